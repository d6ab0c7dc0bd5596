"""Running units of work on an executor: each unit's failure kept to itself, its time by phase, its result a row.

Every stage's units run through :func:`run`: an exception stops only that unit (a partition, or one key range of
one), which the driver reports with the reason while the others commit (SPEC §5). A data or storage error (the
product's own errors, an unreadable object) is the data's; any other exception is a bug in this library, so it is
marked internal and keeps the executor's traceback, for the run report and ``-v`` (an operator and a scheduler
decide from the difference: SPEC §5). A unit's outcome is :class:`Ok` or :class:`Failed`, named by the unit's
``ident``: the driver matches outcomes to its work by identity, never by position.

The functions named ``*_rows`` are the bodies Spark runs (``mapInArrow``, ``groupBy(...).applyInArrow``); they are
module functions bound with :func:`functools.partial`, so Spark ships a reference to them, not a copy of this
module's state.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from compaction.engine.codec import FAILURE_FIELDS, PHASES, RESULT_SCHEMA, dumps, loads
from compaction.engine.phases import task_phases
from compaction.errors import CompactionError

#: What counts as the data's or the store's failure, not the library's: the product's own errors (a corrupt
#: or missing object, an unreachable store) and the operating system's (an I/O error).
DATA_ERRORS = (CompactionError, OSError)


@dataclass(frozen=True)
class Failure:
    """What stopped a unit: ``error`` is ``Type: message``; ``internal`` when it is a bug (then ``trace`` is the
    executor's traceback)."""

    error: str
    internal: bool = False
    trace: str | None = None

    @classmethod
    def of(cls, err: BaseException) -> Failure:
        if isinstance(err, MemoryError):  # the task's share of memory, not a bug: say which settings govern it
            return cls(
                f"MemoryError: a task ran out of memory{f' ({err})' if str(err) else ''}: lower "
                "task.max.records, or give each task more memory (spark.executor.memory, "
                "spark.executor.pyspark.memory, fewer spark.executor.cores)"
            )
        internal = not isinstance(err, DATA_ERRORS)
        return cls(
            f"{type(err).__name__}: {err}", internal, "".join(traceback.format_exception(err)) if internal else None
        )


@dataclass(frozen=True)
class Ok:
    """A unit's value, and its seconds by phase."""

    ident: str
    value: Any
    phases: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Failed:
    """What stopped a unit, and its seconds by phase until then."""

    ident: str
    failure: Failure
    phases: dict[str, float] = field(default_factory=dict)


Outcome = Ok | Failed


def run(body: Callable[[Any], Any], unit: Any, ident: str | None = None) -> Outcome:
    """``body(unit)`` as an :class:`Ok`, or the :class:`Failed` that stopped it; with the seconds it spent by
    phase. ``ident`` names the outcome (default: the unit's own ``ident``)."""
    name = ident if ident is not None else unit.ident
    with task_phases() as seconds:
        try:
            value = body(unit)
        except Exception as err:  # isolate the unit; reported with its reason
            return Failed(name, Failure.of(err), seconds)
    return Ok(name, value, seconds)


def release_memory() -> None:
    """Hand the memory Arrow's allocator holds free back to the system: an idle Python worker would otherwise keep
    its last task's peak (hundreds of MB) while its neighbours work."""
    pa.default_memory_pool().release_unused()


def failure_columns(failures: Sequence[Failure | None]) -> dict[str, list[Any]]:
    """The failure columns (:data:`~compaction.engine.codec.FAILURE_FIELDS`) of rows, one per failure (None: the row
    carries none)."""
    return {
        "error": [f.error if f else None for f in failures],
        "internal": [bool(f and f.internal) for f in failures],
        "trace": [f.trace if f else None for f in failures],
    }


def _failure_of(row: dict[str, Any]) -> Failure | None:
    return Failure(row["error"], bool(row["internal"]), row["trace"]) if row["error"] is not None else None


def failure_in(table: pa.Table) -> Failure | None:
    """The failure that rows with the failure columns carry (the first), if any does."""
    errors = table.column("error")
    if errors.null_count == len(errors):
        return None
    return _failure_of(table.filter(pc.is_valid(errors)).slice(0, 1).to_pylist()[0])


def without_failures(table: pa.Table) -> pa.Table:
    """``table`` with the failure columns added, carrying none."""
    for column in FAILURE_FIELDS:
        table = table.append_column(column, pa.nulls(table.num_rows, column.type))
    return table


def result_table(outcomes: Sequence[Outcome]) -> pa.Table:
    """Result rows (:data:`~compaction.engine.codec.RESULT_SCHEMA`), one per outcome."""
    return pa.table(
        {
            "ident": [o.ident for o in outcomes],
            "payload": [dumps(o.value) if isinstance(o, Ok) else None for o in outcomes],
            **failure_columns([o.failure if isinstance(o, Failed) else None for o in outcomes]),
            **{f"{name}_s": [o.phases.get(name, 0.0) for o in outcomes] for name in PHASES},
        },
        schema=RESULT_SCHEMA,
    )


def outcome_of(row: dict[str, Any]) -> Outcome:
    """A result row as the driver takes it."""
    phases = {name: row[f"{name}_s"] or 0.0 for name in PHASES}
    failure = _failure_of(row)
    if failure is not None:
        return Failed(row["ident"], failure, phases)
    return Ok(row["ident"], loads(row["payload"]), phases)


def _payloads(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, Any]]:
    for batch in batches:
        yield from zip(batch.column("task").to_pylist(), batch.column("payload").to_pylist(), strict=True)


def with_payloads(
    carried: Sequence[bytes],
    body: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """``body`` on a stage's rows of task numbers, each given its payload from ``carried`` (the payloads that
    travel with the stage's function rather than in its rows)."""
    rows = (
        pa.record_batch(
            {
                "task": batch.column("task"),
                "payload": pa.array([carried[t] for t in batch.column("task").to_pylist()], pa.binary()),
            }
        )
        for batch in batches
    )
    return body(rows)


def run_bin(body: Callable[[Any], Any], units: Sequence[Any], threads: int = 1) -> list[Outcome]:
    """Each unit of a bin through :func:`run`; with ``threads``, that many at once (units that wait on an object
    store overlap their requests; their work in Arrow and numpy runs outside the interpreter's lock)."""
    if threads <= 1 or len(units) <= 1:
        return [run(body, unit) for unit in units]
    with ThreadPoolExecutor(max_workers=min(threads, len(units)), thread_name_prefix="unit") as pool:
        return list(pool.map(partial(run, body), units))


def task_rows(body: Callable[[Any], Any], threads: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of a stage: each input row is a bin of units; yields a result row per unit.

    A payload that cannot be read (another version of this library) fails the bin's units like any other error:
    their identities are unknown then, so the one result row is named by the task number.
    """
    for task, payload in _payloads(batches):
        try:
            units = loads(payload)
        except Exception as err:
            outcomes: list[Outcome] = [Failed(f"task {task}", Failure.of(err))]
        else:
            outcomes = run_bin(body, units, threads)
        release_memory()
        yield from result_table(outcomes).to_batches()
