"""Which objects a pass writes: untouched, deletion vectors, rewrites, and merges of small neighbours."""

from __future__ import annotations

from dataclasses import replace

from compaction.clean.layout import WRITE_COST, ApplyPolicy, SegmentOutcome, lay_out
from compaction.store.manifest import DeletionVector, SegmentMeta


def meta(base: int, end: int, size: int, tombstones: int = 0, deletes: DeletionVector | None = None) -> SegmentMeta:
    return SegmentMeta(path=f"segments/{base:020d}-x.parquet", base_offset=base, next_offset=end,
                       record_count=end - base, size_bytes=size, checksum="sha256:0", created_ms=0,
                       tombstone_count=tombstones, deletes=deletes)


def kept(records: int, lost: int = 0, stamped: int = 0) -> SegmentOutcome:
    return SegmentOutcome(records=records, kept=records - lost, stamped=stamped,
                          dropped={"superseded": lost} if lost else {})


def jobs(segments: list[SegmentMeta], outcomes: list[SegmentOutcome], first_dirty: int,
         policy: ApplyPolicy) -> list[tuple[list[int], bool]]:
    by_base = {s.base_offset: o for s, o in zip(segments, outcomes, strict=True)}
    return [([s.base_offset for s in sources], vector)
            for sources, vector in lay_out(segments, by_base, first_dirty, policy)]


SEGMENTS = [meta(0, 10, 1000), meta(10, 20, 1000), meta(20, 30, 1000), meta(30, 40, 1000), meta(40, 50, 100),
            meta(50, 60, 100, tombstones=1), meta(60, 70, 100)]
OUTCOMES = [kept(10, lost=5), kept(10, lost=1), kept(10), kept(10, stamped=1), kept(10), kept(10), kept(10)]


def test_unchanged_segments_stay_vectors_for_few_losses_and_changed_ones_merge_up_to_segment_bytes() -> None:
    policy = ApplyPolicy(segment_bytes=1000, now_ms=0)
    assert jobs(SEGMENTS, OUTCOMES, first_dirty=40, policy=policy) == [
        ([0], False), ([10], True), ([30], False), ([40, 50, 60], False)]


def test_without_vectors_every_loss_rewrites_and_small_clean_neighbours_merge() -> None:
    policy = ApplyPolicy(segment_bytes=900, now_ms=0, deletion_vector_max_ratio=0)
    # [40, 70) are clean and unchanged (their tombstone already carries its horizon), but small (below
    # 900 / 8 each): they merge into one segment.
    assert jobs(SEGMENTS, OUTCOMES, first_dirty=70, policy=policy) == [
        ([0], False), ([10], False), ([30], False), ([40, 50, 60], False)]


def test_a_large_unchanged_segment_is_never_recopied_to_absorb_small_neighbours() -> None:
    segments = [meta(0, 10, 4000), meta(10, 11, 100), meta(11, 12, 100), meta(12, 13, 5000)]
    outcomes = [kept(10), kept(1), kept(1, lost=1), kept(1)]
    assert jobs(segments, outcomes, first_dirty=10, policy=ApplyPolicy(segment_bytes=8000, now_ms=0)) == [
        ([10, 11], False)]


def test_a_small_segment_alone_that_need_not_change_is_left_as_it_is() -> None:
    segments = [meta(0, 10, 4000), meta(10, 11, 100), meta(11, 20, 5000)]
    assert jobs(segments, [kept(10), kept(1), kept(9)], first_dirty=20,
                policy=ApplyPolicy(segment_bytes=8000, now_ms=0)) == []


def test_a_deletion_vector_past_its_age_is_folded_in_and_merges_stop_at_the_task_share_of_the_work() -> None:
    old = DeletionVector(path="segments/00000000000000000000-d.deletes.parquet", count=1, size_bytes=10,
                         checksum="sha256:0", created_ms=0)
    segments = [meta(0, 10, 1000, deletes=old), meta(10, 20, 1000), meta(20, 30, 1000)]
    outcomes = [kept(9), kept(10, lost=9), kept(10, lost=9)]
    policy = ApplyPolicy(segment_bytes=10_000, now_ms=100, deletion_vector_max_age_ms=100, max_group_records=20)
    # Work: records read plus WRITE_COST (2) per record kept: 9 + 18, 10 + 2, 10 + 2 of 51 in all; a share of 20 of
    # the 29 records read is 20 * 51 / 29 = 35.2: the first segment (it keeps all it reads) takes a rewrite alone.
    assert WRITE_COST == 2
    assert jobs(segments, outcomes, first_dirty=30, policy=policy) == [([0], False), ([10, 20], False)]
    for share in (29, 30):  # every record read: its share of the work is all of it, exactly (no rounding)
        policy = replace(policy, max_group_records=share)
        assert jobs(segments, outcomes, first_dirty=30, policy=policy) == [([0, 10, 20], False)]
