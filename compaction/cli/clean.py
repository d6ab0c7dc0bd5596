"""The cleaner's commands: ``plan`` (a dry run) and ``run`` (the job: plan, clean on Spark, commit, report)."""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from compaction import lineage
from compaction.clean.cleaner import plan_store, winner_search
from compaction.clean.figures import Figures
from compaction.clean.plan_json import plan_json
from compaction.clean.planner import CompactionPlan, PartitionPlan, Selected, Skipped, Uncleanable
from compaction.cli import common
from compaction.cli.common import Command, Parser
from compaction.cli.output import Output
from compaction.cli.types import parse_spark_conf
from compaction.config import Settings
from compaction.display import format_duration, human_bytes
from compaction.engine.session import remote_url, running_sessions, spark_session, started_anew, stop_session
from compaction.errors import EXIT_OK
from compaction.job import JobOptions, check_selection, run_job
from compaction.rules import WinnerSearch
from compaction.store import Store

log = logging.getLogger(__name__)


def selected_store(args: argparse.Namespace, settings: Settings, *, strict: bool) -> Store:
    """The store, opened once and checked, with the likely mistakes of the topic selection named (refused when
    ``strict``: a run)."""
    store = common.open_store(args, settings)
    store.require_exists()
    check_selection(
        store,
        settings,
        common.topic_patterns(args),
        strict=strict,
        configured=common.conf_file(args) is not None,
        asked=args.topics,
    )
    return store


def cmd_plan(args: argparse.Namespace) -> int:
    """Plan a run without changing anything: for every partition, whether it would be cleaned and why (dirty ratio,
    max.compaction.lag.ms, expired tombstones, retention), clean and cleanable bytes, the dirty ratio, the compaction
    delay, the offset range to clean and the segments involved.
    """
    settings = common.load_settings(args)
    now = common.command_now(args)
    store = selected_store(args, settings, strict=False)
    result = plan_store(store, settings, now, common.topic_patterns(args))
    print_plan(result, Output.of(args))
    return EXIT_OK


def plan_row(p: PartitionPlan) -> list[Any]:
    """One partition's line of ``plan``: its figures where the planner measured the log, zeros where it did not."""
    match p:
        case Selected(figures=figures) | Skipped(figures=Figures() as figures):
            clean_range = (
                f"[{p.retention.log_start_offset}, {figures.offsets.first_uncleanable_offset})"
                if isinstance(p, Selected)
                else "-"
            )
            reset = figures.offsets.checkpoint_reset
            return [
                str(p.partition),
                p.decision.value,
                human_bytes(figures.clean_bytes),
                human_bytes(figures.cleanable_bytes),
                f"{figures.cleanable_ratio:.2f}",
                format_duration(figures.compaction_delay_ms) if figures.compaction_delay_ms else "-",
                clean_range,
                len(figures.segments),
                str(p.reason) + (f" ({reset}: reset)" if reset else ""),
            ]
        case Skipped() | Uncleanable():  # a topic not compacted, a log without segments, a manifest not read
            return [
                str(p.partition),
                p.decision.value,
                human_bytes(0),
                human_bytes(0),
                f"{0.0:.2f}",
                "-",
                "-",
                0,
                str(p.reason),
            ]


def print_plan(result: CompactionPlan, out: Output) -> None:
    rows = [plan_row(p) for p in result.partitions]
    skipped = len(result.partitions) - len(result.selected) - len(result.uncleanable)
    out.result(
        plan_json(result),
        ["partition", "decision", "clean", "cleanable", "ratio", "delay", "clean range", "segments", "reason"],
        rows,
        [
            f"\n{len(result.selected)} to clean, {len(result.uncleanable)} uncleanable, {skipped} skipped; "
            f"max-dirty-percent {result.max_dirty_percent}, max-compaction-delay-secs "
            f"{result.max_compaction_delay_ms // 1000}"
        ],
    )


@contextlib.contextmanager
def spark_on_demand(args: argparse.Namespace, search: WinnerSearch) -> Iterator[Callable[[], SparkSession]]:
    """The run's session, started when the pass first needs Spark, and stopped when the run is over if the run
    started it (not one this process ran already): a driver that exits with its session running leaves the JVM
    to stop Spark as the Python side goes, finishing tasks (a losing speculative attempt's) whose accumulators it
    can no longer report."""
    conf = common.spark_properties(args)
    remote_url(args.remote, args.master or conf.get("spark.master"))  # a conflict fails before any work
    arrow = search is WinnerSearch.ARROW
    started: list[SparkSession] = []

    def start() -> SparkSession:
        before = running_sessions()
        session = spark_session(args.master, conf=conf, light_driver=arrow, remote=args.remote, ship=args.ship_package)
        if started_anew(session, before):
            started.append(session)
        return session

    try:
        yield start
    finally:
        for session in started:
            try:
                stop_session(session)
            except (PySparkException, Py4JError, OSError) as err:  # the run's result is already decided
                log.debug("stopping the Spark session failed: %s", err)


