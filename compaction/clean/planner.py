"""The planner: which partitions to clean and over which offsets, as Kafka's LogCleanerManager decides.

A pure function of (manifests, configuration, now): no Spark, no filesystem, no clock. Offsets follow
Kafka's arithmetic (reference §2): the validated checkpoint, the segment-aligned first uncleanable offset,
clean/cleanable bytes (with Kafka's double count of a segment holding a mid-segment checkpoint), the dirty
ratio, ``max.compaction.lag.ms``, tombstone purges and retention for ``compact,delete``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from compaction import rules
from compaction.clean.layout import ApplyPolicy
from compaction.clean.settings import CleanerSettings, TopicConfig
from compaction.display import format_duration
from compaction.store import TopicPartition
from compaction.store.manifest import ErasureRequest, Manifest, SegmentMeta


class Decision(StrEnum):
    CLEAN = "clean"
    SKIP = "skip"
    UNCLEANABLE = "uncleanable"


@dataclass(frozen=True)
class PartitionPlan:
    """The planner's verdict on one partition; offsets are Kafka's, ``*_end``/``first_uncleanable`` exclusive.

    A selected partition is cleaned over ``[log_start_offset, first_uncleanable_offset)`` (after retention
    has dropped ``expired_segments``), and its checkpoint then becomes ``first_uncleanable_offset``.
    """

    partition: TopicPartition
    decision: Decision
    reason: str
    manifest: Manifest | None = field(default=None, repr=False, compare=False)
    config: TopicConfig | None = None
    checkpoint: int | None = None
    first_dirty_offset: int | None = None
    checkpoint_reset: str | None = None
    uncleanable_offset: int | None = None  # before rounding down to a segment boundary
    first_uncleanable_offset: int | None = None
    log_start_offset: int | None = None
    clean_bytes: int = 0
    cleanable_bytes: int = 0
    cleanable_ratio: float = 0.0
    compaction_delay_ms: int = 0
    active_rolled: bool = False
    #: Rolled only because an erasure request's tombstone lies in the active segment: the pass rewrites that segment
    #: apart from the others, so that it is the log's last segment again and the rest is not held in it.
    rolled_for_erasure: bool = False
    tombstone_purge: bool = False
    #: How far past a bound on physical removal the partition is: its compaction delay past
    #: ``max.compaction.lag.ms`` or its oldest deletion vector's age past ``deletion.vector.max.age.ms``,
    #: the larger (0: due just now). None while within both. Such a partition goes first in the budget.
    overdue_ms: int | None = None
    dedupe: bool = False
    expired_segments: tuple[SegmentMeta, ...] = ()
    segments: tuple[SegmentMeta, ...] = ()
    #: The pending erasure requests whose tombstones lie in the cleaned range: the pass carries them out.
    erasures: tuple[ErasureRequest, ...] = ()

    @property
    def needs_dedupe(self) -> bool:
        """Whether records must be read: selected for cleaning or a purge (retention alone is metadata)."""
        return self.decision is Decision.CLEAN and self.dedupe and bool(self.segments)

    @property
    def work_bytes(self) -> int:
        return sum(s.live_size_bytes for s in self.segments)

    def to_clean(self) -> LogToClean:
        """The selected partition as a clean pass takes it, every field set."""
        if (self.decision is not Decision.CLEAN or self.manifest is None or self.config is None
                or self.first_dirty_offset is None or self.first_uncleanable_offset is None
                or self.log_start_offset is None):
            raise ValueError(f"partition {self.partition} is not selected for cleaning "
                             f"({self.decision}: {self.reason})")
        return LogToClean(self, self.partition, self.manifest, self.config, self.log_start_offset,
                          self.first_dirty_offset, self.first_uncleanable_offset, self.segments,
                          self.expired_segments, self.needs_dedupe, self.erasures)

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": str(self.partition),
            "decision": self.decision.value,
            "reason": self.reason,
            "version": self.manifest.version if self.manifest else None,
            "checkpoint": self.checkpoint,
            "first_dirty_offset": self.first_dirty_offset,
            "checkpoint_reset": self.checkpoint_reset,
            "first_uncleanable_offset": self.first_uncleanable_offset,
            "log_start_offset": self.log_start_offset,
            "clean_bytes": self.clean_bytes,
            "cleanable_bytes": self.cleanable_bytes,
            "cleanable_ratio": round(self.cleanable_ratio, 6),
            "compaction_delay_ms": self.compaction_delay_ms,
            "active_rolled": self.active_rolled,
            "tombstone_purge": self.tombstone_purge,
            "overdue_ms": self.overdue_ms,
            "expired_segments": [s.path for s in self.expired_segments],
            "erasures": [r.key_sha256 for r in self.erasures],
            "clean_range": [self.log_start_offset, self.first_uncleanable_offset]
            if self.decision is Decision.CLEAN else None,
            "segments": [s.path for s in self.segments],
        }


@dataclass(frozen=True)
class LogToClean:
    """A selected partition as a clean pass takes it (Kafka's LogToClean), every field set.

    The pass cleans ``segments``, the range ``[log_start_offset, first_uncleanable_offset)`` (the dirty part
    from ``first_dirty_offset``), after retention has dropped ``expired_segments``; without ``needs_dedupe``
    (retention alone) it reads no record. It carries out ``erasures``, whose tombstones lie in the range.
    """

    plan: PartitionPlan = field(repr=False)  # the planner's verdict: its reason and figures, for the report
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
    def selected(self) -> list[PartitionPlan]:
        return [p for p in self.partitions if p.decision is Decision.CLEAN]

    @property
    def to_clean(self) -> list[LogToClean]:
        return [p.to_clean() for p in self.selected]

    @property
    def uncleanable(self) -> list[PartitionPlan]:
        return [p for p in self.partitions if p.decision is Decision.UNCLEANABLE]

    def to_dict(self) -> dict[str, Any]:
        return {
            "now_ms": self.now_ms,
            "max_dirty_percent": self.max_dirty_percent,
            "max_compaction_delay_secs": self.max_compaction_delay_ms // 1000,
            "delayed_partitions": self.delayed_partitions,
            "byte_budget": self.byte_budget,
            "partitions": [p.to_dict() for p in self.partitions],
        }


def _floor_index(segments: Sequence[SegmentMeta], offset: int) -> int:
    """Index of the segment containing ``offset``, or of the next one after a gap (Kafka's floor);
    len(segments) if past the last one."""
    for i, segment in enumerate(segments):
        if offset < segment.next_offset:
            return i
    return len(segments)


def active_rolled(segment: SegmentMeta, config: TopicConfig, now_ms: int) -> bool:
    """Whether the last segment counts as rolled: its first record is older than ``min(segment.ms,
    max.compaction.lag.ms)`` (the offline form of KIP-354's forced roll)."""
    first = segment.live_first_timestamp if segment.live_first_timestamp is not None else segment.created_ms
    return now_ms - first > min(config.segment_ms, config.max_compaction_lag_ms)


def expired_by_retention(segments: Sequence[SegmentMeta], config: TopicConfig, now_ms: int,
                         rolled: bool) -> tuple[SegmentMeta, ...]:
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


def plan_partition(tp: TopicPartition, manifest: Manifest, config: TopicConfig, now_ms: int,
                   deletion_vector_max_age_ms: int | None = None) -> PartitionPlan:
    """Kafka's selection arithmetic for one partition (no budget, no ordering), and its erasure requests'.

    A pending erasure request selects the partition at once, whatever its dirty ratio, and rolls the active
    segment as KIP-354's max lag does, so that the pass covers its tombstone; min.compaction.lag.ms and open
    transactions still bound the range, and the request waits for them (the plan's reason says so).
    """
    pending = tuple(r for r in manifest.erasures if r.state == "pending")
    if not config.compact:
        waiting = f"; {len(pending)} erasure request(s) cannot be carried out (a tombstone deletes nothing there)" \
            if pending else ""
        return PartitionPlan(tp, Decision.SKIP, f"cleanup.policy={','.join(config.cleanup_policy)}: not compacted"
                                                f"{waiting}", manifest, config)
    aged_out = bool(manifest.segments) and active_rolled(manifest.segments[-1], config, now_ms)
    # An erasure rolls the active segment for cleaning only: retention still waits for it to age out.
    rolled = aged_out or (bool(manifest.segments) and bool(pending))
    # Segments wholly below the log start go, as Kafka deletes them for every compacted log.
    below = len(list(itertools.takewhile(lambda s: s.next_offset <= manifest.log_start_offset, manifest.segments)))
    retained = expired_by_retention(manifest.segments[below:], config, now_ms, aged_out)
    expired = (*manifest.segments[:below], *retained)
    segments = manifest.segments[len(expired):]
    log_end = manifest.log_end_offset
    log_start = (segments[0].base_offset if segments else log_end) if retained else manifest.log_start_offset
    dropped = "; ".join(note for count, note in ((len(retained), f"retention: {len(retained)} segment(s) expired"),
                                                 (below, f"{below} segment(s) below the log start")) if count)
    base = dict(manifest=manifest, config=config, checkpoint=manifest.first_dirty_offset, log_start_offset=log_start,
                expired_segments=expired)
    if not segments:
        if expired or pending:  # every record below the requests' tombstones goes with its segment
            return PartitionPlan(tp, Decision.CLEAN, dropped or "erasure requested: no segment is left to rewrite",
                                 first_dirty_offset=log_end, first_uncleanable_offset=log_end, erasures=pending,
                                 **base)  # type: ignore[arg-type]
        return PartitionPlan(tp, Decision.SKIP, "empty log", **base)  # type: ignore[arg-type]

    # Checkpoint validation (LogCleanerManager.cleanableOffsets).
    first_dirty = manifest.first_dirty_offset
    reset = None
    if first_dirty < log_start:
        reset = f"checkpoint {first_dirty} is below the log start {log_start}"
        first_dirty = log_start
    elif first_dirty > log_end:
        reset = f"checkpoint {first_dirty} is past the log end {log_end}"
        first_dirty = log_start

    active_base = log_end if rolled else segments[-1].base_offset
    non_active = segments if rolled else segments[:-1]
    lag_bound = None
    if config.min_compaction_lag_ms > 0:
        horizon = now_ms - config.min_compaction_lag_ms
        lag_bound = next((s.base_offset for s in non_active[_floor_index(non_active, first_dirty):]
                          if s.time_ms > horizon), None)
    uncleanable, bound_name = rules.uncleanable_offset(first_dirty_offset=first_dirty, active_base=active_base,
                                                       last_stable_offset=manifest.last_stable_offset,
                                                       lag_bound=lag_bound)
    first_uncleanable = rules.first_uncleanable_offset(uncleanable, [s.base_offset for s in non_active],
                                                       [s.next_offset for s in non_active], active_base)

    # Bytes (LogToClean): a segment holding a mid-segment checkpoint counts on both sides, as in Kafka.
    clean_bytes = sum(s.live_size_bytes for s in segments if s.base_offset < first_dirty)
    start = _floor_index(segments, min(first_dirty, first_uncleanable))
    cleanable_bytes = sum(s.live_size_bytes for s in segments[start:] if s.base_offset < first_uncleanable)
    total = clean_bytes + cleanable_bytes
    ratio = cleanable_bytes / total if total else 0.0

    # max.compaction.lag.ms (LogCleanerManager.maxCompactionDelay).
    dirty = non_active[_floor_index(non_active, first_dirty):]
    first_times = [s.live_first_timestamp for s in dirty
                   if s.live_first_timestamp is not None and s.live_first_timestamp > 0]
    earliest = min(first_times, default=None)
    clean_until = now_ms - max(config.max_compaction_lag_ms, 0)
    delay = clean_until - earliest if earliest is not None and earliest < clean_until else 0

    in_range = tuple(s for s in segments if s.base_offset < first_uncleanable)
    # Tombstones and markers to purge: the last pass says when its earliest pending horizon is due; the
    # horizons that had passed by then and stayed are guarded until the range grows (or, for a log no
    # pass has recorded that for, any passed horizon counts).
    passed = any(s.live_min_delete_horizon_ms is not None and s.live_min_delete_horizon_ms <= now_ms
                 for s in in_range)
    if manifest.last_clean_ms is None or cleanable_bytes > 0:
        purge = passed
    else:  # (the last pass's range may have held the active segment, rolled for an erasure: not this one's)
        purge = bool(in_range) and manifest.next_horizon_ms is not None and manifest.next_horizon_ms <= now_ms
    # deletion.vector.max.age.ms: how long the oldest deletion vector in range has been due for its rewrite.
    vectors_overdue = max((now_ms - rules.saturating_add(s.deletes.created_ms, deletion_vector_max_age_ms)
                           for s in in_range if s.deletes is not None), default=-1) \
        if deletion_vector_max_age_ms is not None else -1
    aged = vectors_overdue >= 0
    lagging = delay > 0 and cleanable_bytes > 0
    # Erasure requests whose tombstones the range covers are carried out now: due at once, overdue past deadline.
    erasures = tuple(r for r in pending if r.tombstone_offset < first_uncleanable)
    erasing = max((max(now_ms - r.deadline_ms, 0) for r in erasures), default=-1)
    overdue = max(delay if lagging else -1, vectors_overdue, erasing)
    fields = dict(base, first_dirty_offset=first_dirty, checkpoint_reset=reset, uncleanable_offset=uncleanable,
                  first_uncleanable_offset=first_uncleanable, clean_bytes=clean_bytes,
                  cleanable_bytes=cleanable_bytes, cleanable_ratio=ratio, compaction_delay_ms=delay,
                  active_rolled=rolled, rolled_for_erasure=rolled and not aged_out, tombstone_purge=purge or aged,
                  segments=in_range,
                  overdue_ms=overdue if overdue >= 0 else None, erasures=erasures)
    left = len(pending) - len(erasures)
    bound = {"active segment": "the active segment", "min.compaction.lag.ms": "min.compaction.lag.ms",
             "last stable offset": f"an open transaction (the last stable offset {manifest.last_stable_offset})"}
    wait_note = f"{left} erasure request(s) wait for {bound[bound_name]}" if left else ""

    fields["dedupe"] = True
    due = f"due for {format_duration(vectors_overdue)}" if vectors_overdue > 0 else "due now"
    aged_reason = (f"deletion vectors at least deletion.vector.max.age.ms old ({due}): rewrite to remove records "
                   "physically")
    if erasures:
        reason = f"erasure requested for {len(erasures)} key(s)"
        if erasing > 0:
            reason += f", past the deadline by {format_duration(erasing)}"
    elif lagging:
        reason = f"max.compaction.lag.ms exceeded by {format_duration(delay)}"
    elif ratio > config.min_cleanable_dirty_ratio:
        reason = f"dirty ratio {ratio:.2f} > {config.min_cleanable_dirty_ratio:.2f}"
    elif purge:
        reason = "tombstones expired: delete horizon passed"
    elif aged:
        reason = aged_reason
    elif expired:
        fields["dedupe"] = False
        reason = dropped
    else:
        if cleanable_bytes == 0:
            reason = {"active segment": "active segment only",
                      "last stable offset": f"nothing cleanable below the last stable offset "
                                            f"{manifest.last_stable_offset} (open transaction)",
                      "min.compaction.lag.ms": "dirty segments are newer than min.compaction.lag.ms"}[bound_name]
            if first_dirty >= log_end:
                reason = "no dirty records"
        else:
            reason = f"dirty ratio {ratio:.2f} <= {config.min_cleanable_dirty_ratio:.2f}"
        fields["dedupe"] = False
        return PartitionPlan(tp, Decision.SKIP, f"{reason}; {wait_note}" if wait_note else reason,
                             **fields)  # type: ignore[arg-type]
    if wait_note:
        reason += f"; {wait_note}"
    if aged and reason != aged_reason:
        reason += f"; {aged_reason}"
    if expired and reason != dropped:
        reason += f"; {dropped}"
    return PartitionPlan(tp, Decision.CLEAN, reason, **fields)  # type: ignore[arg-type]


def plan(manifests: Mapping[TopicPartition, Manifest | Exception], config: Callable[[str], TopicConfig], now_ms: int,
         byte_budget: int | None = None, deletion_vector_max_age_ms: int | None = None) -> CompactionPlan:
    """Plan a run: select cleanable partitions, within an optional byte budget.

    ``config(topic)`` gives a topic's effective configuration. A partition whose manifest could not be
    read (an exception in place of the manifest) is listed as uncleanable with the reason; the others
    are still planned. Partitions past a bound on physical removal (``max.compaction.lag.ms``,
    ``deletion.vector.max.age.ms``) go first, most overdue first, as KIP-354 has the cleaner honour the max
    lag, so that dirtier partitions cannot defer them night after night; then the dirtiest first. The budget
    bounds the bytes read by the run; the first selected partition is always taken, so every run makes
    progress.
    """
    plans: list[PartitionPlan] = []
    uncleanable: list[PartitionPlan] = []
    for tp in sorted(manifests, key=lambda tp: (tp.topic, tp.partition)):
        manifest = manifests[tp]
        if isinstance(manifest, Exception):
            uncleanable.append(PartitionPlan(tp, Decision.UNCLEANABLE, str(manifest)))
            continue
        plans.append(plan_partition(tp, manifest, config(tp.topic), now_ms, deletion_vector_max_age_ms))

    candidates = [p for p in plans if p.clean_bytes + p.cleanable_bytes > 0]
    max_dirty = int(100 * max((p.cleanable_ratio for p in candidates), default=0.0))
    max_delay = max((p.compaction_delay_ms for p in plans), default=0)
    delayed = sum(1 for p in plans if p.compaction_delay_ms > 0)

    selected = sorted((p for p in plans if p.decision is Decision.CLEAN),
                      key=lambda p: (p.overdue_ms is None, -(p.overdue_ms or 0), -p.cleanable_ratio))
    skipped = [p for p in plans if p.decision is not Decision.CLEAN]
    if byte_budget is not None:
        within: list[PartitionPlan] = []
        spent = 0
        for p in selected:
            if within and spent + p.work_bytes > byte_budget:
                skipped.append(_deferred(p, byte_budget))
                continue
            within.append(p if p.overdue_ms is None else replace(p, reason=f"{p.reason}; overdue, so first in the "
                                                                        "per-run byte budget"))
            spent += p.work_bytes
        selected = within
    return CompactionPlan(now_ms, tuple(selected + skipped + uncleanable), max_dirty, max_delay, delayed, byte_budget)


def _deferred(p: PartitionPlan, budget: int) -> PartitionPlan:
    return replace(p, decision=Decision.SKIP, reason=f"deferred: per-run byte budget {budget} exhausted ({p.reason})")


#: A task reads a clean segment's decision columns only, about a quarter of the cost of a dirty segment read
#: whole: so a task may hold this many times ``task.max.records`` records in all.
CLEAN_SEGMENT_COST_DIVISOR = 4


def key_buckets(p: LogToClean, task_max_records: int) -> int:
    """Key buckets (tasks) a partition's cleaned range is split into, so that no task decides too much.

    A task reads its dirty segments whole (at most ``task.max.records`` records) and only the decision
    columns of clean ones (up to :data:`CLEAN_SEGMENT_COST_DIVISOR` times as many records in all).
    """
    dirty = sum(s.live_records for s in p.segments if s.next_offset > p.first_dirty_offset)
    total = p.records
    return max(1, math.ceil(dirty / task_max_records),
               math.ceil(total / (CLEAN_SEGMENT_COST_DIVISOR * task_max_records)))


def segment_runs(segments: Sequence[SegmentMeta], max_records: int) -> list[tuple[SegmentMeta, ...]]:
    """Consecutive segments in runs of at most ``max_records`` live records (a larger segment alone): what
    one task of a split partition reads once for every key bucket."""
    runs: list[tuple[SegmentMeta, ...]] = []
    run: list[SegmentMeta] = []
    records = 0
    for segment in segments:
        if run and records + segment.live_records > max_records:
            runs.append(tuple(run))
            run, records = [], 0
        run.append(segment)
        records += segment.live_records
    return [*runs, tuple(run)] if run else runs


def apply_policy(p: LogToClean, now_ms: int, cleaner: CleanerSettings, buckets: int) -> ApplyPolicy:
    """How a partition's decisions become objects; a split partition's rewrites each read no more records
    than one of its decision tasks."""
    share = math.ceil(p.records / buckets)
    apart = p.segments[-1].base_offset if p.plan.rolled_for_erasure and p.segments else None
    return ApplyPolicy(p.config.segment_bytes, now_ms, cleaner.deletion_vector_max_ratio,
                       cleaner.deletion_vector_max_age_ms, max(1, min(cleaner.task_max_records, share)), apart)
