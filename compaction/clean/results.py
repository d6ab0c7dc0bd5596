"""What a clean pass did: per-partition results with Kafka's CleanerStats, and the run's totals and gauges.

Value objects only: :mod:`compaction.report` writes them out (JSON, summaries, Prometheus).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from compaction.clean.figures import Figures, Retention
from compaction.clean.layout import SegmentCounts
from compaction.clean.planner import CompactionPlan, LogToClean, Selected, Skipped, Uncleanable
from compaction.display import human_bytes
from compaction.store.manifest import Manifest, SegmentMeta

if TYPE_CHECKING:
    from compaction.clean.payloads import ApplyJob

log = logging.getLogger("compaction.cleaner")


class PartitionDone(Protocol):
    """What a pass did of a partition, as its result counts it (a :class:`~compaction.clean.work.PartitionWork`)."""

    @property
    def segment_counts(self) -> dict[int, SegmentCounts]: ...

    @property
    def jobs(self) -> Sequence[ApplyJob]: ...

    @property
    def records_written(self) -> int: ...

    @property
    def bytes_written(self) -> int: ...


class Status(StrEnum):
    """What a run did of a partition."""

    CLEANED = "cleaned"
    SKIPPED = "skipped"
    FAILED = "failed"  # selected, but its clean pass or commit failed; nothing of it was committed
    UNCLEANABLE = "uncleanable"  # could not be planned (unreadable manifest, corrupt segment...)


FAILURES = (Status.FAILED, Status.UNCLEANABLE)


@dataclass(frozen=True)
class SegmentFigures:
    """What a pass did to a partition's segments (the report's names: its JSON holds them among the stats)."""

    segments_rewritten: int = 0
    segments_written: int = 0
    segments_emptied: int = 0  # rewrites that kept no record: their segments go, their range stays part of the log
    deletion_vectors_written: int = 0
    segments_untouched: int = 0
    segments_expired: int = 0


@dataclass(frozen=True)
class RangeSizes:
    """The live bytes and records of a partition's cleaned range (its expired segments included) before the pass and
    after its commit (the report's names: its JSON holds them among the stats)."""

    size_before: int = 0
    size_after: int = 0
    records_before: int = 0
    records_after: int = 0


@dataclass
class CleanerStats:
    """Kafka's CleanerStats and more, for one partition. ``messages_read``/``map_bytes_read`` cover the whole
    cleaned range (what the winner search scanned), ``bytes_read`` the segments recopied."""

    messages_read: int = 0
    map_bytes_read: int = 0
    bytes_read: int = 0
    messages_written: int = 0
    bytes_written: int = 0
    invalid_messages_read: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # records removed, by reason
    segments: SegmentFigures = SegmentFigures()
    sizes: RangeSizes = RangeSizes()
    cleanable_bytes: int = 0  # of a failed partition: what stays dirty (Kafka's uncleanable-bytes)


@dataclass(frozen=True)
class ManifestVersions:
    """A partition's manifest version and checkpoint as the run found them, and as its commit left them (None: not
    read, or not committed; the report's names: its JSON holds them among the partition's fields)."""

    version_before: int | None = None
    version_after: int | None = None
    checkpoint_before: int | None = None
    checkpoint_after: int | None = None


@dataclass
class PartitionResult:
    """One partition's result in a run. Stats follow Kafka's CleanerStats: ``messages_read``/``map_bytes_read`` cover
    the whole cleaned range (what the winner search scanned), ``bytes_read`` the segments recopied."""

    partition: str
    status: Status
    reason: str
    error: str | None = None
    internal: bool = False  # the error is a bug in this library, not the data's or the store's
    trace: str | None = None  # an internal error's traceback, from the executor (or the driver)
    manifest: ManifestVersions = ManifestVersions()
    clean_range: list[int] | None = None
    stats: CleanerStats = field(default_factory=lambda: CleanerStats())
    elapsed_ms: int = 0

    @classmethod
    def from_plan(cls, p: Skipped | Uncleanable) -> PartitionResult:
        match p:
            case Uncleanable():
                return cls(str(p.partition), Status.UNCLEANABLE, str(p.reason), error=str(p.reason))
            case Skipped():
                # The checkpoint the planner read: none for a topic it did not look into (not compacted).
                checkpoint = p.manifest.first_dirty_offset if p.retention is not None else None
                return cls(
                    str(p.partition),
                    Status.SKIPPED,
                    str(p.reason),
                    manifest=ManifestVersions(version_before=p.manifest.version, checkpoint_before=checkpoint),
                )

    @classmethod
    def failed(
        cls, p: Selected | Skipped, error: str, *, internal: bool = False, trace: str | None = None
    ) -> PartitionResult:
        """A selected partition whose pass or commit failed, or a skipped one whose checkpoint reset failed."""
        log.warning("partition %s is uncleanable: %s%s", p.partition, "internal error: " if internal else "", error)
        match p:
            case (
                Selected(retention=retention, figures=figures)
                | Skipped(retention=Retention() as retention, figures=Figures() as figures)
            ):
                clean_range = [retention.log_start_offset, figures.offsets.first_uncleanable_offset]
                cleanable_bytes = figures.cleanable_bytes
            case _:  # (the planner resets only a checkpoint it measured the log for)
                clean_range, cleanable_bytes = [0, 0], 0
        return cls(
            str(p.partition),
            Status.FAILED,
            str(p.reason),
            error=error,
            internal=internal,
            trace=trace,
            manifest=ManifestVersions(
                version_before=p.manifest.version, checkpoint_before=p.manifest.first_dirty_offset
            ),
            clean_range=clean_range,
            stats=CleanerStats(cleanable_bytes=cleanable_bytes),
        )

    @classmethod
    def cleaned(
        cls, target: LogToClean, committed: Manifest, work: PartitionDone, added: list[SegmentMeta], elapsed_ms: int
    ) -> PartitionResult:
        """A partition committed: ``work`` is what the pass did of it, ``added`` the segments its commit added."""
        p = target
        segment_counts, jobs = work.segment_counts, work.jobs
        records_written, bytes_written = work.records_written, work.bytes_written
        dropped: dict[str, int] = {}
        for counts in segment_counts.values():
            for reason, count in counts.dropped.items():
                dropped[reason] = dropped.get(reason, 0) + count
        expired_records = sum(s.live_records for s in p.expired_segments)
        if expired_records:
            dropped["retention"] = expired_records
        range_before = list(p.expired_segments) + list(p.segments)
        rewritten = [s for j in jobs if not j.deletes_only for s in j.sources]
        replaced = {s.path for j in jobs for s in j.sources}
        range_after = [s for s in p.segments if s.path not in replaced] + added
        vectors = sum(1 for j in jobs if j.deletes_only)
        stats = CleanerStats(
            messages_read=sum(o.records for o in segment_counts.values()),
            map_bytes_read=sum(s.size_bytes for s in p.segments),
            bytes_read=sum(s.size_bytes for s in rewritten),
            messages_written=records_written,
            bytes_written=bytes_written,
            invalid_messages_read=dropped.get("keyless", 0),
            dropped=dropped,
            segments=SegmentFigures(
                segments_rewritten=len(rewritten),
                segments_written=len(added) - vectors,
                segments_emptied=len(jobs) - len(added),  # every job adds a segment but an emptied rewrite
                deletion_vectors_written=vectors,
                segments_untouched=len(p.segments) - len(replaced),
                segments_expired=len(p.expired_segments),
            ),
            sizes=RangeSizes(
                size_before=sum(s.size_bytes for s in range_before),
                size_after=sum(s.size_bytes for s in range_after),
                records_before=sum(s.live_records for s in range_before),
                records_after=sum(s.live_records for s in range_after),
            ),
        )
        return cls(
            str(p.partition),
            Status.CLEANED,
            str(target.plan.reason),
            manifest=ManifestVersions(
                version_before=target.manifest.version,
                version_after=committed.version,
                checkpoint_before=target.manifest.first_dirty_offset,
                checkpoint_after=committed.first_dirty_offset,
            ),
            clean_range=[target.log_start_offset, target.first_uncleanable_offset],
            stats=stats,
            elapsed_ms=elapsed_ms,
        )

    def summary(self) -> str:
        """Kafka's cleaner log line, shortened: ``cleaned orders-3 [0, 48210): 2.1 GB -> 420 MB, ...``."""
        if self.internal:
            return (
                f"{self.status} {self.partition}: internal error (a bug in compaction, not a problem of the data; "
                f"the run report and -v show its traceback): {self.error}"
            )
        if self.status is not Status.CLEANED:
            return f"{self.status} {self.partition}: {self.error or self.reason}"
        sizes, segments = self.stats.sizes, self.stats.segments
        size = 100 * (1 - sizes.size_after / sizes.size_before) if sizes.size_before else 0.0
        messages = 100 * (1 - sizes.records_after / sizes.records_before) if sizes.records_before else 0.0
        start, end = self.clean_range or [0, 0]
        return (
            f"cleaned {self.partition} [{start}, {end}): {human_bytes(sizes.size_before)} -> "
            f"{human_bytes(sizes.size_after)}, {size:.1f}% size reduction, {messages:.1f}% fewer messages "
            f"({segments.segments_rewritten} segment(s) rewritten into {segments.segments_written}, "
            f"{segments.deletion_vectors_written} with new deletions, {segments.segments_untouched} untouched; "
            f"{self.reason})"
        )


@dataclass
class RunGc:
    """What ``run --gc`` did after the commits: the objects and bytes it deleted, and each partition it skipped
    (nothing of it deleted) with the reason: a failure of the run, like a partition that could not be cleaned."""

    deleted_objects: int = 0
    deleted_bytes: int = 0
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RunIdentity:
    """Which run a report is of: the run's id, the store's URL, its ``now`` and its winner search (the report's names:
    its JSON holds them first)."""

    run_id: str
    store: str
    now_ms: int
    dedupe_plan: str


@dataclass
class RunReport:
    """The machine-readable record of one run (written as JSON with ``--report``)."""

    run: RunIdentity
    elapsed_ms: int
    partitions: list[PartitionResult]
    totals: dict[str, Any]
    metrics: dict[str, int]
    #: Where the time went: the driver's phases (``plan``, ``clean``: the Spark jobs, ``commit``; the job adds
    #: ``startup``), wall ms; and the executors' ``task_read``, ``task_decide``, ``task_write``, task ms summed.
    phases_ms: dict[str, int] = field(default_factory=dict)
    gc: RunGc | None = None  # with --gc
    #: Tables published after the partitions committed (``[publish] after.run``): per topic the publish's
    #: result, or its ``error``.
    published: list[dict[str, Any]] = field(default_factory=list)
    #: Erasure requests of the run's partitions that are late at ``now_ms`` (still pending past their deadline, or not
    #: yet physically gone the erasure grace period after it) as the run ends: counted by the job, after gc (None in
    #: the report of a pass run alone, which does not count them).
    erasure_overdue_requests: int | None = None
    #: What the pass's Spark stages sent to executors and collected from them, in bytes: it grows with partitions,
    #: segments and key ranges, never with records (SPEC §5).
    driver_bytes: int = 0

    @classmethod
    def build(
        cls,
        run: RunIdentity,
        plan: CompactionPlan,
        results: list[PartitionResult],
        elapsed_ms: int,
        *,
        phases_ms: dict[str, int],
        driver_bytes: int,
    ) -> RunReport:
        """A pass's report, whole: its totals and gauges from its partitions' results."""
        cleaned = [r for r in results if r.status is Status.CLEANED]
        bad = [r for r in results if r.status in FAILURES]
        totals: dict[str, Any] = {
            "partitions": len(results),
            "cleaned": len(cleaned),
            "failed": len(bad),
            "skipped": len(results) - len(cleaned) - len(bad),
        }
        for key in ("messages_read", "bytes_read", "map_bytes_read", "messages_written", "bytes_written"):
            totals[key] = sum(getattr(r.stats, key) for r in cleaned)
        for key in ("size_before", "size_after", "records_before", "records_after"):
            totals[key] = sum(getattr(r.stats.sizes, key) for r in cleaned)
        dropped: dict[str, int] = {}
        for r in cleaned:
            for reason, count in r.stats.dropped.items():
                dropped[reason] = dropped.get(reason, 0) + count
        totals["dropped"] = dropped
        metrics = {
            "max-compaction-delay-secs": plan.max_compaction_delay_ms // 1000,
            "max-dirty-percent": plan.max_dirty_percent,
            "uncleanable-partitions-count": len(bad),
            "uncleanable-bytes": sum(r.stats.cleanable_bytes for r in bad),
            "max-clean-time-secs": elapsed_ms // 1000,
            "cleaner-recopy-percent": 100 * totals["bytes_written"] // max(totals["bytes_read"], 1),
        }
        return cls(run, elapsed_ms, results, totals, metrics, phases_ms=phases_ms, driver_bytes=driver_bytes)

    @property
    def failed(self) -> list[PartitionResult]:
        return [r for r in self.partitions if r.status in FAILURES]

    @property
    def succeeded(self) -> bool:
        """Every selected partition cleaned, and (with --gc) collected, and (with ``after.run``) published."""
        return not self.failed and not (self.gc and self.gc.skipped) and not any("error" in p for p in self.published)

    def topics(self) -> dict[str, dict[str, Any]]:
        """Per topic, in the order of its partitions: how many partitions were cleaned, failed (or stayed
        uncleanable) and skipped, the records and bytes of the cleaned ranges before and after, the manifest version
        each cleaned partition committed, and whether the topic is compacted (a topic that is not has only skipped
        partitions the planner did not look into: no checkpoint read). What lineage events, orchestrators' assets
        and the report's ``topics`` say of each topic."""
        figures: dict[str, dict[str, Any]] = {}
        for r in self.partitions:
            topic, _, number = r.partition.rpartition("-")
            f = figures.setdefault(
                topic,
                {
                    "compacted": False,
                    "partitions_cleaned": 0,
                    "partitions_failed": 0,
                    "partitions_skipped": 0,
                    "records_before": 0,
                    "records_after": 0,
                    "bytes_before": 0,
                    "bytes_after": 0,
                    "versions": {},
                },
            )
            f["compacted"] = (
                f["compacted"] or r.status is not Status.SKIPPED or r.manifest.checkpoint_before is not None
            )
            key = {Status.CLEANED: "partitions_cleaned", Status.SKIPPED: "partitions_skipped"}.get(
                r.status, "partitions_failed"
            )
            f[key] += 1
            if r.status is Status.CLEANED:
                sizes = r.stats.sizes
                f["records_before"] += sizes.records_before
                f["records_after"] += sizes.records_after
                f["bytes_before"] += sizes.size_before
                f["bytes_after"] += sizes.size_after
                f["versions"][number] = r.manifest.version_after
        return figures

    def to_dict(self) -> dict[str, Any]:
        """The report as its JSON holds it (the published shape): each group of fields (the run's identity, a
        partition's manifest versions, its stats' segment figures and sizes) inlined where it stands."""
        doc = _inlined(asdict(self), "run")
        doc["partitions"] = [
            {**_inlined(p, "manifest"), "stats": _inlined(p["stats"], "segments", "sizes")} for p in doc["partitions"]
        ]
        doc["topics"] = self.topics()
        doc["failures"] = [
            {"partition": r.partition, "error": r.error, "internal": r.internal, "trace": r.trace} for r in self.failed
        ] + [
            {"partition": name, "error": f"gc skipped it, nothing deleted: {reason}", "internal": False, "trace": None}
            for name, reason in (self.gc.skipped.items() if self.gc else ())
        ]
        return doc


def _inlined(doc: dict[str, Any], *groups: str) -> dict[str, Any]:
    """``doc`` with the fields of each of its ``groups`` (dicts) in the group's place, in their order."""
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        if key in groups:
            flat.update(value)
        else:
            flat[key] = value
    return flat
