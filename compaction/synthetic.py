"""Synthetic keyed topics (the `generate` command) for demos, tests and benchmarks, deterministic for a given seed."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from compaction.errors import CommitConflictError, InvalidArgumentError, InvalidRecordsError
from compaction.store import Store, TopicPartition, Writer
from compaction.store.log import appended_state
from compaction.store.manifest import Manifest
from compaction.store.names import topic_name_problem
from compaction.store.segment import HEADER_TYPE, NO_PRODUCER, SEGMENT_SCHEMA

KEY_PREFIX = b"key-"
KEY_DIGITS = 10
_ALPHABET = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", dtype=np.uint8)


@dataclass(frozen=True)
class GenerateSpec:
    """What to generate; ``records`` and ``keys`` are per topic, spread evenly over its partitions."""

    topics: tuple[str, ...] = ("orders",)
    partitions: int = 4
    records: int = 100_000
    keys: int = 10_000
    update_ratio: float | None = None
    tombstone_ratio: float = 0.01
    keyless_ratio: float = 0.0
    value_bytes: int = 100
    end_time_ms: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    time_span_ms: int = 7 * 86_400_000
    missing_timestamp_ratio: float = 0.0
    segment_records: int = 10_000
    version_header: str | None = None
    partition0_share: float | None = None  # skew: this share of records (and keys) goes to partition 0
    hot_key_records: int = 0  # skew: this many of partition 0's records update one single key
    seed: int = 0

    def check(self) -> None:
        for name in ("update_ratio", "tombstone_ratio", "keyless_ratio", "missing_timestamp_ratio",
                     "partition0_share"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise InvalidRecordsError(f"generate: {name} must be in [0, 1], got {value}")
        for name in ("partitions", "records", "keys", "segment_records"):
            if getattr(self, name) < 1:
                raise InvalidRecordsError(f"generate: {name} must be at least 1, got {getattr(self, name)}")
        if self.value_bytes < 0 or self.time_span_ms < 0:
            raise InvalidRecordsError("generate: value_bytes and time_span_ms must not be negative")


def _share(total: int, parts: int, index: int, first: float | None = None) -> int:
    """Partition ``index``'s part of ``total``: even, or ``first`` of it to partition 0 and the rest even."""
    if first is None or parts == 1:
        return total // parts + (1 if index < total % parts else 0)
    head = round(total * first)
    return head if index == 0 else _share(total - head, parts - 1, index - 1)


def _key_ids(rng: np.random.Generator, n: int, keys: int, update_ratio: float | None) -> np.ndarray:
    if update_ratio is None:
        return rng.integers(0, keys, n, dtype=np.int64)
    # Each record updates a key written earlier with probability update_ratio, else inserts a new key.
    is_new = rng.random(n) >= update_ratio
    is_new[0] = True
    created = np.minimum(np.cumsum(is_new), keys)
    is_new &= np.concatenate(([True], created[1:] > created[:-1]))
    existing = created - is_new
    picked = np.floor(rng.random(n) * np.maximum(existing, 1)).astype(np.int64)
    return np.where(is_new, created - 1, picked)


def _fixed_binary(data: np.ndarray, width: int, valid: np.ndarray | None) -> pa.Array:
    n = len(data) // width if width else len(valid if valid is not None else [])
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    bitmap = None
    null_count = 0
    if valid is not None and not valid.all():
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
        null_count = int((~valid).sum())
    return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(offsets.tobytes()),
                                                  pa.py_buffer(data.tobytes())], null_count=null_count)


