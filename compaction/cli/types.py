"""Argument types: what a flag's text may be (times, durations, counts, KEY=VALUE pairs, versions), each refused
in one line that says what was probably meant."""

from __future__ import annotations

import argparse
import json
import re
from datetime import UTC, datetime
from typing import Any

from compaction.schema import LONG_MAX, LONG_MIN

#: Integers --now and other times take as epoch milliseconds: below 10^8 (synthetic times early on 1 Jan
#: 1970, as tests and replays use) or from 10^11 (1973) up to 10^14 (year 5138). In between lie epoch seconds
#: (1973 to 5138 in seconds), above lie micro- and nanoseconds: refused with what was probably meant.
SECONDS_LIKE = (10**8, 10**11)
MICROS_LIKE = 10**14
#: The longest duration taken in a unit other than ms (a larger number was probably meant in milliseconds).
MAX_PLAUSIBLE_DURATION_MS = 100 * 365 * 86_400_000
DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def show_ms(ms: int) -> str:
    """Epoch milliseconds with the instant they name: ``1767225600000 (2026-01-01T00:00:00.000+00:00)``."""
    try:
        return f"{ms} ({datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec='milliseconds')})"
    except (OverflowError, ValueError, OSError):
        return str(ms)


def iso_time(ms: int) -> str:
    """Epoch milliseconds as an ISO-8601 instant to the second (``2026-01-01T00:00:00Z``), for tables."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return str(ms)


def parse_time(text: str) -> int:
    """Epoch milliseconds (held to a plausible range), or an ISO-8601 instant (UTC when it has no offset)."""
    if re.fullmatch(r"-?[0-9]+", text, re.ASCII):  # not str.isdigit(), which takes "³" and other scripts' digits
        value = int(text)
        if LONG_MIN <= value <= LONG_MAX:  # outside, the command names Kafka's Long range
            if SECONDS_LIKE[0] <= abs(value) < SECONDS_LIKE[1]:
                raise argparse.ArgumentTypeError(
                    f"{text} looks like epoch seconds ({show_ms(value * 1000)}); times are epoch milliseconds "
                    f"or ISO-8601: did you mean {value * 1000}?"
                )
            if abs(value) >= MICROS_LIKE:
                raise argparse.ArgumentTypeError(
                    f"{text} looks like epoch microseconds or nanoseconds (as milliseconds it is after the year "
                    f"5000); times are epoch milliseconds or ISO-8601: did you mean {value // 1000}?"
                )
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
        raise argparse.ArgumentTypeError(
            f"Spark setting {text!r} must look like KEY=VALUE (e.g. spark.executor.memory=4g)"
        )
    return key.strip(), value


def parse_conf(text: str) -> str | tuple[str, str]:
    """``--conf``: a configuration file, or (spark-submit's habit) a Spark property ``spark.KEY=VALUE``."""
    if text.startswith("spark.") and "=" in text:
        return parse_spark_conf(text)
    return text


def parse_storage_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of an fsspec storage option; the value is read as JSON when it is JSON (numbers, booleans)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"storage option {text!r} must look like KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def parse_version(text: str) -> tuple[int | None, int]:
    """``V`` (every partition read) or ``P=V`` (partition P)."""
    partition, sep, version = text.rpartition("=")
    numbers = [version, partition] if sep else [version]
    if not all(re.fullmatch(r"[0-9]+", n, re.ASCII) for n in numbers):
        raise argparse.ArgumentTypeError(f"version {text!r} must be a version number V or PARTITION=V")
    return (int(partition) if sep else None), int(version)
