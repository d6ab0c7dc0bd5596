"""The ``compaction`` command line: a thin layer over the library; the only place that reads the clock."""

from __future__ import annotations

import argparse
import base64
import binascii
import errno
import fnmatch
import io
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from compaction import __version__, job, logs
from compaction.clean.cleaner import plan_store
from compaction.clean.planner import CompactionPlan, Decision, format_duration
from compaction.clean.rules import LONG_MAX, LONG_MIN, Plan
from compaction.clean.session import remote_url, spark_session
from compaction.config import Settings, did_you_mean
from compaction.erasure import attest, erasure_status, forget
from compaction.errors import (
    CompactionError,
    ConfigError,
    InvalidArgumentError,
    InvalidRecordsError,
    OffsetOverlapError,
    PublishError,
    StoreError,
    StoreNotFoundError,
)
from compaction.interop import export_partition, import_partition
from compaction.job import JobOptions, run_job
from compaction.read.export import FORMATS, snapshot, write_csv, write_jsonl, write_parquet
from compaction.read.history import history
from compaction.read.scan import Scan, scan
from compaction.report import output_location
from compaction.store import IllegalFolder, Store, TopicPartition, Writer, read_manifests
from compaction.store.gc import DEFAULT_GRACE_MS, DEFAULT_KEEP_VERSIONS, collect_store
from compaction.store.jsonl import decode_utf8, parse_lines
from compaction.store.names import partition_name_problem
from compaction.store.segment import conform
from compaction.store.status import format_table, human_bytes, partition_status
from compaction.store.storage import DEFAULT_RETRY_BUDGET_MS
from compaction.store.verify import verify
from compaction.synthetic import GenerateSpec, generate, topic_names

EXIT_OK = 0
EXIT_FAILED = 1  # verify found problems, or the command failed
EXIT_USAGE = 2  # argparse's own code for bad arguments
EXIT_PARTIAL = job.EXIT_PARTIAL  # some partitions failed, the others were committed
EXIT_INVALID = 4  # invalid configuration or input; nothing was changed

#: How far ahead of this machine's clock --now may be (the scheduler's clock can run a little ahead).
FUTURE_NOW_TOLERANCE_MS = 5 * 60_000

log = logging.getLogger("compaction")


def wall_clock_ms() -> int:
    return int(time.time() * 1000)  # clock-ok: the CLI is where `now` comes from


#: Integers --now and other times take as epoch milliseconds: below 10^8 (synthetic times early on 1 Jan
#: 1970, as tests and replays use) or from 10^11 (1973) up to 10^14 (year 5138). In between lie epoch seconds
#: (1973 to 5138 in seconds), above lie micro- and nanoseconds: refused with what was probably meant.
SECONDS_LIKE = (10**8, 10**11)
MICROS_LIKE = 10**14
#: The longest duration taken in a unit other than ms (a larger number was probably meant in milliseconds).
MAX_PLAUSIBLE_DURATION_MS = 100 * 365 * 86_400_000
DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000,
                  "w": 7 * 86_400_000}


