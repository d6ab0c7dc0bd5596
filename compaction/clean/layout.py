"""Which objects a pass writes: per segment, keep it, give it a deletion vector, or rewrite it (merged).

Pure functions of the verdicts' counts and the manifest's metadata, used by the driver and, for a
partition decided and applied within one task, by the executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from compaction.rules import KEPT, reason_counts, saturating_add
from compaction.schema import LONG_MAX
from compaction.store.manifest import SegmentMeta


@dataclass(frozen=True, kw_only=True)
class SegmentCounts:
    """The verdicts' counts for one segment of a cleaned range: live records read, kept, markers to stamp,
    records dropped by reason, the earliest delete horizon still to come among the kept records, and the keys
    (digests) of the records of its object an erasure request erases: live ones, and those no reader sees but the
    object's bytes still hold."""

    records: int
    kept: int
    stamped: int
    dropped: dict[str, int]
    next_horizon_ms: int | None = None
    erased_keys: frozenset[str] = frozenset()

    @classmethod
    def empty(cls) -> SegmentCounts:
        """The counts of a segment no verdict speaks of (none of its rows was read)."""
        return cls(records=0, kept=0, stamped=0, dropped={})

    @classmethod
    def from_verdicts(
        cls, code: np.ndarray, stamp: np.ndarray, upcoming: np.ndarray, erased_keys: frozenset[str] = frozenset()
    ) -> SegmentCounts:
        """The counts of one segment's decided rows: their codes (``KEPT`` or a reason's), which markers to
        stamp, their upcoming delete horizons (``LONG_MAX`` where none), and the digests of the keys of those
        it erases."""
        return cls(
            records=len(code),
            kept=int(np.count_nonzero(code == KEPT)),
            stamped=int(stamp.sum()),
            dropped=reason_counts(code),
            erased_keys=erased_keys,
            next_horizon_ms=int(upcoming.min()) if len(upcoming) and upcoming.min() < LONG_MAX else None,
        )

    @property
    def lost(self) -> int:
        return self.records - self.kept

    def merge(self, other: SegmentCounts) -> SegmentCounts:
        """The sum of two key ranges' segment_counts for the same segment."""
        dropped = dict(self.dropped)
        for reason, count in other.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + count
        horizons = [h for h in (self.next_horizon_ms, other.next_horizon_ms) if h is not None]
        return SegmentCounts(
            records=self.records + other.records,
            kept=self.kept + other.kept,
            stamped=self.stamped + other.stamped,
            dropped=dropped,
            next_horizon_ms=min(horizons, default=None),
            erased_keys=self.erased_keys | other.erased_keys,
        )

    def with_hidden_erased(self, keys: frozenset[str]) -> SegmentCounts:
        """These counts, with the keys of erased records found among those no reader sees."""
        return replace(self, erased_keys=self.erased_keys | keys) if keys else self

    def estimated_bytes(self, segment: SegmentMeta) -> int:
        """The size of the records it keeps, pro rata of the live records read."""
        return segment.live_size_bytes * self.kept // self.records if self.records else 0


#: A segment whose output is smaller than ``segment.bytes`` divided by this is *small*: it merges with its
#: small or rewritten neighbours (SPEC §9), unless it takes a deletion vector. Larger segments that do not change
#: are left as they are, so a nightly pass does not recopy the clean section, and a small one is recopied only
#: until it is not.
SMALL_SEGMENT_DIVISOR = 8

#: What writing a kept record costs, in reads of one (encoding and compressing against decoding): a rewrite's
#: work is the records it reads plus this many times those it keeps, and the rewrites of a split partition (one
#: task each) share the work evenly, not the records read (the last segments of a log keep the most records).
WRITE_COST = 2

#: ``deletion.vector.max.ratio``'s default: a clean segment takes a deletion vector while at most this share
#: of its records is deleted; beyond it, readers skip too much of what they read and a rewrite pays off.
DEFAULT_DELETION_VECTOR_MAX_RATIO = 0.2
#: ``deletion.vector.max.age.ms``'s default, seven days: a deletion vector only hides records, so a segment
#: carrying one is rewritten within this time and its deleted records are removed physically.
DEFAULT_DELETION_VECTOR_MAX_AGE_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class ApplyPolicy:
    """How verdicts become new objects (the layout): size of merged segments and when a deletion vector is enough."""

    segment_bytes: int
    now_ms: int
    deletion_vector_max_ratio: float = DEFAULT_DELETION_VECTOR_MAX_RATIO
    deletion_vector_max_age_ms: int = DEFAULT_DELETION_VECTOR_MAX_AGE_MS
    # A rewrite does at most this share of the work (one task's share, in records read; see WRITE_COST).
    max_group_records: int | None = None
    # A segment never merged with its neighbours: the active segment an erasure rolled, so that it stays the log's
    # last segment (and what precedes it is not held in the active segment once the roll is over).
    apart: int | None = None


