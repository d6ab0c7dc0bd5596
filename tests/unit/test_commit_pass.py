"""The end of a pass (clean/commit.py): the one place a partition's checkpoint moves, and what it refuses to commit.

The pass's results are stated by hand here (an object written, the decision's counts), so that each test says
exactly what the commit makes of them.
"""

from __future__ import annotations

import hashlib
import uuid

import pytest

from compaction.clean.commit import done_cleaning, reset_checkpoint
from compaction.clean.layout import SegmentCounts
from compaction.clean.payloads import AppliedJob, SegmentVerdicts, SourceVerdicts, Verdicts
from compaction.clean.planner import LogToClean, Selected, Skipped, plan
from compaction.clean.results import ManifestVersions, Status
from compaction.clean.settings import TopicConfig
from compaction.clean.work import PartitionWork
from compaction.engine.isolation import Failure
from compaction.erasure import request_erasure
from compaction.errors import SegmentChangedError
from compaction.store import Replacement, Store, TopicPartition, Writer
from compaction.store.segment import records
from tests.helpers.builders import clean_task, keyed, rec
from tests.helpers.stores import RecordingStorage

TP = TopicPartition("t", 0)
NOW = 10_000
HORIZON = NOW + 1000  # the horizon the pass stamps
COMPACT = TopicConfig(cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.0)
WRITER = Writer(id="compaction-run", run_id="r")


@pytest.fixture
def store() -> Store:
    """``a=1 b=2 | a=3 | c=4``: versions 1 to 3, the last segment active."""
    store = Store.open(f"memory://commit-{uuid.uuid4().hex}")
    for pairs in ("a=1 b=2", "a=3", "c=4"):
        store.append(TP, keyed(pairs), now_ms=NOW)
    return store


def planned(store: Store, config: TopicConfig = COMPACT) -> Selected:
    (p,) = plan({TP: store.manifest(TP)}, lambda _: config, NOW).partitions
    assert isinstance(p, Selected)
    return p


def skipped(store: Store, config: TopicConfig) -> Skipped:
    (p,) = plan({TP: store.manifest(TP)}, lambda _: config, NOW).partitions
    assert isinstance(p, Skipped)
    return p


def work(store: Store, p: LogToClean) -> PartitionWork:
    return PartitionWork(
        p, clean_task(TP, store, p.segments, now_ms=NOW, horizon_ms=HORIZON, first_dirty_offset=p.first_dirty_offset)
    )


def rewritten(store: Store, w: PartitionWork, *rows: dict, stamped: int = 0) -> None:
    """The pass's one rewrite of the whole range into an object of ``rows``."""
    job = w.task.job(0, w.log.segments, False)
    segment = store.objects.write_segment(TP, records(rows), job.base_offset, job.next_offset, created_ms=NOW)
    w.jobs.append(job)
    w.add(
        AppliedJob.of(
            job, segment=segment, records_written=len(rows), bytes_written=segment.size_bytes, stamped=stamped
        )
    )


def counts(
    records: int, kept: int, next_horizon: int | None = None, erased: frozenset[str] = frozenset()
) -> SegmentCounts:
    return SegmentCounts(
        records=records,
        kept=kept,
        stamped=0,
        dropped={"superseded": records - kept},
        next_horizon_ms=next_horizon,
        erased_keys=erased,
    )


def test_a_pass_commits_its_objects_its_checkpoint_and_when_it_cleaned(store: Store) -> None:
    p = planned(store).to_clean()
    w = work(store, p)
    w.segment_counts = {0: counts(2, 1, next_horizon=12_000), 2: counts(1, 1, next_horizon=11_500)}
    rewritten(store, w, rec("b", "2", 1), rec("a", "3", 2))
    result = done_cleaning(store, w, WRITER, NOW, elapsed_ms=5)
    manifest = store.manifest(TP)
    assert (
        result.status,
        result.manifest,
        result.clean_range,
        result.elapsed_ms,
    ) == (Status.CLEANED, ManifestVersions(3, 4, 0, 3), [0, 3], 5)
    assert [(s.base_offset, s.next_offset, s.record_count) for s in manifest.segments] == [(0, 3, 2), (3, 4, 1)]
    assert (
        manifest.first_dirty_offset,
        manifest.clean_keys_unique,
        manifest.last_clean_ms,
        manifest.next_horizon_ms,
    ) == (3, True, NOW, 11_500)
    assert (result.stats.messages_read, result.stats.messages_written, result.stats.dropped) == (
        3,
        2,
        {"superseded": 1},
    )


