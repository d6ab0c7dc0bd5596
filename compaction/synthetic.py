"""Synthetic keyed topics (the `generate` command) for demos, tests and benchmarks, deterministic for a given seed."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.errors import CommitConflictError, InvalidArgumentError, InvalidRecordsError
from compaction.kafka import CODECS
from compaction.kafka.layout import CONTROL
from compaction.schema import HEADER_TYPE
from compaction.store import SegmentFormat, Store, TopicPartition, Writer
from compaction.store.formats import frame_batches
from compaction.store.log import appended_state
from compaction.store.manifest import Manifest
from compaction.store.names import topic_name_problem
from compaction.store.segment import NO_PRODUCER, SEGMENT_SCHEMA

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
    segment_format: SegmentFormat = SegmentFormat.PARQUET  # or KAFKA: .log segments of record batches
    compression: str = "none"  # the batches' codec (kafka format only)
    transactional_ratio: float = 0.0  # share of records written in transactions, each ended by a marker
    abort_ratio: float = 0.0  # share of those transactions that abort
    transaction_records: int = 100  # records per transaction

    def check(self) -> None:
        for name in (
            "update_ratio",
            "tombstone_ratio",
            "keyless_ratio",
            "missing_timestamp_ratio",
            "partition0_share",
            "transactional_ratio",
            "abort_ratio",
        ):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise InvalidRecordsError(f"generate: {name} must be in [0, 1], got {value}")
        if self.segment_format not in list(SegmentFormat):
            raise InvalidRecordsError(
                f"generate: no segment format {self.segment_format!r}; the formats are "
                f"{[f.value for f in SegmentFormat]}"
            )
        if self.compression not in CODECS:
            raise InvalidRecordsError(f"generate: no compression {self.compression!r}; Kafka's are {list(CODECS)}")
        if self.compression != "none" and self.segment_format != SegmentFormat.KAFKA:
            raise InvalidRecordsError("generate: compression applies to the kafka format's batches only")
        for name in ("partitions", "records", "keys", "segment_records", "transaction_records"):
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
    return pa.Array.from_buffers(
        pa.binary(), n, [bitmap, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes())], null_count=null_count
    )


def key_bytes(ids: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """Keys ``key-0000000042`` for integer ids, as a binary array (null where ``valid`` is False)."""
    n = len(ids)
    width = len(KEY_PREFIX) + KEY_DIGITS
    out = np.empty((n, width), dtype=np.uint8)
    out[:, : len(KEY_PREFIX)] = np.frombuffer(KEY_PREFIX, dtype=np.uint8)
    powers = 10 ** np.arange(KEY_DIGITS - 1, -1, -1, dtype=np.int64)
    out[:, len(KEY_PREFIX) :] = (ids[:, None] // powers) % 10 + 48
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
    table = pa.table(columns, schema=SEGMENT_SCHEMA)
    return _transactions(spec, rng, table, first_offset) if spec.transactional_ratio else table


#: Transactional producers' ids (a few of them, each running its transactions one after another).
FIRST_PRODUCER_ID = 1000
TRANSACTIONAL_PRODUCERS = 8


def _transactions(spec: GenerateSpec, rng: np.random.Generator, table: pa.Table, first_offset: int) -> pa.Table:
    """Turn runs of ``transaction_records`` records into transactions (with ``transactional_ratio``), each
    followed by its commit or abort marker (abort with ``abort_ratio``); offsets are laid out again."""
    n = table.num_rows
    size = spec.transaction_records
    runs = (n + size - 1) // size
    in_txn = rng.random(runs) < spec.transactional_ratio
    aborts = rng.random(runs) < spec.abort_ratio
    producer = FIRST_PRODUCER_ID + np.arange(runs) % TRANSACTIONAL_PRODUCERS
    run_of = np.arange(n) // size
    txn = in_txn[run_of]
    table = table.set_column(
        table.column_names.index("producer_id"),
        "producer_id",
        pa.array(np.where(txn, producer[run_of], NO_PRODUCER), pa.int64()),
    )
    table = table.set_column(
        table.column_names.index("producer_epoch"), "producer_epoch", pa.array(np.where(txn, 0, -1).astype(np.int16))
    )
    table = table.set_column(table.column_names.index("is_transactional"), "is_transactional", pa.array(txn))
    ends = np.flatnonzero(in_txn)
    last_row = np.minimum((ends + 1) * size, n) - 1
    stamps = table.column("timestamp").take(pa.array(last_row))
    markers = pa.table(
        {
            "timestamp": stamps,
            "key": pa.nulls(len(ends), pa.binary()),
            "value": pa.nulls(len(ends), pa.binary()),
            "headers": pa.nulls(len(ends), HEADER_TYPE),
            "producer_id": pa.array(producer[ends], pa.int64()),
            "producer_epoch": pa.array(np.zeros(len(ends), dtype=np.int16)),
            "is_transactional": pa.array(np.ones(len(ends), dtype=bool)),
            "is_control": pa.array(np.ones(len(ends), dtype=bool)),
            "control_type": pa.array(np.where(aborts[ends], "abort", "commit")),
            "delete_horizon_ms": pa.nulls(len(ends), pa.int64()),
        }
    )
    # Each marker follows its transaction's last record: sort by (row, marker after data).
    order = np.argsort(np.concatenate([np.arange(n) * 2, last_row * 2 + 1]), kind="stable")
    data = table.drop_columns(["offset"])
    merged = pa.concat_tables([data, markers.select(data.column_names)]).take(pa.array(order))
    offsets = pa.array(np.arange(first_offset, first_offset + merged.num_rows, dtype=np.int64))
    return merged.add_column(0, "offset", offsets).cast(SEGMENT_SCHEMA)


def sequenced_batches(records: pa.Table, compression: str, sequences: dict[int, int]) -> pa.Table:
    """Batch rows for generated records, with each producer's sequence numbers running on from ``sequences``
    (updated); control batches have none, as in Kafka."""
    batches = frame_batches(records, compression)
    producers = batches.column("producer_id").to_pylist()
    counts = batches.column("record_count").to_pylist()
    control = (pc.bit_wise_and(batches.column("attributes"), CONTROL).to_numpy(zero_copy_only=False) != 0).tolist()
    base_sequence = []
    for producer, count, is_control in zip(producers, counts, control, strict=True):
        if producer < 0 or is_control:
            base_sequence.append(-1)
            continue
        base_sequence.append(sequences.get(producer, 0))
        sequences[producer] = base_sequence[-1] + count
    return batches.set_column(
        batches.column_names.index("base_sequence"), "base_sequence", pa.array(base_sequence, pa.int32())
    )


def _version_headers(rng: np.random.Generator, n: int, name: str | None) -> pa.Array:
    """Without a name, no headers; with one, one header per record holding a mostly increasing version."""
    if name is None:
        return pa.nulls(n, HEADER_TYPE)
    versions = np.arange(n, dtype=np.int64) + rng.integers(-100, 101, n)
    values = _fixed_binary(versions.astype(">i8").view(np.uint8), 8, None)
    names = pa.repeat(pa.scalar(name, pa.string()), n)
    entries = pa.StructArray.from_arrays([names, values], names=["key", "value"])
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), entries, type=HEADER_TYPE)


def generate(
    store: Store, spec: GenerateSpec, *, now_ms: int, writer: Writer | None = None, threads: int = 4
) -> list[Manifest]:
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
        sequences: dict[int, int] = {}
        for start in range(0, table.num_rows, spec.segment_records):
            chunk = table.slice(start, spec.segment_records)
            base = chunk.column("offset")[0].as_py()
            batches = (
                sequenced_batches(chunk, spec.compression, sequences)
                if spec.segment_format == SegmentFormat.KAFKA
                else None
            )
            segments.append(
                store.objects.write_segment(
                    tp,
                    chunk,
                    base,
                    base + chunk.num_rows,
                    created_ms=now_ms,
                    segment_format=spec.segment_format,
                    batches=batches,
                )
            )

        def build(current: Manifest | None) -> dict[str, Any]:
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
