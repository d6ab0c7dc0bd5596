"""The cleaning rules on hand-built records: versions (KIP-280), transactions, the decision, the boundary."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from compaction import rules
from compaction.rules import DropReason, Strategy
from compaction.schema import HEADER_TYPE, LONG_MAX
from compaction.store.segment import records
from tests.helpers.builders import facts

NOW = 1_000_000


def be(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def versions(rows: list[tuple[int, int | None, Any]], strategy: Strategy, header: str = "") -> list[tuple[int, int]]:
    table = pa.table(
        {
            "offset": pa.array([r[0] for r in rows], pa.int64()),
            "timestamp": pa.array([r[1] for r in rows], pa.int64()),
            "headers": pa.array([r[2] for r in rows], HEADER_TYPE),
        }
    )
    valid, version = rules.versions(table, strategy, header)
    return list(zip(valid.tolist(), version.tolist(), strict=True))


def test_offset_strategy_uses_the_offset() -> None:
    assert versions([(5, None, None), (9, 1, None)], Strategy.OFFSET) == [(1, 5), (1, 9)]


def test_timestamp_strategy_invalidates_missing_and_negative_timestamps() -> None:
    rows = [(0, 1000, None), (1, None, None), (2, -1, None), (3, 0, None)]
    assert versions(rows, Strategy.TIMESTAMP) == [(1, 1000), (0, -1), (0, -1), (1, 0)]


def test_header_strategy_reads_the_last_occurrence_as_a_big_endian_long() -> None:
    rows: list[tuple[int, int | None, Any]] = [
        (0, None, [("v", be(7))]),
        (1, None, [("v", be(7)), ("other", be(99)), ("v", be(-3))]),  # last occurrence wins, even if lower
        (2, None, [("v", b"\x01\x02")]),  # not 8 bytes: malformed
        (3, None, [("V", be(8))]),  # another header (names are case-sensitive)
        (4, None, None),  # no headers at all
        (5, None, [("v", None)]),  # a null value
        (6, None, [("v", be(2**63 - 1))]),
        (7, None, [("v", be(-(2**63)))]),
        (8, None, [("v", b"\x01\x02"), ("v", be(4))]),
        (9, None, [("v", be(4)), ("v", b"123456789")]),  # the last one is malformed: no valid version
    ]
    assert versions(rows, Strategy.HEADER, "v") == [
        (1, 7),
        (1, -3),
        (0, -1),
        (0, -1),
        (0, -1),
        (0, -1),
        (1, 2**63 - 1),
        (1, -(2**63)),
        (1, 4),
        (0, -1),
    ]


def test_header_versions_of_a_sliced_table_read_the_right_bytes() -> None:
    rows = [(i, None, [("v", be(100 + i))]) for i in range(6)]
    table = pa.table(
        {"offset": pa.array([r[0] for r in rows], pa.int64()), "headers": pa.array([r[2] for r in rows], HEADER_TYPE)}
    ).slice(3)
    valid, version = rules.versions(table, Strategy.HEADER, "v")
    assert version.tolist() == [103, 104, 105] and valid.tolist() == [1, 1, 1]


# Transactions (reference §3.9) ------------------------------------------------------------------------------


def T(producer: int, offset: int) -> dict[str, Any]:
    return {"offset": offset, "key": str(offset), "producer_id": producer, "is_transactional": True}


def marker(producer: int, offset: int, kind: str) -> dict[str, Any]:
    return {"offset": offset, "producer_id": producer, "is_control": True, "control_type": kind}


def txn(*rows: dict[str, Any]) -> tuple[list[int], list[int]]:
    table = records(rows)
    found = rules.transaction_facts(table)
    offsets = table.column("offset").to_pylist()
    return (
        [o for o, a in zip(offsets, found.aborted, strict=True) if a],
        [o for o, p in zip(offsets, found.marker_pending, strict=True) if p],
    )


def test_t16_aborted_records_and_pending_markers() -> None:
    # T(1)[1,2]@0-1, T(2)[2,3]@2-3, T(1)[3,4]@4-5, A(1)@6, C(2)@7, T(1)[2]@8, C(1)@9
    aborted, pending = txn(
        T(1, 0),
        T(1, 1),
        T(2, 2),
        T(2, 3),
        T(1, 4),
        T(1, 5),
        marker(1, 6, "abort"),
        marker(2, 7, "commit"),
        T(1, 8),
        marker(1, 9, "commit"),
    )
    assert aborted == [0, 1, 4, 5]
    assert pending == [6, 7, 9]


def test_a_marker_whose_records_are_gone_is_not_pending_and_an_open_transaction_is_not_aborted() -> None:
    # C(1)@3 with its records already removed by earlier passes; producer 2's transaction has no marker yet.
    aborted, pending = txn(marker(1, 3, "commit"), T(2, 4), T(1, 5), marker(1, 6, "abort"))
    assert aborted == [5]
    assert pending == [6]


def test_non_transactional_records_are_never_aborted() -> None:
    aborted, pending = txn({"offset": 0, "key": "a", "producer_id": 1}, marker(1, 1, "abort"))
    assert (aborted, pending) == ([], [])


# The decision ---------------------------------------------------------------------------------------------


def decide(table: pa.Table, winners: list[int], keyless_drop: bool = False) -> list[str | None]:
    offsets = table.column("offset").to_pylist()
    decided = rules.classify(table, np.isin(offsets, winners), now_ms=NOW, keyless_drop=keyless_drop)
    return [None if c == rules.KEPT else list(DropReason)[c - 1].value for c in decided.code.tolist()]


def test_only_the_winner_of_a_key_survives_and_nothing_else_keeps_a_loser() -> None:
    table = facts({"offset": 0, "key": "a"}, {"offset": 1, "key": "a"}, {"offset": 2, "key": "b"})
    # The last record of the range loses like any other: no log-end rule keeps it (SPEC §3.5).
    assert decide(table, winners=[1]) == ["superseded", None, "superseded"]


def test_tombstones_expire_at_their_horizon_unless_guarded_by_a_stale_record_beyond() -> None:
    table = facts(
        {"offset": 0, "key": "a", "delete_horizon_ms": NOW - 5},
        {"offset": 1, "key": "b", "delete_horizon_ms": NOW + 1},
        {"offset": 2, "key": "c", "delete_horizon_ms": NOW},
        {"offset": 3, "key": "d", "delete_horizon_ms": NOW, "guarded": True},
    )
    assert decide(table, winners=[0, 1, 2, 3]) == ["tombstone_expired", None, "tombstone_expired", None]


def test_keyless_records_are_kept_or_dropped_and_aborted_records_go_first() -> None:
    table = facts({"offset": 0}, {"offset": 1, "key": "a", "aborted": True}, {"offset": 2, "aborted": True})
    assert decide(table, winners=[]) == [None, "aborted", "aborted"]
    assert decide(table, winners=[], keyless_drop=True) == ["keyless", "aborted", "aborted"]


def test_markers_stay_while_pending_get_a_horizon_once_free_and_go_when_it_passes() -> None:
    table = facts(
        {"offset": 0, "is_control": True, "marker_pending": True},
        {"offset": 1, "is_control": True},
        {"offset": 2, "is_control": True, "delete_horizon_ms": NOW + 5},
        {"offset": 3, "is_control": True, "delete_horizon_ms": NOW},
        {"offset": 4, "is_control": True, "marker_pending": True, "delete_horizon_ms": NOW},
    )
    assert decide(table, winners=[]) == [None, None, None, "marker_expired", None]
    decided = rules.classify(table, np.zeros(5, dtype=bool), now_ms=NOW, keyless_drop=False)
    assert decided.stamp.tolist() == [False, True, False, False, False]


def test_kept_tombstones_and_named_markers_need_a_horizon_once() -> None:
    table = records(
        [
            {"offset": 0, "key": "a", "value": None},
            {"offset": 1, "key": "b", "value": "x"},
            {"offset": 2, "key": "c", "value": None, "delete_horizon_ms": 7},
            {"offset": 3, "value": None},
            {"offset": 4, "producer_id": 1, "is_control": True, "control_type": "commit"},
            {"offset": 5, "producer_id": 1, "is_control": True, "control_type": "commit"},
        ]
    )
    assert rules.needs_horizon(table, np.array([5])).to_pylist() == [True, False, False, False, False, True]


def test_a_tail_record_guards_a_tombstone_only_with_a_lower_version() -> None:
    table = facts(
        *(
            {"offset": i, "key": k, "version_valid": 1, "version": v}
            for i, (k, v) in enumerate([("a", 50), ("b", 50), ("c", 50), ("d", 50), ("e", 50)])
        ),
        {"offset": 5, "key": "f", "version_valid": 0, "version": -1},
    )
    tail = pa.table(
        {
            "key": pa.array([b"a", b"b", b"b", b"c", b"d", b"f"]),
            "version_valid": pa.array([1, 1, 1, 0, 1, 0], pa.int8()),
            "version": pa.array([10, 60, 50, -1, 70, -1], pa.int64()),
        }
    )
    guarded = rules.guarded_by_tail(table, np.ones(6, dtype=bool), tail)
    # a: older tail value; b: equal version (the later offset wins) and a newer one; c: no version at all;
    # d: newer; e: none; f: a record without a version has nothing lower than it.
    assert guarded.tolist() == [True, False, True, False, False, False]


def test_time_arithmetic_saturates_at_kafkas_long_max() -> None:
    assert rules.delete_horizon(NOW, LONG_MAX) == LONG_MAX
    assert rules.saturating_add(NOW, 5) == NOW + 5
    assert rules.saturating_add(-(2**63), -1) == -(2**63)


@pytest.mark.parametrize(
    ("dirty", "lso", "lag", "expected"),
    [
        (0, 100, None, (30, "active segment")),
        (0, 15, None, (10, "last stable offset")),  # rounded down to the segment holding the LSO
        (0, 100, 20, (20, "min.compaction.lag.ms")),
        (25, 15, None, (25, "last stable offset")),  # never below the first dirty offset's segment
        (0, 22, None, (25, "last stable offset")),  # inside a gap between segments: the next segment
    ],
)
def test_first_uncleanable_offset_is_kafkas_minimum_rounded_to_a_segment(
    dirty: int, lso: int, lag: int | None, expected: tuple[int, str]
) -> None:
    # Segments [0,10) [10,20) [20,22) gap [25,30), active at 30.
    offset, bound = rules.uncleanable_offset(
        first_dirty_offset=dirty, active_base=30, last_stable_offset=lso, lag_bound=lag
    )
    assert (rules.first_uncleanable_offset(offset, [0, 10, 20, 25], [10, 20, 22, 30], 30), bound) == expected


def test_versions_are_exact_longs_with_validity_as_bytes() -> None:
    """A version is a Kafka long: 2^53 + 1 is not rounded (as a float would round it)."""
    big: list[tuple[int, int | None, Any]] = [
        (0, None, [("v", be(2**53 + 1))]),
        (1, None, [("v", be(-(2**53) - 1))]),
        (2, None, [("w", be(1))]),
    ]
    for strategy, rows in (
        (Strategy.HEADER, big),
        (Strategy.TIMESTAMP, [(0, 2**53 + 1, None), (1, None, None)]),
        (Strategy.OFFSET, [(2**53 + 1, None, None)]),
    ):
        table = pa.table(
            {
                "offset": pa.array([r[0] for r in rows], pa.int64()),
                "timestamp": pa.array([r[1] for r in rows], pa.int64()),
                "headers": pa.array([r[2] for r in rows], HEADER_TYPE),
            }
        )
        valid, version = rules.versions(table, strategy, "v")
        assert (valid.dtype, version.dtype) == (np.int8, np.int64), strategy
    assert versions(big, Strategy.HEADER, "v") == [(1, 2**53 + 1), (1, -(2**53) - 1), (0, -1)]
    assert versions([(0, 2**53 + 1, None), (1, None, None)], Strategy.TIMESTAMP) == [(1, 2**53 + 1), (0, -1)]
    no_match = rules.versions(pa.table({"headers": pa.array([[("w", be(1))]], HEADER_TYPE)}), Strategy.HEADER, "v")
    no_headers = rules.versions(pa.table({"headers": pa.array([None], HEADER_TYPE)}), Strategy.HEADER, "v")
    for valid, version in (no_match, no_headers):
        assert (valid.dtype, version.dtype, valid.tolist(), version.tolist()) == (np.int8, np.int64, [0], [-1])


def test_transaction_facts_are_booleans_and_a_null_flag_counts_as_false() -> None:
    table = pa.table(
        {
            "offset": pa.array([0, 1, 2], pa.int64()),
            "producer_id": pa.array([1, 1, 1], pa.int64()),
            "is_transactional": pa.array([True, None, None], pa.bool_()),
            "is_control": pa.array([None, None, True], pa.bool_()),
            "control_type": pa.array([None, None, "abort"], pa.string()),
        }
    )
    found = rules.transaction_facts(table)
    assert (found.aborted.dtype, found.marker_pending.dtype) == (np.dtype(bool), np.dtype(bool))
    assert (found.aborted.tolist(), found.marker_pending.tolist()) == ([True, False, False], [False, False, True])
    plain = rules.transaction_facts(table.slice(1, 1))  # one record, no transaction: nothing to look at
    assert (plain.aborted.tolist(), plain.marker_pending.tolist()) == ([False], [False])
    assert (plain.aborted.dtype, plain.marker_pending.dtype) == (np.dtype(bool), np.dtype(bool))


def test_one_stale_record_beyond_the_range_is_enough_to_guard_and_no_candidate_is_guarded_by_nothing() -> None:
    table = facts({"offset": 0, "key": "a", "version": 50}, {"offset": 1, "key": "b", "version": 50})
    tail = pa.table(
        {"key": pa.array([b"a"]), "version_valid": pa.array([1], pa.int8()), "version": pa.array([10], pa.int64())}
    )
    guarded = rules.guarded_by_tail(table, np.ones(2, dtype=bool), tail)
    assert (guarded.dtype, guarded.tolist()) == (np.dtype(bool), [True, False])
    assert rules.guarded_by_tail(table, np.zeros(2, dtype=bool), tail).tolist() == [False, False]
    assert rules.guarded_by_tail(table, np.ones(2, dtype=bool), tail.slice(0, 0)).tolist() == [False, False]


def test_a_record_with_a_null_control_flag_is_data_when_its_horizon_is_decided() -> None:
    table = records([{"offset": 0, "key": "a", "value": None}, {"offset": 1, "key": "b", "value": "x"}])
    table = table.set_column(table.column_names.index("is_control"), "is_control", pa.nulls(2, pa.bool_()))
    assert rules.needs_horizon(table, np.array([], dtype=np.int64)).to_pylist() == [True, False]


def test_each_strategy_reads_its_version_from_its_own_column() -> None:
    assert [rules.strategy_columns(s) for s in (Strategy.OFFSET, Strategy.TIMESTAMP, Strategy.HEADER)] == [
        [],
        ["timestamp"],
        ["headers"],
    ]


def test_upcoming_horizons_are_those_of_kept_records_still_to_come_as_exact_longs() -> None:
    table = facts(
        {"offset": 0, "key": "a", "delete_horizon_ms": 2**53 + 1},  # kept, to come
        {"offset": 1, "key": "b", "delete_horizon_ms": NOW + 5},  # dropped: its horizon no longer counts
        {"offset": 2, "key": "c", "delete_horizon_ms": NOW},  # kept, due now: not to come
        {"offset": 3, "key": "d"},
    )  # kept, no horizon
    code = np.array([rules.KEPT, DropReason.SUPERSEDED.code, rules.KEPT, rules.KEPT], dtype=np.int8)
    upcoming = rules.upcoming_horizons(table, code, NOW)
    assert (upcoming.dtype, upcoming.tolist()) == (np.dtype(np.int64), [2**53 + 1, LONG_MAX, LONG_MAX, LONG_MAX])


def test_a_bound_equal_to_the_one_before_does_not_take_its_name() -> None:
    # The active segment's base, the last stable offset and the min-lag bound all at 30: the active segment bounds.
    assert rules.uncleanable_offset(first_dirty_offset=0, active_base=30, last_stable_offset=30, lag_bound=30) == (
        30,
        "active segment",
    )
    assert rules.uncleanable_offset(first_dirty_offset=0, active_base=40, last_stable_offset=30, lag_bound=30) == (
        30,
        "last stable offset",
    )
