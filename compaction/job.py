"""One run of the job, shared by ``compaction run`` and the spark-submit entry ``jobs/compact.py``."""

from __future__ import annotations

import fnmatch
import logging
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import SparkSession

from compaction import logs
from compaction.clean.cleaner import TASK_MODULES, Cleaner, plan_store
from compaction.clean.planner import CompactionPlan, Uncleanable
from compaction.clean.results import FAILURES, PartitionResult, RunGc, RunReport
from compaction.config import Settings, did_you_mean
from compaction.display import Progress, quiet
from compaction.engine.stages import SparkStages
from compaction.erasure import overdue_requests
from compaction.errors import EXIT_FAILED, EXIT_OK, EXIT_PARTIAL, InvalidArgumentError
from compaction.publish import Target, check_catalog, publish_topics
from compaction.report import output_location, write_metrics, write_report
from compaction.store import Store, Writer
from compaction.store.gc import collect_store

log = logging.getLogger("compaction.job")


@dataclass(frozen=True)
class JobOptions:
    """A run's inputs besides the store and the configuration; ``now_ms`` is explicit (backfills and retries
    repeat exactly)."""

    now_ms: int
    wall_ms: int  # the wall clock at the start, read once: safety bounds (gc's grace, tombstones' minimum life)
    topics: str | Sequence[str] | None = None  # glob patterns
    dry_run: bool = False
    report_path: str | None = None
    gc: bool = False
    dedupe_plan: str | None = None
    run_id: str | None = None


def run_job(
    store: Store,
    options: JobOptions,
    settings: Settings,
    spark_factory: Callable[[], SparkSession],
    out: Progress = quiet,
) -> tuple[int, RunReport | CompactionPlan]:
    """Plan and (unless a dry run) clean ``store`` (opened by the caller, with the storage options it needs:
    reports and metrics go beside it with the same options); returns the exit code and the report (or the plan
    of a dry run). ``out`` hears the run's lines for people (none by default), credentials masked.

    The store is planned before Spark starts, so a bad configuration or an unreachable store fails fast.
    """
    storage_options = store.storage.storage_options
    secrets = logs.secrets_in(os.environ, storage_options)

    def say(line: str, /, *, of: int | None = None) -> None:  # an error's text may carry what a library put in it
        out(logs.redact(line, secrets), of=of)

    for output in (options.report_path, settings.cleaner.metrics_textfile):
        if output:
            output_location(output, store.url, storage_options)  # a path that cannot be written fails before any work
    if settings.publish.after_run and not options.dry_run:
        check_catalog(publish_target(settings))  # a bad catalog fails now, before any work
    writer = Writer(id="compaction-run", run_id=options.run_id) if options.run_id else Writer(id="compaction-run")
    started = time.perf_counter()
    the_plan = plan_store(store, settings, options.now_ms, options.topics)
    planned = time.perf_counter()
    if options.dry_run:
        return EXIT_OK, the_plan
    # Spark starts only when some partition needs its records read (retention alone is metadata).
    spark = spark_factory() if any(p.needs_dedupe for p in the_plan.selected) else None
    started_spark = time.perf_counter()
    stages = SparkStages(spark, warm=TASK_MODULES) if spark is not None else None
    cleaner = Cleaner(
        stages, store, settings, dedupe_plan=options.dedupe_plan, writer=writer, progress=say, wall_ms=options.wall_ms
    )
    try:
        the_pass = masked(cleaner.run(options.now_ms, compaction_plan=the_plan), secrets)
    finally:
        if stages is not None:
            stages.finish()
    for failed in the_pass.failed:
        if failed.trace is not None:  # an internal error: its traceback, masked, in the report and with -v
            log.debug("internal error in %s:\n%s", failed.partition, failed.trace)
    published: list[dict[str, Any]] = []
    if settings.publish.after_run:  # every partition has committed (or failed) by now; before gc, which keeps pins
        # The snapshots' time is when they are committed, at the end of the run, not when it started.
        published = publish_topics(
            store, options.topics, publish_target(settings), options.wall_ms + the_pass.elapsed_ms, say
        )
    gc = collect(store, options, settings, say) if options.gc else None  # before the report, which names its skips
    # After gc, which completes requests: what is still late as the run ends, in the partitions the plan found
    # requests in (the plan read every manifest; a request made during the run counts next run).
    requested = {
        p.partition: p.manifest for p in the_plan.partitions if not isinstance(p, Uncleanable) and p.manifest.erasures
    }
    overdue = overdue_requests(store, requested, options.now_ms, settings.cleaner.erasure_grace)
    if overdue:
        say(f"{overdue} erasure request(s) late: 'compaction erasure' says what each waits for")
    # The run's report, assembled once: the pass's, with what the run did around it.
    report = replace(
        the_pass,
        phases_ms={
            "plan": round((planned - started) * 1000),
            "startup": round((started_spark - planned) * 1000),
            **the_pass.phases_ms,
        },
        published=published,
        gc=gc,
        erasure_overdue_requests=overdue,
    )
    if options.report_path:
        write_report(report, options.report_path, storage_options)
        say(f"report written to {options.report_path}")
    write_metrics(
        report,
        settings.cleaner.metrics_textfile,
        settings.cleaner.metrics_pushgateway,
        finished_ms=options.wall_ms + report.elapsed_ms,
        storage_options=storage_options,
    )
    if any(r.internal for r in report.failed):
        return EXIT_FAILED, report
    return (EXIT_OK if report.succeeded else EXIT_PARTIAL), report


