"""Kafka's default partitioner for keyed records: which partition a producer sends a key to.

``Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions`` (``BuiltInPartitioner.partitionForKey``, the
Java client's, which librdkafka's ``murmur2_random`` and kafka-python's ``DefaultPartitioner`` follow): the
32-bit MurmurHash2 with Kafka's seed ``0x9747b28c``, its little-endian blocks and its tail cases, and the sign
bit cleared, not ``abs()``. Written out here (two dozen lines) rather than taken from a Kafka client: the
product depends on no client library. :func:`default_partitions` is the same hash over an Arrow array of keys at
once (numpy's 32-bit arithmetic wraps as Java's does), for writes of millions of records.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

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
        k = int.from_bytes(data[i : i + 4], "little")
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


def _murmur2_chunk(keys: pa.Array) -> np.ndarray:
    """:func:`murmur2` of every key of a binary array (a null key hashes as an empty one), as uint32."""
    keys = keys.cast(pa.large_binary())
    n = len(keys)
    bounds = np.frombuffer(keys.buffers()[1], dtype=np.int64)[keys.offset : keys.offset + n + 1]
    data_buffer = keys.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    starts = bounds[:-1]
    lengths = np.diff(bounds)
    m = np.uint32(_M)
    with np.errstate(over="ignore"):
        h = (np.uint32(SEED) ^ lengths.astype(np.uint32)).astype(np.uint32)
        blocks = lengths // 4
        shortest = int(blocks.min(initial=0))
        for i in range(int(blocks.max(initial=0))):
            every = i < shortest  # keys mostly share a length: no row selection then
            rows = slice(None) if every else np.flatnonzero(blocks > i)
            at = starts[rows] + 4 * i
            k = (
                data[at].astype(np.uint32)
                | (data[at + 1].astype(np.uint32) << 8)
                | (data[at + 2].astype(np.uint32) << 16)
                | (data[at + 3].astype(np.uint32) << 24)
            )
            k *= m
            k ^= k >> np.uint32(_R)
            k *= m
            h[rows] = (h[rows] * m) ^ k
        tail = lengths % 4
        whole = starts + blocks * 4
        for size, shift in ((3, 16), (2, 8)):
            rows = np.flatnonzero(tail >= size)
            h[rows] ^= data[whole[rows] + size - 1].astype(np.uint32) << np.uint32(shift)
        rows = np.flatnonzero(tail >= 1)
        h[rows] ^= data[whole[rows]].astype(np.uint32)
        h[rows] *= m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
    return h


def default_partitions(keys: pa.Array | pa.ChunkedArray, partitions: int) -> np.ndarray:
    """:func:`default_partition` of every key of a binary array (int32); -1 for a null key, which Kafka's partitioner
    does not place by hash (a keyless record)."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    chunks = keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]
    hashed = np.concatenate([_murmur2_chunk(c) for c in chunks]) if chunks else np.zeros(0, np.uint32)
    placed = ((hashed & np.uint32(0x7FFFFFFF)) % np.uint32(partitions)).astype(np.int32)
    valid = keys.is_valid().to_numpy(zero_copy_only=False) if keys.null_count else None
    if valid is not None:
        placed[~valid] = -1
    return placed
