"""One run of the job, shared by ``compaction run`` and the spark-submit entry ``jobs/compact.py``."""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from compaction import logs
from compaction.clean.cleaner import Cleaner, plan_store
from compaction.clean.outcome import GcOutcome, RunReport
from compaction.clean.planner import CompactionPlan
from compaction.clean.session import warm_workers
from compaction.config import Settings, did_you_mean
from compaction.erasure import overdue_requests
from compaction.errors import CompactionError, ConfigError, InvalidArgumentError, StoreError
from compaction.read.files import Versions
from compaction.report import output_location, write_metrics, write_report
from compaction.store import Store, Writer
from compaction.store.gc import collect_store

log = logging.getLogger("compaction.job")

EXIT_OK = 0
EXIT_FAILED = 1  # an internal error (a bug) stopped some partition: retrying will not help
EXIT_PARTIAL = 3  # some partitions failed on their data or the store (the others were committed)


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


def run_job(store: Store, options: JobOptions, settings: Settings, spark_factory: Callable[[], SparkSession],
            out: Callable[[str], None] = print) -> tuple[int, RunReport | CompactionPlan]:
    """Plan and (unless a dry run) clean ``store`` (opened by the caller, with the storage options it needs:
    reports and metrics go beside it with the same options); returns the exit code and the report (or the plan
    of a dry run).

    The store is planned before Spark starts, so a bad configuration or an unreachable store fails fast.
    """
    storage_options = store.storage.storage_options
    secrets = logs.secrets_in(os.environ, storage_options)

    def say(line: str) -> None:  # an error's text may carry what a library put in it: credentials are masked
        out(logs.redact(line, secrets))

    for output in (options.report_path, settings.cleaner.metrics_textfile):
        if output:
            output_location(output, store.url, storage_options)  # a path that cannot be written fails before any work
    if settings.publish.after_run and not options.dry_run:
        with redacted(settings):  # a bad catalog fails now, before any work
            publishing().open_catalog(settings.publish.catalog, settings.publish.properties)
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
    warming = warm_workers(spark) if spark is not None else None
    cleaner = Cleaner(spark, store, settings, dedupe_plan=plan_name, writer=writer, progress=say,
                      wall_ms=options.wall_ms)
    try:
        report = cleaner.run(options.now_ms, compaction_plan=the_plan)
    finally:
        if warming is not None:  # no Spark job may outlive the run (see WarmWorkers)
            warming.finish()
    for failed in report.failed:
        failed.error = logs.redact(failed.error or "", secrets)
        if failed.trace is not None:  # an internal error: its traceback, masked, in the report and with -v
            failed.trace = logs.redact(failed.trace, secrets)
            log.debug("internal error in %s:\n%s", failed.partition, failed.trace)
    report.phases_ms = {"plan": round((planned - started) * 1000), "startup": round((started_spark - planned) * 1000),
                        **report.phases_ms}
    if settings.publish.after_run:  # every partition has committed (or failed) by now; before gc, which keeps pins
        # The snapshots' time is when they are committed, at the end of the run, not when it started.
        report.published = publish_topics(store, options.topics, settings, options.wall_ms + report.elapsed_ms, say)
    if options.gc:  # before the report is written, so that it names the partitions gc skipped
        report.gc = collect(store, options, settings, say)
    # After gc, which completes requests: the gauge counts what is still overdue as the run ends, in the partitions
    # the plan found requests in (the plan read every manifest; a request made during the run counts next run).
    requested = [p.partition for p in the_plan.partitions if p.manifest is not None and p.manifest.erasures]
    try:
        report.erasure_overdue_requests = overdue_requests(store, requested, options.now_ms,
                                                           settings.cleaner.erasure_grace)
    except StoreError as err:  # the commits are done: the gauge keeps the planned count, the run does not fail
        say(f"could not count the overdue erasure requests after the run: {err}")
    if report.erasure_overdue_requests:
        say(f"{report.erasure_overdue_requests} erasure request(s) late: 'compaction erasure' says what each waits for")
    if options.report_path:
        write_report(report, options.report_path, storage_options)
        say(f"report written to {options.report_path}")
    write_metrics(report, settings.cleaner.metrics_textfile, settings.cleaner.metrics_pushgateway,
                  finished_ms=options.wall_ms + report.elapsed_ms, storage_options=storage_options)
    if any(r.internal for r in report.failed):
        return EXIT_FAILED, report
    return (EXIT_OK if report.succeeded else EXIT_PARTIAL), report


