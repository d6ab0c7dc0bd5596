"""Kafka's default partitioner for keyed records: which partition a producer sends a key to.

``Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions`` (``BuiltInPartitioner.partitionForKey``, the
Java client's, which librdkafka's ``murmur2_random`` and kafka-python's ``DefaultPartitioner`` follow): the
32-bit MurmurHash2 with Kafka's seed ``0x9747b28c``, its little-endian blocks and its tail cases, and the sign
bit cleared, not ``abs()``. Written out here (two dozen lines) rather than taken from a Kafka client: the
product depends on no client library.
"""

from __future__ import annotations

SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 of ``data``, as an unsigned 32-bit integer (Java's int
    read as unsigned)."""
    length = len(data)
    h = (SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def default_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner sends ``key`` to, among ``partitions`` (at least 1)."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
