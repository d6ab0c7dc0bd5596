"""A selected partition's work in a pass: its task, and what the Spark stages produced for it, gathered as the paths
run them (:mod:`~compaction.clean.paths`) for the commit to publish (:mod:`~compaction.clean.commit`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from compaction.clean.layout import SegmentCounts
from compaction.clean.payloads import AppliedJob, ApplyJob, CleanTask, SourceVerdicts, Verdicts, lists_kept
from compaction.clean.planner import LogToClean
from compaction.engine.isolation import Failure
from compaction.errors import SegmentChangedError
from compaction.store.manifest import SegmentMeta


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
