"""Running a task body on an executor: its failure kept to its partition, its time by phase, its result a row.

Every stage's tasks run through :func:`run`: an exception stops only the task's partition, which the driver
reports with the reason while the others commit (SPEC §5). A data or storage error (the product's own errors,
an unreadable object) is the data's; any other exception is a bug in this library, so it is marked internal
and keeps the executor's traceback, for the run report and ``-v`` (an operator and a scheduler decide from the
difference: SPEC §5).

The functions named ``*_rows`` are the bodies Spark runs (``mapInArrow``, ``groupBy(...).applyInArrow``); they
are module functions bound with :func:`functools.partial`, so Spark ships a reference to them, not a copy of
this module's state.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from compaction.clean import rules
from compaction.clean.payloads import PHASES, RESULT_SCHEMA, BucketPiece, CleanTask, DecisionRow, dumps, loads
from compaction.clean.phases import add, task_phases
from compaction.errors import CompactionError

#: Rows per Arrow batch a facts task hands to Spark SQL: large batches keep the per-batch overhead small,
#: and at a few dozen bytes a row (plus the key) one batch stays a few MB on its way into the JVM.
BATCH_ROWS = 131_072
#: What counts as the data's or the store's failure, not the library's: the product's own errors (a corrupt
#: or missing object, an unreachable store) and the operating system's (an I/O error).
DATA_ERRORS = (CompactionError, OSError)


@dataclass(frozen=True)
class Failure:
    """What stopped a task: ``error`` is ``Type: message``; ``internal`` when it is a bug (then ``trace`` is the
    executor's traceback)."""

    error: str
    internal: bool = False
    trace: str | None = None

    @classmethod
    def of(cls, err: BaseException) -> Failure:
        internal = not isinstance(err, DATA_ERRORS)
        return cls(f"{type(err).__name__}: {err}", internal,
                   "".join(traceback.format_exception(err)) if internal else None)


def run(body: Callable[[Any], Any], value: Any) -> tuple[Any, Failure | None, dict[str, float]]:
    """``body(value)``, or the failure that stopped it; and the seconds it spent by phase.

    When it returns, Arrow's allocator hands the memory the task freed back to the system: an idle Python
    worker would otherwise keep its last task's peak (hundreds of MB) while its neighbours work.
    """
    with task_phases() as seconds:
        try:
            return body(value), None, seconds
        except Exception as err:  # isolate the partition; reported with its reason
            return None, Failure.of(err), seconds
        finally:
            pa.default_memory_pool().release_unused()


def result_table(task: int, result: Any, failure: Failure | None, seconds: dict[str, float]) -> pa.Table:
    """One result row (:data:`~compaction.clean.payloads.RESULT_SCHEMA`)."""
    return pa.table({
        "task": [task], "payload": [dumps(result) if failure is None else None],
        "error": [failure.error if failure else None], "internal": [bool(failure and failure.internal)],
        "trace": [failure.trace if failure else None],
        **{f"{name}_s": [seconds.get(name, 0.0)] for name in PHASES},
    }, schema=RESULT_SCHEMA)


def _payloads(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, Any]]:
    for batch in batches:
        yield from zip(batch.column("task").to_pylist(), batch.column("payload").to_pylist(), strict=True)


def with_payloads(carried: Sequence[bytes], body: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``body`` on a stage's rows of task numbers, each given its payload from ``carried`` (the payloads that
    travel with the stage's function rather than in its rows)."""
    rows = (pa.record_batch({"task": batch.column("task"),
                             "payload": pa.array([carried[t] for t in batch.column("task").to_pylist()], pa.binary())})
            for batch in batches)
    return body(rows)


def task_rows(body: Callable[[Any], Any], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of a stage: each input row is a task; yields its result row.

    A payload that cannot be read (another version of this library) fails its task like any other error.
    """
    for task, payload in _payloads(batches):
        result, failure, seconds = run(lambda data: body(loads(data)), payload)
        yield from result_table(task, result, failure, seconds).to_batches()


def facts_rows(body: Callable[[CleanTask, int], pa.Table],
               batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of the Spark SQL plans' facts: each input row is a task; yields its facts, or one row
    with the failure that stopped it (:data:`~compaction.clean.rules.FACTS_SCHEMA`), which the plans carry to the
    task's result."""
    for task, payload in _payloads(batches):
        facts, failure, _ = run(partial(_facts_of, body, task), payload)
        if failure is not None:
            row: dict[str, list[Any]] = {name: [None] for name in rules.FACTS_SCHEMA.names}
            row.update(task=[task], segment_base=[-1], offset=[-1], error=[failure.error],
                       internal=[failure.internal], trace=[failure.trace])
            facts = pa.table(row, schema=rules.FACTS_SCHEMA)
        yield from facts.to_batches(max_chunksize=BATCH_ROWS)


def _facts_of(body: Callable[[CleanTask, int], pa.Table], task: int, payload: bytes) -> pa.Table:
    return body(loads(payload), task)


def piece_rows(body: Callable[[CleanTask], Sequence[BucketPiece]],
               batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of a split partition's read: each input row is ``(run, groups)``, a run of segments
    and the group of each key range; yields each range's piece for its group. A read that fails sends its
    failure to every range, whose task reports it."""
    for _, payload in _payloads(batches):
        run_task, groups = loads(payload)
        pieces, failure, seconds = run(body, run_task)
        if failure is not None:
            none = np.zeros(0, np.int64)
            pieces = [BucketPiece(tp=run_task.tp, first_segment=run_task.segments[0].base_offset, read_lengths=none,
                                  lengths=none, error=failure.error, internal=failure.internal, trace=failure.trace)
                      for _ in groups]
        pieces = [replace(pieces[0], phases=dict(seconds)), *pieces[1:]]  # the run's time, counted once
        yield from pa.table({"group": pa.array(groups, pa.int32()), "task": pa.nulls(len(groups), pa.binary()),
                             "piece": [dumps(p) for p in pieces]}).to_batches()


def group_rows(body: Callable[[CleanTask, list[BucketPiece]], list[DecisionRow]], table: pa.Table) -> pa.Table:
    """``groupBy("group").applyInArrow`` body of a split partition's decision: one key range's task and its
    pieces from every run become its decision rows (or the first failure among its pieces)."""
    task = loads(next(t for t in table.column("task").to_pylist() if t is not None))
    pieces = [loads(p) for p in table.column("piece").to_pylist() if p is not None]
    failed = next((p for p in pieces if p.error is not None), None)
    result: Any = None
    failure: Failure | None = None
    seconds: dict[str, float] = {}
    if failed is not None and failed.error is not None:
        failure = Failure(failed.error, failed.internal, failed.trace)
    else:
        result, failure, seconds = run(partial(body, task), pieces)
    for piece in pieces:
        add(seconds, piece.phases)
    return result_table(int(table.column("group")[0].as_py()), result, failure, seconds)