def masked(report: RunReport, secrets: Collection[str]) -> RunReport:
    """``report`` with credentials masked in its failures' errors and tracebacks (what a library put in them), as a
    copy: the pass's own report is left as it is."""

    def mask(r: PartitionResult) -> PartitionResult:
        trace = logs.redact(r.trace, secrets) if r.trace is not None else None
        return replace(r, error=logs.redact(r.error or "", secrets), trace=trace)

    return replace(report, partitions=[mask(r) if r.status in FAILURES else r for r in report.partitions])


def check_selection(
    store: Store,
    settings: Settings,
    topics: Sequence[str] | None,
    *,
    strict: bool,
    configured: bool = True,
    asked: str | None = None,
) -> None:
    """Name the likely mistakes that would make a run select nothing: ``topics`` (glob patterns; ``asked``, the
    --topics text they came from) matching no topic, a ``[topics."x"]`` table naming no topic, no topic compacted
    (without a configuration file, Kafka's default policy is delete: ``configured`` false says none was given).

    Each is a warning; with ``strict`` (a run), one that leaves nothing of what was asked for is an error.
    """
    names = store.topics()
    unmatched = [p for p in topics or [] if not any(fnmatch.fnmatchcase(t, p) for t in names)]
    for pattern in unmatched:
        log.warning("--topics %r matches no topic of %s%s", pattern, store.url, did_you_mean(pattern, names))
    for pattern in settings.topics:
        if not any(fnmatch.fnmatchcase(t, pattern) for t in names):
            log.warning(
                "configuration [topics.%r] names no topic of %s%s", pattern, store.url, did_you_mean(pattern, names)
            )
    chosen = [t for t in names if topics is None or any(fnmatch.fnmatchcase(t, p) for p in topics)]
    if topics and not chosen:
        problem = (
            f"--topics {asked or ','.join(topics)!r} matches no topic of {store.url}"
            f"{did_you_mean(unmatched[0], names) if len(unmatched) == 1 else ''}"
        )
        if strict:
            raise InvalidArgumentError(problem)
        return
    if chosen and not any(settings.topic_config(t).compact for t in chosen):
        problem = (
            f"none of the {len(chosen)} topic(s) selected has cleanup.policy=compact, so nothing can be "
            "cleaned"
            + (
                ""
                if configured
                else "; no --conf was given and Kafka's default policy is delete: "
                "pass --conf FILE (e.g. conf/production.toml) or --set log.cleanup.policy=compact"
            )
        )
        if strict:
            raise InvalidArgumentError(problem)
        log.warning(problem)


def collect(store: Store, options: JobOptions, settings: Settings, out: Callable[[str], None]) -> RunGc:
    """gc after the commits; a partition it skips is named with the reason (and fails the run, exit code 3)."""
    results, failures = collect_store(
        store,
        store.topic_partitions(options.topics),
        wall_ms=options.wall_ms,
        grace_ms=settings.cleaner.gc_grace_ms,
        keep_versions=settings.cleaner.gc_keep_versions,
        erasure_grace_ms=settings.cleaner.erasure_grace,
    )
    gc = RunGc(
        sum(len(r.deleted_objects) for r in results),
        sum(r.deleted_bytes for r in results),
        {name: str(err) for name, err in failures.items()},
    )
    for name, reason in gc.skipped.items():
        out(f"gc skipped {name}, nothing deleted: {reason}")
    out(f"gc deleted {gc.deleted_objects} object(s); {len(gc.skipped)} partition(s) skipped")
    return gc


def publish_target(settings: Settings, catalog: str | None = None) -> Target:
    """Where ``[publish]`` says topics go (in ``catalog``, when given), and how long the snapshots a publish replaces
    stay (gc's grace periods)."""
    return Target(
        catalog or settings.publish.catalog,
        settings.publish.properties,
        settings.publish.namespace,
        settings.cleaner.gc_grace_ms,
        settings.cleaner.erasure_grace,
    )
