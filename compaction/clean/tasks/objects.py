"""The names of the objects a task attempt writes."""

from __future__ import annotations

import uuid

from pyspark import TaskContext


def object_id(pass_id: str) -> str:
    """The id in the names of the objects this task attempt writes: ``<pass id>-<task attempt id>``.

    The pass id is the driver's, new for every pass; the task attempt id is Spark's, unique in the
    application. So an attempt's names are its own: a retried or speculative attempt never writes over an
    object another attempt wrote, which the driver may already have committed, nor over one a committed
    manifest of an earlier pass names. The driver commits only the attempt whose result it collected; the
    objects of the others are garbage that gc removes after its grace period. An engine without Spark's task
    context (Sail, which runs tasks in its own process; the in-process stages of the tests) gives each call a
    random id instead, so that an attempt it ran again would not write over the first's objects either.
    """
    task = TaskContext.get()
    return f"{pass_id}-{task.taskAttemptId() if task is not None else uuid.uuid4().hex[:16]}"
