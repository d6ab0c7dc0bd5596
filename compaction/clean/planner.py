"""The planner: which partitions to clean and over which offsets, as Kafka's LogCleanerManager decides.

A pure function of (manifests, configuration, now): no Spark, no filesystem, no clock. Offsets follow
Kafka's arithmetic (reference §2): the validated checkpoint, the segment-aligned first uncleanable offset
(:func:`cleanable_offsets`), clean/cleanable bytes (:func:`calculate_cleanable_bytes`, with Kafka's double count
of a segment holding a mid-segment checkpoint), the dirty ratio, ``max.compaction.lag.ms``
(:func:`max_compaction_delay`), tombstone purges (:func:`is_purge_due`) and retention for ``compact,delete``
(:func:`delete_old_segments`).

A partition's plan is one of three shapes, each with the fields it has: :class:`Selected` (to clean: it gives
the pass its :class:`LogToClean`), :class:`Skipped` (not this pass) and :class:`Uncleanable` (its manifest could
not be read). Why is a value (:class:`Reasons`), written out as text only where it is shown.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import ClassVar

from compaction import rules
from compaction.clean.figures import (
    CheckpointReset,
    CleanableOffsets,
    Figures,
    Retention,
    Roll,
    erasures_overdue,
)
from compaction.clean.reasons import (
    Deferred,
    DeletionVectorsAged,
    DirtyRatio,
    EmptyLog,
    ErasureRequested,
    ErasuresWait,
    ManifestUnreadable,
    MaxLagExceeded,
    NoDirtyRecords,
    NotCompacted,
    NothingCleanable,
    NothingLeftToRewrite,
    OverdueFirstInBudget,
    Reason,
    Reasons,
    RetentionExpired,
    TombstonesExpired,
)
from compaction.clean.settings import TopicConfig
from compaction.store import TopicPartition
from compaction.store.manifest import ErasureRequest, Manifest, SegmentMeta


class Decision(StrEnum):
    """What the plan does with a partition, as ``plan`` prints it: the tag of :data:`PartitionPlan`."""

    CLEAN = "clean"
    SKIP = "skip"
    UNCLEANABLE = "uncleanable"


# Plans -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selected:
    """A partition the pass cleans: over ``[log start, first uncleanable offset)`` once retention has dropped its
    expired segments, after which its checkpoint becomes the first uncleanable offset."""

    decision: ClassVar[Decision] = Decision.CLEAN
    partition: TopicPartition
    manifest: Manifest = field(repr=False, compare=False)
    config: TopicConfig
    reason: Reasons
    retention: Retention
    figures: Figures
    #: Records must be read: selected for cleaning or a purge, not for retention alone (metadata).
    dedupe: bool

    @property
    def needs_dedupe(self) -> bool:
        return self.dedupe and bool(self.figures.segments)

    @property
    def work_bytes(self) -> int:
        return sum(s.live_size_bytes for s in self.figures.segments)

    def to_clean(self) -> LogToClean:
        """The partition as a clean pass takes it."""
        offsets = self.figures.offsets
        return LogToClean(
            self,
            self.partition,
            self.manifest,
            self.config,
            self.retention.log_start_offset,
            offsets.first_dirty_offset,
            offsets.first_uncleanable_offset,
            self.figures.segments,
            self.retention.expired_segments,
            self.needs_dedupe,
            self.figures.erasures,
        )


@dataclass(frozen=True)
class Skipped:
    """A partition this pass leaves as it is. ``retention`` and ``figures`` are what the planner got to before it
    stopped: neither for a topic that is not compacted, no figures for a log without segments."""

    decision: ClassVar[Decision] = Decision.SKIP
    partition: TopicPartition
    manifest: Manifest = field(repr=False, compare=False)
    config: TopicConfig
    reason: Reasons
    retention: Retention | None = None
    figures: Figures | None = None

    @property
    def checkpoint_reset(self) -> CheckpointReset | None:
        """A checkpoint the planner reset, which the run writes though it does not clean the partition (as Kafka)."""
        return self.figures.offsets.checkpoint_reset if self.figures is not None else None


@dataclass(frozen=True)
class Uncleanable:
    """A partition that cannot be planned: its manifest could not be read (the reason says why)."""

    decision: ClassVar[Decision] = Decision.UNCLEANABLE
    partition: TopicPartition
    reason: Reasons


#: One partition's plan: the tag is the class (and its ``decision``).
PartitionPlan = Selected | Skipped | Uncleanable


@dataclass(frozen=True)
class LogToClean:
    """A selected partition as a clean pass takes it (Kafka's LogToClean), every field set.

    The pass cleans ``segments``, the range ``[log_start_offset, first_uncleanable_offset)`` (the dirty part
    from ``first_dirty_offset``), after retention has dropped ``expired_segments``; without ``needs_dedupe``
    (retention alone) it reads no record. It carries out ``erasures``, whose tombstones lie in the range.
    """

    plan: Selected = field(repr=False)  # the planner's choice: its reason and figures, for the report
    partition: TopicPartition
    manifest: Manifest = field(repr=False)
    config: TopicConfig
    log_start_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    segments: tuple[SegmentMeta, ...]
    expired_segments: tuple[SegmentMeta, ...]
    needs_dedupe: bool
    erasures: tuple[ErasureRequest, ...]

    @property
    def tail(self) -> tuple[SegmentMeta, ...]:
        """The segments beyond the cleaned range."""
        return tuple(s for s in self.manifest.segments if s.base_offset >= self.first_uncleanable_offset)

    @property
    def segment_format(self) -> str:
        """What the cleaner writes: the topic's ``segment.format``, else the format of the newest segment."""
        if self.config.segment_format is not None:
            return self.config.segment_format
        return self.manifest.segments[-1].format if self.manifest.segments else "parquet"

    @property
    def records(self) -> int:
        """Live records of the cleaned range."""
        return sum(s.live_records for s in self.segments)

    @property
    def work_bytes(self) -> int:
        return self.plan.work_bytes

    @property
    def checkpoint_after(self) -> int:
        """The checkpoint once the pass commits: past the cleaned range, or (retention alone) past the log start."""
        if self.needs_dedupe:
            return max(self.first_uncleanable_offset, self.first_dirty_offset)
        return max(self.first_dirty_offset, self.log_start_offset)


@dataclass(frozen=True)
class CompactionPlan:
    """Every partition's plan: the selected ones first (the overdue, then the dirtiest), then skipped, then
    uncleanable."""

    now_ms: int
    partitions: tuple[PartitionPlan, ...]
    max_dirty_percent: int
    max_compaction_delay_ms: int
    delayed_partitions: int
    byte_budget: int | None

    @property
    def selected(self) -> list[Selected]:
        return [p for p in self.partitions if isinstance(p, Selected)]

    @property
    def to_clean(self) -> list[LogToClean]:
        return [p.to_clean() for p in self.selected]

    @property
    def uncleanable(self) -> list[Uncleanable]:
        return [p for p in self.partitions if isinstance(p, Uncleanable)]


# One partition: LogCleanerManager's steps -------------------------------------------------------------------------


def _floor_index(segments: Sequence[SegmentMeta], offset: int) -> int:
    """Index of the segment containing ``offset``, or of the next one after a gap (Kafka's floor);
    len(segments) if past the last one."""
    for i, segment in enumerate(segments):
        if offset < segment.next_offset:
            return i
    return len(segments)


def active_segment_rolled(segment: SegmentMeta, config: TopicConfig, now_ms: int) -> bool:
    """Whether the last segment counts as rolled by its age: its first record is older than ``min(segment.ms,
    max.compaction.lag.ms)`` (the offline form of KIP-354's forced roll)."""
    first = segment.live_first_timestamp if segment.live_first_timestamp is not None else segment.created_ms
    return now_ms - first > min(config.segment_ms, config.max_compaction_lag_ms)


def roll(manifest: Manifest, config: TopicConfig, now_ms: int, pending: Sequence[ErasureRequest]) -> Roll:
    """Whether this pass cleans the active segment: rolled by age, or (only for cleaning) for an erasure request."""
    if not manifest.segments:
        return Roll.NONE
    if active_segment_rolled(manifest.segments[-1], config, now_ms):
        return Roll.AGED
    return Roll.FOR_ERASURE if pending else Roll.NONE


def expired_by_retention(
    segments: Sequence[SegmentMeta], config: TopicConfig, now_ms: int, rolled: bool
) -> tuple[SegmentMeta, ...]:
    """Leading non-active segments past ``retention.ms`` or beyond ``retention.bytes`` (Kafka's
    deleteOldSegments); the last segment is a candidate once it counts as rolled."""
    if not config.delete:
        return ()
    candidates = segments if rolled else segments[:-1]
    expired = 0
    if config.retention_ms >= 0:
        while expired < len(candidates) and now_ms - candidates[expired].time_ms > config.retention_ms:
            expired += 1
    if config.retention_bytes >= 0:
        excess = sum(s.live_size_bytes for s in segments) - config.retention_bytes
        by_size = 0
        for segment in candidates:
            if excess - segment.live_size_bytes < 0:
                break
            excess -= segment.live_size_bytes
            by_size += 1
        expired = max(expired, by_size)
    return tuple(candidates[:expired])


def delete_old_segments(manifest: Manifest, config: TopicConfig, now_ms: int, rolled: Roll) -> Retention:
    """What goes before cleaning and the log start it leaves: segments wholly below the log start go, as Kafka
    deletes them for every compacted log, then those :func:`expired_by_retention` (an active segment rolled only
    for an erasure request still waits to age out)."""
    below = len(list(itertools.takewhile(lambda s: s.next_offset <= manifest.log_start_offset, manifest.segments)))
    retained = expired_by_retention(manifest.segments[below:], config, now_ms, rolled is Roll.AGED)
    expired = (*manifest.segments[:below], *retained)
    left = manifest.segments[len(expired) :]
    log_start = (left[0].base_offset if left else manifest.log_end_offset) if retained else manifest.log_start_offset
    return Retention(log_start, expired, below, len(retained))


def validated_checkpoint(manifest: Manifest, log_start: int) -> tuple[int, CheckpointReset | None]:
    """The first dirty offset from the checkpoint, reset to the log start when it lies outside the log."""
    checkpoint, log_end = manifest.first_dirty_offset, manifest.log_end_offset
    if checkpoint < log_start or checkpoint > log_end:
        reset = CheckpointReset(checkpoint, log_start, log_end)
        return reset.first_dirty_offset, reset
    return checkpoint, None


def non_active_segments(segments: Sequence[SegmentMeta], rolled: Roll) -> Sequence[SegmentMeta]:
    """The segments Kafka may clean (``nonActiveLogSegmentsFrom``): all but the last, unless it has rolled."""
    return segments if rolled is not Roll.NONE else segments[:-1]


def cleanable_offsets(
    manifest: Manifest, segments: Sequence[SegmentMeta], log_start: int, rolled: Roll, config: TopicConfig, now_ms: int
) -> CleanableOffsets:
    """Kafka's ``cleanableOffsets``: the validated checkpoint, and the first uncleanable offset, the least of the
    active segment's base, the last stable offset and the first dirty segment newer than ``min.compaction.lag.ms``
    (``max``'d with the first dirty offset), rounded down to a segment boundary."""
    first_dirty, reset = validated_checkpoint(manifest, log_start)
    active_base = manifest.log_end_offset if rolled is not Roll.NONE else segments[-1].base_offset
    non_active = non_active_segments(segments, rolled)
    lag_bound = None
    if config.min_compaction_lag_ms > 0:
        min_lag_cutoff_ms = now_ms - config.min_compaction_lag_ms  # a segment with a record after it is too new
        lag_bound = next(
            (
                s.base_offset
                for s in non_active[_floor_index(non_active, first_dirty) :]
                if s.time_ms > min_lag_cutoff_ms
            ),
            None,
        )
    uncleanable, bound = rules.uncleanable_offset(
        first_dirty_offset=first_dirty,
        active_base=active_base,
        last_stable_offset=manifest.last_stable_offset,
        lag_bound=lag_bound,
    )
    first_uncleanable = rules.first_uncleanable_offset(
        uncleanable, [s.base_offset for s in non_active], [s.next_offset for s in non_active], active_base
    )
    return CleanableOffsets(first_dirty, reset, uncleanable, first_uncleanable, bound)


def calculate_cleanable_bytes(segments: Sequence[SegmentMeta], offsets: CleanableOffsets) -> tuple[int, int]:
    """Clean and cleanable bytes (LogToClean, ``calculateCleanableBytes``): a segment holding a mid-segment
    checkpoint counts on both sides, as in Kafka."""
    first_dirty, first_uncleanable = offsets.first_dirty_offset, offsets.first_uncleanable_offset
    clean_bytes = sum(s.live_size_bytes for s in segments if s.base_offset < first_dirty)
    start = _floor_index(segments, min(first_dirty, first_uncleanable))
    cleanable_bytes = sum(s.live_size_bytes for s in segments[start:] if s.base_offset < first_uncleanable)
    return clean_bytes, cleanable_bytes


def dirty_ratio(clean_bytes: int, cleanable_bytes: int) -> float:
    """Kafka's ``cleanableRatio``: the cleanable share of the clean and cleanable bytes (0 without bytes)."""
    total = clean_bytes + cleanable_bytes
    return cleanable_bytes / total if total else 0.0


def max_compaction_delay(dirty: Sequence[SegmentMeta], config: TopicConfig, now_ms: int) -> int:
    """Kafka's ``maxCompactionDelay``: how long past ``max.compaction.lag.ms`` the earliest first record of the
    dirty non-active segments is (0 if within it; first timestamps of 0 or less do not count)."""
    first_times = [
        s.live_first_timestamp for s in dirty if s.live_first_timestamp is not None and s.live_first_timestamp > 0
    ]
    earliest = min(first_times, default=None)
    clean_until = now_ms - max(config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest is not None and earliest < clean_until else 0


def is_purge_due(manifest: Manifest, in_range: Sequence[SegmentMeta], cleanable_bytes: int, now_ms: int) -> bool:
    """Whether tombstones and markers in range are due to go: the last pass says when its earliest pending delete
    horizon is due; the horizons that had passed by then and stayed are guarded until the range grows (or, for a
    log no pass has recorded that for, any passed horizon counts)."""
    if manifest.last_clean_ms is None or cleanable_bytes > 0:
        return any(
            s.live_min_delete_horizon_ms is not None and s.live_min_delete_horizon_ms <= now_ms for s in in_range
        )
    # (the last pass's range may have held the active segment, rolled for an erasure: not this one's)
    return bool(in_range) and manifest.next_horizon_ms is not None and manifest.next_horizon_ms <= now_ms


def deletion_vectors_overdue(in_range: Sequence[SegmentMeta], max_age_ms: int | None, now_ms: int) -> int:
    """How long the oldest deletion vector in range has been due for its rewrite under
    ``deletion.vector.max.age.ms`` (-1: none is due, or no maximum age)."""
    if max_age_ms is None:
        return -1
    return max(
        (now_ms - rules.saturating_add(s.deletes.created_ms, max_age_ms) for s in in_range if s.deletes is not None),
        default=-1,
    )


def measure(
    manifest: Manifest,
    segments: Sequence[SegmentMeta],
    retention: Retention,
    rolled: Roll,
    config: TopicConfig,
    now_ms: int,
    *,
    deletion_vector_max_age_ms: int | None = None,
) -> Figures:
    """Kafka's figures of a partition with ``segments`` left after retention, and the erasure requests the range
    covers: these are carried out now, due at once, overdue past their deadline."""
    offsets = cleanable_offsets(manifest, segments, retention.log_start_offset, rolled, config, now_ms)
    clean_bytes, cleanable_bytes = calculate_cleanable_bytes(segments, offsets)
    non_active = non_active_segments(segments, rolled)
    delay = max_compaction_delay(non_active[_floor_index(non_active, offsets.first_dirty_offset) :], config, now_ms)
    in_range = tuple(s for s in segments if s.base_offset < offsets.first_uncleanable_offset)
    vectors_overdue = deletion_vectors_overdue(in_range, deletion_vector_max_age_ms, now_ms)
    erasures = tuple(
        r for r in manifest.erasures if r.state == "pending" and r.tombstone_offset < offsets.first_uncleanable_offset
    )
    erasing = erasures_overdue(erasures, now_ms)
    overdue = max(delay if delay > 0 and cleanable_bytes > 0 else -1, vectors_overdue, erasing)
    return Figures(
        offsets,
        clean_bytes,
        cleanable_bytes,
        dirty_ratio(clean_bytes, cleanable_bytes),
        delay,
        rolled,
        is_purge_due(manifest, in_range, cleanable_bytes, now_ms),
        vectors_overdue,
        erasing,
        overdue if overdue >= 0 else None,
        in_range,
        erasures,
    )


def grounds(figures: Figures, retention: Retention, config: TopicConfig) -> Reason | None:
    """What selects a measured partition, the first that holds in Kafka's order and then this cleaner's (None:
    nothing does): erasure requests in range, ``max.compaction.lag.ms``, the dirty ratio, expired tombstones, aged
    deletion vectors, and retention alone."""
    if figures.erasures:
        return ErasureRequested(len(figures.erasures), figures.erasures_overdue_ms)
    if figures.lagging:
        return MaxLagExceeded(figures.compaction_delay_ms)
    if figures.cleanable_ratio > config.min_cleanable_dirty_ratio:
        return DirtyRatio(figures.cleanable_ratio, config.min_cleanable_dirty_ratio)
    if figures.tombstones_due:
        return TombstonesExpired()
    if figures.deletion_vectors_overdue_ms >= 0:
        return DeletionVectorsAged(figures.deletion_vectors_overdue_ms)
    if retention.expired_segments:
        return retention.reason
    return None


def choose(
    tp: TopicPartition, manifest: Manifest, config: TopicConfig, retention: Retention, figures: Figures
) -> Selected | Skipped:
    """Select a measured partition with its reasons, or skip it with why nothing selects it; either way the pending
    erasure requests past the range say what they wait for."""
    waiting = sum(1 for r in manifest.erasures if r.state == "pending") - len(figures.erasures)
    wait = (ErasuresWait(waiting, figures.offsets.bound, manifest.last_stable_offset),) if waiting else ()
    first = grounds(figures, retention, config)
    if first is None:
        if figures.cleanable_bytes > 0:
            why: Reason = DirtyRatio(figures.cleanable_ratio, config.min_cleanable_dirty_ratio)
        elif figures.offsets.first_dirty_offset >= manifest.log_end_offset:
            why = NoDirtyRecords()
        else:
            why = NothingCleanable(figures.offsets.bound, manifest.last_stable_offset)
        return Skipped(tp, manifest, config, Reasons(why, wait), retention, figures)
    # Aged deletion vectors and retention are named after the rest, unless they decided (then they come first).
    aged = (
        ()
        if figures.deletion_vectors_overdue_ms < 0 or isinstance(first, DeletionVectorsAged)
        else (DeletionVectorsAged(figures.deletion_vectors_overdue_ms),)
    )
    expired = () if not retention.expired_segments or isinstance(first, RetentionExpired) else (retention.reason,)
    return Selected(
        tp,
        manifest,
        config,
        Reasons(first, (*wait, *aged, *expired)),
        retention,
        figures,
        dedupe=not isinstance(first, RetentionExpired),
    )


def plan_partition(
    tp: TopicPartition,
    manifest: Manifest,
    config: TopicConfig,
    now_ms: int,
    deletion_vector_max_age_ms: int | None = None,
) -> Selected | Skipped:
    """Kafka's selection arithmetic for one partition (no budget, no ordering), and its erasure requests'.

    A pending erasure request selects the partition at once, whatever its dirty ratio, and rolls the active
    segment as KIP-354's max lag does, so that the pass covers its tombstone; min.compaction.lag.ms and open
    transactions still bound the range, and the request waits for them (the plan's reason says so).
    """
    pending = tuple(r for r in manifest.erasures if r.state == "pending")
    if not config.compact:
        return Skipped(tp, manifest, config, Reasons(NotCompacted(config.cleanup_policy, len(pending))))
    rolled = roll(manifest, config, now_ms, pending)
    retention = delete_old_segments(manifest, config, now_ms, rolled)
    segments = manifest.segments[len(retention.expired_segments) :]
    if segments:
        figures = measure(
            manifest, segments, retention, rolled, config, now_ms, deletion_vector_max_age_ms=deletion_vector_max_age_ms
        )
        return choose(tp, manifest, config, retention, figures)
    if not retention.expired_segments and not pending:
        return Skipped(tp, manifest, config, Reasons(EmptyLog()), retention)
    # Every record below the requests' tombstones goes with its segment.
    figures = Figures.nothing_left(manifest.log_end_offset, pending, now_ms)
    reason = retention.reason if retention.expired_segments else NothingLeftToRewrite(figures.erasures_overdue_ms)
    return Selected(tp, manifest, config, Reasons(reason), retention, figures, dedupe=False)


# The run ----------------------------------------------------------------------------------------------------------


def plan(
    manifests: Mapping[TopicPartition, Manifest | Exception],
    config: Callable[[str], TopicConfig],
    now_ms: int,
    byte_budget: int | None = None,
    deletion_vector_max_age_ms: int | None = None,
) -> CompactionPlan:
    """Plan a run: select cleanable partitions, within an optional byte budget.

    ``config(topic)`` gives a topic's effective configuration. A partition whose manifest could not be
    read (an exception in place of the manifest) is listed as uncleanable with the reason; the others
    are still planned. Partitions past a bound on physical removal (``max.compaction.lag.ms``,
    ``deletion.vector.max.age.ms``) go first, most overdue first, as KIP-354 has the cleaner honour the max
    lag, so that dirtier partitions cannot defer them night after night; then the dirtiest first. The budget
    bounds the bytes read by the run; the first selected partition is always taken, so every run makes
    progress.
    """
    plans: list[Selected | Skipped] = []
    uncleanable: list[PartitionPlan] = []
    for tp in sorted(manifests, key=lambda tp: (tp.topic, tp.partition)):
        manifest = manifests[tp]
        if isinstance(manifest, Exception):
            uncleanable.append(Uncleanable(tp, Reasons(ManifestUnreadable(str(manifest)))))
            continue
        plans.append(plan_partition(tp, manifest, config(tp.topic), now_ms, deletion_vector_max_age_ms))

    measured = [p.figures for p in plans if p.figures is not None]
    candidates = [f for f in measured if f.clean_bytes + f.cleanable_bytes > 0]
    max_dirty = int(100 * max((f.cleanable_ratio for f in candidates), default=0.0))
    max_delay = max((f.compaction_delay_ms for f in measured), default=0)
    delayed = sum(1 for f in measured if f.compaction_delay_ms > 0)

    selected = sorted(
        (p for p in plans if isinstance(p, Selected)),
        key=lambda p: (p.figures.overdue_ms is None, -(p.figures.overdue_ms or 0), -p.figures.cleanable_ratio),
    )
    skipped: list[PartitionPlan] = [p for p in plans if isinstance(p, Skipped)]
    if byte_budget is not None:
        within: list[Selected] = []
        spent = 0
        for p in selected:
            if within and spent + p.work_bytes > byte_budget:
                skipped.append(_deferred(p, byte_budget))
                continue
            within.append(
                p if p.figures.overdue_ms is None else replace(p, reason=p.reason.adding(OverdueFirstInBudget()))
            )
            spent += p.work_bytes
        selected = within
    return CompactionPlan(now_ms, tuple(selected + skipped + uncleanable), max_dirty, max_delay, delayed, byte_budget)


def _deferred(p: Selected, budget: int) -> Skipped:
    return Skipped(p.partition, p.manifest, p.config, Reasons(Deferred(budget, p.reason)), p.retention, p.figures)
