"""Compaction strategies (KIP-280): what makes one version of a key newer than another.

Each strategy is a ``DataFrame -> DataFrame`` transform adding two columns:

- ``version_valid`` (int, 1 or 0): whether the record carries a usable version;
- ``version`` (long): the version itself (-1 when not valid).

Every dedupe plan keeps, per (topic, partition, key), the record that is greatest in :data:`SURVIVAL_ORDER`
(``version_valid``, then ``version``, then ``offset``), so:

- ``offset``: the highest offset wins;
- ``timestamp``: the highest timestamp wins; ties go to the higher offset; a record without a timestamp
  (null or negative) loses to any record with one;
- ``header``: the **last** occurrence of the named header, read as an 8-byte big-endian signed long, wins
  when highest; ties go to the higher offset; a record whose header is missing or not exactly 8 bytes
  loses to one with a valid header; two without fall back to offset.

Tombstones compete under the same rule, so a tombstone with a lower version does not delete a value.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

#: The explicit survival rule shared by every plan: the greatest tuple wins.
SURVIVAL_ORDER = ("version_valid", "version", "offset")
STRATEGIES = ("offset", "timestamp", "header")



def _timestamp_valid() -> Column:
    return F.coalesce(F.col("timestamp") >= 0, F.lit(False))


def _header_value(name: Column) -> Column:
    """The value of the last header called ``name`` (null when there is none)."""
    matching = F.filter("headers", lambda h: h["key"] == name)
    return F.get(matching, F.size(matching) - 1)["value"]


def _big_endian_long(value: Column) -> Column:
    unsigned = F.conv(F.hex(value), 16, 10).cast("decimal(20,0)")
    two_63, two_64 = (F.lit(str(2**n)).cast("decimal(20,0)") for n in (63, 64))
    return F.when(unsigned >= two_63, unsigned - two_64).otherwise(unsigned).cast("long")


def version_columns(strategy: str, header: Column | str | None = None) -> tuple[Column, Column]:
    """``(version_valid, version)`` expressions for a strategy; ``header`` names the header (a column or text)."""
    if strategy == "offset":
        return F.lit(1), F.col("offset")
    if strategy == "timestamp":
        valid = _timestamp_valid()
        return valid.cast("int"), F.when(valid, F.col("timestamp")).otherwise(F.lit(-1).cast("long"))
    if strategy == "header":
        if header is None:
            raise ValueError("the header strategy needs a header name")
        value = _header_value(F.lit(header) if isinstance(header, str) else header)
        valid = F.coalesce(F.octet_length(value) == 8, F.lit(False))
        return valid.cast("int"), F.when(valid, _big_endian_long(value)).otherwise(F.lit(-1).cast("long"))
    raise ValueError(f"unknown compaction strategy {strategy!r}; expected one of {STRATEGIES}")


def _with(valid: Column, version: Column) -> Callable[[DataFrame], DataFrame]:
    return lambda df: df.withColumns({"version_valid": valid, "version": version})


def by_offset(df: DataFrame) -> DataFrame:
    """The ``offset`` strategy (Kafka's default)."""
    return _with(*version_columns("offset"))(df)


def by_timestamp(df: DataFrame) -> DataFrame:
    """The ``timestamp`` strategy."""
    return _with(*version_columns("timestamp"))(df)


def by_header(name: str) -> Callable[[DataFrame], DataFrame]:
    """The ``header`` strategy reading the header ``name``."""
    return _with(*version_columns("header", name))


def by_configured_strategy(df: DataFrame) -> DataFrame:
    """Each row by its partition's strategy, given in the ``strategy`` and ``strategy_header`` columns."""
    cases = [(F.col("strategy") == name, version_columns(name, F.col("strategy_header"))) for name in STRATEGIES]
    valid = F.when(cases[0][0], cases[0][1][0])
    version = F.when(cases[0][0], cases[0][1][1])
    for condition, (v, ver) in cases[1:]:
        valid = valid.when(condition, v)
        version = version.when(condition, ver)
    return _with(valid, version)(df)
