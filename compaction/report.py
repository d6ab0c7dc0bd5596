"""Writing out what a run did: the JSON report and Kafka's cleaner gauges for Prometheus."""

from __future__ import annotations

import json
from pathlib import Path

from compaction.clean.outcome import RunReport


def write_report(report: RunReport, path: str | Path) -> None:
    """The run report as JSON (``--report``)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(report.to_dict(), indent=1))


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
