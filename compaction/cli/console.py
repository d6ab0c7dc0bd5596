"""The entry of the ``compaction`` command: the parser of every command, errors turned into exit codes, ``main``.

Like PyIceberg's ``cli/console.py``: the commands live in a module per group (:mod:`.store`, :mod:`.clean`,
:mod:`.read`, :mod:`.kafka`, :mod:`.erasure`) and print through :mod:`.output`; this module only assembles and runs
them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Sequence

from compaction import __version__, lineage, logs
from compaction.cli import clean, common, environment, erasure, kafka, read, store
from compaction.cli.output import Output
from compaction.engine.session import remote_url
from compaction.errors import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_USAGE,
    CompactionError,
    ConfigError,
    InvalidArgumentError,
    InvalidRecordsError,
    OffsetOverlapError,
    PublishError,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compaction",
        description="An offline log cleaner: Kafka's log-compaction guarantees for segment stores on object storage.",
        epilog=f"exit codes: {EXIT_OK} ok; {EXIT_FAILED} failed or problems found; {EXIT_USAGE} bad arguments; "
        f"{EXIT_PARTIAL} some partitions failed, the rest committed; {EXIT_INVALID} invalid configuration "
        "or input (nothing changed). run, forget, gc and publish send OpenLineage events when OpenLineage is "
        "configured (OPENLINEAGE_URL, OPENLINEAGE_CONFIG, openlineage.yml), and a run launched by Dagster "
        "Pipes reports its topics to Dagster",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log debug details; -vv also the storage clients' requests (credentials are masked at every level)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (clean, store, kafka, read, erasure, environment):
        group.add_commands(sub)
    return parser


def run_command(
    func: Callable[[argparse.Namespace], int],
    args: argparse.Namespace,
    secrets: Iterable[str] = (),
    told: Callable[[str], None] | None = None,
) -> int:
    """``func(args)``, its errors printed (masked) and turned into exit codes; ``told`` hears each error too."""

    def error(text: str) -> None:
        Output().line(f"error: {logs.redact(text, secrets)}", aside=True)
        if told is not None:
            told(text)

    try:
        return func(args)
    except (ConfigError, InvalidArgumentError, InvalidRecordsError, OffsetOverlapError, PublishError) as err:
        error(str(err))
        return EXIT_INVALID
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
    secrets = logs.secrets_in(os.environ, common.storage_options(args))
    logs.install(args.verbose, secrets)

    def check(args: argparse.Namespace) -> int:
        common.load_settings(args)
        common.command_now(args)
        remote_url(args.remote, args.master or common.spark_properties(args).get("spark.master"))
        return EXIT_OK

    return run_command(check, args, secrets)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    secrets = logs.secrets_in(os.environ, common.storage_options(args))
    logs.install(args.verbose, secrets)
    return lineage.observe(args, secrets, lambda told: run_command(args.func, args, secrets, told))
