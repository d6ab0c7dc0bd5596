"""What a run did: per-partition results (Kafka's CleanerStats and more), the run report, summaries, metrics."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compaction.layout import SegmentOutcome
from compaction.manifest import Manifest, SegmentMeta
from compaction.planner import CompactionPlan, Decision, PartitionPlan
from compaction.status import human_bytes

if TYPE_CHECKING:
    from compaction.tasks import ApplyJob

log = logging.getLogger("compaction.report")


@dataclass
class PartitionResult:
    """One partition's outcome. Stats follow Kafka's CleanerStats: ``messages_read``/``map_bytes_read`` cover
    the whole cleaned range (what the decision scanned), ``bytes_read`` the segments recopied."""

    partition: str
    status: str  # cleaned | failed | skipped | uncleanable
    reason: str
    error: str | None = None
    version_before: int | None = None
    version_after: int | None = None
    checkpoint_before: int | None = None
    checkpoint_after: int | None = None
    clean_range: list[int] | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    elapsed_ms: int = 0

    @classmethod
    def from_plan(cls, p: PartitionPlan) -> PartitionResult:
        status = "uncleanable" if p.decision is Decision.UNCLEANABLE else "skipped"
        return cls(str(p.partition), status, p.reason, error=p.reason if status == "uncleanable" else None,
                   version_before=p.manifest.version if p.manifest else None, checkpoint_before=p.checkpoint)

    @classmethod
    def failed(cls, p: PartitionPlan, error: str, outcomes: dict[int, SegmentOutcome]) -> PartitionResult:
        log.warning("partition %s is uncleanable: %s", p.partition, error)
        return cls(str(p.partition), "failed", p.reason, error=error,
                   version_before=p.manifest.version if p.manifest else None, checkpoint_before=p.checkpoint,
                   clean_range=[p.log_start_offset or 0, p.first_uncleanable_offset or 0],
                   stats={"cleanable_bytes": p.cleanable_bytes})

    @classmethod
    def cleaned(cls, p: PartitionPlan, committed: Manifest, outcomes: dict[int, SegmentOutcome],
                jobs: Sequence[ApplyJob], added: list[SegmentMeta], records_written: int, bytes_written: int,
                elapsed_ms: int) -> PartitionResult:
        dropped: dict[str, int] = {}
        for outcome in outcomes.values():
            for reason, count in outcome.dropped.items():
                dropped[reason] = dropped.get(reason, 0) + count
        expired_records = sum(s.live_records for s in p.expired_segments)
        if expired_records:
            dropped["retention"] = expired_records
        range_before = list(p.expired_segments) + list(p.segments)
        rewritten = [s for j in jobs if not j.deletes_only for s in j.sources]
        replaced = {s.path for j in jobs for s in j.sources}
        range_after = [s for s in p.segments if s.path not in replaced] + added
        stats = {
            "messages_read": sum(o.records for o in outcomes.values()),
            "map_bytes_read": sum(s.size_bytes for s in p.segments),
            "bytes_read": sum(s.size_bytes for s in rewritten),
            "messages_written": records_written,
            "bytes_written": bytes_written,
            "invalid_messages_read": dropped.get("keyless", 0),
            "dropped": dropped,
            "segments_rewritten": len(rewritten),
            "segments_written": len(added) - sum(1 for j in jobs if j.deletes_only),
            # rewrites that kept no record: their segments go, their range stays part of the log
            "segments_emptied": sum(1 for j in jobs if not j.deletes_only) - len(added)
            + sum(1 for j in jobs if j.deletes_only),
            "deletion_vectors_written": sum(1 for j in jobs if j.deletes_only),
            "segments_untouched": len(p.segments) - len(replaced),
            "segments_expired": len(p.expired_segments),
            "size_before": sum(s.size_bytes for s in range_before),
            "size_after": sum(s.size_bytes for s in range_after),
            "records_before": sum(s.live_records for s in range_before),
            "records_after": sum(s.live_records for s in range_after),
        }
        return cls(str(p.partition), "cleaned", p.reason, version_before=p.manifest.version if p.manifest else None,
                   version_after=committed.version, checkpoint_before=p.checkpoint,
                   checkpoint_after=committed.first_dirty_offset,
                   clean_range=[p.log_start_offset or 0, p.first_uncleanable_offset or 0], stats=stats,
                   elapsed_ms=elapsed_ms)

    def summary(self) -> str:
        """Kafka's cleaner log line, shortened: ``cleaned orders-3 [0, 48210): 2.1 GB -> 420 MB, ...``."""
        if self.status != "cleaned":
            return f"{self.status} {self.partition}: {self.error or self.reason}"
        s = self.stats
        size = 100 * (1 - s["size_after"] / s["size_before"]) if s["size_before"] else 0.0
        messages = 100 * (1 - s["records_after"] / s["records_before"]) if s["records_before"] else 0.0
        start, end = self.clean_range or [0, 0]
        return (f"cleaned {self.partition} [{start}, {end}): {human_bytes(s['size_before'])} -> "
                f"{human_bytes(s['size_after'])}, {size:.1f}% size reduction, {messages:.1f}% fewer messages "
                f"({s['segments_rewritten']} segment(s) rewritten into {s['segments_written']}, "
                f"{s['deletion_vectors_written']} with new deletions, {s['segments_untouched']} untouched; "
                f"{self.reason})")