def test_a_pass_commits_on_the_version_its_plan_read_without_listing_or_reading_the_manifests(store: Store) -> None:
    """On an object store a commit then costs one request when nobody wrote since the plan: the manifest's create."""
    w = work(store, planned(store).to_clean())
    rewritten(store, w, rec("b", "2", 1), rec("a", "3", 2))
    recorder = RecordingStorage(store)
    assert done_cleaning(store, w, WRITER, NOW, elapsed_ms=0).status is Status.CLEANED
    assert [op for op, rel in recorder.calls if op in ("list", "read", "open")] == [], "nothing listed or read back"
    assert store.versions(TP) == [1, 2, 3, 4]


def test_the_next_horizon_counts_the_one_the_pass_stamped(store: Store) -> None:
    w = work(store, planned(store).to_clean())
    w.segment_counts = {0: counts(2, 2), 2: counts(1, 1, next_horizon=HORIZON + 1)}
    rewritten(store, w, rec("a", "1", 0), rec("b", None, 1), rec("a", "3", 2), stamped=1)
    assert (w.stamped, w.next_horizon_ms()) == (1, HORIZON)
    done_cleaning(store, w, WRITER, NOW, elapsed_ms=0)
    assert store.manifest(TP).next_horizon_ms == HORIZON


def test_a_partition_that_failed_anywhere_commits_nothing_and_keeps_its_error(store: Store) -> None:
    w = work(store, planned(store).to_clean())
    rewritten(store, w, rec("a", "3", 2))
    w.fail(Failure("ValueError: boom", internal=True, trace="Traceback: boom"))
    w.fail(Failure("OSError: later"))  # the first failure is the one reported
    result = done_cleaning(store, w, WRITER, NOW, elapsed_ms=0)
    assert (result.status, result.error, result.internal, result.trace) == (
        Status.FAILED,
        "ValueError: boom",
        True,
        "Traceback: boom",
    )
    assert store.versions(TP) == [1, 2, 3]


def test_an_apply_job_without_a_result_is_a_bug_and_commits_nothing(store: Store) -> None:
    w = work(store, planned(store).to_clean())
    w.jobs.append(w.task.job(0, w.log.segments, False))
    result = done_cleaning(store, w, WRITER, NOW, elapsed_ms=0)
    assert (result.status, result.error, result.internal) == (
        Status.FAILED,
        "apply job(s) [0] produced no output",
        True,
    )
    assert store.versions(TP) == [1, 2, 3]


def test_a_segment_holding_an_erased_key_that_was_not_rewritten_is_a_bug_and_commits_nothing(store: Store) -> None:
    p = planned(store).to_clean()
    w = work(store, p)
    w.segment_counts = {0: counts(2, 2, erased=frozenset({"d" * 64})), 2: counts(1, 1)}
    result = done_cleaning(store, w, WRITER, NOW, elapsed_ms=0)
    assert (result.status, result.internal) == (Status.FAILED, True)
    assert result.error == f"segment(s) {[p.segments[0].path]} hold records of erased keys but were not rewritten"
    assert store.versions(TP) == [1, 2, 3]


def test_a_segment_no_outcome_speaks_of_holds_no_erased_key(store: Store) -> None:
    w = work(store, planned(store).to_clean())
    w.segment_counts = {2: counts(1, 1)}  # segment 0: no row of it was decided
    assert done_cleaning(store, w, WRITER, NOW, elapsed_ms=0).status is Status.CLEANED


