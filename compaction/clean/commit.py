"""The end of a clean pass: the one place a partition's checkpoint moves (Kafka's ``doneCleaning``).

Per partition, the driver publishes the next manifest version through the store's commit primitive (an
exclusive create, rebasing over concurrent appends): the segments the pass replaced out, the objects it wrote
in, and the checkpoint past the cleaned range. A partition that failed anywhere commits nothing and is reported
with its reason; so is one whose commit fails.
"""

from __future__ import annotations

import logging

from compaction.clean.figures import CheckpointReset
from compaction.clean.layout import SegmentCounts
from compaction.clean.planner import Skipped
from compaction.clean.results import PartitionResult
from compaction.clean.work import PartitionWork
from compaction.errors import StoreError
from compaction.store import Replacement, Store, Writer
from compaction.store.commit import Erased

log = logging.getLogger("compaction.clean.commit")


def done_cleaning(store: Store, work: PartitionWork, writer: Writer, now_ms: int, elapsed_ms: int) -> PartitionResult:
    """Commit a partition's pass (or report why it cannot be committed)."""
    p = work.log
    if work.failure is not None:
        return PartitionResult.failed(
            p.plan, work.failure.error, internal=work.failure.internal, trace=work.failure.trace
        )
    missing = [j.job_id for j in work.jobs if j.job_id not in work.results]
    if missing:
        return PartitionResult.failed(p.plan, f"apply job(s) {missing} produced no output", internal=True)
    removed = [s for j in work.jobs for s in j.sources]
    added = [segment for j in work.jobs if (segment := work.results[j.job_id]) is not None]
    empty = SegmentCounts.empty()
    holding = {s.path: work.segment_counts.get(s.base_offset, empty).erased_keys for s in p.segments}
    unrewritten = [path for path, keys in holding.items() if keys and path not in {s.path for s in removed}]
    if unrewritten:  # lay_out rewrites every such segment: this is a bug, never committed as done
        return PartitionResult.failed(
            p.plan, f"segment(s) {unrewritten} hold records of erased keys but were not rewritten", internal=True
        )
    change = Replacement(
        removed=(*p.expired_segments, *removed),
        added=tuple(added),
        expected_first_dirty_offset=p.manifest.first_dirty_offset,
        first_dirty_offset=p.checkpoint_after,
        expected_log_start_offset=p.manifest.log_start_offset,
        log_start_offset=p.log_start_offset,
        # A pass leaves one competing record per key in the range it decided, whatever the strategy.
        clean_keys_unique=True if p.needs_dedupe else None,
        last_clean_ms=now_ms if p.needs_dedupe else None,
        next_horizon_ms=work.next_horizon_ms(),
        erased=tuple(
            Erased(
                r.key_sha256, r.tombstone_offset, tuple(path for path, keys in holding.items() if r.key_sha256 in keys)
            )
            for r in p.erasures
        ),
        time_ms=now_ms,
        expired_producers=p.manifest.expired_producers(p.config.cleaning.producer_id_expiration_ms, now_ms),
    )
    try:
        committed = store.replace(p.partition, change, writer=writer, now_ms=now_ms, expected=p.manifest)
    except StoreError as err:
        return PartitionResult.failed(p.plan, f"{type(err).__name__}: {err}")
    return PartitionResult.cleaned(p, committed, work, added, elapsed_ms=elapsed_ms)


def reset_checkpoint(store: Store, p: Skipped, reset: CheckpointReset, writer: Writer, now_ms: int) -> PartitionResult:
    """Write a checkpoint the planner reset (below the log start or past the log end) at once, as Kafka does
    even for a partition it does not clean; a reset that cannot be committed is a failure of the partition."""
    manifest = p.manifest
    change = Replacement(
        (),
        (),
        manifest.first_dirty_offset,
        reset.first_dirty_offset,
        manifest.log_start_offset,
        manifest.log_start_offset,
    )
    try:
        store.replace(p.partition, change, writer=writer, now_ms=now_ms, expected=manifest)
    except StoreError as err:
        return PartitionResult.failed(p, f"could not reset the checkpoint ({reset}): {type(err).__name__}: {err}")
    return PartitionResult.from_plan(p)