def check_selection(store: Store, settings: Settings, topics: Sequence[str] | None, *, strict: bool,
                    configured: bool = True, asked: str | None = None) -> None:
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
            log.warning("configuration [topics.%r] names no topic of %s%s", pattern, store.url,
                        did_you_mean(pattern, names))
    chosen = [t for t in names if topics is None or any(fnmatch.fnmatchcase(t, p) for p in topics)]
    if topics and not chosen:
        problem = (f"--topics {asked or ','.join(topics)!r} matches no topic of {store.url}"
                   f"{did_you_mean(unmatched[0], names) if len(unmatched) == 1 else ''}")
        if strict:
            raise InvalidArgumentError(problem)
        return
    if chosen and not any(settings.topic_config(t).compact for t in chosen):
        problem = (f"none of the {len(chosen)} topic(s) selected has cleanup.policy=compact, so nothing can be "
                   "cleaned" + ("" if configured else "; no --conf was given and Kafka's default policy is delete: "
                                "pass --conf FILE (e.g. conf/production.toml) or --set log.cleanup.policy=compact"))
        if strict:
            raise InvalidArgumentError(problem)
        log.warning(problem)


def collect(store: Store, options: JobOptions, settings: Settings, out: Callable[[str], None]) -> GcOutcome:
    """gc after the commits; a partition it skips is named with the reason (and fails the run, exit code 3)."""
    results, failures = collect_store(store, store.topic_partitions(options.topics), wall_ms=options.wall_ms,
                                      grace_ms=settings.cleaner.gc_grace_ms,
                                      keep_versions=settings.cleaner.gc_keep_versions,
                                      erasure_grace_ms=settings.cleaner.erasure_grace)
    outcome = GcOutcome(sum(len(r.deleted_objects) for r in results), sum(r.deleted_bytes for r in results),
                        {name: str(err) for name, err in failures.items()})
    for name, reason in outcome.skipped.items():
        out(f"gc skipped {name}, nothing deleted: {reason}")
    out(f"gc deleted {outcome.deleted_objects} object(s); {len(outcome.skipped)} partition(s) skipped")
    return outcome


def publishing() -> Any:
    """The publish package, whose pyiceberg is an optional dependency; ConfigError when it is not installed."""
    try:
        import compaction.publish
    except ImportError as err:
        raise ConfigError(f"publishing to Iceberg needs pyiceberg ({err}): pip install 'compaction[iceberg]'") from err
    return compaction.publish


def publish_topic(store: Store, topic: str, settings: Settings, *, wall_ms: int, catalog: str | None = None,
                  table: str | None = None, version: Versions = None) -> Any:
    """Publish ``topic`` as configured in ``[publish]`` (the catalog and table may be given instead); snapshots
    replaced more than gc's grace period ago are expired (those holding an erased key, more than the erasure grace
    period ago). Returns the :class:`compaction.publish.PublishResult`."""
    with redacted(settings):
        return publishing().publish(store, topic, catalog or settings.publish.catalog, settings.publish.properties,
                                    table=table, namespace=settings.publish.namespace, version=version,
                                    wall_ms=wall_ms, grace_ms=settings.cleaner.gc_grace_ms,
                                    erasure_grace_ms=settings.cleaner.erasure_grace)


@contextlib.contextmanager
def redacted(settings: Settings) -> Iterator[None]:
    """Errors without the catalog's secret-looking properties (``s3.secret-access-key``, ``token``...), which the
    command line's own masking, set up before the configuration is read, does not know."""
    try:
        yield
    except CompactionError as err:
        text = logs.redact(str(err), logs.secrets_in({}, settings.publish.properties))
        if text != str(err):
            raise type(err)(text) from None
        raise


def publish_topics(store: Store, patterns: str | Sequence[str] | None, settings: Settings, wall_ms: int,
                   out: Callable[[str], None]) -> list[dict[str, Any]]:
    """Publish each topic of the run (``after.run``); a topic that fails is reported and the others go on."""
    chosen = [patterns] if isinstance(patterns, str) else list(patterns or ["*"])
    outcomes = []
    for topic in store.topics():
        if not any(fnmatch.fnmatchcase(topic, p) for p in chosen):
            continue
        try:
            result = publish_topic(store, topic, settings, wall_ms=wall_ms)
        except CompactionError as err:
            out(f"failed to publish {topic}: {err}")
            outcomes.append({"topic": topic, "error": str(err)})
            continue
        out(describe_publish(topic, result))
        outcomes.append({"topic": topic, **result.to_dict()})
    return outcomes


def describe_publish(topic: str, result: Any) -> str:
    """One line saying what a publish did."""
    versions = " ".join(f"{p}={v}" for p, v in result.versions.items())
    expired = f"; expired {len(result.expired)} snapshot(s)" if result.expired else ""
    if not result.committed:
        return f"{result.table} already holds {topic} at versions {versions}: no new snapshot{expired}"
    return (f"published {topic} at versions {versions} as {result.table} snapshot {result.snapshot_id} "
            f"({result.data_files} data file(s), {result.delete_files} position delete file(s)){expired}")
