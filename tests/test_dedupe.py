"""Survivor decision on hand-built facts, for every dedupe plan: winners, tombstones, transactions, keyless."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from compaction import arrow_dedupe
from compaction.cleaner import PLANS
from compaction.dedupe import REASONS, WINNER_PLANS, decide
from compaction.strategies import by_configured_strategy
from compaction.tasks import FACTS_DDL, FACTS_SCHEMA

pytestmark = pytest.mark.spark

NOW = 1_000_000
DAY = 86_400_000
RESULT = "offset long, keep boolean, reason string, stamp boolean"


def be(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def fact(offset: int, key: str | None, *, ts: int | None = None, header: bytes | None = None,
         horizon: int | None = None, control: bool = False, aborted: bool = False, pending: bool = False,
         strategy: str = "offset", last: int = 99, keyless_drop: bool = False, partition: int = 0) -> tuple[Any, ...]:
    headers = [("v", header)] if header is not None else None
    return ("t", partition, 0, offset, offset, key.encode() if key is not None else None, ts, headers, horizon,
            control, aborted, pending, strategy, "v" if strategy == "header" else "", last, keyless_drop, None)


def run(spark, plan: str, *facts: tuple[Any, ...]):  # type: ignore[no-untyped-def]
    """The decision of ``plan`` on hand-built facts, as a (offset, keep, reason, stamp) frame."""
    if plan == "arrow":
        rows = []
        table = pa.Table.from_pylist([dict(zip(FACTS_SCHEMA.names, f, strict=True)) for f in facts],
                                     schema=FACTS_SCHEMA)
        for partition in sorted(set(table.column("partition").to_pylist())):
            part = table.filter(pa.compute.equal(table.column("partition"), partition))
            part = part.sort_by("offset")
            first = part.slice(0, 1).to_pylist()[0]
            decided = arrow_dedupe.decide(part, strategy=first["strategy"], header=first["strategy_header"],
                                          now_ms=NOW, keyless_drop=first["keyless_drop"],
                                          range_last_offset=first["range_last_offset"])
            for offset, code, stamp in zip(part.column("offset").to_pylist(), decided.code.tolist(),
                                           decided.stamp.tolist(), strict=True):
                rows.append((offset, code == 0, REASONS[code - 1] if code else None, bool(stamp)))
        return spark.createDataFrame(rows, RESULT)
    df = spark.createDataFrame(list(facts), FACTS_DDL)
    decided = df.transform(by_configured_strategy).transform(WINNER_PLANS[plan]).transform(decide(NOW))
    return decided.select("offset", "keep", "reason", "stamp").orderBy("partition", "offset")


def expect(spark, *rows: tuple[int, bool, str | None, bool]):  # type: ignore[no-untyped-def]
    return spark.createDataFrame(list(rows), RESULT)


@pytest.fixture(params=PLANS)
def plan(request: pytest.FixtureRequest) -> str:
    return request.param


def test_offset_strategy_keeps_the_highest_offset_per_key_and_partition(spark, plan: str) -> None:  # type: ignore[no-untyped-def]
    result = run(spark, plan, fact(0, "a"), fact(1, "b"), fact(2, "a"), fact(3, "a", partition=1),
                 fact(4, "b"))
    assert_df_equality(result, expect(spark, (0, False, "superseded", False), (1, False, "superseded", False),
                                      (2, True, None, False), (4, True, None, False), (3, True, None, False)),
                       ignore_nullable=True)


def test_timestamp_ties_go_to_the_higher_offset_and_missing_timestamps_lose(spark, plan: str) -> None:  # type: ignore[no-untyped-def]
    s = "timestamp"
    result = run(spark, plan, fact(0, "a", ts=50, strategy=s), fact(1, "a", ts=10, strategy=s),
                 fact(2, "b", ts=7, strategy=s), fact(3, "b", ts=7, strategy=s),
                 fact(4, "c", ts=1, strategy=s), fact(5, "c", ts=None, strategy=s), fact(6, "c", ts=-5, strategy=s),
                 fact(7, "z", ts=0, strategy=s, last=7))
    assert_df_equality(result, expect(
        spark, (0, True, None, False), (1, False, "superseded", False), (2, False, "superseded", False),
        (3, True, None, False), (4, True, None, False), (5, False, "superseded", False),
        (6, False, "superseded", False), (7, True, None, False)), ignore_nullable=True)


def test_header_versions_with_malformed_and_missing_headers(spark, plan: str) -> None:  # type: ignore[no-untyped-def]
    s = "header"
    result = run(spark, plan, fact(0, "a", header=be(9), strategy=s), fact(1, "a", header=be(3), strategy=s),
                 fact(2, "a", header=b"bad", strategy=s), fact(3, "b", strategy=s), fact(4, "b", strategy=s),
                 fact(5, "c", header=be(-1), strategy=s), fact(6, "c", strategy=s))
    assert_df_equality(result, expect(
        spark, (0, True, None, False), (1, False, "superseded", False), (2, False, "superseded", False),
        (3, False, "superseded", False), (4, True, None, False), (5, True, None, False),
        (6, False, "superseded", False)), ignore_nullable=True)


def test_a_stamped_tombstone_competes_like_any_version(spark, plan: str) -> None:  # type: ignore[no-untyped-def]
    s = "timestamp"
    result = run(spark, plan, fact(0, "a", ts=20, strategy=s), fact(1, "a", ts=10, horizon=NOW + 9, strategy=s),
                 fact(2, "b", ts=10, strategy=s), fact(3, "b", ts=20, horizon=NOW + 9, strategy=s))
    assert_df_equality(result, expect(spark, (0, True, None, False), (1, False, "superseded", False),
                                      (2, False, "superseded", False), (3, True, None, False)), ignore_nullable=True)


def test_log_end_rule_keeps_the_last_record_under_timestamp_and_header_only(spark, plan: str) -> None:  # type: ignore[no-untyped-def]
    result = run(spark, plan, fact(0, "a", ts=20, strategy="timestamp", last=1),
                 fact(1, "a", ts=10, strategy="timestamp", last=1),
                 fact(2, "b", partition=1, last=3), fact(3, "b", partition=1, last=3))
    assert_df_equality(result, expect(spark, (0, True, None, False), (1, True, None, False),
                                      (2, False, "superseded", False), (3, True, None, False)), ignore_nullable=True)


def test_tombstones_expire_at_their_horizon_unless_superseded_first(spark, plan: str) -> None:  # type: ignore[no-untyped-def]
    result = run(spark, plan, fact(0, "a"), fact(1, "a", horizon=NOW - 5), fact(2, "b", horizon=NOW + 1),
                 fact(3, "c", horizon=NOW), fact(4, "d", horizon=NOW), fact(5, "d"))
    assert_df_equality(result, expect(spark, (0, False, "superseded", False), (1, False, "tombstone_expired", False),
                                      (2, True, None, False), (3, False, "tombstone_expired", False),
                                      (4, False, "superseded", False), (5, True, None, False)),
                       ignore_nullable=True)


def test_keyless_records_are_kept_or_dropped_and_counted(spark, plan: str) -> None:  # type: ignore[no-untyped-def]
    result = run(spark, plan, fact(0, None), fact(1, None, partition=1, keyless_drop=True), fact(2, "a"))
    assert_df_equality(result, expect(spark, (0, True, None, False), (2, True, None, False),
                                      (1, False, "keyless", False)), ignore_nullable=True)


def test_aborted_records_go_and_markers_follow_their_transaction(spark, plan: str) -> None:  # type: ignore[no-untyped-def]
    result = run(spark, plan, fact(0, "a", aborted=True), fact(1, "a"), fact(2, None, control=True, pending=True),
                 fact(3, None, control=True), fact(4, None, control=True, horizon=NOW + 5),
                 fact(5, None, control=True, horizon=NOW), fact(6, "b", aborted=True))
    assert_df_equality(result, expect(
        spark, (0, False, "aborted", False), (1, True, None, False), (2, True, None, False), (3, True, None, True),
        (4, True, None, False), (5, False, "marker_expired", False), (6, False, "aborted", False)),
        ignore_nullable=True)


def test_an_aborted_record_never_wins_over_a_committed_one(spark, plan: str) -> None:  # type: ignore[no-untyped-def]
    result = run(spark, plan, fact(0, "a"), fact(1, "a", aborted=True))
    assert_df_equality(result, expect(spark, (0, True, None, False), (1, False, "aborted", False)),
                       ignore_nullable=True)
