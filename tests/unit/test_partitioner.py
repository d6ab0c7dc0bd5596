"""Kafka's default partitioner: the partition a producer sends a key to (``forget --partitions``)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from compaction.kafka.partitioner import default_partition, default_partitions, murmur2


def _java_int(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # Kafka's UtilsTest.testMurmur2: Utils.murmur2 of these strings' bytes, as Java's (signed) int.
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_gives_kafkas_values(data: bytes, expected: int) -> None:
    assert _java_int(murmur2(data)) == expected


def test_murmur2_agrees_with_kafka_python_on_every_tail_length() -> None:
    rng = random.Random(5)
    for _ in range(3000):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 67)))
        assert murmur2(data) == kafka_python_murmur2(data) & 0xFFFFFFFF, data


def test_the_partition_clears_the_sign_bit_instead_of_taking_the_absolute_value() -> None:
    # murmur2(b"21") is negative as a Java int: toPositive keeps its low 31 bits (abs() would give another number).
    assert default_partition(b"21", 1000) == 340  # abs() would give 308
    assert default_partition(b"abc", 7) == 4
    assert default_partition(b"", 3) == (murmur2(b"") & 0x7FFFFFFF) % 3


def test_a_topic_has_at_least_one_partition() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        default_partition(b"k", 0)


def test_an_array_of_keys_is_placed_as_each_key_alone() -> None:
    rng = random.Random(11)
    keys: list[bytes | None] = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))) for _ in range(2000)]
    keys[3] = keys[700] = None
    array = pa.array(keys, pa.binary())
    for partitions in (1, 3, 64):
        expected = [-1 if k is None else default_partition(k, partitions) for k in keys]
        assert default_partitions(array, partitions).tolist() == expected
        # A sliced chunk and a chunked array read the same keys.
        chunked = pa.chunked_array([array.slice(0, 999), array.slice(999)])
        assert default_partitions(chunked, partitions).tolist() == expected
        assert default_partitions(array.slice(5, 10), partitions).tolist() == expected[5:15]
    assert default_partitions(pa.array([b"21"]), 1000).tolist() == [340]
    with pytest.raises(ValueError, match="at least one partition"):
        default_partitions(array, 0)
