"""The Spark stages of a clean pass, on the DataFrame API: one code path for classic sessions and Spark Connect.

A stage's tasks are rows of a small DataFrame (:data:`~compaction.clean.payloads.TASK_SCHEMA`), one Spark task
per row (:func:`task_frame`); their work runs inside ``mapInArrow`` (or ``groupBy(...).applyInArrow``) through
:mod:`compaction.clean.tasks.isolation`; their results come back as typed rows the driver collects
(:data:`~compaction.clean.payloads.RESULT_SCHEMA`), with each task's time by phase. Nothing here needs a
SparkContext, RDDs, broadcasts or accumulators, which Spark Connect sessions (``--remote``, Databricks
serverless and shared clusters) do not have.

:class:`Stages` is the seam: the cleaner asks for stages, :class:`SparkStages` runs them on a session, and the
tests run the same task bodies in their own process through another implementation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from compaction.clean import rules
from compaction.clean.dedupe import WINNER_PLANS, classify, decision_results, per_segment
from compaction.clean.payloads import (
    PHASES,
    PIECE_SCHEMA,
    RESULT_SCHEMA,
    TASK_SCHEMA,
    BucketPiece,
    CleanTask,
    DecisionRow,
    dumps,
    loads,
)
from compaction.clean.tasks.facts import read_facts
from compaction.clean.tasks.isolation import Failure, facts_rows, group_rows, piece_rows, task_rows, with_payloads
from compaction.errors import CompactionError

RESULT_TYPE = from_arrow_schema(RESULT_SCHEMA)
TASK_TYPE = from_arrow_schema(TASK_SCHEMA)
PIECE_TYPE = from_arrow_schema(PIECE_SCHEMA)
FACTS_TYPE = from_arrow_schema(rules.FACTS_SCHEMA)

#: A split partition's read of a run of segments: the run (a :class:`CleanTask` narrowed to it) and the group
#: of each of the partition's key ranges, in range order.
Run = tuple[CleanTask, tuple[int, ...]]
ReadRun = Callable[[CleanTask], Sequence[BucketPiece]]
DecideRange = Callable[[CleanTask, list[BucketPiece]], list[DecisionRow]]


@dataclass(frozen=True)
class TaskResult:
    """A task's result (``value``), or the failure that stopped it; and its seconds by phase."""

    task: int  # the index of its task (or key range group) in the stage's input
    value: Any
    failure: Failure | None
    phases: dict[str, float]


class Stages(ABC):
    """The stages a clean pass asks for; each returns its tasks' results (in no particular order)."""

    @abstractmethod
    def map_tasks(self, body: Callable[[Any], Any], tasks: Sequence[Any]) -> list[TaskResult]:
        """``body`` run on each task, one Spark task each."""

    @abstractmethod
    def map_groups(self, read: ReadRun, runs: Sequence[Run], decide: DecideRange,
                   groups: Sequence[CleanTask]) -> list[TaskResult]:
        """Each run read once by ``read`` into one piece per key range; each range's pieces shuffled to its
        group, where ``decide`` turns its task (``groups[i]``) and pieces into decision rows."""

    def sql_decisions(self, tasks: Sequence[CleanTask], plan: rules.Plan, now_ms: int,
                      keyless_drop: bool) -> list[TaskResult]:
        """Decision rows of whole partitions by one of the Spark SQL plans (one result per segment)."""
        raise CompactionError(f"the {plan} plan runs on Spark SQL, which needs a SparkSession")


