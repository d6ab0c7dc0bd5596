"""Storage that misbehaves inside Spark tasks only: it kills the Python worker or slows a task's first attempt.

The store travels to executors inside every task, so a fault set here fires in the worker process, where
an exception handler cannot catch it (``os._exit``) or where Spark's speculation can see the slow attempt.
The driver (no TaskContext) is never affected. Executors import this module, so the repository root must be
on their Python path (it is the working folder of a local session started from it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pyspark import TaskContext

from compaction.store import Store
from compaction.store.storage import Storage

T = TypeVar("T")


class TaskFaults(Storage):
    """``kill``: any call under that prefix (``topic/partition/``) ends the worker, in every attempt or (with
    ``first_attempt_only``) in the first; ``slow_s``: each write under ``slow`` in a first attempt is followed
    by that long a pause (the object is written, then the attempt lingers), and a later attempt's first write there
    waits, as long at most, until the first attempt has written (a marker in ``marks``, a folder both executors
    see): so the first attempt always leaves an object behind, whichever attempt Spark ran first; ``bug``: any call
    under that prefix raises a ``TypeError`` whose message holds ``bug_text``, as a bug in the library would."""

    def __init__(
        self,
        inner: Storage,
        *,
        kill: str | None = None,
        first_attempt_only: bool = False,
        slow: tuple[str, ...] = (),
        slow_s: float = 0.0,
        marks: str = "",
        bug: str | None = None,
        bug_text: str = "",
    ) -> None:
        super().__init__(inner.fs, inner.root, inner.url, inner.storage_options)
        self.faults: dict[str, Any] = {
            "kill": kill,
            "first_attempt_only": first_attempt_only,
            "slow": slow,
            "slow_s": slow_s,
            "marks": marks,
            "bug": bug,
            "bug_text": bug_text,
        }

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "faults": self.faults}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.faults = state["faults"]

    def _call(self, op: str, rel: str, fn: Callable[[], T]) -> T:
        task = TaskContext.get()
        first = task is not None and task.attemptNumber() == 0
        kill = self.faults["kill"]
        if task is not None and kill and rel.startswith(kill) and (first or not self.faults["first_attempt_only"]):
            os._exit(17)  # the worker dies mid-task, as if killed
        bug = self.faults.get("bug")
        if task is not None and bug and rel.startswith(bug):
            raise TypeError(f"unsupported operand type(s) for +: 'int' and 'NoneType' ({self.faults['bug_text']})")
        slow = [prefix for prefix in self.faults["slow"] if op == "write" and rel.startswith(prefix)]
        mark = os.path.join(self.faults["marks"], slow[0].replace("/", "_")) if slow and task is not None else None
        if mark and not first:
            deadline = time.monotonic() + self.faults["slow_s"]
            while not os.path.exists(mark) and time.monotonic() < deadline:  # bounded: at most slow_s
                time.sleep(0.05)
        result = super()._call(op, rel, fn)
        if mark and first:
            open(mark, "w").close()
            time.sleep(self.faults["slow_s"])
        return result


def faulty(store: Store, **faults: Any) -> Store:
    """The same store, read and written through :class:`TaskFaults`."""
    return Store(TaskFaults(store.storage, **faults))