def cmd_run(args: argparse.Namespace) -> int:
    """Plan, then clean every selected partition with Spark and commit each one's new manifest and checkpoint. Prints a
    Kafka-style summary per partition; writes a JSON report (--report) and Prometheus metrics (configured in
    [cleaner]). A partition that fails is reported uncleanable and the others still commit (exit code 3).
    """
    settings = common.load_settings(args)
    clock = common.wall_clock_ms()
    now = common.command_now(args, clock)
    store = selected_store(args, settings, strict=True)
    search = winner_search(settings, args.plan)
    options = JobOptions(
        now_ms=now,
        wall_ms=clock,
        topics=common.topic_patterns(args),
        dry_run=args.dry_run,
        report_path=args.report,
        gc=args.gc,
        dedupe_plan=search,
        run_id=args.run_id,
    )
    out = Output()  # every line the run prints, its progress included, goes through it
    with spark_on_demand(args, search) as spark:
        code, result = run_job(store, options, settings, spark, out=out.line)
    if isinstance(result, CompactionPlan):
        print_plan(result, out)
        return code
    lineage.ran(args, store, result)
    totals = result.totals
    out.line(
        f"{totals['cleaned']} partition(s) cleaned, {totals['failed']} failed, {totals['skipped']} skipped in "
        f"{result.elapsed_ms / 1000:.1f} s: {human_bytes(totals['size_before'])} -> "
        f"{human_bytes(totals['size_after'])}, {totals['records_before']:,} -> {totals['records_after']:,} "
        "records"
    )
    return code


def add_run_options(parser: Parser) -> None:
    """The flags of ``run`` beyond the common ones (``jobs/compact.py`` takes the same)."""
    parser.add_argument("--dry-run", action="store_true", help="print the plan and change nothing (no Spark)")
    parser.add_argument("--report", metavar="PATH", help="write the JSON run report here")
    parser.add_argument(
        "--gc",
        action="store_true",
        help="run gc after the commits (grace and kept versions from [cleaner] gc.grace.ms / gc.keep.versions)",
    )
    parser.add_argument(
        "--plan",
        choices=[plan.value for plan in WinnerSearch],
        default=None,
        help="how executors decide survivors: arrow (in each partition's task), window or aggregate "
        "(Spark SQL over a shuffle) (default: [cleaner] dedupe.plan, arrow)",
    )
    parser.add_argument("--master", default=None, help="classic Spark's master (default: local[*], or spark-submit's)")
    parser.add_argument(
        "--remote",
        metavar="URL",
        default=None,
        help="run on a Spark Connect server, sc://HOST:PORT (or local[N], a Spark server started "
        "in this process; or sail, a Sail server started in this process, which needs "
        "compaction[sail]); default: Spark's SPARK_REMOTE when set. Not with --master",
    )
    parser.add_argument(
        "--no-ship-package",
        dest="ship_package",
        action="store_false",
        help="with --remote: do not send this package to the server as an artifact (it is installed "
        "on the server's Python, which is checked before any work)",
    )
    parser.add_argument(
        "--spark-conf",
        metavar="KEY=VALUE",
        action="append",
        type=parse_spark_conf,
        help="extra Spark setting, repeatable (also accepted as --conf spark.KEY=VALUE)",
    )
    parser.add_argument("--run-id", default=None, help="recorded in manifests and the report (default: random)")


def add_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    p = _selection(
        sub, cmd_plan, "dry run: per partition the decision, reason, bytes, ratio and range", "plan as of this time"
    )
    common.add_json(p)

    p = _selection(
        sub,
        cmd_run,
        "clean the store: plan, deduplicate on Spark, commit each partition",
        "the run's time (pass the schedule's logical time so that retries and backfills decide exactly the same)",
    )
    add_run_options(p)


def _selection(sub: argparse._SubParsersAction[Parser], command: Command, help: str, now: str) -> Parser:
    """A command of the cleaner (plan, run): the store, --topics, the configuration and --now."""
    parser = common.add_command(sub, command, help)
    common.add_store(parser)
    common.add_selection(parser)
    common.add_config(parser)
    common.add_now(parser, now)
    return parser
