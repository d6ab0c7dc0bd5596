"""Strategies as DataFrame transforms: versions for offset, timestamp and header (KIP-280), compared by chispa."""

from __future__ import annotations

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from compaction import arrow_dedupe
from compaction.segment import HEADER_TYPE
from compaction.strategies import by_configured_strategy, by_header, by_offset, by_timestamp

pytestmark = pytest.mark.spark

SCHEMA = "offset long, timestamp long, headers array<struct<key:string,value:binary>>"
EXPECTED = f"{SCHEMA}, version_valid int, version long"


def be(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def arrow_versions(rows: list[tuple], strategy: str, header: str = "") -> list[tuple[int, int]]:
    """The Arrow plan's reading of the same rows, to hold it to the same expectations."""
    table = pa.table({"offset": pa.array([r[0] for r in rows], pa.int64()),
                      "timestamp": pa.array([r[1] for r in rows], pa.int64()),
                      "headers": pa.array([r[2] for r in rows], HEADER_TYPE)})
    valid, version = arrow_dedupe.versions(table, strategy, header)
    return list(zip(valid.tolist(), version.tolist(), strict=True))


def expected_versions(expected) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    return [(r["version_valid"], r["version"]) for r in expected.orderBy("offset").collect()]


def test_offset_strategy_uses_the_offset(spark) -> None:  # type: ignore[no-untyped-def]
    df = spark.createDataFrame([(5, None, None), (9, 1, None)], SCHEMA)
    expected = spark.createDataFrame([(5, None, None, 1, 5), (9, 1, None, 1, 9)], EXPECTED)
    assert_df_equality(df.transform(by_offset), expected, ignore_nullable=True)
    assert arrow_versions([(5, None, None), (9, 1, None)], "offset") == expected_versions(expected)


def test_timestamp_strategy_invalidates_missing_and_negative_timestamps(spark) -> None:  # type: ignore[no-untyped-def]
    rows = [(0, 1000, None), (1, None, None), (2, -1, None), (3, 0, None)]
    df = spark.createDataFrame(rows, SCHEMA)
    expected = spark.createDataFrame(
        [(0, 1000, None, 1, 1000), (1, None, None, 0, -1), (2, -1, None, 0, -1), (3, 0, None, 1, 0)], EXPECTED)
    assert_df_equality(df.transform(by_timestamp), expected, ignore_nullable=True)
    assert arrow_versions(rows, "timestamp") == expected_versions(expected)


def test_header_strategy_reads_the_last_occurrence_as_a_big_endian_long(spark) -> None:  # type: ignore[no-untyped-def]
    rows = [
        (0, None, [("v", be(7))]),
        (1, None, [("v", be(7)), ("other", be(99)), ("v", be(-3))]),  # last occurrence wins, even if lower
        (2, None, [("v", b"\x01\x02")]),  # not 8 bytes: malformed
        (3, None, [("V", be(8))]),  # another header (names are case-sensitive)
        (4, None, None),  # no headers at all
        (5, None, [("v", None)]),  # a null value
        (6, None, [("v", be(2**63 - 1))]),
        (7, None, [("v", be(-(2**63)))]),
        (8, None, [("v", b"\x01\x02"), ("v", be(4))]),
    ]
    df = spark.createDataFrame(rows, SCHEMA)
    expected = spark.createDataFrame([
        (*rows[0], 1, 7), (*rows[1], 1, -3), (*rows[2], 0, -1), (*rows[3], 0, -1), (*rows[4], 0, -1),
        (*rows[5], 0, -1), (*rows[6], 1, 2**63 - 1), (*rows[7], 1, -(2**63)), (*rows[8], 1, 4)], EXPECTED)
    assert_df_equality(df.transform(by_header("v")), expected, ignore_nullable=True)
    assert arrow_versions(rows, "header", "v") == expected_versions(expected)


def test_configured_strategy_applies_each_rows_own_strategy(spark) -> None:  # type: ignore[no-untyped-def]
    schema = f"{SCHEMA}, strategy string, strategy_header string"
    df = spark.createDataFrame([(1, 50, [("seq", be(3))], "offset", ""), (2, 50, [("seq", be(3))], "timestamp", ""),
                                (3, 50, [("seq", be(3))], "header", "seq"), (4, 50, None, "header", "seq")], schema)
    result = df.transform(by_configured_strategy).select("offset", "version_valid", "version")
    expected = spark.createDataFrame([(1, 1, 1), (2, 1, 50), (3, 1, 3), (4, 0, -1)],
                                     "offset long, version_valid int, version long")
    assert_df_equality(result, expected, ignore_nullable=True)
