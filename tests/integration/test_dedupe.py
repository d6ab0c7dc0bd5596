"""Every dedupe plan finds the same winners and decides the same on hand-built facts.

The Arrow plan runs without Spark; the Spark SQL plans run on the shared session. Expectations are
written by hand.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from compaction import rules, winners
from compaction.clean.dedupe import WINNER_SEARCHES, classify
from compaction.engine.isolation import without_failures
from compaction.rules import DropReason, WinnerSearch
from tests.helpers.builders import facts

NOW = 1_000_000
Verdict = tuple[int, str | None]  # (offset, the reason it drops or None when kept)


def expect(spark, plan: WinnerSearch, table: pa.Table, expected: list[Verdict], keyless_drop: bool = False) -> None:
    """The plan decides ``table`` (rows of every partition) as ``expected``: (offset, reason or None when kept) in
    offset order. The Spark SQL plans decide a DataFrame, compared with chispa to one written from ``expected``."""
    if plan is WinnerSearch.ARROW:
        result: list[tuple[int, int]] = []
        for partition in sorted(set(table.column("partition").to_pylist())):
            part = table.filter(pa.compute.equal(table.column("partition"), partition)).sort_by("offset")
            decided = winners.decide(part, now_ms=NOW, keyless_drop=keyless_drop)
            result += zip(part.column("offset").to_pylist(), decided.code.tolist(), strict=True)
        assert sorted((o, None if c == rules.KEPT else list(DropReason)[c - 1].value) for o, c in result) == expected
        return
    df = spark.createDataFrame(without_failures(table))  # the facts' rows, as facts_rows yields them
    frame = classify(df.transform(WINNER_SEARCHES[plan]), now_ms=NOW, keyless_drop=keyless_drop)
    # A reason's code is its index in DropReason plus one (0: kept), as element_at counts.
    reasons = ", ".join(f"'{r.value}'" for r in DropReason)
    reason = f"CASE WHEN code = {rules.KEPT} THEN NULL ELSE element_at(array({reasons}), CAST(code AS INT)) END"
    assert_df_equality(
        frame.selectExpr("offset", f"{reason} AS reason"),
        spark.createDataFrame(expected, "offset long, reason string"),
        ignore_row_order=True,
        ignore_nullable=True,
    )


@pytest.fixture(
    params=[
        pytest.param((WinnerSearch.ARROW, None), id="arrow"),
        *(
            pytest.param((p, kind), id=f"{p}-{kind}", marks=pytest.mark.spark)
            for p in WINNER_SEARCHES
            for kind in ("classic", "connect")
        ),
    ]
)
def plan_and_session(request: pytest.FixtureRequest) -> tuple[WinnerSearch, str | None]:
    return request.param


@pytest.fixture
def plan(plan_and_session: tuple[WinnerSearch, str | None]) -> WinnerSearch:
    return plan_and_session[0]


@pytest.fixture
def spark_or_none(request: pytest.FixtureRequest, plan_and_session: tuple[WinnerSearch, str | None]):
    """The shared session (classic or Spark Connect) for the Spark SQL plans; the Arrow plan needs none."""
    kind = plan_and_session[1]
    return None if kind is None else request.getfixturevalue("spark" if kind == "classic" else "connect")


def versioned(offset: int, key: str, version: int | None, **fields: Any) -> dict[str, Any]:
    """A record of a non-offset strategy: ``version`` None means it has none (valid 0, version -1)."""
    return {
        "offset": offset,
        "key": key,
        "version_valid": 0 if version is None else 1,
        "version": -1 if version is None else version,
        **fields,
    }


def test_the_highest_offset_wins_per_key_and_partition(spark_or_none, plan: WinnerSearch) -> None:
    table = facts(
        {"offset": 0, "key": "a"},
        {"offset": 1, "key": "b"},
        {"offset": 2, "key": "a"},
        {"offset": 3, "key": "a", "partition": 1},
        {"offset": 4, "key": "b"},
    )
    expect(spark_or_none, plan, table, [(0, "superseded"), (1, "superseded"), (2, None), (3, None), (4, None)])


def test_a_higher_version_wins_ties_go_to_the_higher_offset_and_records_without_one_lose(
    spark_or_none, plan: WinnerSearch
) -> None:
    table = facts(
        versioned(0, "a", 50),
        versioned(1, "a", 10),
        versioned(2, "b", 7),
        versioned(3, "b", 7),
        versioned(4, "c", 1),
        versioned(5, "c", None),
        versioned(6, "c", None),
        versioned(7, "d", None),
        versioned(8, "d", None),
        versioned(9, "e", -(2**63)),
        versioned(10, "e", None),
    )
    expect(
        spark_or_none,
        plan,
        table,
        [
            (0, None),
            (1, "superseded"),
            (2, "superseded"),
            (3, None),
            (4, None),
            (5, "superseded"),
            (6, "superseded"),
            (7, "superseded"),
            (8, None),
            (9, None),
            (10, "superseded"),
        ],
    )


def test_the_last_record_of_the_range_loses_like_any_other(spark_or_none, plan: WinnerSearch) -> None:
    # Timestamp strategy: value @0 (t=300), tombstone @1 (t=500), stale value @2 (t=100) last in the range.
    table = facts(versioned(0, "k", 300), versioned(1, "k", 500, delete_horizon_ms=NOW + 1), versioned(2, "k", 100))
    expect(spark_or_none, plan, table, [(0, "superseded"), (1, None), (2, "superseded")])


def test_a_stamped_tombstone_competes_like_any_version(spark_or_none, plan: WinnerSearch) -> None:
    table = facts(
        versioned(0, "a", 20),
        versioned(1, "a", 10, delete_horizon_ms=NOW - 9),
        versioned(2, "b", 10),
        versioned(3, "b", 20, delete_horizon_ms=NOW + 9),
    )
    expect(spark_or_none, plan, table, [(0, None), (1, "superseded"), (2, "superseded"), (3, None)])


def test_tombstones_expire_at_their_horizon_unless_superseded_first_or_guarded(
    spark_or_none, plan: WinnerSearch
) -> None:
    table = facts(
        {"offset": 0, "key": "a"},
        {"offset": 1, "key": "a", "delete_horizon_ms": NOW - 5},
        {"offset": 2, "key": "b", "delete_horizon_ms": NOW + 1},
        {"offset": 3, "key": "c", "delete_horizon_ms": NOW},
        {"offset": 4, "key": "d", "delete_horizon_ms": NOW},
        {"offset": 5, "key": "d"},
        {"offset": 6, "key": "e", "delete_horizon_ms": NOW, "guarded": True},
    )
    expect(
        spark_or_none,
        plan,
        table,
        [
            (0, "superseded"),
            (1, "tombstone_expired"),
            (2, None),
            (3, "tombstone_expired"),
            (4, "superseded"),
            (5, None),
            (6, None),
        ],
    )


def test_keyless_records_are_kept_or_dropped(spark_or_none, plan: WinnerSearch) -> None:
    table = facts({"offset": 0}, {"offset": 1, "key": "a"})
    expect(spark_or_none, plan, table, [(0, None), (1, None)])
    expect(spark_or_none, plan, table, [(0, "keyless"), (1, None)], keyless_drop=True)


def test_aborted_records_go_never_win_and_markers_follow_their_transaction(spark_or_none, plan: WinnerSearch) -> None:
    table = facts(
        {"offset": 0, "key": "a", "aborted": True},
        {"offset": 1, "key": "a"},
        {"offset": 2, "is_control": True, "marker_pending": True},
        {"offset": 3, "is_control": True},
        {"offset": 4, "is_control": True, "delete_horizon_ms": NOW + 5},
        {"offset": 5, "is_control": True, "delete_horizon_ms": NOW},
        {"offset": 6, "key": "b", "aborted": True},
        {"offset": 7, "key": "c"},
        {"offset": 8, "key": "c", "aborted": True},
    )
    expect(
        spark_or_none,
        plan,
        table,
        [
            (0, "aborted"),
            (1, None),
            (2, None),
            (3, None),
            (4, None),
            (5, "marker_expired"),
            (6, "aborted"),
            (7, None),
            (8, "aborted"),
        ],
    )