@dataclass
class RunReport:
    """The machine-readable record of one run (written as JSON with ``--report``)."""

    run_id: str
    store: str
    now_ms: int
    dedupe_plan: str
    elapsed_ms: int
    partitions: list[PartitionResult]
    totals: dict[str, Any]
    metrics: dict[str, int]

    @classmethod
    def build(cls, store: str, run_id: str, now_ms: int, dedupe_plan: str, plan: CompactionPlan,
              results: list[PartitionResult], elapsed_ms: int) -> RunReport:
        cleaned = [r for r in results if r.status == "cleaned"]
        bad = [r for r in results if r.status in ("failed", "uncleanable")]
        totals: dict[str, Any] = {"partitions": len(results), "cleaned": len(cleaned), "failed": len(bad),
                                  "skipped": len(results) - len(cleaned) - len(bad)}
        for key in ("messages_read", "bytes_read", "map_bytes_read", "messages_written", "bytes_written",
                    "size_before", "size_after", "records_before", "records_after"):
            totals[key] = sum(r.stats.get(key, 0) for r in cleaned)
        dropped: dict[str, int] = {}
        for r in cleaned:
            for reason, count in r.stats.get("dropped", {}).items():
                dropped[reason] = dropped.get(reason, 0) + count
        totals["dropped"] = dropped
        metrics = {
            "max-compaction-delay-secs": plan.max_compaction_delay_ms // 1000,
            "max-dirty-percent": plan.max_dirty_percent,
            "uncleanable-partitions-count": len(bad),
            "uncleanable-bytes": sum(r.stats.get("cleanable_bytes", 0) for r in bad),
            "max-clean-time-secs": elapsed_ms // 1000,
            "cleaner-recopy-percent": 100 * totals["bytes_written"] // max(totals["bytes_read"], 1),
        }
        return cls(run_id, store, now_ms, dedupe_plan, elapsed_ms, results, totals, metrics)

    @property
    def failed(self) -> list[PartitionResult]:
        return [r for r in self.partitions if r.status in ("failed", "uncleanable")]

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["failures"] = [{"partition": r.partition, "error": r.error} for r in self.failed]
        return doc

    def write(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))


def write_metrics(report: RunReport, textfile: str | None = None, pushgateway: str | None = None,
                  job: str = "compaction") -> None:
    """Kafka's cleaner gauges in Prometheus form: a text file (node-exporter style) and/or a Pushgateway."""
    from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway, write_to_textfile

    registry = CollectorRegistry()
    labels = {"store": report.store}
    help_texts = {
        "max-compaction-delay-secs": "Largest delay past max.compaction.lag.ms among partitions (LogCleaner)",
        "max-dirty-percent": "Largest dirty ratio of a partition, in percent (LogCleanerManager)",
        "uncleanable-partitions-count": "Partitions that could not be cleaned (LogCleanerManager)",
        "uncleanable-bytes": "Cleanable bytes of the uncleanable partitions (LogCleanerManager)",
        "max-clean-time-secs": "Duration of the run (LogCleaner)",
        "cleaner-recopy-percent": "Bytes written as a percentage of bytes recopied (LogCleaner)",
    }
    for name, value in report.metrics.items():
        gauge = Gauge("kafka_log_cleaner_" + name.replace("-", "_"), help_texts[name], list(labels), registry=registry)
        gauge.labels(**labels).set(value)
    if not report.failed:
        success = Gauge("kafka_log_cleaner_last_success_time_seconds", "Time (the run's --now) of the last run in "
                        "which every selected partition was cleaned", list(labels), registry=registry)
        success.labels(**labels).set(report.now_ms / 1000)
    if textfile:
        Path(textfile).parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(textfile, registry)
    if pushgateway:
        # pushadd keeps the previous last-success gauge when this run had failures and did not set it
        pushadd_to_gateway(pushgateway, job=job, registry=registry)
