"""Which objects a pass writes: per segment, keep it, give it a deletion vector, or rewrite it (merged).

Pure functions of the decision's counts and the manifest's metadata, used by the driver and, for a
partition decided and applied within one task, by the executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compaction.manifest import SegmentMeta


@dataclass(frozen=True)
class SegmentOutcome:
    """The decision's counts for one segment of a cleaned range (live records read, kept, markers to stamp)."""

    records: int
    kept: int
    stamped: int
    dropped: dict[str, int]

    @property
    def lost(self) -> int:
        return self.records - self.kept

    def merge(self, other: SegmentOutcome) -> SegmentOutcome:
        """The sum of two key buckets' outcomes for the same segment."""
        dropped = dict(self.dropped)
        for reason, count in other.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + count
        return SegmentOutcome(self.records + other.records, self.kept + other.kept, self.stamped + other.stamped,
                              dropped)

    def estimated_bytes(self, segment: SegmentMeta) -> int:
        return segment.size_bytes * self.kept // segment.record_count if segment.record_count else 0


@dataclass(frozen=True)
class ApplyPolicy:
    """How decisions become new objects: size of merged segments and when a deletion vector is enough."""

    segment_bytes: int
    now_ms: int
    deletion_vector_max_ratio: float = 0.2
    deletion_vector_max_age_ms: int = 604_800_000
    max_group_records: int | None = None  # a rewrite reads at most this many records (one task's share)


def plan_jobs(segments: Sequence[SegmentMeta], outcomes: dict[int, SegmentOutcome], first_dirty_offset: int,
              policy: ApplyPolicy) -> list[tuple[tuple[SegmentMeta, ...], bool]]:
    """The apply jobs for a partition's cleaned range: ``(sources, deletes_only)`` pairs.

    A segment changes when it loses records, has markers to stamp, is dirty and holds tombstones (their
    first horizon is stamped when rewritten), or carries a deletion vector past its maximum age. A clean
    segment that only loses records, and stays within ``deletion.vector.max.ratio`` deleted, gets a
    deletion vector. Other changed segments are rewritten, consecutive ones (and small dirty segments
    between them) merged while the estimated output stays within ``segment.bytes`` and the records read
    within ``max_group_records``; a group of one unchanged segment is no job at all.
    """
    jobs: list[tuple[tuple[SegmentMeta, ...], bool]] = []
    current: list[SegmentMeta] = []
    changed: set[int] = set()
    size = records = 0

    def flush() -> None:
        nonlocal current, size, records
        if len(current) > 1 or (current and current[0].base_offset in changed):
            jobs.append((tuple(current), False))
        current, size, records = [], 0, 0

    for segment in segments:
        outcome = outcomes[segment.base_offset]
        dirty = segment.next_offset > first_dirty_offset
        needs_stamp = outcome.stamped > 0 or (dirty and segment.tombstone_count > 0)
        old = segment.deletes
        old_expired = old is not None and old.created_ms + policy.deletion_vector_max_age_ms <= policy.now_ms
        deleted = (old.count if old else 0) + outcome.lost
        if outcome.lost and not (dirty or needs_stamp or old_expired) and policy.deletion_vector_max_ratio > 0 \
                and deleted <= policy.deletion_vector_max_ratio * segment.record_count:
            flush()
            jobs.append(((segment,), True))
            continue
        estimate = outcome.estimated_bytes(segment)
        if outcome.lost or needs_stamp or old_expired:
            changed.add(segment.base_offset)
        elif not (dirty and estimate < policy.segment_bytes // 2):
            flush()
            continue
        too_many = policy.max_group_records is not None and \
            records + segment.live_records > policy.max_group_records
        if current and (size + estimate > policy.segment_bytes or too_many):
            flush()
        current.append(segment)
        size += estimate
        records += segment.live_records
    flush()
    return jobs