def key_bytes(ids: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """Keys ``key-0000000042`` for integer ids, as a binary array (null where ``valid`` is False)."""
    n = len(ids)
    width = len(KEY_PREFIX) + KEY_DIGITS
    out = np.empty((n, width), dtype=np.uint8)
    out[:, : len(KEY_PREFIX)] = np.frombuffer(KEY_PREFIX, dtype=np.uint8)
    powers = 10 ** np.arange(KEY_DIGITS - 1, -1, -1, dtype=np.int64)
    out[:, len(KEY_PREFIX):] = (ids[:, None] // powers) % 10 + 48
    return _fixed_binary(out.reshape(-1), width, valid)


def partition_records(spec: GenerateSpec, topic_index: int, partition: int, first_offset: int) -> pa.Table:
    """The generated records of one partition, offsets starting at ``first_offset``."""
    n = _share(spec.records, spec.partitions, partition, spec.partition0_share)
    keys = max(1, _share(spec.keys, spec.partitions, partition, spec.partition0_share))
    rng = np.random.default_rng([spec.seed, topic_index, partition])
    keyless = rng.random(n) < spec.keyless_ratio
    ids = _key_ids(rng, n, keys, spec.update_ratio)
    if partition == 0 and spec.hot_key_records:
        ids[rng.choice(n, size=min(spec.hot_key_records, n), replace=False)] = 0
    ids = ids * spec.partitions + partition
    tombstone = (rng.random(n) < spec.tombstone_ratio) & ~keyless
    values = _ALPHABET[np.frombuffer(rng.bytes(n * spec.value_bytes), dtype=np.uint8) & 63]
    step = spec.time_span_ms / max(n, 1)
    jitter = rng.integers(-1000, 1001, n) if n else np.zeros(0, dtype=np.int64)
    start = spec.end_time_ms - spec.time_span_ms
    timestamps = np.clip(start + (np.arange(n) * step).astype(np.int64) + jitter, 0, spec.end_time_ms)
    has_ts = rng.random(n) >= spec.missing_timestamp_ratio
    columns = {
        "offset": pa.array(np.arange(first_offset, first_offset + n, dtype=np.int64)),
        "timestamp": pa.array(timestamps, pa.int64(), mask=~has_ts),
        "key": key_bytes(ids, ~keyless),
        "value": _fixed_binary(values, spec.value_bytes, ~tombstone),
        "headers": _version_headers(rng, n, spec.version_header),
        "producer_id": pa.array(np.full(n, NO_PRODUCER, dtype=np.int64)),
        "producer_epoch": pa.array(np.full(n, -1, dtype=np.int16)),
        "is_transactional": pa.array(np.zeros(n, dtype=bool)),
        "is_control": pa.array(np.zeros(n, dtype=bool)),
        "control_type": pa.nulls(n, pa.string()),
        "delete_horizon_ms": pa.nulls(n, pa.int64()),
    }
    return pa.table(columns, schema=SEGMENT_SCHEMA)


def _version_headers(rng: np.random.Generator, n: int, name: str | None) -> pa.Array:
    """Without a name, no headers; with one, one header per record holding a mostly increasing version."""
    if name is None:
        return pa.nulls(n, HEADER_TYPE)
    versions = np.arange(n, dtype=np.int64) + rng.integers(-100, 101, n)
    values = _fixed_binary(versions.astype(">i8").view(np.uint8), 8, None)
    names = pa.repeat(pa.scalar(name, pa.string()), n)
    entries = pa.StructArray.from_arrays([names, values], names=["key", "value"])
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), entries, type=HEADER_TYPE)


def generate(store: Store, spec: GenerateSpec, *, now_ms: int, writer: Writer | None = None,
             threads: int = 4) -> list[Manifest]:
    """Write the spec's topics into the store (after any existing log end) and commit each partition."""
    spec.check()
    writer = writer or Writer(id="compaction-generate")

    def one(item: tuple[int, str, int]) -> Manifest:
        topic_index, topic, partition = item
        tp = TopicPartition(topic, partition)
        latest = store.latest(tp)
        first = latest.log_end_offset if latest else 0
        table = partition_records(spec, topic_index, partition, first)
        segments = []
        for start in range(0, table.num_rows, spec.segment_records):
            chunk = table.slice(start, spec.segment_records)
            base = chunk.column("offset")[0].as_py()
            segments.append(store.write_segment(tp, chunk, base, base + chunk.num_rows, created_ms=now_ms))

        def build(current: Manifest | None) -> dict:
            if (current.log_end_offset if current else 0) != first:
                raise CommitConflictError(f"partition {tp} changed while generating into it")
            return appended_state(current, segments, table, f"generated records for {tp}")

        return store.commit(tp, build, writer=writer, operation="generate", now_ms=now_ms)

    items = [(i, topic, p) for i, topic in enumerate(spec.topics) for p in range(spec.partitions)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(one, items))


def topic_names(value: str | Sequence[str]) -> tuple[str, ...]:
    """Topic names from ``a,b`` or a list, all checked before any is written (a bad one must not leave half a store)."""
    names = value.split(",") if isinstance(value, str) else list(value)
    topics = tuple(name.strip() for name in names if name.strip())
    for topic in topics:
        problem = topic_name_problem(topic)
        if problem:
            raise InvalidArgumentError(f"topic name {topic!r} {problem}")
    return topics
