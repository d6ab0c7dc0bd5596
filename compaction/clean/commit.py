"""The end of a clean pass: the one place a partition's checkpoint moves (Kafka's ``doneCleaning``).

Per partition, the driver publishes the next manifest version through the store's commit primitive (an
exclusive create, rebasing over concurrent appends): the segments the pass replaced out, the objects it wrote
in, and the checkpoint past the cleaned range. A partition that failed anywhere commits nothing and is reported
with its reason; so is one whose commit fails.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from compaction.clean.figures import CheckpointReset
from compaction.clean.layout import SegmentCounts
from compaction.clean.payloads import AppliedJob, ApplyJob, CleanTask, SourceVerdicts, Verdicts, lists_kept
from compaction.clean.planner import LogToClean, Skipped
from compaction.clean.results import PartitionResult
from compaction.engine.isolation import Failure
from compaction.errors import SegmentChangedError, StoreError
from compaction.store import Replacement, Store, Writer
from compaction.store.commit import Erased
from compaction.store.manifest import SegmentMeta

log = logging.getLogger("compaction.clean.commit")


@dataclass
class PartitionWork:
    """One selected partition in a pass: its task, and what the Spark stages produced for it."""

    log: LogToClean
    task: CleanTask
    segment_counts: dict[int, SegmentCounts] = field(default_factory=dict)  # by segment base offset
    verdicts: list[Verdicts] = field(default_factory=list)  # what its deciding stage listed (decided in stages)
    handed: set[str] = field(default_factory=set)  # the other hand-over objects its stages wrote (pieces)
    jobs: list[ApplyJob] = field(default_factory=list)
    results: dict[int, SegmentMeta | None] = field(default_factory=dict)  # by job id; None: nothing kept
    bytes_written: int = 0
    records_written: int = 0
    stamped: int = 0  # records the rewrites gave their first delete horizon
    failure: Failure | None = None

    def fail(self, failure: Failure) -> None:
        """Record the first failure of the partition (its task's, or a later stage's)."""
        self.failure = self.failure or failure

    def decided(self, verdicts: Verdicts) -> None:
        """Record what a key range (or a Spark SQL winner search) decided of some of the partition's segments."""
        self.verdicts.append(verdicts)
        for found in verdicts.segments:
            before = self.segment_counts.get(found.segment_base)
            self.segment_counts[found.segment_base] = before.merge(found.counts) if before else found.counts

    def source_verdicts(self, segment: SegmentMeta) -> SourceVerdicts:
        """Where the verdicts on one of its segments are listed, every key range's part of it."""
        found = [(v.path, s) for v in self.verdicts for s in v.segments if s.segment_base == segment.base_offset]
        rows = {s.rows for _, s in found}
        if len(rows) > 1:
            raise SegmentChangedError(
                f"the key ranges of {self.task.tp} read {sorted(rows)} live rows of segment "
                f"{segment.path}: it changed while they read it"
            )
        return SourceVerdicts(
            rows=rows.pop() if rows else 0,
            kept=lists_kept(segment, self.task.cleaned.first_dirty_offset),
            listed=tuple((path, s.row_group) for path, s in found if path is not None and s.row_group is not None),
        )

    def handed_paths(self) -> list[str]:
        """The hand-over objects the pass wrote for it (verdicts, pieces): deleted once it ends."""
        return sorted(self.handed | {v.path for v in self.verdicts if v.path is not None})

    def add(self, result: AppliedJob) -> None:
        """Record an apply job's result."""
        self.results[result.job_id] = result.segment
        self.bytes_written += result.bytes_written
        self.records_written += result.records_written
        self.stamped += result.stamped

    def next_horizon_ms(self) -> int | None:
        """The earliest delete horizon still to come in the cleaned range after this pass."""
        horizons = [o.next_horizon_ms for o in self.segment_counts.values() if o.next_horizon_ms is not None]
        if self.stamped:
            horizons.append(self.task.context.horizon_ms)
        return min(horizons, default=None)


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
        expired_producers=p.manifest.expired_producers(p.config.producer_id_expiration_ms, now_ms),
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
