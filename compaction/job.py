"""One run of the job, shared by ``compaction run`` and the spark-submit entry ``jobs/compact.py``."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from compaction import logs
from compaction.clean.cleaner import Cleaner, plan_store
from compaction.clean.outcome import GcOutcome, RunReport
from compaction.clean.planner import CompactionPlan
from compaction.clean.session import warm_workers
from compaction.config import Settings
from compaction.report import output_location, write_metrics, write_report
from compaction.store import Store, Writer
from compaction.store.gc import collect_store

log = logging.getLogger("compaction.job")

EXIT_OK = 0
EXIT_FAILED = 1  # an internal error (a bug) stopped some partition: retrying will not help
EXIT_PARTIAL = 3  # some partitions failed on their data or the store (the others were committed)


@dataclass(frozen=True)
class JobOptions:
    """A run's inputs besides the configuration; ``now_ms`` is explicit (backfills and retries repeat exactly)."""

    store: str
    now_ms: int
    wall_ms: int  # the wall clock at the start, read once: safety bounds (gc's grace, tombstones' minimum life)
    topics: str | Sequence[str] | None = None  # glob patterns
    dry_run: bool = False
    report_path: str | None = None
    gc: bool = False
    dedupe_plan: str | None = None
    run_id: str | None = None


def run_job(options: JobOptions, settings: Settings, spark_factory: Callable[[], SparkSession],
            storage_options: Mapping[str, Any] | None = None, out: Callable[[str], None] = print
            ) -> tuple[int, RunReport | CompactionPlan]:
    """Plan and (unless a dry run) clean; returns the exit code and the report (or the plan of a dry run).

    The store is planned before Spark starts, so a bad configuration or an unreachable store fails fast.
    """
    options_ = settings.store.storage_options()
    options_.update(storage_options or {})
    secrets = logs.secrets_in(os.environ, options_)

    def say(line: str) -> None:  # an error's text may carry what a library put in it: credentials are masked
        out(logs.redact(line, secrets))
    for output in (options.report_path, settings.cleaner.metrics_textfile):
        if output:
            output_location(output, options.store, options_)  # a path that cannot be written fails before any work
    store = Store.open(options.store, options_)
    store.require_exists()  # an unreachable endpoint, missing credentials or a typo fail here, before Spark
    writer = Writer(id="compaction-run", run_id=options.run_id) if options.run_id else Writer(id="compaction-run")
    plan_name = options.dedupe_plan
    started = time.perf_counter()
    the_plan = plan_store(store, settings, options.now_ms, options.topics)
    planned = time.perf_counter()
    if options.dry_run:
        return EXIT_OK, the_plan
    # Spark starts only when some partition needs its records read (retention alone is metadata).
    spark = spark_factory() if any(p.needs_dedupe for p in the_plan.selected) else None
    started_spark = time.perf_counter()
    if spark is not None:
        warm_workers(spark)
    cleaner = Cleaner(spark, store, settings, dedupe_plan=plan_name, writer=writer, progress=say,
                      wall_ms=options.wall_ms)
    report = cleaner.run(options.now_ms, compaction_plan=the_plan)
    for failed in report.failed:
        failed.error = logs.redact(failed.error or "", secrets)
        if failed.trace is not None:  # an internal error: its traceback, masked, in the report and with -v
            failed.trace = logs.redact(failed.trace, secrets)
            log.debug("internal error in %s:\n%s", failed.partition, failed.trace)
    report.phases_ms = {"plan": round((planned - started) * 1000), "startup": round((started_spark - planned) * 1000),
                        **report.phases_ms}
    if options.gc:  # before the report is written, so that it names the partitions gc skipped
        report.gc = collect(store, options, settings, say)
    if options.report_path:
        write_report(report, options.report_path, options_)
        say(f"report written to {options.report_path}")
    write_metrics(report, settings.cleaner.metrics_textfile, settings.cleaner.metrics_pushgateway,
                  finished_ms=options.wall_ms + report.elapsed_ms, storage_options=options_)
    if any(r.internal for r in report.failed):
        return EXIT_FAILED, report
    return (EXIT_OK if report.succeeded else EXIT_PARTIAL), report


def collect(store: Store, options: JobOptions, settings: Settings, out: Callable[[str], None]) -> GcOutcome:
    """gc after the commits; a partition it skips is named with the reason (and fails the run, exit code 3)."""
    results, failures = collect_store(store, store.topic_partitions(options.topics), wall_ms=options.wall_ms,
                                      grace_ms=settings.cleaner.gc_grace_ms,
                                      keep_versions=settings.cleaner.gc_keep_versions)
    outcome = GcOutcome(sum(len(r.deleted_objects) for r in results), sum(r.deleted_bytes for r in results),
                        {name: str(err) for name, err in failures.items()})
    for name, reason in outcome.skipped.items():
        out(f"gc skipped {name}, nothing deleted: {reason}")
    out(f"gc deleted {outcome.deleted_objects} object(s); {len(outcome.skipped)} partition(s) skipped")
    return outcome