def parse_time(text: str) -> int:
    """Epoch milliseconds (held to a plausible range), or an ISO-8601 instant (UTC when it has no offset)."""
    if re.fullmatch(r"-?[0-9]+", text, re.ASCII):  # not str.isdigit(), which takes "³" and other scripts' digits
        value = int(text)
        if LONG_MIN <= value <= LONG_MAX:  # outside, the command names Kafka's Long range
            if SECONDS_LIKE[0] <= abs(value) < SECONDS_LIKE[1]:
                raise argparse.ArgumentTypeError(
                    f"{text} looks like epoch seconds ({_show_ms(value * 1000)}); times are epoch milliseconds "
                    f"or ISO-8601: did you mean {value * 1000}?")
            if abs(value) >= MICROS_LIKE:
                raise argparse.ArgumentTypeError(
                    f"{text} looks like epoch microseconds or nanoseconds (as milliseconds it is after the year "
                    f"5000); times are epoch milliseconds or ISO-8601: did you mean {value // 1000}?")
        return value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r} is neither epoch milliseconds nor an ISO-8601 time") from err
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_duration(text: str) -> int:
    """Milliseconds from a number with a unit: ``900000ms``, ``90s``, ``15m``, ``36h``, ``7d``, ``2w`` (or ``0``)."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([a-z]+)?", text.strip(), re.ASCII)
    if match is None or (match.group(2) is not None and match.group(2) not in DURATION_UNITS):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 900000ms, 90s, 15m, 36h or 7d")
    number, unit = match.groups()
    if unit is None:
        if float(number) != 0:
            raise argparse.ArgumentTypeError(f"{text!r} has no unit: write {text}ms, {text}s, {text}h or {text}d")
        return 0
    ms = int(float(number) * DURATION_UNITS[unit])
    if unit != "ms" and ms > MAX_PLAUSIBLE_DURATION_MS:
        raise argparse.ArgumentTypeError(f"{text!r} is over 100 years; did you mean {number}ms?")
    if ms > LONG_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is beyond Kafka's Long range of milliseconds")
    return ms


def positive_int(text: str) -> int:
    """An integer of at least 1, for counts such as --keep-versions and --partitions."""
    if not re.fullmatch(r"[0-9]+", text.strip(), re.ASCII) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def parse_spark_conf(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of a Spark property."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"Spark setting {text!r} must look like KEY=VALUE (e.g. "
                                         "spark.executor.memory=4g)")
    return key.strip(), value


def parse_conf(text: str) -> str | tuple[str, str]:
    """``--conf``: a configuration file, or (spark-submit's habit) a Spark property ``spark.KEY=VALUE``."""
    if text.startswith("spark.") and "=" in text:
        return parse_spark_conf(text)
    return text


def parse_storage_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"storage option {text!r} must look like KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _show_ms(ms: int) -> str:
    try:
        return f"{ms} ({datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec='milliseconds')})"
    except (OverflowError, ValueError, OSError):
        return str(ms)


def check_long(flag: str, ms: int) -> int:
    """``ms`` if it is a Kafka Long (every time in the store is one), else InvalidArgumentError naming ``flag``."""
    if not LONG_MIN <= ms <= LONG_MAX:
        raise InvalidArgumentError(f"{flag} {ms} is outside Kafka's Long range [{LONG_MIN}, {LONG_MAX}]")
    return ms


def command_now(args: argparse.Namespace, clock: int) -> int:
    """The command's ``now``: --now, a Long not in the future (unless --allow-future-now), or the clock.

    A future ``now`` would stamp delete horizons, age segments out of retention and lift min.compaction.lag.ms
    as if that time had come; a past one (a backfill, a retry) is how runs are repeated exactly.
    """
    if args.now is None:
        return clock
    now = check_long("--now", args.now)
    if now > clock + FUTURE_NOW_TOLERANCE_MS and not args.allow_future_now:
        raise InvalidArgumentError(
            f"--now {_show_ms(now)} is in the future: this machine's clock says {_show_ms(clock)} (a "
            f"{FUTURE_NOW_TOLERANCE_MS // 60_000}-minute skew is tolerated); use --allow-future-now for tests and "
            "replays")
    return now


def topic_partition(args: argparse.Namespace) -> TopicPartition:
    """The TOPIC and PARTITION arguments, held to the names the store uses (``00``, ``+1``, ``³`` are refused)."""
    problem = partition_name_problem(args.partition)
    if problem:
        raise InvalidArgumentError(f"partition {args.partition!r} of topic {args.topic!r} {problem}")
    return TopicPartition(args.topic, int(args.partition))


def storage_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in getattr(args, "storage_option", None) or []:
        target = options
        *parents, leaf = key.split(".")
        for parent in parents:  # client_kwargs.endpoint_url=... nests
            target = target.setdefault(parent, {})
        target[leaf] = value
    return options


def open_store(args: argparse.Namespace, settings: Settings | None = None) -> Store:
    options = settings.store.storage_options() if settings else {}
    options.update(storage_options(args))
    return Store.open(args.store, options)


def conf_file(args: argparse.Namespace) -> str | None:
    """The configuration file among the --conf values (the others are Spark properties)."""
    files = [value for value in getattr(args, "conf", None) or [] if isinstance(value, str)]
    if len(files) > 1:
        raise InvalidArgumentError(f"--conf names {len(files)} configuration files ({', '.join(files)}); give one")
    return files[0] if files else None


def spark_properties(args: argparse.Namespace) -> dict[str, str]:
    """Spark properties from --spark-conf KEY=VALUE and --conf spark.KEY=VALUE, in the order given."""
    pairs = [value for value in getattr(args, "conf", None) or [] if isinstance(value, tuple)]
    return dict(pairs + list(getattr(args, "spark_conf", None) or []))


def load_settings(args: argparse.Namespace) -> Settings:
    """Configuration from --conf, the environment and --set flags; validated before any work."""
    return Settings.load(conf_file(args), flags=getattr(args, "set", None) or [])


def topic_patterns(args: argparse.Namespace) -> list[str] | None:
    """--topics as glob patterns: one glob (``orders*``) or a comma-separated list (``orders,payments``)."""
    text = getattr(args, "topics", None)
    if text is None:
        return None
    patterns = [p.strip() for p in text.split(",") if p.strip()]
    if not patterns:
        raise InvalidArgumentError(f"--topics {text!r} names no topic")
    return patterns


def selected_partitions(store: Store, args: argparse.Namespace) -> tuple[list[TopicPartition], list[IllegalFolder]]:
    """The partitions --topics selects, and the folders among them that cannot be a topic or a partition."""
    store.require_exists()
    return store.scan(topic_patterns(args))


def check_selection(store: Store, settings: Settings, args: argparse.Namespace, strict: bool) -> None:
    """Name the likely mistakes that would make a run select nothing: --topics matching no topic, a
    ``[topics."x"]`` table naming no topic, no topic compacted (no --conf: Kafka's default policy is delete).

    Each is a warning; with ``strict`` (a run), one that leaves nothing of what was asked for is an error.
    """
    topics = store.topics()
    patterns = topic_patterns(args)
    unmatched = [p for p in patterns or [] if not any(fnmatch.fnmatchcase(t, p) for t in topics)]
    for pattern in unmatched:
        log.warning("--topics %r matches no topic of %s%s", pattern, store.url, did_you_mean(pattern, topics))
    for pattern in settings.topics:
        if not any(fnmatch.fnmatchcase(t, pattern) for t in topics):
            log.warning("configuration [topics.%r] names no topic of %s%s", pattern, store.url,
                        did_you_mean(pattern, topics))
    chosen = [t for t in topics if patterns is None or any(fnmatch.fnmatchcase(t, p) for p in patterns)]
    if patterns and not chosen:
        problem = (f"--topics {args.topics!r} matches no topic of {store.url}"
                   f"{did_you_mean(unmatched[0], topics) if len(unmatched) == 1 else ''}")
        if strict:
            raise InvalidArgumentError(problem)
        return
    if chosen and not any(settings.topic_config(t).compact for t in chosen):
        problem = (f"none of the {len(chosen)} topic(s) selected has cleanup.policy=compact, so nothing can be "
                   "cleaned" + ("; no --conf was given and Kafka's default policy is delete: pass --conf FILE "
                                "(e.g. conf/production.toml) or --set log.cleanup.policy=compact"
                                if conf_file(args) is None else ""))
        if strict:
            raise InvalidArgumentError(problem)
        log.warning(problem)


# Commands ------------------------------------------------------------------------------------------------


def cmd_plan(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    now = command_now(args, wall_clock_ms())
    store = open_store(args, settings)
    store.require_exists()
    check_selection(store, settings, args, strict=False)
    result = plan_store(store, settings, now, topic_patterns(args))
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print_plan(result)
    return EXIT_OK


def print_plan(result: CompactionPlan) -> None:
    rows = []
    for p in result.partitions:
        clean_range = f"[{p.log_start_offset}, {p.first_uncleanable_offset})" if p.decision is Decision.CLEAN else "-"
        reason = p.reason + (f" ({p.checkpoint_reset}: reset)" if p.checkpoint_reset else "")
        rows.append([str(p.partition), p.decision.value, human_bytes(p.clean_bytes), human_bytes(p.cleanable_bytes),
                     f"{p.cleanable_ratio:.2f}", format_duration(p.compaction_delay_ms) if p.compaction_delay_ms
                     else "-", clean_range, len(p.segments), reason])
    print(format_table(["partition", "decision", "clean", "cleanable", "ratio", "delay", "clean range",
                        "segments", "reason"], rows))
    print(f"\n{len(result.selected)} to clean, {len(result.uncleanable)} uncleanable, "
          f"{len(result.partitions) - len(result.selected) - len(result.uncleanable)} skipped; "
          f"max-dirty-percent {result.max_dirty_percent}, max-compaction-delay-secs "
          f"{result.max_compaction_delay_ms // 1000}")


def spark_factory(args: argparse.Namespace, settings: Settings) -> Callable[[], SparkSession]:
    conf = spark_properties(args)
    remote_url(args.remote, args.master or conf.get("spark.master"))  # a conflict fails before any work
    arrow = (args.plan or settings.cleaner.dedupe_plan) == Plan.ARROW
    return lambda: spark_session(args.master, conf=conf, light_driver=arrow, remote=args.remote,
                                 ship=args.ship_package)


def cmd_run(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    clock = wall_clock_ms()
    now = command_now(args, clock)
    store = open_store(args, settings)
    store.require_exists()
    check_selection(store, settings, args, strict=True)
    options = JobOptions(store=args.store, now_ms=now, wall_ms=clock, topics=topic_patterns(args),
                         dry_run=args.dry_run,
                         report_path=args.report, gc=args.gc, dedupe_plan=args.plan, run_id=args.run_id)
    code, outcome = run_job(options, settings, spark_factory(args, settings), storage_options(args))
    if isinstance(outcome, CompactionPlan):
        print_plan(outcome)
        return code
    totals = outcome.totals
    print(f"{totals['cleaned']} partition(s) cleaned, {totals['failed']} failed, {totals['skipped']} skipped in "
          f"{outcome.elapsed_ms / 1000:.1f} s: {human_bytes(totals['size_before'])} -> "
          f"{human_bytes(totals['size_after'])}, {totals['records_before']:,} -> {totals['records_after']:,} records")
    return code


def cmd_generate(args: argparse.Namespace) -> int:
    now = command_now(args, wall_clock_ms())
    store = open_store(args)
    if args.end_time is not None:
        check_long("--end-time", args.end_time)
    spec = GenerateSpec(
        topics=topic_names(args.topics), partitions=args.partitions, records=args.records, keys=args.keys,
        update_ratio=args.update_ratio, tombstone_ratio=args.tombstone_ratio, keyless_ratio=args.keyless_ratio,
        value_bytes=args.value_bytes, end_time_ms=args.end_time if args.end_time is not None else now,
        time_span_ms=args.time_span, missing_timestamp_ratio=args.missing_timestamp_ratio,
        segment_records=args.segment_records, version_header=args.version_header, seed=args.seed,
        partition0_share=args.skew, hot_key_records=args.hot_key_records, segment_format=args.format,
        compression=args.compression, transactional_ratio=args.transactional_ratio, abort_ratio=args.abort_ratio,
        transaction_records=args.transaction_records,
    )
    manifests = generate(store, spec, now_ms=now)
    total = sum(m.size_bytes for m in manifests)
    print(f"generated {len(manifests)} partition(s), {spec.records * len(spec.topics):,} records, "
          f"{human_bytes(total)} in {store.url}")
    return EXIT_OK


def cmd_append(args: argparse.Namespace) -> int:
    tp = topic_partition(args)
    now = command_now(args, wall_clock_ms())
    store = open_store(args)
    path = Path(args.file)
    if not path.exists():
        raise InvalidRecordsError(f"input file {path} does not exist")
    if path.suffix == ".log":  # Kafka record batches: kept byte for byte, offsets and all
        manifest = store.append_log(tp, path.read_bytes(), now_ms=now, writer=Writer(id="compaction-append"),
                                    where=str(path))
        segment = manifest.segments[-1]
        print(f"appended {segment.record_count} record(s) in Kafka record batches to {tp} at "
              f"[{segment.base_offset}, {segment.next_offset}) as manifest version {manifest.version}")
        return EXIT_OK
    if path.suffix == ".parquet":
        try:
            table = pq.read_table(path)
        except Exception as err:  # pyarrow raises several types for a bad file
            raise InvalidRecordsError(f"input file {path} is not a readable Parquet file: {err}") from err
    else:
        # Universal newlines, as a text-mode file reads them; the bytes are decoded first so that a byte that is
        # not UTF-8 is reported with its line.
        table = parse_lines(io.StringIO(decode_utf8(path.read_bytes(), str(path)), newline=None), str(path))
    table = conform(table, str(path))  # every column in the segment's types, a value that does not fit named
    if not args.no_timestamp:
        filled = pc.fill_null(table.column("timestamp"), now)
        table = table.set_column(table.column_names.index("timestamp"), "timestamp", filled)
    manifest = store.append(tp, table, now_ms=now, writer=Writer(id="compaction-append"), where=str(path))
    segment = manifest.segments[-1]
    print(f"appended {segment.record_count} record(s) to {tp} at [{segment.base_offset}, {segment.next_offset}) "
          f"as manifest version {manifest.version}")
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    tp = topic_partition(args)
    now = command_now(args, wall_clock_ms())
    manifest = import_partition(open_store(args), tp, args.directory, now_ms=now)
    print(f"imported {len(manifest.segments)} segment(s), offsets [{manifest.log_start_offset}, "
          f"{manifest.log_end_offset}), into {tp} as manifest version {manifest.version}")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    tp = topic_partition(args)
    written = export_partition(open_store(args), tp, args.directory)
    logs_written = [p for p in written if p.suffix == ".log"]
    print(f"exported {tp} as {len(logs_written)} .log file(s) with their indexes into {args.directory}")
    return EXIT_OK


def parse_version(text: str) -> tuple[int | None, int]:
    """``V`` (every partition read) or ``P=V`` (partition P)."""
    partition, sep, version = text.rpartition("=")
    numbers = [version, partition] if sep else [version]
    if not all(re.fullmatch(r"[0-9]+", n, re.ASCII) for n in numbers):
        raise argparse.ArgumentTypeError(f"version {text!r} must be a version number V or PARTITION=V")
    return (int(partition) if sep else None), int(version)


def read_versions(args: argparse.Namespace) -> int | dict[int, int] | None:
    given = args.version or []
    plain = [v for p, v in given if p is None]
    if plain and (len(plain) > 1 or len(given) > 1):
        raise InvalidArgumentError("give one --version V for every partition, or --version PARTITION=V per partition")
    return plain[0] if plain else ({p: v for p, v in given if p is not None} or None)


def open_scan(args: argparse.Namespace, store: Store) -> Scan:
    """The scan the read, files and snapshot commands describe with their arguments."""
    partition = None
    if getattr(args, "partition", None) is not None:
        partition = topic_partition(args).partition
    strategy, header = "offset", ""
    if getattr(args, "latest", False):
        config = load_settings(args).topic_config(args.topic)  # the topic's compaction.strategy
        strategy, header = config.compaction_strategy, config.compaction_strategy_header
    columns = None
    if getattr(args, "columns", None):
        columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    timestamps = (getattr(args, "since", None), getattr(args, "until", None))
    for flag, value in (("--since", timestamps[0]), ("--until", timestamps[1])):
        if value is not None:
            check_long(flag, value)
    return scan(store, args.topic, partition, version=read_versions(args), columns=columns,
                keys=getattr(args, "key", None), offsets=(getattr(args, "start", None), getattr(args, "end", None)),
                timestamps=timestamps, latest=getattr(args, "latest", False), strategy=strategy,
                strategy_header=header)


def _output_format(args: argparse.Namespace) -> str:
    if args.format:
        return str(args.format)
    suffix = Path(args.output).suffix.lower() if args.output else ""
    return {".parquet": "parquet", ".csv": "csv"}.get(suffix, "jsonl")


def _quiet_stdout() -> None:
    """After the reader of our stdout went away (``read ... | head``): send what is left, including the
    interpreter's final flush, nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def cmd_read(args: argparse.Namespace) -> int:
    if args.partition is not None:
        topic_partition(args)  # a bad partition name is refused before the store is touched
    store = open_store(args)
    the_scan = open_scan(args, store)
    fmt = _output_format(args)
    batches = the_scan.batches()
    try:
        if args.output:
            stream: IO[Any] = open(args.output, "w", encoding="utf-8") if fmt == "jsonl" \
                else open(args.output, "wb")  # noqa: SIM115
            with stream:
                count = write_output(fmt, batches, the_scan, stream)
            print(f"wrote {count} record(s) to {args.output}", file=sys.stderr)
        else:
            write_output(fmt, batches, the_scan, sys.stdout if fmt == "jsonl" else sys.stdout.buffer)
            sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
    return EXIT_OK


def write_output(fmt: str, batches: Iterable[pa.RecordBatch], the_scan: Scan, stream: Any) -> int:
    if fmt == "jsonl":
        return write_jsonl(batches, stream)
    try:
        if fmt == "csv":
            return write_csv(batches, the_scan.schema, stream)
        return write_parquet(batches, the_scan.schema, stream)
    except OSError as err:
        if err.errno == errno.EPIPE or "broken pipe" in str(err).lower():
            raise BrokenPipeError(errno.EPIPE, str(err)) from err  # Arrow's writers report a closed pipe so
        raise


def cmd_files(args: argparse.Namespace) -> int:
    the_scan = open_scan(args, open_store(args))
    parts = the_scan.files()
    if args.json:
        print(json.dumps({"topic": args.topic, "store": the_scan.store.url,
                          "partitions": [p.to_dict() for p in parts]}, indent=1))
        return EXIT_OK
    rows = []
    for part in parts:
        for file in part.files:
            s = file.segment
            rows.append([str(part.tp), part.version, f"[{part.log_start_offset}, {part.log_end_offset})",
                         f"[{s.base_offset}, {s.next_offset})", s.live_records, human_bytes(s.size_bytes),
                         s.deletes.count if s.deletes else 0, file.url])
    print(format_table(["partition", "version", "log", "offsets", "live", "size", "deleted", "file"], rows))
    print("\nA reader reads each file's records with offsets inside the log range and skips those its deletion "
          "vector lists (--json names them): globbing the folders reads superseded segments and deleted records.")
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    partition = topic_partition(args).partition if args.partition is not None else None
    entries = history(open_store(args), args.topic, partition)
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=1))
        return EXIT_OK

    def maybe(value: int | None, show: Callable[[int], str] = str) -> str:
        return "-" if value is None else show(value)

    rows = [[e.partition, e.version, _iso(e.time_ms), e.operation, maybe(e.records_in), maybe(e.records_out),
             maybe(e.bytes_in, human_bytes), maybe(e.bytes_out, human_bytes), e.live_records,
             f"{e.writer} {e.run_id[:12]}"] for e in entries]
    print(format_table(["partition", "version", "time", "operation", "records in", "records out", "bytes in",
                        "bytes out", "live records", "writer (run)"], rows))
    return EXIT_OK


def _iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return str(ms)


def cmd_snapshot(args: argparse.Namespace) -> int:
    store = open_store(args)
    the_scan = open_scan(args, store)
    result = snapshot(the_scan, args.dest, storage_options(args), written_ms=wall_clock_ms())
    versions = ", ".join(f"{p}@{v['version']}" for p, v in result.partitions.items())
    print(f"wrote {result.records:,} record(s) of {args.topic} (partition@version: {versions}) to {result.dest}"
          f"{' (latest per key)' if result.latest else ''}")
    return EXIT_OK


def cmd_publish(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    store = open_store(args, settings)
    result = job.publish_topic(store, args.topic, settings, wall_ms=wall_clock_ms(), catalog=args.catalog,
                               table=args.table, version=read_versions(args))
    print(json.dumps(result.to_dict(), indent=1) if args.json else job.describe_publish(args.topic, result))
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    store = open_store(args, load_settings(args))
    partitions, illegal = selected_partitions(store, args)
    manifests = read_manifests(store, partitions)
    rows, failures, statuses = [], [f"{folder}; not read" for folder in illegal], []
    for tp, manifest in manifests.items():
        if isinstance(manifest, StoreError):
            failures.append(f"{tp}: {manifest}")
            continue
        s = partition_status(manifest)
        statuses.append(s)
        rows.append([s.partition, s.version, s.format, s.segments, human_bytes(s.size_bytes), s.records,
                     f"[{s.log_start_offset}, {s.log_end_offset})", s.first_dirty_offset,
                     human_bytes(s.dirty_bytes), s.last_operation])
    if args.json:
        print(json.dumps({"partitions": [s.to_dict() for s in statuses], "errors": failures}, indent=1))
    else:
        print(format_table(["partition", "version", "format", "segments", "size", "records", "log", "checkpoint",
                            "dirty", "last"], rows))
        total = sum(s.size_bytes for s in statuses)
        print(f"\n{len(statuses)} partition(s), {sum(s.records for s in statuses):,} records, {human_bytes(total)}")
        for failure in failures:
            print(f"unreadable: {failure}")
    return EXIT_FAILED if failures else EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    store = open_store(args, load_settings(args))
    partitions, illegal = selected_partitions(store, args)
    reports = verify(store, partitions, check_data=not args.metadata_only)
    problems = [f"{folder}; not checked" for folder in illegal] + [str(p) for r in reports for p in r.problems]
    for report in reports:
        state = "ok" if not report.problems else f"{len(report.problems)} problem(s)"
        print(f"{report.partition}: version {report.version}, {report.segments} segment(s), "
              f"{report.records} record(s), {report.orphans} unreferenced object(s): {state}")
    for problem in problems:
        print(f"PROBLEM {problem}")
    if not reports and not illegal:
        print(f"no partitions found in {store.url}")
    return EXIT_FAILED if problems else EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    store = open_store(args, settings)
    partitions, illegal = selected_partitions(store, args)
    grace = args.grace if args.grace is not None else settings.cleaner.gc_grace_ms
    keep = args.keep_versions if args.keep_versions is not None else settings.cleaner.gc_keep_versions
    erasure_grace = args.erasure_grace if args.erasure_grace is not None else \
        settings.cleaner.erasure_grace if args.grace is None else min(grace, settings.cleaner.erasure_grace)
    results, failures = collect_store(store, partitions, wall_ms=wall_clock_ms(), grace_ms=grace,
                                      keep_versions=keep, dry_run=args.dry_run, erasure_grace_ms=erasure_grace)
    verb = "would delete" if args.dry_run else "deleted"
    for result in results:
        if result.deleted_objects or result.pruned_versions or result.unknown_objects or result.pinned_versions:
            pinned = f", kept pinned versions {result.pinned_versions}" if result.pinned_versions else ""
            erased = f", {len(result.erased_objects)} of them holding erased keys" if result.erased_objects else ""
            print(f"{result.partition}: {verb} {len(result.deleted_objects)} object(s){erased} "
                  f"({human_bytes(result.deleted_bytes)}), pruned manifest versions {result.pruned_versions or '-'}, "
                  f"{result.waiting_objects} within the grace period{pinned}")
        for unknown in result.unknown_objects:
            print(f"{result.partition}: left alone unknown object {unknown}")
        for digest in result.erasures_completed:
            print(f"{result.partition}: erasure of key sha256:{digest[:16]} {'would be' if args.dry_run else 'is'} "
                  "complete: no object holds a record of it below its tombstone")
        for wait in result.erasure_waits:
            print(f"{result.partition}: erasure waits: {wait}")
    for name, err in failures.items():
        print(f"{name}: skipped, nothing deleted: {err}")
    for folder in illegal:
        print(f"{folder.path}: skipped, nothing deleted: {folder.reason}")
    print(f"{verb} {sum(len(r.deleted_objects) for r in results)} object(s), "
          f"{human_bytes(sum(r.deleted_bytes for r in results))}")
    return EXIT_FAILED if failures or illegal else EXIT_OK


def given_keys(args: argparse.Namespace) -> list[bytes]:
    """The keys of --key and --keys-file, as bytes (UTF-8 text, or base64 with --base64)."""
    texts = [(f"--key #{i}", text) for i, text in enumerate(args.key, start=1)]
    if getattr(args, "keys_file", None):
        path = Path(args.keys_file)
        if not path.is_file():
            raise InvalidArgumentError(f"keys file {path} does not exist")
        lines = decode_utf8(path.read_bytes(), str(path)).splitlines()
        texts += [(f"{path} line {n}", line.rstrip("\r")) for n, line in enumerate(lines, start=1) if line.strip()]
    if not texts:
        raise InvalidArgumentError("no key given: use --key or --keys-file")
    if not args.base64:
        return [text.encode() for _, text in texts]
    keys = []
    for where, text in texts:
        try:
            keys.append(base64.b64decode(text.strip(), validate=True))
        except binascii.Error as err:
            raise InvalidArgumentError(f"{where} is not base64 ({err})") from err
    return keys


def cmd_forget(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    now = command_now(args, wall_clock_ms())
    store = open_store(args, settings)
    store.require_exists()
    if conf_file(args) is not None or getattr(args, "set", None):
        config = settings.topic_config(args.topic)
        if not config.compact:  # nothing would carry the request out; without a configuration it is not known
            raise InvalidArgumentError(
                f"topic {args.topic} has cleanup.policy={','.join(config.cleanup_policy)} in this configuration: a "
                "tombstone deletes nothing there, so no run would carry an erasure request out")
    max_delay = args.max_delay if args.max_delay is not None else settings.cleaner.erasure_max_delay_ms
    outcomes = forget(store, args.topic, given_keys(args), now_ms=now, max_delay_ms=max_delay,
                      partitions=args.partitions)
    if args.json:
        print(json.dumps({"topic": args.topic, "requested_ms": now, "deadline_ms": now + max_delay,
                          "keys": [o.to_dict() for o in outcomes]}, indent=1))
    for outcome in outcomes:
        name = f"key sha256:{outcome.key_sha256[:16]}"
        for partition, error in sorted(outcome.errors.items()):
            print(f"{name}: partition {args.topic}-{partition} could not be searched: {error}",
                  file=sys.stderr if args.json else sys.stdout)
        if args.json:
            continue
        if outcome.found:
            where = ", ".join(f"{args.topic}-{p} at offset {o}" for p, o in sorted(outcome.tombstones.items()))
            print(f"{name}: tombstone appended and erasure requested in {where}; due by {_iso(now + max_delay)}")
        elif not outcome.errors:
            absent = "; " + ", ".join(f"{args.topic}-{p}" for p in outcome.absent) + " has no log in the store" \
                if outcome.absent else ""
            print(f"{name}: found nowhere in {args.topic} ({len(outcome.searched)} partition(s) searched{absent}): "
                  "nothing to erase, no tombstone appended")
    return EXIT_FAILED if any(o.errors for o in outcomes) else EXIT_OK


def cmd_erasure(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    now = command_now(args, wall_clock_ms())
    store = open_store(args, settings)
    store.require_exists()
    if args.topic is not None and not store.partitions(args.topic):
        raise StoreNotFoundError(f"topic {args.topic!r} has no partition in {store.url}")
    statuses, errors = erasure_status(store, [args.topic] if args.topic else None, now, settings.topic_config,
                                      settings.cleaner.erasure_grace)
    overdue = [s for s in statuses if s.overdue]
    if args.json:
        print(json.dumps({"now_ms": now, "requests": [s.to_dict() for s in statuses], "overdue": len(overdue),
                          "errors": errors}, indent=1))
    else:
        rows = [[str(s.partition), s.request.key_sha256[:16], s.request.state + (" OVERDUE" if s.overdue else ""),
                 s.request.tombstone_offset, _iso(s.request.requested_ms), _iso(s.request.deadline_ms),
                 f"{_iso(s.request.rewritten_ms)} (v{s.request.rewritten_version})" if s.request.rewritten_ms
                 is not None else "-", _iso(s.request.completed_ms) if s.request.completed_ms is not None else "-"]
                for s in statuses]
        print(format_table(["partition", "key sha256", "state", "tombstone", "requested", "deadline", "rewritten",
                            "gone"], rows))
        for s in statuses:
            for held in s.request.held:
                went = f"gone by {_iso(held.removed_ms)}" if held.removed_ms is not None else "still there"
                print(f"{s.partition} {s.request.key_sha256[:16]}: {held.path} held it (found "
                      f"{_iso(held.found_ms)}), {went}")
            for wait in s.waits:
                print(f"{s.partition} {s.request.key_sha256[:16]}: waits for {wait}")
        print(f"\n{len(statuses)} request(s): " + ", ".join(
            f"{sum(1 for s in statuses if s.request.state == state)} {state}" for state in ("pending", "rewritten",
                                                                                               "gone"))
            + f"; {len(overdue)} late")
        for name, error in errors.items():
            print(f"unreadable: {name}: {error}")
    return EXIT_FAILED if overdue or errors else EXIT_OK


def cmd_attest(args: argparse.Namespace) -> int:
    store = open_store(args)
    store.require_exists()
    (key,) = given_keys(args)[:1]
    if len(args.key) > 1:
        raise InvalidArgumentError("attest proves one key: give --key once")
    if args.output:
        output_location(args.output, store.url, storage_options(args))  # a path that cannot be written fails first
    proof = attest(store, args.topic, key, wall_ms=wall_clock_ms(), program_version=__version__,
                   partitions=args.partitions)
    document = json.dumps(proof.to_dict(), indent=1)
    objects = sum(len(p.objects) for p in proof.partitions)
    summary = (f"key sha256:{proof.key_sha256[:16]} in {args.topic}: {objects} object(s) read in "
               f"{len(proof.partitions)} partition(s): "
               + ("no record of it is left that an erasure request erases, and no value without one"
                  if proof.passed else f"{len(proof.problems)} object(s) still hold it"))
    if args.output:
        storage, name = output_location(args.output, store.url, storage_options(args))
        storage.write_bytes(name, document.encode())
        print(summary)
        for problem in proof.problems:
            print(f"PROBLEM {problem}")
        print(f"proof written to {args.output}")
    else:
        print(document)
        print(summary, file=sys.stderr)
        for problem in proof.problems:
            print(f"PROBLEM {problem}", file=sys.stderr)
    return EXIT_OK if proof.passed else EXIT_FAILED


# Parser --------------------------------------------------------------------------------------------------


def _store_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", metavar="STORE", help="store URL: a path, file://, s3://bucket/prefix, memory://...")
    parser.add_argument("--storage-option", metavar="KEY=VALUE", action="append", type=parse_storage_option,
                        help="fsspec storage option, repeatable (e.g. client_kwargs.endpoint_url=http://...); "
                             "credentials are better left to the environment (AWS_* variables); "
                             "retry_budget_ms=N bounds how long a failing storage call retries (default "
                             f"{DEFAULT_RETRY_BUDGET_MS})")


def _config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conf", metavar="FILE", action="append", type=parse_conf,
                        help="configuration file: TOML (e.g. conf/local.toml) or Kafka's server.properties; without "
                             "it, Kafka's defaults apply (cleanup.policy=delete: nothing is compacted). As with "
                             "spark-submit, --conf spark.KEY=VALUE sets a Spark property instead")
    parser.add_argument("--set", metavar="NAME=VALUE", action="append",
                        help="override a setting, repeatable: a broker-level name (log.cleaner.min.cleanable."
                             "ratio=0.2), TOPIC:NAME=VALUE for a topic (orders:min.cleanable.dirty.ratio=0.1), "
                             "cleaner.NAME=VALUE or publish.NAME=VALUE")


def _now_args(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--now", type=parse_time, default=None,
                        help=f"{what}, epoch ms or ISO-8601 (default: the clock); more than "
                             f"{FUTURE_NOW_TOLERANCE_MS // 60_000} minutes ahead of the clock is refused")
    parser.add_argument("--allow-future-now", action="store_true",
                        help="accept a --now in the future (tests and replays)")


def _selection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topics", metavar="PATTERN", help="only these topics: a glob ('orders*') or a "
                                                           "comma-separated list of names or globs ('orders,pay*')")


def _scan_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--latest", action="store_true",
                        help="the table view: per key its winning record under the topic's compaction.strategy "
                             "(from --conf / --set; default offset), tombstoned keys absent, keyless records left out")
    parser.add_argument("--version", metavar="V|P=V", action="append", type=parse_version, default=None,
                        help="read manifest version V of every partition, or PARTITION=V (repeatable); default: "
                             "the newest. A version gc removed is refused, naming the oldest readable one")
    _config_args(parser)


def _key_args(parser: argparse.ArgumentParser, many: bool) -> None:
    parser.add_argument("--key", action="append", default=[], metavar="KEY", required=not many,
                        help="the key as UTF-8 text (with --base64: base64 of its bytes)"
                             + (", repeatable" if many else ""))
    if many:
        parser.add_argument("--keys-file", metavar="FILE", default=None,
                            help="keys, one per line (UTF-8 text, or base64 with --base64); blank lines are skipped")
    parser.add_argument("--base64", action="store_true", help="keys are given as base64 of their bytes")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compaction",
        description="An offline log cleaner: Kafka's log-compaction guarantees for segment stores on object "
                    "storage.",
        epilog=f"exit codes: {EXIT_OK} ok; {EXIT_FAILED} failed or problems found; {EXIT_USAGE} bad arguments; "
               f"{EXIT_PARTIAL} some partitions failed, the rest committed; {EXIT_INVALID} invalid configuration "
               "or input (nothing changed)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log debug details; -vv also the storage clients' requests (credentials are masked "
                             "at every level)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("plan", help="dry run: per partition the decision, reason, bytes, ratio and range",
                       description="Plan a run without changing anything: for every partition, whether it would "
                                   "be cleaned and why (dirty ratio, max.compaction.lag.ms, expired tombstones, "
                                   "retention), clean and cleanable bytes, the dirty ratio, the compaction delay, "
                                   "the offset range to clean and the segments involved.")
    _store_args(p)
    _selection_args(p)
    _config_args(p)
    _now_args(p, "plan as of this time")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run", help="clean the store: plan, deduplicate on Spark, commit each partition",
                       description="Plan, then clean every selected partition with Spark and commit each one's "
                                   "new manifest and checkpoint. Prints a Kafka-style summary per partition; "
                                   "writes a JSON report (--report) and Prometheus metrics (configured in "
                                   "[cleaner]). A partition that fails is reported uncleanable and the others "
                                   f"still commit (exit code {EXIT_PARTIAL}).")
    _store_args(p)
    _selection_args(p)
    _config_args(p)
    _now_args(p, "the run's time (pass the schedule's logical time so that retries and backfills decide "
                 "exactly the same)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and change nothing (no Spark)")
    p.add_argument("--report", metavar="PATH", help="write the JSON run report here")
    p.add_argument("--gc", action="store_true", help="run gc after the commits (grace and kept versions from "
                                                     "[cleaner] gc.grace.ms / gc.keep.versions)")
    p.add_argument("--plan", choices=[plan.value for plan in Plan], default=None,
                   help="how executors decide survivors: arrow (in each partition's task), window or aggregate "
                        "(Spark SQL over a shuffle) (default: [cleaner] dedupe.plan, arrow)")
    p.add_argument("--master", default=None, help="classic Spark's master (default: local[*], or spark-submit's)")
    p.add_argument("--remote", metavar="URL", default=None,
                   help="run on a Spark Connect server, sc://HOST:PORT (or local[N], one started in this process); "
                        "default: Spark's SPARK_REMOTE when set. Not with --master")
    p.add_argument("--no-ship-package", dest="ship_package", action="store_false",
                   help="with --remote: do not send this package to the server as an artifact (it is installed "
                        "on the server's Python)")
    p.add_argument("--spark-conf", metavar="KEY=VALUE", action="append", type=parse_spark_conf,
                   help="extra Spark setting, repeatable (also accepted as --conf spark.KEY=VALUE)")
    p.add_argument("--run-id", default=None, help="recorded in manifests and the report (default: random)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("generate", help="write a synthetic keyed store (deterministic for a seed)",
                       description="Generate synthetic keyed topics. Records and keys are totals per topic, spread "
                                   "over its partitions; keys are drawn uniformly from --keys unless --update-ratio "
                                   "is given. Into an existing partition, records are appended after its log end.")
    _store_args(p)
    p.add_argument("--topics", default="orders", help="comma-separated topic names (default: orders)")
    p.add_argument("--partitions", type=positive_int, default=4, help="partitions per topic (default: 4)")
    p.add_argument("--records", type=int, default=100_000, help="records per topic (default: 100000)")
    p.add_argument("--keys", type=positive_int, default=10_000, help="key cardinality per topic (default: 10000)")
    p.add_argument("--update-ratio", type=float, default=None,
                   help="probability that a record updates a key written earlier instead of inserting a new one")
    p.add_argument("--tombstone-ratio", type=float, default=0.01, help="share of keyed records that are tombstones")
    p.add_argument("--keyless-ratio", type=float, default=0.0, help="share of records without a key")
    p.add_argument("--value-bytes", type=int, default=100, help="value size in bytes (default: 100)")
    p.add_argument("--end-time", type=parse_time, default=None,
                   help="timestamp of the newest record, epoch ms or ISO-8601 (default: --now)")
    p.add_argument("--time-span", type=parse_duration, default=7 * 86_400_000,
                   help="records' timestamps span this duration up to --end-time (default: 7d)")
    p.add_argument("--missing-timestamp-ratio", type=float, default=0.0, help="share of records without timestamp")
    p.add_argument("--segment-records", type=positive_int, default=10_000, help="records per segment (default: 10000)")
    p.add_argument("--version-header", default=None,
                   help="add this header to every record: an 8-byte big-endian version (for the header strategy)")
    p.add_argument("--skew", type=float, default=None,
                   help="share of each topic's records and keys that go to partition 0 (default: even)")
    p.add_argument("--hot-key-records", type=int, default=0,
                   help="records of partition 0 that all update one key (default: 0)")
    p.add_argument("--format", choices=["parquet", "kafka"], default="parquet",
                   help="segment format: parquet, or kafka (.log files of Kafka record batches v2) (default: parquet)")
    p.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none",
                   help="the record batches' codec, with --format kafka (default: none)")
    p.add_argument("--transactional-ratio", type=float, default=0.0,
                   help="share of records written by transactional producers, each transaction ended by a commit "
                        "or abort marker (default: 0)")
    p.add_argument("--abort-ratio", type=float, default=0.0, help="share of transactions that abort (default: 0)")
    p.add_argument("--transaction-records", type=positive_int, default=100,
                   help="records per transaction (default: 100)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    _now_args(p, "commit time")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("append", help="append a Parquet, JSON Lines or Kafka .log file as a new segment",
                       description="Append records as one new segment at the partition's log end. Offsets are "
                                   "assigned from the log end when the file has none; explicit offsets must start "
                                   "at or after it. Records without a timestamp get the append time unless "
                                   "--no-timestamp. A .log file of Kafka record batches (v2) becomes a .log segment "
                                   "byte for byte: its CRCs are checked, and its first batch must start at the log "
                                   "end offset (its offsets are kept).")
    _store_args(p)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("partition", metavar="PARTITION", help="partition number (0, 1, ...)")
    p.add_argument("file", metavar="FILE", help="a .parquet file with segment columns, a Kafka .log file of record "
                                                "batches, or JSON Lines")
    p.add_argument("--no-timestamp", action="store_true", help="leave records without timestamp without one")
    _now_args(p, "append time")
    p.set_defaults(func=cmd_append)

    p = sub.add_parser("import", help="load a Kafka partition directory's .log files as a partition's segments",
                       description="Load a Kafka partition directory (a broker's, a backup's, tiered storage's): its "
                                   "<20-digit base offset>.log files, in offset order, become .log segments byte for "
                                   "byte, each covering [its base offset, the next file's). Every batch's CRC and "
                                   "framing is checked and abort markers are cross-checked with .txnindex files; "
                                   ".index, .timeindex and .snapshot files are ignored. Bad input refuses the whole "
                                   "import, naming the file and offset, and nothing is written.")
    _store_args(p)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("partition", metavar="PARTITION", help="partition number (0, 1, ...)")
    p.add_argument("directory", metavar="DIR", help="the partition directory (a local path)")
    _now_args(p, "import time")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("export", help="write a partition's live log as a Kafka partition directory",
                       description="Write the live log as a Kafka partition directory that kafka-dump-log.sh and a "
                                   "broker read: <20-digit base offset>.log files with the .index, .timeindex and "
                                   ".txnindex files Kafka's LogSegment builds (index.interval.bytes 4096). Records "
                                   "a deletion vector hides are left out; Parquet segments are framed in batches. "
                                   "An uncleaned import exports the same files.")
    _store_args(p)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("partition", metavar="PARTITION", help="partition number (0, 1, ...)")
    p.add_argument("directory", metavar="DIR", help="a new or empty local directory")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("read", help="read a topic's or a partition's live log (or its latest record per key)",
                       description="Read the live log at a committed version: the records its manifest lists, "
                                   "without deletion-vector entries or records below the log start. Without "
                                   "PARTITION the whole topic is read, with a partition column first. Rows come in "
                                   "partition and offset order; stdout gets JSON Lines as they are read (and "
                                   "stops quietly when the pipe closes: read ... | head).")
    _store_args(p)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("partition", metavar="PARTITION", nargs="?", default=None,
                   help="partition number (0, 1, ...); default: every partition of the topic")
    _scan_args(p)
    p.add_argument("--columns", metavar="C,C", default=None,
                   help="only these record columns, comma-separated: offset, timestamp, key, value, headers, "
                        "producer_id, producer_epoch, is_transactional, is_control, control_type, delete_horizon_ms")
    p.add_argument("--key", action="append", default=None, metavar="KEY",
                   help="only records with this key (UTF-8), repeatable")
    p.add_argument("--from", dest="start", type=int, default=None, help="first offset (inclusive)")
    p.add_argument("--to", dest="end", type=int, default=None, help="last offset (exclusive)")
    p.add_argument("--since", type=parse_time, default=None,
                   help="only records with a timestamp at or after this, epoch ms or ISO-8601")
    p.add_argument("--until", type=parse_time, default=None,
                   help="only records with a timestamp before this, epoch ms or ISO-8601 (with --latest: the "
                        "table as of that time)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="output format (default: from the --output suffix, .parquet or .csv, else jsonl); CSV "
                        "shows keys and values as UTF-8 text, jsonl and parquet keep exact bytes")
    p.add_argument("-o", "--output", default=None, help="write to this file instead of stdout")
    p.set_defaults(func=cmd_read)

    p = sub.add_parser("files", help="list the live files of a topic at a version, for wiring up other engines",
                       description="Print each partition's pinned version, log range and live segment files with "
                                   "their offset ranges and deletion vectors. A correct reader of a file keeps the "
                                   "records with offsets in [log_start_offset, log_end_offset) that its deletion "
                                   "vector (a Parquet file of one offset column) does not list.")
    _store_args(p)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("partition", metavar="PARTITION", nargs="?", default=None,
                   help="partition number; default: every partition")
    p.add_argument("--version", metavar="V|P=V", action="append", type=parse_version, default=None,
                   help="manifest version for every partition (V) or one (PARTITION=V), repeatable; default: "
                        "the newest")
    p.add_argument("--json", action="store_true", help="print JSON (files with full URLs) instead of a table")
    p.set_defaults(func=cmd_files)

    p = sub.add_parser("history", help="list a topic's committed versions: time, operation, records and bytes",
                       description="List every manifest version each partition still has (gc prunes old ones): "
                                   "when it was committed, by which operation (append, clean; +retention when the "
                                   "log start moved) and writer, the live records and bytes it replaced (in) and "
                                   "added (out), and the live records after it.")
    _store_args(p)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("partition", metavar="PARTITION", nargs="?", default=None,
                   help="partition number; default: every partition")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("snapshot", help="export a topic at a version as a plain Parquet dataset (hive-partitioned)",
                       description="Write the topic's live records (or, with --latest, its latest record per key) "
                                   "at a version to DEST, a new or empty folder (any store URL), as DEST/partition=N/"
                                   "part-*.parquet plus DEST/_snapshot.json naming the versions: a dataset any "
                                   "engine reads correctly with a plain glob.")
    _store_args(p)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("dest", metavar="DEST", help="destination folder or URL (new or empty)")
    _scan_args(p)
    p.set_defaults(func=cmd_snapshot)

    p = sub.add_parser("publish", help="publish a topic as an Iceberg table, without copying it",
                       description="Commit the topic at a version as the next snapshot of an Iceberg table (format "
                                   "v2, identity-partitioned by partition): its live Parquet segments are the data "
                                   "files as they are, deletion vectors and records below the log start position "
                                   "delete files. The snapshot summary names each partition's manifest version "
                                   "(compaction.versions); publishing versions already published adds no snapshot. "
                                   "Snapshots replaced more than [cleaner] gc.grace.ms ago are expired (those "
                                   "reading a version from before an erasure, erasure.grace.ms ago); gc keeps "
                                   "every object a retained snapshot reads. The catalog is configured as pyiceberg "
                                   "configures catalogs (.pyiceberg.yaml, PYICEBERG_CATALOG__NAME__* variables) or "
                                   "in the configuration's [publish] table (type, uri, warehouse...). Kafka .log "
                                   "segments cannot be data files: such a topic is refused.")
    _store_args(p)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--catalog", metavar="NAME", default=None,
                   help="the catalog's name (default: [publish] catalog, else 'default')")
    p.add_argument("--table", metavar="NAMESPACE.TABLE", default=None,
                   help="the table (default: [publish] namespace, 'default', and the topic's name); created when "
                        "absent")
    p.add_argument("--version", metavar="V|P=V", action="append", type=parse_version, default=None,
                   help="publish manifest version V of every partition, or PARTITION=V (repeatable); default: the "
                        "newest")
    p.add_argument("--json", action="store_true", help="print what was published as JSON")
    _config_args(p)
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("status", help="per partition: segments, bytes, records, checkpoint, dirty bytes")
    _store_args(p)
    _selection_args(p)
    _config_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("verify", help="check the store's invariants; exits non-zero on any problem",
                       description="Check manifests (continuous versions, ordered segments), that every "
                                   "referenced object exists with its recorded size, and (unless --metadata-only) "
                                   "checksums, offsets and statistics of every live segment.")
    _store_args(p)
    _selection_args(p)
    _config_args(p)
    p.add_argument("--metadata-only", action="store_true", help="skip reading segment data")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("gc", help="delete unreferenced objects after a grace period; prune old manifests",
                       description="Delete objects in each partition's own folders that no retained manifest "
                                   "references, once older than --grace; prune manifest versions beyond "
                                   "--keep-versions that were superseded more than --grace ago. The grace period is "
                                   "measured on the wall clock (objects' modification times), never on a run's --now. "
                                   "A version an Iceberg snapshot holds (pinned by publish) is always kept.")
    _store_args(p)
    _selection_args(p)
    _config_args(p)
    p.add_argument("--grace", type=parse_duration, default=None,
                   help=f"grace period with a unit, e.g. 36h or 7d (default: [cleaner] gc.grace.ms, "
                        f"{DEFAULT_GRACE_MS // 86_400_000}d)")
    p.add_argument("--keep-versions", type=positive_int, default=None,
                   help=f"manifest versions always kept, at least 1 (default: [cleaner] gc.keep.versions, "
                        f"{DEFAULT_KEEP_VERSIONS})")
    p.add_argument("--erasure-grace", type=parse_duration, default=None,
                   help="how long what holds a key an erasure request erases is kept for readers of older versions "
                        "(default: [cleaner] erasure.grace.ms, else the grace period); the versions that reference "
                        "it go then too, however many --keep-versions asks for")
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted, delete nothing")
    p.set_defaults(func=cmd_gc)

    p = sub.add_parser("forget", help="erasure request: tombstone a key wherever it is and have its values removed",
                       description="Find the partitions of TOPIC whose log holds each key (every partition, or with "
                                   "--partitions N only the one Kafka's default partitioner, murmur2, sends it to), "
                                   "append a tombstone for it there (an ordinary delete for readers and consumers) and "
                                   "record an erasure request in the partition's manifest: the key's SHA-256 digest, "
                                   "never the key, when it was requested and its deadline. The next run rewrites "
                                   "every segment holding an older record of the key; gc then removes what older "
                                   "versions and orphans hold; 'compaction erasure' follows each request and "
                                   "'compaction attest' proves it done. Only digests are printed.")
    _store_args(p)
    p.add_argument("topic", metavar="TOPIC")
    _key_args(p, many=True)
    p.add_argument("--partitions", type=positive_int, default=None, metavar="N",
                   help="the topic's partition count: search only the partition Kafka's default partitioner sends "
                        "each key to (murmur2), instead of every partition")
    p.add_argument("--max-delay", type=parse_duration, default=None,
                   help="the deadline, from now (default: [cleaner] erasure.max.delay.ms, 1d)")
    p.add_argument("--json", action="store_true", help="print JSON instead of lines")
    _config_args(p)
    _now_args(p, "the request's time")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser("erasure", help="list erasure requests: pending, rewritten or gone, and what each waits for",
                       description="List every erasure request of the store (or TOPIC): pending (no run has "
                                   "rewritten the segments holding the key yet), rewritten (the live log holds no "
                                   "record of the key below its tombstone; older versions or orphans may) or gone "
                                   "(no object under the partition's folders does), with the objects found holding "
                                   "the key and when each went, and what a request still waits for. A request is "
                                   "late (OVERDUE, exit 1) when still pending past its deadline, or not gone "
                                   "[cleaner] erasure.grace.ms after it.")
    _store_args(p)
    p.add_argument("topic", metavar="TOPIC", nargs="?", default=None, help="only this topic (default: every topic)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _config_args(p)
    _now_args(p, "judge deadlines as of this time")
    p.set_defaults(func=cmd_erasure)

    p = sub.add_parser("attest", help="prove from every object that a key's erased records are gone",
                       description="Read every object under the folders of each partition of TOPIC (segments, "
                                   "deletion vectors, manifests, superseded and orphaned objects alike) and write a "
                                   "proof: the manifest version, each object's name, size and SHA-256, the records "
                                   "of the key found in each, the key's digest and this program's version. Exit 0 "
                                   "when no record of the key is left below its erasure request's tombstone (without "
                                   "a request: no value of the key at all), 1 otherwise, naming the objects.")
    _store_args(p)
    p.add_argument("topic", metavar="TOPIC")
    _key_args(p, many=False)
    p.add_argument("--partitions", type=positive_int, default=None, metavar="N",
                   help="only the partition Kafka's default partitioner sends the key to among N (default: every "
                        "partition)")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="write the proof (JSON) here, a path or a store-like URL (default: stdout)")
    p.set_defaults(func=cmd_attest)
    return parser


def run_command(func: Callable[[argparse.Namespace], int], args: argparse.Namespace,
                secrets: Iterable[str] = ()) -> int:
    def error(text: str) -> None:
        print(f"error: {logs.redact(text, secrets)}", file=sys.stderr)

    try:
        return func(args)
    except (ConfigError, InvalidArgumentError, InvalidRecordsError, OffsetOverlapError, PublishError) as err:
        error(str(err))
        return EXIT_INVALID
    except StoreNotFoundError as err:
        error(str(err))
        return EXIT_FAILED
    except CompactionError as err:
        error(str(err))
        return EXIT_FAILED
    except OSError as err:  # an object store's I/O error that the store layer passes on
        error(f"{type(err).__name__}: {err}")
        return EXIT_FAILED


def check_run(argv: Sequence[str]) -> int:
    """Check ``compaction run ARGV``'s flags, configuration and --now without running it, touching neither the
    store nor Spark: 0 when a run would start, 2 for a bad flag, 4 for an invalid configuration."""
    args = build_parser().parse_args(["run", *argv])
    secrets = logs.secrets_in(os.environ, storage_options(args))
    logs.install(args.verbose, secrets)

    def check(args: argparse.Namespace) -> int:
        load_settings(args)
        command_now(args, wall_clock_ms())
        remote_url(args.remote, args.master or spark_properties(args).get("spark.master"))
        return EXIT_OK

    return run_command(check, args, secrets)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    secrets = logs.secrets_in(os.environ, storage_options(args))
    logs.install(args.verbose, secrets)
    return run_command(args.func, args, secrets)


if __name__ == "__main__":
    sys.exit(main())
