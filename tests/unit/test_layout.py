"""Which objects a pass writes: untouched, deletion vectors, rewrites, and merges of small neighbours."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from compaction.clean.layout import WRITE_COST, ApplyPolicy, SegmentCounts, lay_out
from compaction.schema import LONG_MAX
from compaction.store.manifest import DeletionVector, SegmentMeta


def meta(base: int, end: int, size: int, tombstones: int = 0, deletes: DeletionVector | None = None) -> SegmentMeta:
    return SegmentMeta(
        path=f"segments/{base:020d}-x.parquet",
        base_offset=base,
        next_offset=end,
        record_count=end - base,
        size_bytes=size,
        checksum="sha256:0",
        created_ms=0,
        tombstone_count=tombstones,
        deletes=deletes,
    )


def kept(records: int, lost: int = 0, stamped: int = 0) -> SegmentCounts:
    return SegmentCounts(
        records=records, kept=records - lost, stamped=stamped, dropped={"superseded": lost} if lost else {}
    )


def jobs(
    segments: list[SegmentMeta], segment_counts: list[SegmentCounts], first_dirty: int, policy: ApplyPolicy
) -> list[tuple[list[int], bool]]:
    by_base = {s.base_offset: o for s, o in zip(segments, segment_counts, strict=True)}
    return [
        ([s.base_offset for s in sources], vector)
        for sources, vector in lay_out(segments, by_base, first_dirty, policy)
    ]


SEGMENTS = [
    meta(0, 10, 1000),
    meta(10, 20, 1000),
    meta(20, 30, 1000),
    meta(30, 40, 1000),
    meta(40, 50, 100),
    meta(50, 60, 100, tombstones=1),
    meta(60, 70, 100),
]
OUTCOMES = [kept(10, lost=5), kept(10, lost=1), kept(10), kept(10, stamped=1), kept(10), kept(10), kept(10)]


def test_unchanged_segments_stay_vectors_for_few_losses_and_changed_ones_merge_up_to_segment_bytes() -> None:
    policy = ApplyPolicy(segment_bytes=1000, now_ms=0)
    assert jobs(SEGMENTS, OUTCOMES, first_dirty=40, policy=policy) == [
        ([0], False),
        ([10], True),
        ([30], False),
        ([40, 50, 60], False),
    ]


def test_without_vectors_every_loss_rewrites_and_small_clean_neighbours_merge() -> None:
    policy = ApplyPolicy(segment_bytes=900, now_ms=0, deletion_vector_max_ratio=0)
    # [40, 70) are clean and unchanged (their tombstone already carries its horizon), but small (below
    # 900 / 8 each): they merge into one segment.
    assert jobs(SEGMENTS, OUTCOMES, first_dirty=70, policy=policy) == [
        ([0], False),
        ([10], False),
        ([30], False),
        ([40, 50, 60], False),
    ]


def test_a_clean_segment_ending_at_the_dirty_section_keeps_its_stamped_tombstones_as_they_are() -> None:
    """The last clean segment ends where the dirty section starts; its tombstones got their horizon when it was
    cleaned, so it is not rewritten to stamp them again, and a loss still takes a deletion vector."""
    segments = [meta(0, 10, 1000, tombstones=2), meta(10, 20, 1000, tombstones=1)]
    policy = ApplyPolicy(segment_bytes=1000, now_ms=0)
    assert jobs(segments, [kept(10), kept(10)], first_dirty=20, policy=policy) == []
    assert jobs(segments, [kept(10), kept(10)], first_dirty=10, policy=policy) == [([10], False)]
    assert jobs(segments, [kept(10, lost=1), kept(10)], first_dirty=10, policy=policy) == [([0], True), ([10], False)]


def test_a_large_unchanged_segment_is_never_recopied_to_absorb_small_neighbours() -> None:
    segments = [meta(0, 10, 4000), meta(10, 11, 100), meta(11, 12, 100), meta(12, 13, 5000)]
    segment_counts = [kept(10), kept(1), kept(1, lost=1), kept(1)]
    assert jobs(segments, segment_counts, first_dirty=10, policy=ApplyPolicy(segment_bytes=8000, now_ms=0)) == [
        ([10, 11], False)
    ]


def test_a_small_segment_alone_that_need_not_change_is_left_as_it_is() -> None:
    segments = [meta(0, 10, 4000), meta(10, 11, 100), meta(11, 20, 5000)]
    assert (
        jobs(segments, [kept(10), kept(1), kept(9)], first_dirty=20, policy=ApplyPolicy(segment_bytes=8000, now_ms=0))
        == []
    )


def test_a_deletion_vector_past_its_age_is_folded_in_and_merges_stop_at_the_task_share_of_the_work() -> None:
    old = DeletionVector(
        path="segments/00000000000000000000-d.deletes.parquet",
        count=1,
        size_bytes=10,
        checksum="sha256:0",
        created_ms=0,
    )
    segments = [meta(0, 10, 1000, deletes=old), meta(10, 20, 1000), meta(20, 30, 1000)]
    segment_counts = [kept(9), kept(10, lost=9), kept(10, lost=9)]
    policy = ApplyPolicy(segment_bytes=10_000, now_ms=100, deletion_vector_max_age_ms=100, max_group_records=20)
    # Work: records read plus WRITE_COST (2) per record kept: 9 + 18, 10 + 2, 10 + 2 of 51 in all; a share of 20 of
    # the 29 records read is 20 * 51 / 29 = 35.2: the first segment (it keeps all it reads) takes a rewrite alone.
    assert WRITE_COST == 2
    assert jobs(segments, segment_counts, first_dirty=30, policy=policy) == [([0], False), ([10, 20], False)]
    for share in (29, 30):  # every record read: its share of the work is all of it, exactly (no rounding)
        policy = replace(policy, max_group_records=share)
        assert jobs(segments, segment_counts, first_dirty=30, policy=policy) == [([0, 10, 20], False)]


def test_a_deletion_vector_takes_up_to_its_ratio_of_the_records_counting_those_it_already_deletes() -> None:
    policy = ApplyPolicy(segment_bytes=100, now_ms=0)  # deletion.vector.max.ratio 0.2: 2 of 10 records
    assert jobs([meta(0, 10, 1000)], [kept(10, lost=2)], first_dirty=10, policy=policy) == [([0], True)]
    assert jobs([meta(0, 10, 1000)], [kept(10, lost=3)], first_dirty=10, policy=policy) == [([0], False)]
    older = DeletionVector(
        path="segments/_00000000000000000000-d.deletes.parquet",
        count=2,
        size_bytes=10,
        checksum="sha256:0",
        created_ms=0,
    )
    assert jobs([meta(0, 10, 1000, deletes=older)], [kept(8, lost=1)], first_dirty=10, policy=policy) == [
        ([0], False)
    ], "two deleted before and one now are more than two"


def test_a_small_segment_that_only_loses_a_few_records_alone_takes_a_deletion_vector() -> None:
    policy = ApplyPolicy(segment_bytes=8000, now_ms=0)
    assert jobs([meta(0, 10, 100)], [kept(10, lost=1)], first_dirty=10, policy=policy) == [([0], True)]


def test_a_segment_of_exactly_an_eighth_of_segment_bytes_is_large() -> None:
    # 801 // 8 = 100: the unchanged clean segment of 100 bytes stands alone; the one that loses its record is
    # rewritten without it.
    policy = ApplyPolicy(segment_bytes=801, now_ms=0)
    segments = [meta(0, 10, 100), meta(10, 11, 50)]
    assert jobs(segments, [kept(10), kept(1, lost=1)], first_dirty=11, policy=policy) == [([10], False)]


def test_merged_rewrites_fill_segment_bytes_exactly_and_start_afresh_after_a_large_segment() -> None:
    # A large unchanged segment, then three rewrites of 500 estimated bytes each (556 * 9 // 10) within 1000.
    segments = [meta(0, 10, 5000), meta(10, 20, 556), meta(20, 30, 556), meta(30, 40, 556)]
    segment_counts = [kept(10), kept(10, lost=1), kept(10, lost=1), kept(10, lost=1)]
    policy = ApplyPolicy(segment_bytes=1000, now_ms=0, deletion_vector_max_ratio=0)
    assert jobs(segments, segment_counts, first_dirty=40, policy=policy) == [([10, 20], False), ([30], False)]


def test_the_work_of_a_rewrite_adds_up_over_its_sources_and_starts_afresh_after_each_rewrite() -> None:
    # Four rewrites of 10 records read and 5 kept: work 10 + 2 * 5 = 20 each, 80 in all; a share of 20 of the 40
    # records read is 40 of the work: two segments a rewrite.
    segments = [meta(b, b + 10, 1000) for b in range(0, 40, 10)]
    policy = ApplyPolicy(segment_bytes=10_000, now_ms=0, max_group_records=20)
    assert jobs(segments, [kept(10, lost=5)] * 4, first_dirty=40, policy=policy) == [
        ([0, 10], False),
        ([20, 30], False),
    ]


def test_segment_outcomes_of_two_key_ranges_add_up() -> None:
    first = SegmentCounts(
        records=3, kept=2, stamped=1, dropped={"superseded": 1}, next_horizon_ms=50, erased_keys=frozenset({"x"})
    )
    second = SegmentCounts(
        records=4, kept=1, stamped=2, dropped={"superseded": 2, "aborted": 1}, erased_keys=frozenset({"y"})
    )
    both = SegmentCounts(
        records=7,
        kept=3,
        stamped=3,
        dropped={"superseded": 3, "aborted": 1},
        next_horizon_ms=50,
        erased_keys=frozenset({"x", "y"}),
    )
    assert first.merge(second) == both and second.merge(first) == both
    assert first.merge(replace(second, next_horizon_ms=40)).next_horizon_ms == 40
    assert second.merge(second).next_horizon_ms is None
    assert (both.lost, both.with_hidden_erased(frozenset({"z"})).erased_keys) == (4, frozenset({"x", "y", "z"}))
    assert both.with_hidden_erased(frozenset()) is both


def test_a_segment_no_decision_speaks_of_read_and_lost_nothing() -> None:
    assert SegmentCounts.empty() == SegmentCounts(records=0, kept=0, stamped=0, dropped={})
    assert SegmentCounts.empty().estimated_bytes(meta(0, 10, 1000)) == 0
    assert SegmentCounts(records=3, kept=1, stamped=0, dropped={}).estimated_bytes(meta(0, 3, 1000)) == 333


def test_verdicts_count_for_one_segment() -> None:
    code = np.array([0, 1, 0, 0], dtype=np.int8)
    stamp = np.array([False, False, True, False])
    counts = SegmentCounts.from_verdicts(code, stamp, np.array([500, LONG_MAX, 300, LONG_MAX]), frozenset({"k"}))
    assert counts == SegmentCounts(
        records=4, kept=3, stamped=1, dropped={"superseded": 1}, next_horizon_ms=300, erased_keys=frozenset({"k"})
    )
    nothing_to_come = SegmentCounts.from_verdicts(code, stamp, np.full(4, LONG_MAX))
    assert (nothing_to_come.next_horizon_ms, nothing_to_come.erased_keys) == (None, frozenset())
    assert SegmentCounts.from_verdicts(code[:0], stamp[:0], np.array([], dtype=np.int64)) == SegmentCounts.empty()


def test_a_small_clean_segment_that_loses_a_few_records_takes_a_deletion_vector_rather_than_merging() -> None:
    # A nightly increment: the clean section's segments are small (below 8000 / 8) and each loses a record to the
    # dirty segments' updates; merging them into the rewrite would recopy the whole clean section for two losers.
    segments = [meta(0, 10, 500), meta(10, 20, 500), meta(20, 21, 50), meta(21, 22, 50)]
    segment_counts = [kept(10, lost=1), kept(10, lost=1), kept(1), kept(1)]
    policy = ApplyPolicy(segment_bytes=8000, now_ms=0)
    assert jobs(segments, segment_counts, first_dirty=20, policy=policy) == [
        ([0], True),
        ([10], True),
        ([20, 21], False),
    ]
    # An unchanged small clean segment beside the rewrite still merges into it (SPEC §9).
    unchanged = [kept(10, lost=1), kept(10), kept(1), kept(1)]
    assert jobs(segments, unchanged, first_dirty=20, policy=policy) == [([0], True), ([10, 20, 21], False)]


def test_a_segment_of_empty_batches_counts_no_record_in_the_share_of_the_work() -> None:
    """A .log segment holding only an empty batch that must go (a stale one: it is rewritten) reads no record: with
    a one-record neighbour the range reads one record, and the rewrite's share of the work (one record, and its write)
    takes them both."""
    stale = SegmentMeta.model_validate({**meta(0, 1, 61).model_dump(), "record_count": 0})
    segments = [stale, meta(1, 2, 100)]
    by_base = {0: SegmentCounts.empty(), 1: kept(1)}
    policy = ApplyPolicy(segment_bytes=10_000, now_ms=0, max_group_records=1)
    assert lay_out(segments, by_base, 2, policy, reframe=frozenset({0})) == [((stale, segments[1]), False)]