def test_a_pass_that_carries_out_an_erasure_marks_it_rewritten_and_names_what_held_the_key(store: Store) -> None:
    (tombstone,) = request_erasure(store, TP, [b"a"], now_ms=NOW, deadline_ms=NOW + 1000)
    p = planned(store).to_clean()
    digest = hashlib.sha256(b"a").hexdigest()
    assert [(r.key_sha256, r.tombstone_offset) for r in p.erasures] == [(digest, tombstone)]
    w = work(store, p)
    holders = [s for s in p.segments if s.base_offset in (0, 2)]
    w.segment_counts = {s.base_offset: counts(1, 0, erased=frozenset({digest})) for s in holders}
    job = w.task.job(0, p.segments, False)
    w.jobs.append(job)
    w.add(AppliedJob.of(job, segment=None))
    assert done_cleaning(store, w, WRITER, NOW, elapsed_ms=0).status is Status.CLEANED
    (request,) = store.manifest(TP).erasures
    assert (request.state, request.rewritten_ms, request.rewritten_version) == ("rewritten", NOW, 5)
    assert [(h.path, h.found_ms) for h in request.held] == [(s.path, NOW) for s in holders]


def test_a_retention_pass_moves_the_log_start_but_not_the_time_of_the_last_clean(store: Store) -> None:
    config = TopicConfig(
        cleanup_policy=("compact", "delete"), min_cleanable_dirty_ratio=1.0, retention_bytes=0, retention_ms=-1
    )
    store.replace(
        TP,
        Replacement((), (), 0, 3, 0, 0, clean_keys_unique=False, last_clean_ms=7, next_horizon_ms=9),
        writer=WRITER,
        now_ms=NOW,
    )  # a pass cleaned [0, 3) at 7 (keys left unique or not: as it was)
    p = planned(store, config).to_clean()
    assert (p.needs_dedupe, [s.base_offset for s in p.expired_segments]) == (False, [0, 2])
    result = done_cleaning(store, work(store, p), WRITER, NOW, elapsed_ms=0)
    manifest = store.manifest(TP)
    assert (result.status, manifest.log_start_offset, manifest.first_dirty_offset) == (Status.CLEANED, 3, 3)
    assert (manifest.clean_keys_unique, manifest.last_clean_ms, manifest.next_horizon_ms) == (False, 7, 9)
    assert result.stats.dropped == {"retention": 3}


def test_a_commit_that_conflicts_fails_the_partition_with_the_reason(store: Store) -> None:
    w = work(store, planned(store).to_clean())
    rewritten(store, w, rec("b", "2", 1), rec("a", "3", 2))
    store.replace(TP, Replacement((), (), 0, 1, 0, 0), writer=WRITER, now_ms=NOW)  # another cleaner moved it
    result = done_cleaning(store, w, WRITER, NOW, elapsed_ms=0)
    assert (result.status, result.internal) == (Status.FAILED, False)
    assert result.error is not None and result.error.startswith(
        "CommitConflictError: partition t-0: manifest version 4 moved the checkpoint from 0 to 1"
    )


def past_the_end() -> Store:
    """``a=1 | a=2``, its checkpoint at 5: past the log end (a checkpoint written by hand, or for a lost log)."""
    store = Store.open(f"memory://commit-{uuid.uuid4().hex}")
    store.append(TP, keyed("a=1"), now_ms=NOW)
    store.append(TP, keyed("a=2"), now_ms=NOW)
    store.replace(TP, Replacement((), (), 0, 5, 0, 0), writer=WRITER, now_ms=NOW)
    return store


SKIPPING = TopicConfig(cleanup_policy=("compact",), min_cleanable_dirty_ratio=1.0)


def test_a_reset_checkpoint_is_committed_at_once() -> None:
    store = past_the_end()
    p = skipped(store, SKIPPING)
    reset = p.checkpoint_reset
    assert reset is not None
    assert (p.manifest.first_dirty_offset, reset.first_dirty_offset, str(reset)) == (
        5,
        0,
        "checkpoint 5 is past the log end 2",
    )
    result = reset_checkpoint(store, p, reset, WRITER, NOW)
    manifest = store.manifest(TP)
    assert (result.status, manifest.first_dirty_offset, manifest.log_start_offset) == (Status.SKIPPED, 0, 0)
    assert (manifest.version, manifest.writer.run_id, manifest.writer.time_ms) == (4, "r", NOW)


