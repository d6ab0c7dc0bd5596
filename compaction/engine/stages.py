"""Units of work run as Spark stages on the DataFrame API, one code path for classic sessions, Spark Connect and
Sail; or in this process, through the same row bodies.

A stage's tasks are rows of a small DataFrame (:data:`~compaction.engine.codec.TASK_SCHEMA`), one Spark task per row
(:func:`task_frame`), each row a bin of units; their work runs inside ``mapInArrow`` through
:mod:`compaction.engine.isolation`, and their outcomes come back as typed rows the driver collects
(:data:`~compaction.engine.codec.RESULT_SCHEMA`), one per unit, with its time by phase. Nothing here needs a
SparkContext, RDDs, broadcasts or accumulators, which Spark Connect sessions (``--remote``, Databricks serverless and
shared clusters) do not have.

What reaches the driver is what units return, and what it sends is the units themselves: the stages count both
(:attr:`Stages.sent_bytes`, :attr:`Stages.received_bytes`), so that a run can show that they grow with partitions,
segments and key ranges, never with records (SPEC §5).
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from compaction.engine.codec import RESULT_SCHEMA, TASK_SCHEMA, dumps
from compaction.engine.isolation import (
    Failed,
    Failure,
    Outcome,
    outcome_of,
    task_rows,
    with_payloads,
)
from compaction.engine.session.workers import WarmWorkers

RESULT_TYPE = from_arrow_schema(RESULT_SCHEMA)
TASK_TYPE = from_arrow_schema(TASK_SCHEMA)

#: What a Spark action raises when its job fails for good: a task failed all its attempts, or the JVM (or the
#: Spark Connect server) is gone.
SPARK_JOB_FAILURES = (Py4JError, PySparkException)


def spark_failure(err: Exception) -> str:
    """One line saying why a Spark job failed: its last task failure's cause, with no stack trace.

    The text is the exception's, JVM causes included (a classic session's collect wraps the job's failure in
    "Exception thrown in awaitResult"; a Spark Connect session's error carries the server's message)."""
    text = str(err)
    if "OutOfMemoryError" in text:
        return out_of_memory(text)
    attempts = re.search(r"failed (\d+) times", text)
    lost = re.search(r"most recent failure: Lost task .*?\): ", text)
    cause = text[lost.end() :] if lost else text
    lines = cause.strip().splitlines() or [""]
    if "Traceback (most recent call last)" in cause:  # a Python exception that left a task: its last line
        lines = [line for line in lines if line.strip() and not line[0].isspace()]
        cause = lines[-1]
    else:
        cause = re.sub(r"^[\w.$]+(Exception|Error): ", "", lines[0]).split(". Consider setting")[0]
    return f"Spark task failed {attempts.group(1)} times: {cause}" if attempts else f"Spark job failed: {cause}"


def out_of_memory(text: str) -> str:
    """What to do when a JVM of the job ran out of memory: in the driver (collecting results, planning stages) or in
    a task on an executor (a local session's executors live in the driver's JVM)."""
    cause = re.search(r"java\.lang\.OutOfMemoryError[^\n]*", text)
    found = cause.group(0).strip() if cause else "java.lang.OutOfMemoryError"
    if "Lost task" in text:
        return (
            f"a Spark task ran out of memory ({found}): give executors more memory (spark.executor.memory; in "
            "local mode spark.driver.memory) or lower task.max.records"
        )
    return f"the Spark driver ran out of memory ({found}): raise spark.driver.memory"


def isolated(
    call: Callable[[list[Any]], list[Outcome]], groups: Sequence[list[Any]], said: Callable[[str], None] | None = None
) -> list[Outcome]:
    """``call`` over every group's units as one Spark job; if that job fails for good (a task that failed all its
    attempts: a killed worker, a lost executor), the groups run again in halves, and so on down to the one group
    whose job keeps failing, each of whose units fails with the job's reason. A failed job returns nothing, and
    Spark's message names a task, which need not be one group's (a shuffle's tasks hold rows of many); halving
    finds a failing group in a few jobs (about twice the logarithm of their number), where a job per group would
    take as many jobs as groups. ``said`` hears of a failure once. What a failed job wrote is never committed.
    """
    units = [unit for group in groups for unit in group]
    if not units:
        return []
    try:
        return call(units)
    except SPARK_JOB_FAILURES as err:
        if len(groups) == 1:
            failure = Failure(spark_failure(err))
            return [Failed(unit.ident, failure) for unit in units]
        if said is not None:
            said(
                f"a Spark job failed ({spark_failure(err)}); running its {len(groups)} partition(s) again in "
                "smaller jobs, so that only the one that keeps failing is left out"
            )
        half = len(groups) // 2
        with ThreadPoolExecutor(max_workers=2) as pool:  # two Spark jobs at once, as cores free up
            halves = list(pool.map(lambda part: isolated(call, part), (groups[:half], groups[half:])))
        return [*halves[0], *halves[1]]


class Stages(ABC):
    """The stages the job asks for; each returns its units' outcomes (in no particular order)."""

    def __init__(self) -> None:
        self.sent_bytes = 0  # the units sent to executors, pickled
        self.received_bytes = 0  # the result rows collected
        self._lock = threading.Lock()  # stages may run from several driver threads at once

    def _count(self, sent: int, received: int) -> None:
        with self._lock:
            self.sent_bytes += sent
            self.received_bytes += received

    @abstractmethod
    def map_tasks(self, body: Callable[[Any], Any], bins: Sequence[Sequence[Any]], threads: int = 1) -> list[Outcome]:
        """``body`` run on each unit, one Spark task per bin of units; with ``threads``, that many units of a bin at
        once."""


def _received(table: pa.Table) -> int:
    return sum(pc.sum(pc.binary_length(table.column(name))).as_py() or 0 for name in ("payload", "error", "trace"))


class SparkStages(Stages):
    """The stages on a SparkSession: classic, Spark Connect or Sail alike. With ``warm``, the session's Python
    workers are started with those modules imported while the driver prepares the first stage
    (:class:`~compaction.engine.session.WarmWorkers`); :meth:`finish` waits for that at the end of the run."""

    def __init__(self, spark: SparkSession, warm: Sequence[str] = ()) -> None:
        super().__init__()
        self.spark = spark
        self.warming = WarmWorkers(spark, warm) if warm else None

    def finish(self) -> None:
        """The end of the run: no Spark job of these stages may outlive it (see WarmWorkers)."""
        if self.warming is not None:
            self.warming.finish()

    def frame(self, payloads: Sequence[Any]) -> TaskFrame:
        """The payloads as a stage's task rows (counted as sent). The warm-up stands down as the first stage is
        built, not as it is collected: a job planned beside that stage's (both a second or so in a fresh JVM) is
        submitted behind it, and its tasks would only delay the next stage's."""
        if self.warming is not None:
            self.warming.stand_down()
        frame = task_frame(self.spark, payloads)
        self._count(frame.bytes, 0)
        return frame

    def collect(self, results: DataFrame) -> list[Outcome]:
        """Run a stage and bring its result rows to the driver (counted as received)."""
        table = results.toArrow()
        self._count(0, _received(table))
        return [outcome_of(row) for row in table.to_pylist()]

    def map_tasks(self, body: Callable[[Any], Any], bins: Sequence[Sequence[Any]], threads: int = 1) -> list[Outcome]:
        if not bins:
            return []
        return self.collect(self.frame([list(b) for b in bins]).map(partial(task_rows, body, threads), RESULT_TYPE))


class LocalStages(Stages):
    """The stages run in this process, through the same row bodies and codecs as on Spark (units pickled on the way
    in, outcomes on the way out): what would not reach an executor, or not come back, fails here too. It lets the
    job's own code run hundreds of times per test without a JVM; the Spark SQL winner searches need Spark."""

    def map_tasks(self, body: Callable[[Any], Any], bins: Sequence[Sequence[Any]], threads: int = 1) -> list[Outcome]:
        rows = [
            pa.record_batch(
                {"task": pa.array([i], pa.int32()), "payload": pa.array([dumps(list(b))], pa.binary())},
                schema=TASK_SCHEMA,
            )
            for i, b in enumerate(bins)
        ]
        self._count(sum(r.nbytes for r in rows), 0)
        return self._outcomes([out for row in rows for out in task_rows(body, threads, iter([row]))])

    def _outcomes(self, batches: list[pa.RecordBatch]) -> list[Outcome]:
        table = pa.Table.from_batches(batches, schema=RESULT_SCHEMA)
        self._count(0, _received(table))
        return [outcome_of(row) for row in table.to_pylist()]


#: Payloads of up to this many bytes in all travel with a stage's function (in every task's command) rather than
#: in its rows: rows joined to the task numbers need a broadcast, a Spark job of its own before the stage (a few
#: tenths of a second, more in a fresh JVM); past this size, sending every payload to every task costs more.
CARRIED_BYTES = 1 << 20


@dataclass(frozen=True)
class TaskFrame:
    """A stage's tasks: ``rows`` has one row in each of its partitions (``task``, and ``payload`` unless the
    payloads are ``carried`` with the stage's function instead); ``bytes`` is what the payloads weigh."""

    rows: DataFrame
    carried: tuple[bytes, ...] = ()
    bytes: int = 0

    def map(self, body: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], schema: Any) -> DataFrame:
        """``mapInArrow(body, schema)``, where ``body`` sees rows of :data:`TASK_SCHEMA` either way."""
        return self.rows.mapInArrow(partial(with_payloads, self.carried, body) if self.carried else body, schema)


def task_frame(spark: SparkSession, payloads: Sequence[Any]) -> TaskFrame:
    """Tasks with one row in each partition of a DataFrame, so that each is a Spark task of its own: retried and
    isolated alone, and scheduled as cores free up, first row first."""
    blobs = [dumps(p) for p in payloads]
    size = sum(map(len, blobs))
    # A range of task numbers in as many partitions has one in each, in order: no shuffle, and no sampling job
    # (as a repartition by range of the payloads would need before every stage).
    slots = spark.range(0, len(blobs), 1, max(1, len(blobs))).selectExpr("CAST(id AS INT) AS task")
    if size <= CARRIED_BYTES:
        return TaskFrame(slots, tuple(blobs), size)
    # Many or large payloads join the task numbers by broadcast, which keeps that partitioning.
    table = pa.table(
        {"task": pa.array(range(len(blobs)), pa.int32()), "payload": pa.array(blobs, pa.binary())}, schema=TASK_SCHEMA
    )
    return TaskFrame(slots.join(spark.createDataFrame(table, TASK_TYPE).hint("broadcast"), "task"), bytes=size)
