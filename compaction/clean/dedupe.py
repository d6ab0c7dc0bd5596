"""The Spark SQL winner searches: each key's greatest competing record found with a window or an aggregate.

The searches are SQL run by the DataFrame's own session (``spark.sql(..., facts=df)``), which reads the same on a
classic session and on Spark Connect, whichever kind of session a process has made first.

Input: the facts of cleaned ranges (:data:`compaction.rules.FACTS_SCHEMA`, read by executors, :func:`facts_rows`),
with the engine's failure columns (:data:`FACTS_ROWS_SCHEMA`), which carry a partition's failure to its result.
A search adds ``is_winner``, stating :data:`compaction.rules.SURVIVAL_ORDER` explicitly (never ``dropDuplicates``,
whose survivor is unspecified); :func:`classify` then applies :func:`compaction.rules.classify` to each Arrow batch,
and :func:`decided_verdicts` turns each segment's decided rows into its verdicts, listed in the store for the apply
stage, with the counts as the stage's result rows (:data:`compaction.engine.codec.RESULT_SCHEMA`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from compaction import rules
from compaction.clean.layout import SegmentCounts
from compaction.clean.payloads import CleanTask, SegmentVerdicts, Verdicts, lists_kept
from compaction.clean.tasks.facts import read_facts
from compaction.clean.tasks.objects import object_id
from compaction.engine.codec import FAILURE_FIELDS, RESULT_SCHEMA, carrying_failures, loads
from compaction.engine.isolation import (
    Failed,
    Outcome,
    failure_columns,
    failure_in,
    release_memory,
    result_table,
    run,
    without_failures,
)
from compaction.engine.stages import SparkStages
from compaction.schema import LONG_MAX
from compaction.store.erasure import key_digest

KEY = ("topic", "partition", "key")
#: Rows per Arrow batch a facts task hands to Spark SQL: large batches keep the per-batch overhead small, and at a
#: few dozen bytes a row (plus the key) one batch stays a few MB on its way into the JVM.
BATCH_ROWS = 131_072

#: The facts' rows: the facts, and what stopped a partition's facts in its one row (the engine's failure columns).
FACTS_ROWS_SCHEMA = carrying_failures(rules.FACTS_SCHEMA)
FACTS_TYPE: StructType = from_arrow_schema(FACTS_ROWS_SCHEMA)
#: The columns :func:`classify` passes through to :func:`segment_verdicts`, before the verdicts' own columns.
PASSED_ON = ("task", "topic", "partition", "segment_base", "position", "offset", *(f.name for f in FAILURE_FIELDS))
DECIDED_SCHEMA = pa.schema(
    [
        *(FACTS_ROWS_SCHEMA.field(name) for name in PASSED_ON),
        ("code", pa.int8()),
        ("stamp", pa.bool_()),
        ("upcoming_horizon_ms", pa.int64()),
        ("erased_key", pa.string()),
    ]
)
DECIDED_TYPE: StructType = from_arrow_schema(DECIDED_SCHEMA)
RESULT_TYPE: StructType = from_arrow_schema(RESULT_SCHEMA)


def _names(*names: str) -> str:
    return ", ".join(f"`{name}`" for name in names)


def winners_by_window(df: DataFrame) -> DataFrame:
    """``is_winner`` = row 1 of its key in survival order: ``row_number() over (... order by competes,
    version_valid, version, offset desc)``; non-competing rows sort last, so they never take row 1."""
    order = ", ".join(f"`{name}` DESC" for name in ("competes", *rules.SURVIVAL_ORDER))
    return df.sparkSession.sql(
        f"SELECT *, competes AND row_number() OVER (PARTITION BY {_names(*KEY)} ORDER BY {order}) = 1 AS is_winner "
        "FROM {facts}",
        facts=df,
    )


def winners_by_aggregate(df: DataFrame) -> DataFrame:
    """``is_winner`` via ``max(struct(survival order))`` per key over competing rows, joined back on the offset."""
    joined = " AND ".join(f"f.`{name}` = b.`{name}`" for name in KEY)
    return df.sparkSession.sql(
        f"WITH best AS (SELECT {_names(*KEY)}, max(struct({_names(*rules.SURVIVAL_ORDER)})).`offset` AS winner "
        f"FROM {{facts}} WHERE competes GROUP BY {_names(*KEY)}) "
        f"SELECT f.*, f.competes AND f.`offset` = b.winner AS is_winner FROM {{facts}} f LEFT JOIN best b ON {joined}",
        facts=df,
    )


WINNER_SEARCHES: dict[rules.WinnerSearch, Callable[[DataFrame], DataFrame]] = {
    rules.WinnerSearch.WINDOW: winners_by_window,
    rules.WinnerSearch.AGGREGATE: winners_by_aggregate,
}


def classify(df: DataFrame, *, now_ms: int, keyless_drop: bool) -> DataFrame:
    """The rules' verdict on each record of facts with ``is_winner``: adds ``code`` and ``stamp``."""

    def body(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            winner = table.column("is_winner").to_numpy(zero_copy_only=False).astype(bool)
            decided = rules.classify(table, winner, now_ms=now_ms, keyless_drop=keyless_drop)
            upcoming = rules.upcoming_horizons(table, decided.code, now_ms)
            columns = [table.column(name) for name in PASSED_ON]
            # The digest of an erased record's key (which request erased it), for the request's record: the rows
            # are few, and the keys themselves need not travel on.
            erased = decided.code == rules.DropReason.ERASED.code
            digests: list[str | None] = [None] * table.num_rows
            for row in np.flatnonzero(erased).tolist():
                digests[row] = key_digest(table.column("key")[row].as_py())
            yield from pa.table(
                [
                    *columns,
                    pa.array(decided.code),
                    pa.array(decided.stamp),
                    pa.array(upcoming, mask=upcoming == LONG_MAX),
                    pa.array(digests, pa.string()),
                ],
                schema=DECIDED_SCHEMA,
            ).to_batches()

    return df.mapInArrow(body, DECIDED_TYPE)


def segment_verdicts(tasks: Sequence[CleanTask], table: pa.Table) -> pa.Table:
    """``groupBy("task", "segment_base").applyInArrow`` body: one segment's decided rows (or the one row of a task
    whose facts failed) become its :class:`~compaction.clean.payloads.Verdicts`, listed in the store for the apply
    stage; only the counts and where they are listed reach the driver."""
    task = tasks[table.column("task")[0].as_py()]
    failure = failure_in(table)
    if failure is not None:
        return result_table([Failed(task.ident, failure)])
    return result_table([run(partial(_segment_verdicts, table), task)])


def _segment_verdicts(table: pa.Table, task: CleanTask) -> Verdicts:
    base = table.column("segment_base")[0].as_py()
    segment = next(s for s in task.cleaned.segments if s.base_offset == base)
    table = table.sort_by("position")
    code = table.column("code").to_numpy()
    stamp = table.column("stamp").to_numpy(zero_copy_only=False).astype(bool)
    upcoming = pc.fill_null(table.column("upcoming_horizon_ms"), LONG_MAX).to_numpy()
    erased = frozenset(pc.drop_null(table.column("erased_key")).to_pylist())
    counts = SegmentCounts.from_verdicts(code, stamp, upcoming, erased)
    kept = code == rules.KEPT
    listed = kept if lists_kept(segment, task.cleaned.first_dirty_offset) else ~kept
    chosen = listed | stamp
    path, group = None, None
    if chosen.any():
        part = pa.table(
            {
                "position": table.column("position").filter(pa.array(chosen)).cast(pa.int32()),
                "listed": listed[chosen],
                "stamp": stamp[chosen],
            }
        )
        path, (group,) = task.context.store.objects.write_verdicts(
            task.tp, base, [part], object_id(task.context.pass_id)
        )
    return Verdicts(tp=task.tp, path=path, segments=(SegmentVerdicts(base, counts, table.num_rows, group),))


def decided_verdicts(decided: DataFrame, tasks: Sequence[CleanTask]) -> DataFrame:
    """The stage's result rows: per segment its verdicts (:func:`segment_verdicts`), or the failure that stopped its
    partition."""

    def body(table: pa.Table) -> pa.Table:  # typed: PySpark infers the kind of Arrow UDF from the hints
        return segment_verdicts(tasks, table)

    return decided.groupBy("task", "segment_base").applyInArrow(body, RESULT_TYPE)


def facts_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of the Spark SQL winner searches' facts: each input row is a bin of one task (a
    partition); yields its facts, or one row with the failure that stopped it (:data:`FACTS_ROWS_SCHEMA`), which the
    searches carry to the partition's result."""
    for batch in batches:
        for index, payload in zip(batch.column("task").to_pylist(), batch.column("payload").to_pylist(), strict=True):
            found = run(partial(_read_facts, index), payload, ident=str(index))
            if isinstance(found, Failed):
                row: dict[str, list[Any]] = {name: [None] for name in rules.FACTS_SCHEMA.names}
                row.update(task=[index], segment_base=[-1], offset=[-1], **failure_columns([found.failure]))
                facts = pa.table(row, schema=FACTS_ROWS_SCHEMA)
            else:
                facts = without_failures(found.value)
            release_memory()
            yield from facts.to_batches(max_chunksize=BATCH_ROWS)


def _read_facts(index: int, payload: bytes) -> pa.Table:
    (task,) = loads(payload)
    return read_facts(task, index)


def decide_with_sql(
    stages: SparkStages, tasks: Sequence[CleanTask], search: rules.WinnerSearch, now_ms: int, keyless_drop: bool
) -> list[Outcome]:
    """The verdicts on whole partitions by one of the Spark SQL winner searches: one outcome per segment (of the
    partitions whose facts were read), or a partition's failure."""
    if not tasks:
        return []
    facts = stages.frame([[task] for task in tasks]).map(facts_rows, FACTS_TYPE)
    decided = classify(facts.transform(WINNER_SEARCHES[search]), now_ms=now_ms, keyless_drop=keyless_drop)
    return stages.collect(decided_verdicts(decided, tasks))
