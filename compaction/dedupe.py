"""Which records survive a pass: the winner of each key, then Kafka's record-level rules.

Input: the facts of cleaned ranges (:data:`compaction.tasks.FACTS_SCHEMA`) with the strategy's
``version_valid``/``version`` columns. Records that compete for their key are keyed data records that
are not aborted. The winner of a (topic, partition, key) is the greatest in
:data:`compaction.strategies.SURVIVAL_ORDER`; every plan states that rule explicitly (never
``dropDuplicates``, whose survivor is unspecified).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from compaction.strategies import SURVIVAL_ORDER

PLANS = ("window", "aggregate")
KEY = ("topic", "partition", "key")

#: Why a record is dropped (the report's ``dropped`` counters). Rows of a partition that failed to read
#: carry the reason ``error`` and are never counted: the whole partition is reported uncleanable.
REASONS = ("superseded", "tombstone_expired", "marker_expired", "aborted", "keyless")


def competes() -> Column:
    return F.col("key").isNotNull() & ~F.col("is_control") & ~F.col("aborted") & F.col("error").isNull()


def winners_by_window(df: DataFrame) -> DataFrame:
    """``is_winner`` = row 1 of its key in survival order: ``row_number() over (... order by valid, version,
    offset desc)``. Non-competing rows sort after competing ones, so they never take row 1 from them."""
    order = [competes().desc(), *(F.col(c).desc() for c in SURVIVAL_ORDER)]
    window = Window.partitionBy(*KEY).orderBy(*order)
    return df.withColumn("is_winner", competes() & (F.row_number().over(window) == 1))


def winners_by_aggregate(df: DataFrame) -> DataFrame:
    """``is_winner`` via ``max(struct(valid, version, offset))`` per key, joined back on (key, offset)."""
    best = (df.filter(competes()).groupBy(*KEY)
            .agg(F.max(F.struct(*SURVIVAL_ORDER)).alias("best"))
            .select(*KEY, F.col("best.offset").alias("winner_offset")))
    joined = df.join(best, list(KEY), "left")
    return joined.withColumn("is_winner", competes() & (F.col("offset") == F.col("winner_offset"))
                             ).drop("winner_offset")


WINNER_PLANS: dict[str, Callable[[DataFrame], DataFrame]] = {
    "window": winners_by_window,
    "aggregate": winners_by_aggregate,
}


def decide(now_ms: int) -> Callable[[DataFrame], DataFrame]:
    """Add ``reason`` (why the record is dropped; null = kept), ``keep`` and ``stamp`` (a kept marker whose
    transaction has no record left before it, still without a delete horizon).

    A data record carrying a delete horizon is a tombstone (only the cleaner stamps horizons, and only on
    tombstones and markers), so a winner whose horizon has passed is an expired tombstone. Tombstones get
    their first horizon when their segment is rewritten, where the value is read anyway.
    """

    def transform(df: DataFrame) -> DataFrame:
        now = F.lit(now_ms)
        horizon = F.col("delete_horizon_ms")
        passed = horizon.isNotNull() & (now >= horizon)
        log_end = (F.col("strategy") != "offset") & (F.col("offset") == F.col("range_last_offset"))
        reason = (
            F.when(F.col("error").isNotNull(), F.lit("error"))
            .when(F.col("is_control") & F.col("marker_pending"), F.lit(None))
            .when(F.col("is_control") & passed, F.lit("marker_expired"))
            .when(F.col("is_control"), F.lit(None))
            .when(F.col("aborted"), F.lit("aborted"))
            .when(F.col("key").isNull(), F.when(F.col("keyless_drop"), F.lit("keyless")))
            .when(~F.col("is_winner") & ~log_end, F.lit("superseded"))
            .when(F.col("is_winner") & passed, F.lit("tombstone_expired"))
        )
        keep = reason.isNull()
        stamp = keep & horizon.isNull() & F.col("is_control") & ~F.col("marker_pending")
        return df.withColumns({"reason": reason, "keep": keep, "stamp": stamp})

    return transform


def per_segment(decided: DataFrame) -> DataFrame:
    """Decision rows per segment (stage 1 of the Spark SQL plans): its counts, the offsets it loses
    and the markers to stamp."""
    counts = [F.sum(F.when(F.col("reason") == r, 1).otherwise(0)).cast("long").alias(r) for r in REASONS]
    return decided.groupBy("topic", "partition", "segment_base").agg(
        F.count(F.lit(1)).alias("records"), F.sum(F.col("keep").cast("long")).alias("kept"), *counts,
        F.collect_list(F.when(~F.col("keep"), F.col("position"))).alias("dropped"),
        F.collect_list(F.when(F.col("stamp"), F.col("offset"))).alias("stamps"),
        F.max("error").alias("error"))


def decision_row(row: Any) -> dict[str, Any]:
    """A :func:`per_segment` row as the dict stage 2 takes (the Arrow plan's decision row): the dropped rows'
    positions become a bitmap over the segment's rows (here all read, with no key buckets)."""
    bits = np.zeros(row["records"] or 0, dtype=bool)
    bits[np.array(row["dropped"] or [], dtype=np.int64)] = True
    return {"topic": row["topic"], "partition": row["partition"], "segment_base": row["segment_base"],
            "records": row["records"], "kept": row["kept"], "stamped": len(row["stamps"] or []),
            "dropped_by": {reason: row[reason] for reason in REASONS if row[reason]},
            "rows": len(bits), "dropped": np.packbits(bits),
            "stamps": np.array(row["stamps"] or [], dtype=np.int64), "error": row["error"]}
