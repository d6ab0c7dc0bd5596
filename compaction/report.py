"""Writing out what a run did: the JSON report and Kafka's cleaner gauges for Prometheus, at the store's URLs."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fsspec

from compaction.clean.results import RunReport
from compaction.errors import InvalidArgumentError, MissingObjectError
from compaction.store.storage import RETRY_BUDGET_OPTION, Storage

#: The Prometheus name of each gauge of ``RunReport.metrics`` (Kafka's JMX names, as a JMX exporter writes
#: them) and its help text; with LAST_SUCCESS, every metric the job exports.
GAUGES = {
    "max-compaction-delay-secs": "Largest delay past max.compaction.lag.ms among partitions (LogCleaner)",
    "max-dirty-percent": "Largest dirty ratio of a partition, in percent (LogCleanerManager)",
    "uncleanable-partitions-count": "Partitions that could not be cleaned (LogCleanerManager)",
    "uncleanable-bytes": "Cleanable bytes of the uncleanable partitions (LogCleanerManager)",
    "max-clean-time-secs": "Duration of the run (LogCleaner)",
    "cleaner-recopy-percent": "Bytes written as a percentage of bytes recopied (LogCleaner)",
}
LAST_SUCCESS = "kafka_log_cleaner_last_success_time_seconds"
#: Erasure requests past their deadline and not yet physically done, as the run ends (the store's, by label).
ERASURE_OVERDUE = "compaction_erasure_overdue_requests"
#: The label and Pushgateway grouping key that keep two stores' gauges apart.
STORE_LABEL = "store"
PUSHGATEWAY_JOB = "compaction"


def metric_name(gauge: str) -> str:
    return "kafka_log_cleaner_" + gauge.replace("-", "_")


EXPORTED_METRICS = frozenset([metric_name(g) for g in GAUGES] + [LAST_SUCCESS, ERASURE_OVERDUE])


def _protocol(url: str) -> str:
    protocol = fsspec.core.split_protocol(url)[0]
    return "file" if protocol in (None, "file", "local") else protocol


def output_location(url: str, store_url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Storage, str]:
    """The folder and object name of an output file (a report, a metrics file) given as a path or URL.

    It is reached as the store is: on the store's filesystem (``s3://`` beside an ``s3://`` store) with the
    store's storage options (endpoint, region, retry budget); elsewhere with that filesystem's defaults.
    """
    folder, _, name = url.rstrip("/").rpartition("/")
    if not name or folder.endswith((":", ":/", "://")):
        raise InvalidArgumentError(
            f"output path {url!r} must name a file in a folder or bucket (e.g. s3://bucket/reports/run.json)"
        )
    same = _protocol(url) == _protocol(store_url)
    options = (
        dict(storage_options or {})
        if same
        else {k: v for k, v in (storage_options or {}).items() if k == RETRY_BUDGET_OPTION}
    )
    return Storage.from_url(folder or ".", options), name


def write_report(report: RunReport, path: str | Path, storage_options: Mapping[str, Any] | None = None) -> None:
    """The run report as JSON (``--report``), at a path or any URL the store could have."""
    storage, name = output_location(str(path), report.run.store, storage_options)
    storage.write_bytes(name, json.dumps(report.to_dict(), indent=1).encode())


def _previous_samples(storage: Storage, name: str) -> dict[str, dict[str, float]]:
    """The samples of the job's metrics in an existing text file: metric -> store -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = storage.read_bytes(name).decode()
    except MissingObjectError:
        return {}
    samples: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in EXPORTED_METRICS and STORE_LABEL in sample.labels:
                samples.setdefault(sample.name, {})[sample.labels[STORE_LABEL]] = sample.value
    return samples


def write_metrics(
    report: RunReport,
    textfile: str | None = None,
    pushgateway: str | None = None,
    *,
    finished_ms: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Kafka's cleaner gauges in Prometheus form: a text file (node-exporter style) and/or a Pushgateway.

    Each store's gauges stay apart: labelled by store, grouped by job and store on the Pushgateway, and merged
    by store into an existing text file. ``kafka_log_cleaner_last_success_time_seconds`` is set only by a run in
    which every selected partition was cleaned (and, with --gc, collected), to ``finished_ms`` (the wall clock,
    never ``--now``: a backfill is not a recent success); a run with failures keeps the previous value, in the
    Pushgateway (``pushadd`` replaces only the metrics pushed) and in the text file.
    """
    from prometheus_client import CollectorRegistry, Gauge, generate_latest, pushadd_to_gateway, write_to_textfile

    store = report.run.store
    values: dict[str, float] = {metric_name(gauge): value for gauge, value in report.metrics.items()}
    if report.erasure_overdue_requests is not None:  # a run's count (a pass run alone counts none)
        values[ERASURE_OVERDUE] = report.erasure_overdue_requests
    if report.succeeded:
        if finished_ms is None:
            raise ValueError("a successful run's metrics need the wall-clock time it finished")
        values[LAST_SUCCESS] = finished_ms / 1000
    help_texts = {metric_name(g): text for g, text in GAUGES.items()}
    help_texts[LAST_SUCCESS] = (
        "Wall-clock time at which a run last cleaned every partition it selected (not the run's --now)"
    )
    help_texts[ERASURE_OVERDUE] = (
        "Erasure requests (compaction forget) past their deadline whose key is not yet "
        "physically gone from every object, at the run's end"
    )

    def gauges(samples: Mapping[str, Mapping[str, float]]) -> CollectorRegistry:
        target = CollectorRegistry()
        for name in sorted(samples):
            gauge = Gauge(name, help_texts[name], [STORE_LABEL], registry=target)
            for label, value in sorted(samples[name].items()):
                gauge.labels(**{STORE_LABEL: label}).set(value)
        return target

    registry = gauges({name: {store: value} for name, value in values.items()})
    if textfile:
        storage, name = output_location(textfile, store, storage_options)
        merged = _previous_samples(storage, name)
        for metric in list(merged):
            if metric != LAST_SUCCESS:
                merged[metric].pop(store, None)  # this run's figures replace its store's, never another's
        for metric, value in values.items():
            merged.setdefault(metric, {})[store] = value
        text_registry = gauges(merged)
        if storage.is_local:
            os.makedirs(storage.root, exist_ok=True)
            write_to_textfile(storage.path(name), text_registry)  # a temporary file renamed: node-exporter reads
        else:
            storage.write_bytes(name, generate_latest(text_registry))  # an object store's PUT is atomic
    if pushgateway:
        # pushadd keeps the previous last-success gauge when this run had failures and did not set it
        pushadd_to_gateway(pushgateway, job=PUSHGATEWAY_JOB, registry=registry, grouping_key={STORE_LABEL: store})
