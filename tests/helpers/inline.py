"""The clean pass's Spark stages run in this process, through the same task bodies and row codecs as on Spark.

It lets the job's own code (planning, the Arrow plan's tasks, both stages of a split partition, the commits)
run hundreds of times per test without starting a JVM. Tasks travel as the rows a Spark stage takes and their
results as the rows it returns (payloads pickled on the way), so whatever would not reach an executor, or not
come back, fails here too. The Spark SQL plans need Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pyarrow as pa

from compaction.clean.payloads import PIECE_SCHEMA, TASK_SCHEMA, dumps
from compaction.clean.stages import DecideRange, ReadRun, Run, Stages, TaskResult, result_of
from compaction.clean.tasks.isolation import group_rows, piece_rows, task_rows


def _rows(payloads: Sequence[Any]) -> list[pa.RecordBatch]:
    """A stage's input, one batch per task as Spark hands each task its row."""
    return [pa.record_batch({"task": pa.array([i], pa.int32()), "payload": pa.array([dumps(p)], pa.binary())},
                            schema=TASK_SCHEMA) for i, p in enumerate(payloads)]


def _results(batches: list[pa.RecordBatch]) -> list[TaskResult]:
    return [result_of(row) for batch in batches for row in batch.to_pylist()]


class InlineStages(Stages):
    """Passed to :class:`compaction.clean.cleaner.Cleaner` in place of a SparkSession (the Arrow plan only)."""

    def map_tasks(self, body: Callable[[Any], Any], tasks: Sequence[Any]) -> list[TaskResult]:
        return _results([out for batch in _rows(tasks) for out in task_rows(body, iter([batch]))])

    def map_groups(self, read: ReadRun, runs: Sequence[Run], decide: DecideRange,
                   groups: Sequence[Any]) -> list[TaskResult]:
        pieces = [out for batch in _rows(runs) for out in piece_rows(read, iter([batch]))]
        heads = pa.table({"group": pa.array(range(len(groups)), pa.int32()), "task": [dumps(t) for t in groups],
                          "piece": pa.nulls(len(groups), pa.binary())}, schema=PIECE_SCHEMA)
        rows = pa.concat_tables([heads, *(pa.Table.from_batches([b], schema=PIECE_SCHEMA) for b in pieces)])
        body = partial(group_rows, decide)
        return _results([batch for group in range(len(groups))
                         for batch in body(rows.filter(pa.compute.equal(rows.column("group"), group))).to_batches()])


#: The name the tests use for it: a session in all but name, for the Arrow plan.
InlineSession = InlineStages