class SparkStages(Stages):
    """The stages on a SparkSession, classic or Spark Connect alike."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def _frame(self, payloads: Sequence[Any]) -> TaskFrame:
        return task_frame(self.spark, payloads)

    def map_tasks(self, body: Callable[[Any], Any], tasks: Sequence[Any]) -> list[TaskResult]:
        if not tasks:
            return []
        return collect(self._frame(tasks).map(partial(task_rows, body), RESULT_TYPE))

    def map_groups(self, read: ReadRun, runs: Sequence[Run], decide: DecideRange,
                   groups: Sequence[CleanTask]) -> list[TaskResult]:
        if not groups:
            return []
        pieces = self._frame(runs).map(partial(piece_rows, read), PIECE_TYPE)
        heads = self.spark.createDataFrame(pa.table({
            "group": pa.array(range(len(groups)), pa.int32()), "task": [dumps(t) for t in groups],
            "piece": pa.nulls(len(groups), pa.binary())}, schema=PIECE_SCHEMA))

        def decide_group(table: pa.Table) -> pa.Table:  # typed: PySpark infers the kind of Arrow UDF from the hints
            return group_rows(decide, table)

        # Spark's own shuffle (in the JVM) takes each range's pieces to its group: every group has its task
        # row, so a range with no piece still decides (and reports) something.
        return collect(pieces.unionByName(heads).groupBy("group").applyInArrow(decide_group, RESULT_TYPE))

    def sql_decisions(self, tasks: Sequence[CleanTask], plan: rules.Plan, now_ms: int,
                      keyless_drop: bool) -> list[TaskResult]:
        if not tasks:
            return []
        facts = self._frame(tasks).map(partial(facts_rows, read_facts), FACTS_TYPE)
        decided = classify(facts.transform(WINNER_PLANS[plan]), now_ms=now_ms, keyless_drop=keyless_drop)
        return collect(decision_results(per_segment(decided)))


#: Payloads of up to this many bytes in all travel with a stage's function (in every task's command) rather than
#: in its rows: rows joined to the task numbers need a broadcast, a Spark job of its own before the stage (a few
#: tenths of a second, more in a fresh JVM); past this size, sending every payload to every task costs more.
CARRIED_BYTES = 1 << 20


@dataclass(frozen=True)
class TaskFrame:
    """A stage's tasks: ``rows`` has one row in each of its partitions (``task``, and ``payload`` unless the
    payloads are ``carried`` with the stage's function instead)."""

    rows: DataFrame
    carried: tuple[bytes, ...] = ()

    def map(self, body: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], schema: Any) -> DataFrame:
        """``mapInArrow(body, schema)``, where ``body`` sees rows of :data:`TASK_SCHEMA` either way."""
        return self.rows.mapInArrow(partial(with_payloads, self.carried, body) if self.carried else body, schema)


def task_frame(spark: SparkSession, payloads: Sequence[Any]) -> TaskFrame:
    """Tasks with one row in each partition of a DataFrame, so that each is a Spark task of its own: retried and
    isolated alone, and scheduled as cores free up, first row first."""
    blobs = [dumps(p) for p in payloads]
    # A range of task numbers in as many partitions has one in each, in order: no shuffle, and no sampling job
    # (as a repartition by range of the payloads would need before every stage).
    slots = spark.range(0, len(blobs), 1, max(1, len(blobs))).selectExpr("CAST(id AS INT) AS task")
    if sum(map(len, blobs)) <= CARRIED_BYTES:
        return TaskFrame(slots, tuple(blobs))
    # Many or large payloads join the task numbers by broadcast, which keeps that partitioning.
    table = pa.table({"task": pa.array(range(len(blobs)), pa.int32()), "payload": pa.array(blobs, pa.binary())},
                     schema=TASK_SCHEMA)
    return TaskFrame(slots.join(spark.createDataFrame(table, TASK_TYPE).hint("broadcast"), "task"))


def collect(results: DataFrame) -> list[TaskResult]:
    """Run a stage and bring its result rows to the driver."""
    return [result_of(row) for row in results.toArrow().to_pylist()]


def result_of(row: dict[str, Any]) -> TaskResult:
    """A result row (:data:`~compaction.clean.payloads.RESULT_SCHEMA`) as the driver takes it."""
    failure = Failure(row["error"], bool(row["internal"]), row["trace"]) if row["error"] is not None else None
    value = loads(row["payload"]) if failure is None else None
    return TaskResult(row["task"], value, failure, {name: row[f"{name}_s"] or 0.0 for name in PHASES})
