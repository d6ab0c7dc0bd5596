"""Erasure in the cleaner's decisions: rule 0, which segments a pass must rewrite, and when the planner selects."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from compaction import winners
from compaction.clean.figures import Roll
from compaction.clean.layout import ApplyPolicy, SegmentCounts, lay_out
from compaction.clean.planner import Decision, Selected, plan, plan_partition
from compaction.clean.settings import CleanerSettings, TopicConfig
from compaction.clean.sizing import apply_policy
from compaction.rules import KEPT, DropReason
from compaction.store import TopicPartition
from compaction.store.manifest import DeletionVector, ErasureRequest, Manifest, SegmentMeta, WriterInfo
from tests.helpers.builders import facts

HOUR = 3_600_000
ALICE = hashlib.sha256(b"alice").hexdigest()
COMPACT = TopicConfig(cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.9)


# Rule 0 --------------------------------------------------------------------------------------------------


def test_an_erased_record_goes_whatever_its_version_and_the_tombstone_is_what_its_key_keeps() -> None:
    # Header strategy: alice's old value carries version 9, the request's tombstone none; without rule 0 the old
    # value would win and the tombstone be superseded (a tombstone with a lower version deletes nothing).
    table = facts(
        {"offset": 0, "key": "alice", "version": 9, "erased": True},
        {"offset": 1, "key": "bob", "version": 1},
        {"offset": 2, "key": "alice", "version_valid": 0, "version": -1},  # the tombstone
        {"offset": 3, "key": None, "is_control": True, "marker_pending": True},
    )
    decided = winners.decide(table, now_ms=0, keyless_drop=False)
    assert decided.code.tolist() == [DropReason.ERASED.code, KEPT, KEPT, KEPT]


def test_an_erased_record_that_was_aborted_is_counted_as_erased() -> None:
    table = facts({"offset": 0, "key": "alice", "aborted": True, "erased": True}, {"offset": 1, "key": "alice"})
    assert winners.decide(table, now_ms=0, keyless_drop=False).code.tolist() == [DropReason.ERASED.code, KEPT]


# Which segments a pass rewrites ---------------------------------------------------------------------------


def meta(base: int, end: int, size: int = 1000, deletes: DeletionVector | None = None) -> SegmentMeta:
    return SegmentMeta(
        path=f"segments/{base:020d}-x.parquet",
        base_offset=base,
        next_offset=end,
        record_count=end - base,
        size_bytes=size,
        checksum="sha256:0",
        created_ms=0,
        deletes=deletes,
    )


def test_a_clean_segment_holding_an_erased_record_is_rewritten_where_it_would_take_a_deletion_vector() -> None:
    segments = [meta(0, 100), meta(100, 200)]
    policy = ApplyPolicy(segment_bytes=1000, now_ms=0)
    lost_one = SegmentCounts(records=100, kept=99, stamped=0, dropped={"superseded": 1})
    plain = lay_out(
        segments, {0: lost_one, 100: SegmentCounts(records=100, kept=100, stamped=0, dropped={})}, 200, policy
    )
    assert [([s.base_offset for s in sources], vector) for sources, vector in plain] == [([0], True)]
    erased = SegmentCounts(records=100, kept=99, stamped=0, dropped={"erased": 1}, erased_keys=frozenset({ALICE}))
    jobs = lay_out(segments, {0: erased, 100: SegmentCounts(records=100, kept=100, stamped=0, dropped={})}, 200, policy)
    assert [([s.base_offset for s in sources], vector) for sources, vector in jobs] == [([0], False)]


def test_a_segment_whose_deletion_vector_hides_an_erased_record_is_rewritten_though_it_loses_nothing_seen() -> None:
    vector = DeletionVector(
        path="segments/_00000000000000000000-d.deletes.parquet",
        count=3,
        size_bytes=10,
        checksum="sha256:0",
        created_ms=0,
    )
    segments = [meta(0, 100, deletes=vector)]
    nothing = SegmentCounts(records=97, kept=97, stamped=0, dropped={})
    assert lay_out(segments, {0: nothing}, 100, ApplyPolicy(segment_bytes=1000, now_ms=0)) == []
    hidden = nothing.with_hidden_erased(frozenset({ALICE}))
    assert lay_out(segments, {0: hidden}, 100, ApplyPolicy(segment_bytes=1000, now_ms=0)) == [(tuple(segments), False)]


def test_key_ranges_outcomes_add_up_their_erased_keys() -> None:
    bob = hashlib.sha256(b"bob").hexdigest()
    one = SegmentCounts(records=1, kept=0, stamped=0, dropped={"erased": 1}, erased_keys=frozenset({ALICE}))
    other = SegmentCounts(records=2, kept=1, stamped=0, dropped={"erased": 1}, erased_keys=frozenset({bob}))
    merged = one.merge(other)
    assert merged.erased_keys == {ALICE, bob} and merged.dropped == {"erased": 2} and merged.records == 3


# The planner ---------------------------------------------------------------------------------------------


def seg(base: int, end: int, ts: int = 0) -> SegmentMeta:
    return SegmentMeta(
        path=f"segments/{base:020d}-s.parquet",
        base_offset=base,
        next_offset=end,
        record_count=end - base,
        size_bytes=70 * (end - base),
        checksum="sha256:0",
        created_ms=ts,
        first_timestamp=ts,
        max_timestamp=ts,
    )


def request(tombstone: int, requested: int = 0, deadline: int = 24 * HOUR, **fields: object) -> ErasureRequest:
    return ErasureRequest(
        key_sha256=ALICE,
        tombstone_offset=tombstone,
        requested_ms=requested,
        deadline_ms=deadline,
        **fields,  # type: ignore[arg-type]
    )


def manifest(
    segments: list[SegmentMeta],
    erasures: tuple[ErasureRequest, ...],
    checkpoint: int = 0,
    lso: int | None = None,
    partition: int = 0,
) -> Manifest:
    end = segments[-1].next_offset
    return Manifest(
        topic="t",
        partition=partition,
        version=3,
        log_start_offset=0,
        log_end_offset=end,
        last_stable_offset=end if lso is None else lso,
        first_dirty_offset=checkpoint,
        segments=tuple(segments),
        erasures=erasures,
        writer=WriterInfo(id="t", run_id="r", operation="forget", time_ms=0, commit_id="c"),
    )


def test_a_pending_request_selects_its_partition_at_once_and_rolls_the_active_segment() -> None:
    # Clean [0, 100), one dirty record in the active segment with the tombstone: far below the dirty ratio.
    log = manifest([seg(0, 100), seg(100, 102)], (request(101),), checkpoint=100)
    without = plan_partition(TopicPartition("t", 0), log.model_copy(update={"erasures": ()}), COMPACT, HOUR)
    assert without.decision is Decision.SKIP
    chosen = plan_partition(TopicPartition("t", 0), log, COMPACT, HOUR)
    assert isinstance(chosen, Selected) and chosen.figures.active_segment_rolled
    assert (chosen.figures.offsets.first_uncleanable_offset, str(chosen.reason)) == (
        102,
        "erasure requested for 1 key(s)",
    )
    assert chosen.figures.erasures == log.erasures and chosen.figures.overdue_ms == 0
    assert chosen.to_clean().erasures == log.erasures


def test_a_request_past_its_deadline_says_so_and_goes_first_in_the_byte_budget() -> None:
    late = manifest([seg(0, 100), seg(100, 102)], (request(101, deadline=HOUR),), checkpoint=100, partition=1)
    dirty = manifest([seg(0, 10), seg(10, 100), seg(100, 101)], (), checkpoint=10)
    logs = {TopicPartition("t", 0): dirty, TopicPartition("t", 1): late}
    result = plan(
        logs,
        lambda _: TopicConfig(cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.1),
        now_ms=3 * HOUR,
        byte_budget=1,
    )
    assert [str(p.partition) for p in result.selected] == ["t-1"]
    assert str(result.selected[0].reason).startswith("erasure requested for 1 key(s), past the deadline by 2h")
    assert result.selected[0].figures.overdue_ms == 2 * HOUR


def test_a_request_waits_for_an_open_transaction_and_the_plan_says_so() -> None:
    log = manifest([seg(0, 100), seg(100, 110)], (request(109),), checkpoint=100, lso=105)
    chosen = plan_partition(TopicPartition("t", 0), log, COMPACT, HOUR)
    assert chosen.figures is not None and chosen.figures.erasures == ()
    assert "1 erasure request(s) wait for an open transaction (the last stable offset 105)" in str(chosen.reason)


def test_a_request_in_a_topic_that_is_not_compacted_cannot_be_carried_out() -> None:
    log = manifest([seg(0, 2)], (request(1),))
    result = plan_partition(TopicPartition("t", 0), log, TopicConfig(cleanup_policy=("delete",)), HOUR)
    assert result.decision is Decision.SKIP
    assert str(result.reason) == (
        "cleanup.policy=delete: not compacted; 1 erasure request(s) cannot be carried out "
        "(a tombstone deletes nothing there)"
    )


def test_a_request_a_pass_carried_out_selects_nothing() -> None:
    done = request(101, rewritten_ms=5, rewritten_version=3)
    log = manifest([seg(0, 100), seg(100, 102)], (done,), checkpoint=100)
    chosen = plan_partition(TopicPartition("t", 0), log, COMPACT, HOUR)
    assert chosen.decision is Decision.SKIP and chosen.figures is not None
    assert not chosen.figures.active_segment_rolled and chosen.figures.erasures == ()


def test_the_active_segment_an_erasure_rolled_is_rewritten_apart_so_that_it_stays_the_last() -> None:
    log = manifest([seg(0, 100), seg(100, 102)], (request(101),))
    chosen = plan_partition(TopicPartition("t", 0), log, COMPACT, HOUR)
    assert isinstance(chosen, Selected) and chosen.figures.roll is Roll.FOR_ERASURE
    policy = apply_policy(chosen.to_clean(), HOUR, CleanerSettings.model_validate({}), key_ranges=1)
    assert policy.apart == 100
    lost = SegmentCounts(records=100, kept=99, stamped=0, dropped={"erased": 1}, erased_keys=frozenset({ALICE}))
    stamped = SegmentCounts(records=2, kept=2, stamped=1, dropped={})  # its tombstone gets its horizon
    outcomes = {0: lost, 100: stamped}
    merged = lay_out(log.segments, outcomes, 0, replace(policy, apart=None))
    assert [[s.base_offset for s in sources] for sources, _ in merged] == [[0, 100]]
    apart = lay_out(log.segments, outcomes, 0, policy)
    assert [[s.base_offset for s in sources] for sources, _ in apart] == [[0], [100]]
    # Retention still waits for the active segment to age out: the roll is for cleaning only.
    aged = plan_partition(TopicPartition("t", 0), log, replace(COMPACT, segment_ms=HOUR // 2), HOUR)
    assert isinstance(aged, Selected) and aged.figures.roll is Roll.AGED
