"""The Spark SQL plans: each key's greatest competing record found with a window or an aggregate.

The plans are SQL run by the DataFrame's own session (``spark.sql(..., facts=df)``), which reads the same on a
classic session and on Spark Connect, whichever kind of session a process has made first.

Input: the facts of cleaned ranges (:data:`compaction.clean.rules.FACTS_SCHEMA`, read by executors). A plan
adds ``is_winner``, stating :data:`compaction.clean.rules.SURVIVAL_ORDER` explicitly (never ``dropDuplicates``,
whose survivor is unspecified); :func:`classify` then applies :func:`compaction.clean.rules.classify` to each
Arrow batch, :func:`per_segment` sums the decision up per segment, and :func:`decision_results` turns those
sums into the stage's result rows (:data:`compaction.clean.payloads.RESULT_SCHEMA`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from compaction.clean import rules
from compaction.clean.layout import SegmentOutcome
from compaction.clean.payloads import RESULT_SCHEMA, DecisionRow
from compaction.clean.tasks.isolation import Failure, result_table
from compaction.store import TopicPartition
from compaction.store.erasure import key_digest

KEY = ("topic", "partition", "key")

FACTS_TYPE: StructType = from_arrow_schema(rules.FACTS_SCHEMA)
#: The facts :func:`classify` passes through to :func:`per_segment`, before the decision's own columns.
PASSED_ON = ("task", "topic", "partition", "segment_base", "position", "offset", "error", "internal", "trace")
DECIDED_SCHEMA = pa.schema([*(rules.FACTS_SCHEMA.field(name) for name in PASSED_ON),
                            ("code", pa.int8()), ("stamp", pa.bool_()), ("upcoming_horizon_ms", pa.int64()),
                            ("erased_key", pa.string())])
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
        "FROM {facts}", facts=df)


def winners_by_aggregate(df: DataFrame) -> DataFrame:
    """``is_winner`` via ``max(struct(survival order))`` per key over competing rows, joined back on the offset."""
    joined = " AND ".join(f"f.`{name}` = b.`{name}`" for name in KEY)
    return df.sparkSession.sql(
        f"WITH best AS (SELECT {_names(*KEY)}, max(struct({_names(*rules.SURVIVAL_ORDER)})).`offset` AS winner "
        f"FROM {{facts}} WHERE competes GROUP BY {_names(*KEY)}) "
        f"SELECT f.*, f.competes AND f.`offset` = b.winner AS is_winner FROM {{facts}} f LEFT JOIN best b ON {joined}",
        facts=df)


WINNER_PLANS: dict[rules.Plan, Callable[[DataFrame], DataFrame]] = {
    rules.Plan.WINDOW: winners_by_window,
    rules.Plan.AGGREGATE: winners_by_aggregate,
}


def classify(df: DataFrame, *, now_ms: int, keyless_drop: bool) -> DataFrame:
    """The rules' per-record decision on facts with ``is_winner``: adds ``code`` and ``stamp``."""

    def body(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            winner = table.column("is_winner").to_numpy(zero_copy_only=False).astype(bool)
            decided = rules.classify(table, winner, now_ms=now_ms, keyless_drop=keyless_drop)
            upcoming = rules.upcoming_horizons(table, decided.code, now_ms)
            columns = [table.column(name) for name in PASSED_ON]
            # The digest of an erased record's key (which request erased it), for the request's record: the rows
            # are few, and the keys themselves need not travel on.
            erased = decided.code == rules.Reason.ERASED.code
            digests: list[str | None] = [None] * table.num_rows
            for row in np.flatnonzero(erased).tolist():
                digests[row] = key_digest(table.column("key")[row].as_py())
            yield from pa.table([*columns, pa.array(decided.code), pa.array(decided.stamp),
                                 pa.array(upcoming, mask=upcoming == rules.LONG_MAX), pa.array(digests, pa.string())],
                                schema=DECIDED_SCHEMA).to_batches()

    return df.mapInArrow(body, DECIDED_TYPE)


def per_segment(decided: DataFrame) -> DataFrame:
    """One decision row per segment: its counts, the positions of the rows it loses, the markers to stamp."""
    counts = ", ".join(f"CAST(sum(CASE WHEN code = {reason.code} THEN 1 ELSE 0 END) AS BIGINT) AS {reason.value}"
                       for reason in rules.Reason)
    group = _names("task", "topic", "partition", "segment_base")
    return decided.sparkSession.sql(
        f"SELECT {group}, count(1) AS records, CAST(sum(CAST(code = {rules.KEPT} AS INT)) AS BIGINT) AS kept, "
        f"{counts}, collect_list(CASE WHEN code != {rules.KEPT} THEN position END) AS dropped, "
        "collect_list(CASE WHEN stamp THEN `offset` END) AS stamps, min(upcoming_horizon_ms) AS next_horizon_ms, "
        "collect_set(erased_key) AS erased_keys, "
        "max(error) AS error, max(internal) AS internal, max(trace) AS trace "
        f"FROM {{decided}} GROUP BY {group}", decided=decided)


def decision_row(row: dict[str, Any]) -> DecisionRow:
    """A :func:`per_segment` row as stage 2 takes it (the Arrow plan's decision row): the dropped rows'
    positions become a bitmap over the segment's rows (here all read, with no key ranges)."""
    bits = np.zeros(row["records"] or 0, dtype=bool)
    bits[np.array(row["dropped"] or [], dtype=np.int64)] = True
    stamps = np.array(row["stamps"] or [], dtype=np.int64)
    outcome = SegmentOutcome(records=row["records"], kept=row["kept"], stamped=len(stamps),
                             dropped={reason.value: row[reason.value] for reason in rules.Reason if row[reason.value]},
                             next_horizon_ms=row["next_horizon_ms"], erased_keys=frozenset(row["erased_keys"] or ()))
    return DecisionRow(tp=TopicPartition(row["topic"], row["partition"]), segment_base=row["segment_base"],
                       outcome=outcome, rows=len(bits), dropped=np.packbits(bits), stamps=stamps)


def _results(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for row in batch.to_pylist():
            if row["error"] is not None:
                failure = Failure(row["error"], bool(row["internal"]), row["trace"])
                yield from result_table(row["task"], None, failure, {}).to_batches()
            else:
                yield from result_table(row["task"], [decision_row(row)], None, {}).to_batches()


def decision_results(per_segment_rows: DataFrame) -> DataFrame:
    """:func:`per_segment`'s rows as the stage's result rows: a decision row per segment, or the failure that
    stopped the task's partition."""
    return per_segment_rows.mapInArrow(_results, RESULT_TYPE)