def _needs_stamp(segment: SegmentMeta, counts: SegmentCounts, first_dirty_offset: int) -> bool:
    """Kept markers to stamp, or (a dirty segment) tombstones, whose first horizon a rewrite stamps."""
    return counts.stamped > 0 or (segment.next_offset > first_dirty_offset and segment.tombstone_count > 0)


def _aged(segment: SegmentMeta, policy: ApplyPolicy) -> bool:
    """A deletion vector past ``deletion.vector.max.age.ms``: its records go physically."""
    old = segment.deletes
    return old is not None and saturating_add(old.created_ms, policy.deletion_vector_max_age_ms) <= policy.now_ms


def takes_vector(segment: SegmentMeta, counts: SegmentCounts, first_dirty_offset: int, policy: ApplyPolicy) -> bool:
    """Whether :func:`lay_out` gives a segment a deletion vector (and nothing else): a clean segment that only loses
    records, within ``deletion.vector.max.ratio`` deleted in all; its own counts decide, whatever its neighbours'
    (a segment that takes a deletion vector stands alone)."""
    old = segment.deletes
    deleted = (old.count if old else 0) + counts.lost
    changed = (
        segment.next_offset > first_dirty_offset
        or bool(counts.erased_keys)
        or _needs_stamp(segment, counts, first_dirty_offset)
        or _aged(segment, policy)
    )
    # A loss is at least one record: a ratio of 0 gives no segment a deletion vector.
    return bool(counts.lost) and not changed and deleted <= policy.deletion_vector_max_ratio * segment.record_count


def lay_out(
    segments: Sequence[SegmentMeta],
    segment_counts: dict[int, SegmentCounts],
    first_dirty_offset: int,
    policy: ApplyPolicy,
    reframe: frozenset[int] = frozenset(),
) -> list[tuple[tuple[SegmentMeta, ...], bool]]:
    """The apply jobs for a partition's cleaned range: ``(sources, deletes_only)`` pairs.

    A segment that holds a record an erasure request erases (seen or hidden) is rewritten: a deletion vector
    would only hide it. Otherwise a segment *changes* when it loses records, has markers to stamp, is dirty and
    holds tombstones (their first horizon is stamped when rewritten), or carries a deletion vector past its
    maximum age. A clean
    segment that only loses records, and stays within ``deletion.vector.max.ratio`` deleted, gets a
    deletion vector, however small it is (merging it would rewrite its records for the few it loses); other
    changed segments are rewritten. Consecutive rewritten and small unchanged segments are
    merged into one while the estimated output stays within ``segment.bytes`` and the work (records read, and
    :data:`WRITE_COST` times those kept) within ``max_group_records`` records' share of the range's work (the
    policy's ``apart`` segment never merges); a group of one segment that need not be
    rewritten is no rewrite. A rewrite that
    keeps no record removes its segments (their range stays part of the log, without an object). Segments
    whose base offset is in ``reframe`` (``.log`` segments with empty batches to drop) are rewritten too.
    """
    jobs: list[tuple[tuple[SegmentMeta, ...], bool]] = []
    group: list[SegmentMeta] = []
    rewrite: set[int] = set()  # base offsets of segments that must be rewritten on their own account
    vector: set[int] = set()  # ... that would rather take a deletion vector
    size = work = 0
    # The share of the work: max_group_records of the records read, with their part of the writes. Compared in
    # integers (work * read against the share's numerator), so that a share of every record fits them all.
    read = max(1, sum(s.live_records for s in segments))
    share_of_work = (
        None
        if policy.max_group_records is None
        else policy.max_group_records * (read + WRITE_COST * sum(segment_counts[s.base_offset].kept for s in segments))
    )

    def flush() -> None:
        nonlocal group, size, work
        if len(group) > 1 or (group and group[0].base_offset in rewrite):
            jobs.append((tuple(group), False))
        group, size, work = [], 0, 0

    for segment in segments:
        base = segment.base_offset
        counts = segment_counts[base]
        if takes_vector(segment, counts, first_dirty_offset, policy):
            vector.add(base)
        elif (
            counts.lost
            or counts.erased_keys
            or _needs_stamp(segment, counts, first_dirty_offset)
            or _aged(segment, policy)
            or base in reframe
        ):
            rewrite.add(base)
        estimate = counts.estimated_bytes(segment)
        if base in vector or (base not in rewrite and estimate >= policy.segment_bytes // SMALL_SEGMENT_DIVISOR):
            # A segment that takes a deletion vector, small or not, stands alone, as does a large one that need not
            # be rewritten: a night's increment never recopies the clean section for a few losers per segment.
            flush()
            if base in vector:
                jobs.append(((segment,), True))
            continue
        segment_work = segment.live_records + WRITE_COST * counts.kept
        too_much = share_of_work is not None and (work + segment_work) * read > share_of_work
        if group and (size + estimate > policy.segment_bytes or too_much or base == policy.apart):
            flush()
        group.append(segment)
        size += estimate
        work += segment_work
    flush()
    return jobs
