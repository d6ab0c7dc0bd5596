"""What every command shares: the exit codes, the clock, the common arguments and reading them back (the store,
the configuration, ``now``, the topics, a partition, versions)."""

from __future__ import annotations

import argparse
import inspect
import time
from collections.abc import Callable
from typing import Any

from compaction.cli.types import parse_conf, parse_storage_option, parse_time, parse_version, show_ms
from compaction.config import Settings
from compaction.errors import (
    InvalidArgumentError,
)
from compaction.schema import LONG_MAX, LONG_MIN
from compaction.store import Store, TopicPartition
from compaction.store.names import partition_name_problem
from compaction.store.storage import DEFAULT_RETRY_BUDGET_MS

#: How far ahead of this machine's clock --now may be (the scheduler's clock can run a little ahead).
FUTURE_NOW_TOLERANCE_MS = 5 * 60_000

Parser = argparse.ArgumentParser
Command = Callable[[argparse.Namespace], int]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)  # clock-ok: the command line is where `now` comes from


# Arguments ------------------------------------------------------------------------------------------------


def add_command(sub: argparse._SubParsersAction[Parser], command: Command, help: str) -> Parser:
    """The parser of ``command`` (a function ``cmd_NAME``; ``cmd_warm_up`` is ``warm-up``): ``help`` in the list of
    commands, the function's docstring as its description, the function run when it is chosen."""
    parser = sub.add_parser(
        command.__name__.removeprefix("cmd_").replace("_", "-"), help=help, description=inspect.getdoc(command)
    )
    parser.set_defaults(func=command)
    return parser


def add_store(parser: Parser) -> None:
    parser.add_argument("store", metavar="STORE", help="store URL: a path, file://, s3://bucket/prefix, memory://...")
    parser.add_argument(
        "--storage-option",
        metavar="KEY=VALUE",
        action="append",
        type=parse_storage_option,
        help="fsspec storage option, repeatable (e.g. client_kwargs.endpoint_url=http://...); "
        "credentials are better left to the environment (AWS_* variables); "
        "retry_budget_ms=N bounds how long a failing storage call retries (default "
        f"{DEFAULT_RETRY_BUDGET_MS})",
    )


def add_topic(parser: Parser, partition: str | None = None, *, optional: bool = False) -> None:
    """TOPIC, and PARTITION when ``partition`` (its help) is given (``optional``: default every partition)."""
    parser.add_argument("topic", metavar="TOPIC")
    if optional:
        parser.add_argument("partition", metavar="PARTITION", nargs="?", default=None, help=partition)
    elif partition is not None:
        parser.add_argument("partition", metavar="PARTITION", help=partition)


def add_config(parser: Parser) -> None:
    parser.add_argument(
        "--conf",
        metavar="FILE",
        action="append",
        type=parse_conf,
        help="configuration file: TOML (e.g. conf/local.toml) or Kafka's server.properties; without "
        "it, Kafka's defaults apply (cleanup.policy=delete: nothing is compacted). As with "
        "spark-submit, --conf spark.KEY=VALUE sets a Spark property instead",
    )
    parser.add_argument(
        "--set",
        metavar="NAME=VALUE",
        action="append",
        help="override a setting, repeatable: a broker-level name (log.cleaner.min.cleanable."
        "ratio=0.2), TOPIC:NAME=VALUE for a topic (orders:min.cleanable.dirty.ratio=0.1), "
        "cleaner.NAME=VALUE or publish.NAME=VALUE",
    )


def add_now(parser: Parser, what: str) -> None:
    parser.add_argument(
        "--now",
        type=parse_time,
        default=None,
        help=f"{what}, epoch ms or ISO-8601 (default: the clock); more than "
        f"{FUTURE_NOW_TOLERANCE_MS // 60_000} minutes ahead of the clock is refused",
    )
    parser.add_argument(
        "--allow-future-now", action="store_true", help="accept a --now in the future (tests and replays)"
    )


def add_selection(parser: Parser) -> None:
    parser.add_argument(
        "--topics",
        metavar="PATTERN",
        help="only these topics: a glob ('orders*') or a comma-separated list of names or globs ('orders,pay*')",
    )


def add_versions(parser: Parser, help: str) -> None:
    parser.add_argument("--version", metavar="V|P=V", action="append", type=parse_version, default=None, help=help)


def add_json(parser: Parser, help: str = "print JSON instead of a table") -> None:
    parser.add_argument("--json", action="store_true", help=help)


# Reading them back ----------------------------------------------------------------------------------------


def check_long(flag: str, ms: int) -> int:
    """``ms`` if it is a Kafka Long (every time in the store is one), else InvalidArgumentError naming ``flag``."""
    if not LONG_MIN <= ms <= LONG_MAX:
        raise InvalidArgumentError(f"{flag} {ms} is outside Kafka's Long range [{LONG_MIN}, {LONG_MAX}]")
    return ms


def command_now(args: argparse.Namespace, clock: int | None = None) -> int:
    """The command's ``now``: --now, a Long not in the future (unless --allow-future-now), or the clock (read
    here unless given).

    A future ``now`` would stamp delete horizons, age segments out of retention and lift min.compaction.lag.ms
    as if that time had come; a past one (a backfill, a retry) is how runs are repeated exactly.
    """
    clock = wall_clock_ms() if clock is None else clock
    if args.now is None:
        return clock
    now = check_long("--now", args.now)
    if now > clock + FUTURE_NOW_TOLERANCE_MS and not args.allow_future_now:
        raise InvalidArgumentError(
            f"--now {show_ms(now)} is in the future: this machine's clock says {show_ms(clock)} (a "
            f"{FUTURE_NOW_TOLERANCE_MS // 60_000}-minute skew is tolerated); use --allow-future-now for tests and "
            "replays"
        )
    return now


def topic_partition(args: argparse.Namespace) -> TopicPartition:
    """The TOPIC and PARTITION arguments, held to the names the store uses (``00``, ``+1``, ``³`` are refused)."""
    problem = partition_name_problem(args.partition)
    if problem:
        raise InvalidArgumentError(f"partition {args.partition!r} of topic {args.topic!r} {problem}")
    return TopicPartition(args.topic, int(args.partition))


def partition_number(args: argparse.Namespace) -> int | None:
    """The optional PARTITION argument's number (None: every partition), checked as :func:`topic_partition`."""
    return None if args.partition is None else topic_partition(args).partition


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
    """The command's store, opened once: the configuration's ``[store]`` options, then --storage-option's."""
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


def read_versions(args: argparse.Namespace) -> int | dict[int, int] | None:
    """--version: one version for every partition, PARTITION=V per partition, or None (the newest)."""
    given = args.version or []
    plain = [v for p, v in given if p is None]
    if plain and (len(plain) > 1 or len(given) > 1):
        raise InvalidArgumentError("give one --version V for every partition, or --version PARTITION=V per partition")
    return plain[0] if plain else ({p: v for p, v in given if p is not None} or None)
