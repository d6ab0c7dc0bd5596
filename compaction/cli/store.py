"""The store's commands: ``generate`` and ``append`` write to it, ``status``, ``verify`` and ``gc`` look after it."""

from __future__ import annotations

import argparse
from typing import Any

from compaction import lineage
from compaction.cli import common
from compaction.cli.common import Command, Parser
from compaction.cli.output import Output
from compaction.cli.types import parse_duration, parse_time, positive_int
from compaction.display import human_bytes
from compaction.errors import EXIT_FAILED, EXIT_OK, StoreError
from compaction.store import IllegalFolder, SegmentFormat, Store, TopicPartition, Writer, read_manifests
from compaction.store.gc import DEFAULT_GRACE_MS, DEFAULT_KEEP_VERSIONS, collect_store
from compaction.store.status import partition_status
from compaction.store.verify import verify
from compaction.synthetic import GenerateSpec, generate, topic_names


def cmd_generate(args: argparse.Namespace) -> int:
    """Generate synthetic keyed topics. Records and keys are totals per topic, spread over its partitions; keys are
    drawn uniformly from --keys unless --update-ratio is given. Into an existing partition, records are appended
    after its log end.
    """
    now = common.command_now(args)
    store = common.open_store(args)
    if args.end_time is not None:
        common.check_long("--end-time", args.end_time)
    spec = GenerateSpec(
        topics=topic_names(args.topics),
        partitions=args.partitions,
        records=args.records,
        keys=args.keys,
        update_ratio=args.update_ratio,
        tombstone_ratio=args.tombstone_ratio,
        keyless_ratio=args.keyless_ratio,
        value_bytes=args.value_bytes,
        end_time_ms=args.end_time if args.end_time is not None else now,
        time_span_ms=args.time_span,
        missing_timestamp_ratio=args.missing_timestamp_ratio,
        segment_records=args.segment_records,
        version_header=args.version_header,
        seed=args.seed,
        partition0_share=args.skew,
        hot_key_records=args.hot_key_records,
        segment_format=SegmentFormat(args.format),
        compression=args.compression,
        transactional_ratio=args.transactional_ratio,
        abort_ratio=args.abort_ratio,
        transaction_records=args.transaction_records,
    )
    manifests = generate(store, spec, now_ms=now)
    total = sum(m.size_bytes for m in manifests)
    Output().line(
        f"generated {len(manifests)} partition(s), {spec.records * len(spec.topics):,} records, "
        f"{human_bytes(total)} in {store.url}"
    )
    return EXIT_OK


def cmd_append(args: argparse.Namespace) -> int:
    """Append records as one new segment at the partition's log end. Offsets are assigned from the log end when the file
    has none; explicit offsets must start at or after it. Records without a timestamp get the append time unless
    --no-timestamp. A .log file of Kafka record batches (v2) becomes a .log segment byte for byte: its CRCs are
    checked, and its first batch must start at the log end offset (its offsets are kept).
    """
    tp = common.topic_partition(args)
    now = common.command_now(args)
    manifest = common.open_store(args).append_file(
        tp, args.file, now_ms=now, writer=Writer(id="compaction-append"), fill_timestamps=not args.no_timestamp
    )
    segment = manifest.segments[-1]
    framing = " in Kafka record batches" if segment.format == SegmentFormat.KAFKA else ""
    Output().line(
        f"appended {segment.record_count} record(s){framing} to {tp} at [{segment.base_offset}, "
        f"{segment.next_offset}) as manifest version {manifest.version}"
    )
    return EXIT_OK


def cmd_create_topic(args: argparse.Namespace) -> int:
    """Create a topic of empty partitions (version 1 of each, no segment), as Kafka's kafka-topics --create: writers
    (append, a Spark write) append to it after. A topic that exists already is refused."""
    now = common.command_now(args)
    manifests = common.open_store(args).create_topic(
        args.topic, args.partitions, now_ms=now, writer=Writer(id="compaction-create-topic")
    )
    Output().line(f"created topic {args.topic} with {len(manifests)} partition(s)")
    return EXIT_OK


def selected_partitions(store: Store, args: argparse.Namespace) -> tuple[list[TopicPartition], list[IllegalFolder]]:
    """The partitions --topics selects, and the folders among them that cannot be a topic or a partition."""
    store.require_exists()
    return store.scan(common.topic_patterns(args))


