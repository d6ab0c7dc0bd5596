"""Reading the clean log for people and other tools: ``read``, ``files``, ``history``, ``snapshot``, and ``publish``
(the topic as an Iceberg table, without copying it)."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from compaction import job, lineage
from compaction.cli import common
from compaction.cli.common import Parser
from compaction.cli.output import Output
from compaction.cli.types import iso_time, parse_time
from compaction.display import human_bytes
from compaction.errors import EXIT_OK
from compaction.publish import describe_publish, publish_topic
from compaction.read.export import FORMATS, snapshot, write_csv, write_jsonl, write_parquet
from compaction.read.history import history
from compaction.read.scan import Scan, scan
from compaction.store import Store


def open_scan(args: argparse.Namespace, store: Store) -> Scan:
    """The scan the read, files and snapshot commands describe with their arguments."""
    partition = common.partition_number(args) if hasattr(args, "partition") else None
    strategy, header = "offset", ""
    if getattr(args, "latest", False):
        cleaning = common.load_settings(args).topic_config(args.topic).cleaning  # the topic's compaction.strategy
        strategy, header = cleaning.compaction_strategy, cleaning.compaction_strategy_header
    columns = None
    if getattr(args, "columns", None):
        columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    timestamps = (getattr(args, "since", None), getattr(args, "until", None))
    for flag, value in (("--since", timestamps[0]), ("--until", timestamps[1])):
        if value is not None:
            common.check_long(flag, value)
    return scan(
        store,
        args.topic,
        partition,
        version=common.read_versions(args),
        columns=columns,
        keys=getattr(args, "key", None),
        offsets=(getattr(args, "start", None), getattr(args, "end", None)),
        timestamps=timestamps,
        latest=getattr(args, "latest", False),
        strategy=strategy,
        strategy_header=header,
    )


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
    """Read the live log at a committed version: the records its manifest lists, without deletion-vector entries or
    records below the log start. Without PARTITION the whole topic is read, with a partition column first. Rows come
    in partition and offset order; stdout gets JSON Lines as they are read (and stops quietly when the pipe closes:
    read ... | head).
    """
    if args.partition is not None:
        common.topic_partition(args)  # a bad partition name is refused before the store is touched
    the_scan = open_scan(args, common.open_store(args))
    fmt = _output_format(args)
    batches = the_scan.batches()
    try:
        if args.output:
            stream: IO[Any] = open(args.output, "w", encoding="utf-8") if fmt == "jsonl" else open(args.output, "wb")  # noqa: SIM115
            with stream:
                count = write_output(fmt, batches, the_scan, stream)
            Output().line(f"wrote {count} record(s) to {args.output}", aside=True)
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
    """Print each partition's pinned version, log range and live segment files with their offset ranges and deletion
    vectors. A correct reader of a file keeps the records with offsets in [log_start_offset, log_end_offset) that its
    deletion vector (a Parquet file of one offset column) does not list.
    """
    the_scan = open_scan(args, common.open_store(args))
    parts = the_scan.files()
    rows = []
    for part in parts:
        for file in part.files:
            s = file.segment
            rows.append(
                [
                    str(part.tp),
                    part.version,
                    f"[{part.log_start_offset}, {part.log_end_offset})",
                    f"[{s.base_offset}, {s.next_offset})",
                    s.live_records,
                    human_bytes(s.size_bytes),
                    s.deletes.count if s.deletes else 0,
                    file.url,
                ]
            )
    Output.of(args).result(
        {"topic": args.topic, "store": the_scan.store.url, "partitions": [p.to_dict() for p in parts]},
        ["partition", "version", "log", "offsets", "live", "size", "deleted", "file"],
        rows,
        [
            "\nA reader reads each file's records with offsets inside the log range and skips those its deletion "
            "vector lists (--json names them): globbing the folders reads superseded segments and deleted records."
        ],
    )
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    """List every manifest version each partition still has (gc prunes old ones): when it was committed, by which
    operation (append, clean; +retention when the log start moved) and writer, the live records and bytes it replaced
    (in) and added (out), and the live records after it.
    """
    entries = history(common.open_store(args), args.topic, common.partition_number(args))

    def maybe(value: int | None, show: Callable[[int], str] = str) -> str:
        return "-" if value is None else show(value)

    rows = [
        [
            e.partition,
            e.version,
            iso_time(e.time_ms),
            e.operation,
            maybe(e.records_in),
            maybe(e.records_out),
            maybe(e.bytes_in, human_bytes),
            maybe(e.bytes_out, human_bytes),
            e.live_records,
            f"{e.writer} {e.run_id[:12]}",
        ]
        for e in entries
    ]
    Output.of(args).result(
        [e.to_dict() for e in entries],
        [
            "partition",
            "version",
            "time",
            "operation",
            "records in",
            "records out",
            "bytes in",
            "bytes out",
            "live records",
            "writer (run)",
        ],
        rows,
    )
    return EXIT_OK


def cmd_snapshot(args: argparse.Namespace) -> int:
    """Write the topic's live records (or, with --latest, its latest record per key) at a version to DEST, a new or
    empty folder (any store URL), as DEST/partition=N/part-*.parquet plus DEST/_snapshot.json naming the versions: a
    dataset any engine reads correctly with a plain glob.
    """
    the_scan = open_scan(args, common.open_store(args))
    result = snapshot(the_scan, args.dest, common.storage_options(args), written_ms=common.wall_clock_ms())
    versions = ", ".join(f"{p}@{v['version']}" for p, v in result.partitions.items())
    Output().line(
        f"wrote {result.records:,} record(s) of {args.topic} (partition@version: {versions}) to "
        f"{result.dest}{' (latest per key)' if result.latest else ''}"
    )
    return EXIT_OK


def cmd_publish(args: argparse.Namespace) -> int:
    """Commit the topic at a version as the next snapshot of an Iceberg table (format v2, identity-partitioned by
    partition): its live Parquet segments are the data files as they are, deletion vectors and records below the log
    start position delete files. The snapshot summary names each partition's manifest version (compaction.versions);
    publishing versions already published adds no snapshot. Snapshots replaced more than [cleaner] gc.grace.ms ago
    are expired; gc keeps every object a retained snapshot reads. The catalog is configured as pyiceberg configures
    catalogs (.pyiceberg.yaml, PYICEBERG_CATALOG__NAME__* variables) or in the configuration's [publish] table (type,
    uri, warehouse...). Kafka .log segments cannot be data files: such a topic is refused.
    """
    settings = common.load_settings(args)
    store = common.open_store(args, settings)
    target = job.publish_target(settings, args.catalog)
    result = publish_topic(
        store, args.topic, target, wall_ms=common.wall_clock_ms(), table=args.table, version=common.read_versions(args)
    )
    lineage.published(args, store, args.topic, target, result)
    Output.of(args).result(result.to_dict(), notes=[describe_publish(args.topic, result)])
    return EXIT_OK


EVERY_PARTITION = "partition number; default: every partition"
READ_VERSIONS = (
    "read manifest version V of every partition, or PARTITION=V (repeatable); default: the newest. A "
    "version gc removed is refused, naming the oldest readable one"
)


def add_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    p = common.add_command(sub, cmd_read, "read a topic's or a partition's live log (or its latest record per key)")
    common.add_store(p)
    common.add_topic(p, "partition number (0, 1, ...); default: every partition of the topic", optional=True)
    _scan(p)
    p.add_argument(
        "--columns",
        metavar="C,C",
        default=None,
        help="only these record columns, comma-separated: offset, timestamp, key, value, headers, "
        "producer_id, producer_epoch, is_transactional, is_control, control_type, delete_horizon_ms",
    )
    p.add_argument(
        "--key", action="append", default=None, metavar="KEY", help="only records with this key (UTF-8), repeatable"
    )
    p.add_argument("--from", dest="start", type=int, default=None, help="first offset (inclusive)")
    p.add_argument("--to", dest="end", type=int, default=None, help="last offset (exclusive)")
    p.add_argument(
        "--since",
        type=parse_time,
        default=None,
        help="only records with a timestamp at or after this, epoch ms or ISO-8601",
    )
    p.add_argument(
        "--until",
        type=parse_time,
        default=None,
        help="only records with a timestamp before this, epoch ms or ISO-8601 (with --latest: the "
        "table as of that time)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="output format (default: from the --output suffix, .parquet or .csv, else jsonl); CSV "
        "shows keys and values as UTF-8 text, jsonl and parquet keep exact bytes",
    )
    p.add_argument("-o", "--output", default=None, help="write to this file instead of stdout")

    p = common.add_command(sub, cmd_files, "list the live files of a topic at a version, for wiring up other engines")
    common.add_store(p)
    common.add_topic(p, EVERY_PARTITION, optional=True)
    common.add_versions(
        p, "manifest version for every partition (V) or one (PARTITION=V), repeatable; default: the newest"
    )
    common.add_json(p, "print JSON (files with full URLs) instead of a table")

    p = common.add_command(sub, cmd_history, "list a topic's committed versions: time, operation, records and bytes")
    common.add_store(p)
    common.add_topic(p, EVERY_PARTITION, optional=True)
    common.add_json(p)

    p = common.add_command(
        sub, cmd_snapshot, "export a topic at a version as a plain Parquet dataset (hive-partitioned)"
    )
    common.add_store(p)
    common.add_topic(p)
    p.add_argument("dest", metavar="DEST", help="destination folder or URL (new or empty)")
    _scan(p)

    p = common.add_command(sub, cmd_publish, "publish a topic as an Iceberg table, without copying it")
    common.add_store(p)
    common.add_topic(p)
    p.add_argument(
        "--catalog",
        metavar="NAME",
        default=None,
        help="the catalog's name (default: [publish] catalog, else 'default')",
    )
    p.add_argument(
        "--table",
        metavar="NAMESPACE.TABLE",
        default=None,
        help="the table (default: [publish] namespace, 'default', and the topic's name); created when absent",
    )
    common.add_versions(
        p, "publish manifest version V of every partition, or PARTITION=V (repeatable); default: the newest"
    )
    common.add_json(p, "print what was published as JSON")
    common.add_config(p)


def _scan(parser: Parser) -> None:
    """The scan's arguments read and snapshot share: --latest, --version and the configuration (the strategy)."""
    parser.add_argument(
        "--latest",
        action="store_true",
        help="the table view: per key its winning record under the topic's compaction.strategy "
        "(from --conf / --set; default offset), tombstoned keys absent, keyless records left out",
    )
    common.add_versions(parser, READ_VERSIONS)
    common.add_config(parser)
