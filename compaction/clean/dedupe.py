"""The Spark SQL plans: each key's greatest competing record found with a window or an aggregate.

Input: the facts of cleaned ranges (:data:`compaction.clean.rules.FACTS_SCHEMA`, read by executors). A plan
adds ``is_winner``, stating :data:`compaction.clean.rules.SURVIVAL_ORDER` explicitly (never ``dropDuplicates``,
whose survivor is unspecified); :func:`classify` then applies :func:`compaction.clean.rules.classify` to each
Arrow batch, and :func:`per_segment` sums the decision up per segment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from compaction.clean import rules
from compaction.clean.layout import SegmentOutcome
from compaction.clean.payloads import DecisionRow
from compaction.store import TopicPartition

KEY = ("topic", "partition", "key")

FACTS_TYPE: StructType = from_arrow_schema(rules.FACTS_SCHEMA)
#: The facts :func:`classify` passes through to :func:`per_segment`, before the decision's own columns.
PASSED_ON = ("topic", "partition", "segment_base", "position", "offset", "error")
DECIDED_SCHEMA = pa.schema([*(rules.FACTS_SCHEMA.field(name) for name in PASSED_ON),
                            ("code", pa.int8()), ("stamp", pa.bool_()), ("upcoming_horizon_ms", pa.int64())])
DECIDED_TYPE: StructType = from_arrow_schema(DECIDED_SCHEMA)


def winners_by_window(df: DataFrame) -> DataFrame:
    """``is_winner`` = row 1 of its key in survival order: ``row_number() over (... order by competes,
    version_valid, version, offset desc)``; non-competing rows sort last, so they never take row 1."""
    order = [F.col("competes").desc(), *(F.col(c).desc() for c in rules.SURVIVAL_ORDER)]
    window = Window.partitionBy(*KEY).orderBy(*order)
    return df.withColumn("is_winner", F.col("competes") & (F.row_number().over(window) == 1))


def winners_by_aggregate(df: DataFrame) -> DataFrame:
    """``is_winner`` via ``max(struct(survival order))`` per key over competing rows, joined back on the offset."""
    best = (df.filter(F.col("competes")).groupBy(*KEY)
            .agg(F.max(F.struct(*rules.SURVIVAL_ORDER)).alias("best"))
            .select(*KEY, F.col("best.offset").alias("winner_offset")))
    joined = df.join(best, list(KEY), "left")
    return joined.withColumn("is_winner", F.col("competes") & (F.col("offset") == F.col("winner_offset"))
                             ).drop("winner_offset")


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
            yield from pa.table([*columns, pa.array(decided.code), pa.array(decided.stamp),
                                 pa.array(upcoming, mask=upcoming == rules.LONG_MAX)],
                                schema=DECIDED_SCHEMA).to_batches()

    return df.mapInArrow(body, DECIDED_TYPE)


def per_segment(decided: DataFrame) -> DataFrame:
    """One decision row per segment: its counts, the positions of the rows it loses, the markers to stamp."""
    counts = [F.sum(F.when(F.col("code") == reason.code, 1).otherwise(0)).cast("long").alias(reason.value)
              for reason in rules.Reason]
    return decided.groupBy("topic", "partition", "segment_base").agg(
        F.count(F.lit(1)).alias("records"), F.sum((F.col("code") == rules.KEPT).cast("long")).alias("kept"),
        *counts,
        F.collect_list(F.when(F.col("code") != rules.KEPT, F.col("position"))).alias("dropped"),
        F.collect_list(F.when(F.col("stamp"), F.col("offset"))).alias("stamps"),
        F.min("upcoming_horizon_ms").alias("next_horizon_ms"), F.max("error").alias("error"))


def decision_row(row: Any) -> DecisionRow:
    """A :func:`per_segment` row as stage 2 takes it (the Arrow plan's decision row): the dropped rows'
    positions become a bitmap over the segment's rows (here all read, with no key buckets)."""
    tp = TopicPartition(row["topic"], row["partition"])
    if row["error"] is not None:
        return DecisionRow.failed(tp, row["error"])
    bits = np.zeros(row["records"] or 0, dtype=bool)
    bits[np.array(row["dropped"] or [], dtype=np.int64)] = True
    stamps = np.array(row["stamps"] or [], dtype=np.int64)
    outcome = SegmentOutcome(records=row["records"], kept=row["kept"], stamped=len(stamps),
                             dropped={reason.value: row[reason.value] for reason in rules.Reason if row[reason.value]},
                             next_horizon_ms=row["next_horizon_ms"])
    return DecisionRow(tp=tp, segment_base=row["segment_base"], outcome=outcome, rows=len(bits),
                       dropped=np.packbits(bits), stamps=stamps)