def cmd_status(args: argparse.Namespace) -> int:
    store = common.open_store(args, common.load_settings(args))
    partitions, illegal = selected_partitions(store, args)
    rows, failures, statuses = [], [f"{folder}; not read" for folder in illegal], []
    for tp, manifest in read_manifests(store, partitions).items():
        if isinstance(manifest, StoreError):
            failures.append(f"{tp}: {manifest}")
            continue
        s = partition_status(manifest)
        statuses.append(s)
        rows.append(
            [
                s.partition,
                s.version,
                s.format,
                s.segments,
                human_bytes(s.size_bytes),
                s.records,
                f"[{s.log_start_offset}, {s.log_end_offset})",
                s.first_dirty_offset,
                human_bytes(s.dirty_bytes),
                s.last_operation,
            ]
        )
    total = sum(s.size_bytes for s in statuses)
    Output.of(args).result(
        {"partitions": [s.to_dict() for s in statuses], "errors": failures},
        ["partition", "version", "format", "segments", "size", "records", "log", "checkpoint", "dirty", "last"],
        rows,
        [
            f"\n{len(statuses)} partition(s), {sum(s.records for s in statuses):,} records, {human_bytes(total)}",
            *(f"unreadable: {failure}" for failure in failures),
        ],
    )
    return EXIT_FAILED if failures else EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    """Check manifests (continuous versions, ordered segments), that every referenced object exists with its recorded
    size, and (unless --metadata-only) checksums, offsets and statistics of every live segment.
    """
    store = common.open_store(args, common.load_settings(args))
    partitions, illegal = selected_partitions(store, args)
    reports = verify(store, partitions, check_data=not args.metadata_only)
    problems = [f"{folder}; not checked" for folder in illegal] + [str(p) for r in reports for p in r.problems]
    out = Output()
    for report in reports:
        state = "ok" if not report.problems else f"{len(report.problems)} problem(s)"
        out.line(
            f"{report.partition}: version {report.version}, {report.segments} segment(s), "
            f"{report.records} record(s), {report.orphans} unreferenced object(s): {state}"
        )
    for problem in problems:
        out.line(f"PROBLEM {problem}")
    if not reports and not illegal:
        out.line(f"no partitions found in {store.url}")
    return EXIT_FAILED if problems else EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    """Delete objects in each partition's own folders that no retained manifest references, once older than --grace;
    prune manifest versions beyond --keep-versions that were superseded more than --grace ago. The grace period is
    measured on the wall clock (objects' modification times), never on a run's --now. A version an Iceberg snapshot
    holds (pinned by publish) is always kept. What holds a key an erasure request erases goes once
    --erasure-grace has passed, with the versions that reference it.
    """
    settings = common.load_settings(args)
    store = common.open_store(args, settings)
    partitions, illegal = selected_partitions(store, args)
    grace = args.grace if args.grace is not None else settings.cleaner.gc_grace_ms
    keep = args.keep_versions if args.keep_versions is not None else settings.cleaner.gc_keep_versions
    erasure_grace = (
        args.erasure_grace
        if args.erasure_grace is not None
        else settings.cleaner.erasure_grace
        if args.grace is None
        else min(grace, settings.cleaner.erasure_grace)
    )
    results, failures = collect_store(
        store,
        partitions,
        wall_ms=common.wall_clock_ms(),
        grace_ms=grace,
        keep_versions=keep,
        dry_run=args.dry_run,
        erasure_grace_ms=erasure_grace,
    )
    lineage.collected(args, store, results, failures)
    verb = "would delete" if args.dry_run else "deleted"
    out = Output()
    for result in results:
        if result.deleted_objects or result.pruned_versions or result.unknown_objects or result.pinned_versions:
            pinned = f", kept pinned versions {result.pinned_versions}" if result.pinned_versions else ""
            erased = f", {len(result.erased_objects)} of them holding erased keys" if result.erased_objects else ""
            out.line(
                f"{result.partition}: {verb} {len(result.deleted_objects)} object(s){erased} "
                f"({human_bytes(result.deleted_bytes)}), pruned manifest versions "
                f"{result.pruned_versions or '-'}, {result.waiting_objects} within the grace period{pinned}"
            )
        for unknown in result.unknown_objects:
            out.line(f"{result.partition}: left alone unknown object {unknown}")
        for digest in result.erasures_completed:
            out.line(
                f"{result.partition}: erasure of key sha256:{digest[:16]} {'would be' if args.dry_run else 'is'} "
                "complete: no object holds a record of it below its tombstone"
            )
        for wait in result.erasure_waits:
            out.line(f"{result.partition}: erasure waits: {wait}")
    for name, err in failures.items():
        out.line(f"{name}: skipped, nothing deleted: {err}")
    for folder in illegal:
        out.line(f"{folder.path}: skipped, nothing deleted: {folder.reason}")
    out.line(
        f"{verb} {sum(len(r.deleted_objects) for r in results)} object(s), "
        f"{human_bytes(sum(r.deleted_bytes for r in results))}"
    )
    return EXIT_FAILED if failures or illegal else EXIT_OK


