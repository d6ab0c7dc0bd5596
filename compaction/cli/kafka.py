"""Kafka interop: ``import`` a broker's partition directory as segments, ``export`` a live log as one."""

from __future__ import annotations

import argparse

from compaction.cli import common
from compaction.cli.common import Parser
from compaction.cli.output import Output
from compaction.errors import EXIT_OK
from compaction.interop import export_partition, import_partition


def cmd_import(args: argparse.Namespace) -> int:
    """Load a Kafka partition directory (a broker's, a backup's, tiered storage's): its <20-digit base offset>.log
    files, in offset order, become .log segments byte for byte, each covering [its base offset, the next file's).
    Every batch's CRC and framing is checked and abort markers are cross-checked with .txnindex files; .index,
    .timeindex and .snapshot files are ignored. Bad input refuses the whole import, naming the file and offset, and
    nothing is written.
    """
    tp = common.topic_partition(args)
    now = common.command_now(args)
    manifest = import_partition(common.open_store(args), tp, args.directory, now_ms=now)
    Output().line(
        f"imported {len(manifest.segments)} segment(s), offsets [{manifest.log_start_offset}, "
        f"{manifest.log_end_offset}), into {tp} as manifest version {manifest.version}"
    )
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    """Write the live log as a Kafka partition directory that kafka-dump-log.sh and a broker read: <20-digit base
    offset>.log files with the .index, .timeindex and .txnindex files Kafka's LogSegment builds (index.interval.bytes
    4096). Records a deletion vector hides are left out; Parquet segments are framed in batches. An uncleaned import
    exports the same files.
    """
    tp = common.topic_partition(args)
    written = export_partition(common.open_store(args), tp, args.directory)
    logs_written = [p for p in written if p.suffix == ".log"]
    Output().line(f"exported {tp} as {len(logs_written)} .log file(s) with their indexes into {args.directory}")
    return EXIT_OK


def add_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    p = common.add_command(sub, cmd_import, "load a Kafka partition directory's .log files as a partition's segments")
    common.add_store(p)
    common.add_topic(p, "partition number (0, 1, ...)")
    p.add_argument("directory", metavar="DIR", help="the partition directory (a local path)")
    common.add_now(p, "import time")

    p = common.add_command(sub, cmd_export, "write a partition's live log as a Kafka partition directory")
    common.add_store(p)
    common.add_topic(p, "partition number (0, 1, ...)")
    p.add_argument("directory", metavar="DIR", help="a new or empty local directory")