def test_a_reset_is_committed_on_the_version_the_plan_read_without_listing_or_reading_the_manifests() -> None:
    store = past_the_end()
    p = skipped(store, SKIPPING)
    assert p.checkpoint_reset is not None
    recorder = RecordingStorage(store)
    assert reset_checkpoint(store, p, p.checkpoint_reset, WRITER, NOW).status is Status.SKIPPED
    assert [op for op, rel in recorder.calls if op in ("list", "read", "open")] == [], "nothing listed or read back"
    assert (store.versions(TP), store.manifest(TP).first_dirty_offset) == ([1, 2, 3, 4], 0)


def test_a_reset_that_cannot_be_committed_fails_the_partition() -> None:
    store = past_the_end()
    p = skipped(store, SKIPPING)
    assert p.checkpoint_reset is not None
    store.replace(TP, Replacement((), (), 5, 1, 0, 0), writer=WRITER, now_ms=NOW)  # another writer, first
    result = reset_checkpoint(store, p, p.checkpoint_reset, WRITER, NOW)
    assert (result.status, result.internal) == (Status.FAILED, False)
    assert result.error is not None and result.error.startswith(
        "could not reset the checkpoint (checkpoint 5 is past the log end 2): CommitConflictError: "
    )
    assert store.manifest(TP).first_dirty_offset == 1


def test_apply_results_add_up() -> None:
    store = Store.open(f"memory://commit-{uuid.uuid4().hex}")
    for pairs in ("a=1 b=2", "a=3", "c=4"):
        store.append(TP, keyed(pairs), now_ms=NOW)
    w = work(store, planned(store).to_clean())
    for job_id, (written, size, stamped) in enumerate([(2, 100, 1), (3, 50, 2)]):
        job = w.task.job(job_id, w.log.segments, False)
        w.add(AppliedJob.of(job, segment=None, records_written=written, bytes_written=size, stamped=stamped))
    assert (w.records_written, w.bytes_written, w.stamped, sorted(w.results)) == (5, 150, 3, [0, 1])


def verdicts(path: str | None, *found: tuple[int, int, int | None]) -> Verdicts:
    """What one key range listed in the object at ``path``: per segment, its base, the live rows it read and the
    row group listing its part."""
    return Verdicts(
        tp=TP,
        path=path,
        segments=tuple(
            SegmentVerdicts(segment_base=base, counts=counts(rows, rows), rows=rows, row_group=group)
            for base, rows, group in found
        ),
    )


def test_an_apply_job_finds_every_key_ranges_part_of_a_segments_verdicts(store: Store) -> None:
    p = planned(store).to_clean()
    w = work(store, p)
    first, second = p.segments
    w.decided(verdicts("verdicts/0.parquet", (0, 2, 0), (2, 1, None)))
    w.decided(verdicts("verdicts/1.parquet", (0, 2, 3)))
    w.decided(verdicts(None, (2, 1, None)))  # a key range that listed no row of the segment
    assert w.source_verdicts(first) == SourceVerdicts(
        rows=2, kept=True, listed=(("verdicts/0.parquet", 0), ("verdicts/1.parquet", 3))
    )
    assert w.source_verdicts(second) == SourceVerdicts(rows=1, kept=True, listed=())
    w.handed.add("pieces/0.parquet")
    assert w.handed_paths() == ["pieces/0.parquet", "verdicts/0.parquet", "verdicts/1.parquet"], (
        "the pass deletes every hand-over object it wrote once it ends: pieces and verdicts"
    )


def test_a_segment_no_key_range_read_has_no_verdicts_to_apply(store: Store) -> None:
    p = planned(store).to_clean()
    w = work(store, p)
    w.decided(verdicts("verdicts/0.parquet", (0, 2, 0)))
    assert w.source_verdicts(p.segments[1]) == SourceVerdicts(rows=0, kept=True, listed=())


def test_key_ranges_that_read_a_segment_with_different_row_counts_fail_the_pass_as_a_change_of_it(store: Store) -> None:
    p = planned(store).to_clean()
    w = work(store, p)
    w.decided(verdicts("verdicts/0.parquet", (0, 2, 0)))
    w.decided(verdicts("verdicts/1.parquet", (0, 3, 0)))
    with pytest.raises(SegmentChangedError) as raised:
        w.source_verdicts(p.segments[0])
    assert str(raised.value) == (
        f"the key ranges of t-0 read [2, 3] live rows of segment {p.segments[0].path}: it changed while they read it"
    )