#: generate's options: flag -> argparse keywords.
GENERATE_OPTIONS: dict[str, dict[str, Any]] = {
    "--topics": {"default": "orders", "help": "comma-separated topic names (default: orders)"},
    "--partitions": {"type": positive_int, "default": 4, "help": "partitions per topic (default: 4)"},
    "--records": {"type": int, "default": 100_000, "help": "records per topic (default: 100000)"},
    "--keys": {"type": positive_int, "default": 10_000, "help": "key cardinality per topic (default: 10000)"},
    "--update-ratio": {
        "type": float,
        "default": None,
        "help": "probability that a record updates a key written earlier instead of inserting a new one",
    },
    "--tombstone-ratio": {"type": float, "default": 0.01, "help": "share of keyed records that are tombstones"},
    "--keyless-ratio": {"type": float, "default": 0.0, "help": "share of records without a key"},
    "--value-bytes": {"type": int, "default": 100, "help": "value size in bytes (default: 100)"},
    "--end-time": {
        "type": parse_time,
        "default": None,
        "help": "timestamp of the newest record, epoch ms or ISO-8601 (default: --now)",
    },
    "--time-span": {
        "type": parse_duration,
        "default": 7 * 86_400_000,
        "help": "records' timestamps span this duration up to --end-time (default: 7d)",
    },
    "--missing-timestamp-ratio": {"type": float, "default": 0.0, "help": "share of records without timestamp"},
    "--segment-records": {"type": positive_int, "default": 10_000, "help": "records per segment (default: 10000)"},
    "--version-header": {
        "default": None,
        "help": "add this header to every record: an 8-byte big-endian version (for the header strategy)",
    },
    "--skew": {
        "type": float,
        "default": None,
        "help": "share of each topic's records and keys that go to partition 0 (default: even)",
    },
    "--hot-key-records": {
        "type": int,
        "default": 0,
        "help": "records of partition 0 that all update one key (default: 0)",
    },
    "--format": {
        "choices": [f.value for f in SegmentFormat],
        "default": SegmentFormat.PARQUET.value,
        "help": "segment format: parquet, or kafka (.log files of Kafka record batches v2) (default: parquet)",
    },
    "--compression": {
        "choices": ["none", "gzip", "snappy", "lz4", "zstd"],
        "default": "none",
        "help": "the record batches' codec, with --format kafka (default: none)",
    },
    "--transactional-ratio": {
        "type": float,
        "default": 0.0,
        "help": "share of records written by transactional producers, each transaction ended "
        "by a commit or abort marker (default: 0)",
    },
    "--abort-ratio": {"type": float, "default": 0.0, "help": "share of transactions that abort (default: 0)"},
    "--transaction-records": {"type": positive_int, "default": 100, "help": "records per transaction (default: 100)"},
    "--seed": {"type": int, "default": 0, "help": "random seed (default: 0)"},
}


def add_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    p = common.add_command(sub, cmd_generate, "write a synthetic keyed store (deterministic for a seed)")
    common.add_store(p)
    for flag, keywords in GENERATE_OPTIONS.items():
        p.add_argument(flag, **keywords)
    common.add_now(p, "commit time")

    p = common.add_command(sub, cmd_append, "append a Parquet, JSON Lines or Kafka .log file as a new segment")
    common.add_store(p)
    common.add_topic(p, "partition number (0, 1, ...)")
    p.add_argument(
        "file",
        metavar="FILE",
        help="a .parquet file with segment columns, a Kafka .log file of record batches, or JSON Lines",
    )
    p.add_argument("--no-timestamp", action="store_true", help="leave records without timestamp without one")
    common.add_now(p, "append time")

    p = common.add_command(sub, cmd_create_topic, "create a topic of empty partitions, as kafka-topics --create")
    common.add_store(p)
    common.add_topic(p)
    p.add_argument("--partitions", type=positive_int, required=True, help="how many partitions")
    common.add_now(p, "creation time")

    p = _maintenance(sub, cmd_status, "per partition: segments, bytes, records, checkpoint, dirty bytes")
    common.add_json(p)

    p = _maintenance(sub, cmd_verify, "check the store's invariants; exits non-zero on any problem")
    p.add_argument("--metadata-only", action="store_true", help="skip reading segment data")

    p = _maintenance(sub, cmd_gc, "delete unreferenced objects after a grace period; prune old manifests")
    p.add_argument(
        "--grace",
        type=parse_duration,
        default=None,
        help=f"grace period with a unit, e.g. 36h or 7d (default: [cleaner] gc.grace.ms, "
        f"{DEFAULT_GRACE_MS // 86_400_000}d)",
    )
    p.add_argument(
        "--keep-versions",
        type=positive_int,
        default=None,
        help=f"manifest versions always kept, at least 1 (default: [cleaner] gc.keep.versions, "
        f"{DEFAULT_KEEP_VERSIONS})",
    )
    p.add_argument(
        "--erasure-grace",
        type=parse_duration,
        default=None,
        help="how long what holds a key an erasure request erases is kept for readers of older versions "
        "(default: [cleaner] erasure.grace.ms, else the grace period); the versions that reference "
        "it go then too, however many --keep-versions asks for",
    )
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted, delete nothing")


def _maintenance(sub: argparse._SubParsersAction[Parser], command: Command, help: str) -> Parser:
    """A command that looks after the store (status, verify, gc): the store, --topics and the configuration."""
    parser = common.add_command(sub, command, help)
    common.add_store(parser)
    common.add_selection(parser)
    common.add_config(parser)
    return parser
