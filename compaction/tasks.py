"""Executor-side work: read the facts a pass decides on, and rewrite segment groups.

Both run inside Spark tasks on pyarrow and fsspec (so the same code reads local disk and S3). A failure
is caught at the partition's boundary and returned as an ``error`` row: one bad partition (a corrupt or
missing segment) must not stop the others (SPEC §5).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.manifest import SegmentMeta
from compaction.segment import HEADER_TYPE
from compaction.store import Store, TopicPartition
from compaction.transactions import transaction_facts

#: One row per record of a cleaned range (plus one ``error`` row for a partition that could not be read).
FACTS_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("segment_base", pa.int64()),
    ("offset", pa.int64()),
    ("key", pa.binary()),
    ("timestamp", pa.int64()),
    ("headers", HEADER_TYPE),
    ("is_tombstone", pa.bool_()),
    ("delete_horizon_ms", pa.int64()),
    ("is_control", pa.bool_()),
    ("aborted", pa.bool_()),
    ("marker_pending", pa.bool_()),
    ("strategy", pa.string()),
    ("strategy_header", pa.string()),
    ("range_last_offset", pa.int64()),
    ("delete_retention_ms", pa.int64()),
    ("keyless_drop", pa.bool_()),
    ("error", pa.string()),
])
FACTS_DDL = ("topic string, partition int, segment_base long, offset long, key binary, timestamp long, "
             "headers array<struct<key:string,value:binary>>, is_tombstone boolean, delete_horizon_ms long, "
             "is_control boolean, aborted boolean, marker_pending boolean, strategy string, strategy_header string, "
             "range_last_offset long, delete_retention_ms long, keyless_drop boolean, error string")

REWRITE_DDL = ("topic string, partition int, group_id int, segment string, records_read long, bytes_read long, "
               "records_written long, bytes_written long, error string")

_TXN_COLUMNS = ["offset", "producer_id", "is_transactional", "is_control", "control_type"]
BATCH_ROWS = 131_072


@dataclass(frozen=True)
class ReadTask:
    """Read one partition's cleaned range (or one key-hash bucket of it) for the survivor decision."""

    tp: TopicPartition
    store: Store
    segments: tuple[SegmentMeta, ...]
    beyond: tuple[SegmentMeta, ...]  # later segments whose markers may decide transactions in the range
    strategy: str
    strategy_header: str
    delete_retention_ms: int
    keyless_drop: bool
    bucket: int = 0
    buckets: int = 1


@dataclass(frozen=True)
class RewriteGroup:
    """Rewrite consecutive source segments into one segment covering their offset range."""

    tp: TopicPartition
    store: Store
    group_id: int
    sources: tuple[SegmentMeta, ...]
    horizon_ms: int
    created_ms: int

    @property
    def base_offset(self) -> int:
        return self.sources[0].base_offset

    @property
    def next_offset(self) -> int:
        return self.sources[-1].next_offset


def _columns_for(task: ReadTask, segment: SegmentMeta) -> list[str]:
    columns = ["offset", "key", "delete_horizon_ms"]
    if task.strategy == "timestamp":
        columns.append("timestamp")
    if task.strategy == "header":
        columns.append("headers")
    if segment.tombstone_count:
        columns.append("value")
    if segment.control_count or segment.transactional_count:
        columns += ["producer_id", "is_transactional", "is_control", "control_type"]
    return columns


def _column(table: pa.Table, name: str, type_: pa.DataType, default: Any = None) -> pa.Array:
    if name in table.column_names:
        return table.column(name).combine_chunks()
    return pa.nulls(table.num_rows, type_) if default is None else pa.array(np.full(table.num_rows, default), type_)


def key_buckets(keys: pa.Array, buckets: int) -> np.ndarray:
    """A stable bucket in ``[0, buckets)`` per key (CRC-32 of the key bytes); keyless rows get bucket 0."""
    result = np.zeros(len(keys), dtype=np.int64)
    for i, key in enumerate(keys.to_pylist()):
        if key is not None:
            result[i] = zlib.crc32(key) % buckets
    return result


def read_facts(task: ReadTask) -> pa.Table:
    """The facts table of a read task (raises StoreError on a bad segment)."""
    parts = []
    for segment in task.segments:
        table = task.store.read_segment(task.tp, segment, _columns_for(task, segment))
        n = table.num_rows
        is_control = _column(table, "is_control", pa.bool_(), False)
        key = _column(table, "key", pa.binary())
        value_null = pc.is_null(table.column("value")) if "value" in table.column_names else pa.array(np.zeros(n, bool))
        tombstone = pc.and_(pc.and_(pc.invert(pc.fill_null(is_control, False)), pc.is_valid(key)), value_null)
        parts.append(pa.table({
            "segment_base": pa.array(np.full(n, segment.base_offset, dtype=np.int64)),
            "offset": _column(table, "offset", pa.int64()),
            "key": key,
            "timestamp": _column(table, "timestamp", pa.int64()),
            "headers": _column(table, "headers", HEADER_TYPE),
            "is_tombstone": tombstone,
            "delete_horizon_ms": _column(table, "delete_horizon_ms", pa.int64()),
            "is_control": pc.fill_null(is_control, False),
            "producer_id": _column(table, "producer_id", pa.int64(), -1),
            "is_transactional": pc.fill_null(_column(table, "is_transactional", pa.bool_(), False), False),
            "control_type": _column(table, "control_type", pa.string()),
        }))
    facts = pa.concat_tables(parts) if parts else None
    if facts is None or facts.num_rows == 0:
        return FACTS_SCHEMA.empty_table()
    n = facts.num_rows
    aborted = np.zeros(n, dtype=bool)
    pending = np.zeros(n, dtype=bool)
    if any(s.transactional_count or s.control_count for s in (*task.segments, *task.beyond)):
        later = [task.store.read_segment(task.tp, s, _TXN_COLUMNS) for s in task.beyond]
        txn_rows = pa.concat_tables([facts.select(_TXN_COLUMNS), *[t.cast(facts.select(_TXN_COLUMNS).schema)
                                                                   for t in later]])
        found = transaction_facts(txn_rows)
        aborted, pending = found.aborted[:n], found.marker_pending[:n]
    last_offset = pc.max(facts.column("offset")).as_py()

    def constant(value: Any, type_: pa.DataType) -> pa.Array:
        return pa.array([value] * n, type_) if value is None else pa.repeat(pa.scalar(value, type_), n)

    result = pa.table({
        "topic": constant(task.tp.topic, pa.string()),
        "partition": constant(task.tp.partition, pa.int32()),
        "segment_base": facts.column("segment_base"),
        "offset": facts.column("offset"),
        "key": facts.column("key"),
        "timestamp": facts.column("timestamp"),
        "headers": facts.column("headers"),
        "is_tombstone": facts.column("is_tombstone"),
        "delete_horizon_ms": facts.column("delete_horizon_ms"),
        "is_control": facts.column("is_control"),
        "aborted": pa.array(aborted),
        "marker_pending": pa.array(pending),
        "strategy": constant(task.strategy, pa.string()),
        "strategy_header": constant(task.strategy_header, pa.string()),
        "range_last_offset": constant(last_offset, pa.int64()),
        "delete_retention_ms": constant(task.delete_retention_ms, pa.int64()),
        "keyless_drop": constant(task.keyless_drop, pa.bool_()),
        "error": constant(None, pa.string()),
    }, schema=FACTS_SCHEMA)
    if task.buckets > 1:
        buckets = key_buckets(result.column("key").combine_chunks(), task.buckets)
        result = result.filter(pa.array(buckets == task.bucket))
    return result


def error_facts(task: ReadTask, err: BaseException) -> pa.Table:
    row: dict[str, list[Any]] = {name: [None] for name in FACTS_SCHEMA.names}
    row.update(topic=[task.tp.topic], partition=[task.tp.partition], segment_base=[-1], offset=[-1],
               error=[f"{type(err).__name__}: {err}"])
    return pa.table(row, schema=FACTS_SCHEMA)


def read_facts_batches(batches: Iterator[pa.RecordBatch], tasks: dict[int, ReadTask]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: each input row names a read task; yields its facts (or its error row)."""
    for batch in batches:
        for task_id in batch.column("task").to_pylist():
            task = tasks[task_id]
            try:
                table = read_facts(task)
            except Exception as err:
                table = error_facts(task, err)
            yield from table.to_batches(max_chunksize=BATCH_ROWS)


def rewrite_group(group: RewriteGroup, kept: pa.Table) -> dict[str, Any]:
    """Write the group's surviving records (``kept``: offset, stamp) as one segment; returns a result row."""
    tp = group.tp
    kept = kept.filter(pc.is_valid(kept.column("offset")))
    keep_offsets = kept.column("offset").combine_chunks()
    stamp_offsets = kept.filter(pc.fill_null(kept.column("stamp"), False)).column("offset").combine_chunks()
    pieces, records_read = [], 0
    for source in group.sources:
        table = group.store.read_segment(tp, source)
        records_read += table.num_rows
        pieces.append(table.filter(pc.is_in(table.column("offset"), keep_offsets)))
    output = pa.concat_tables(pieces)
    if len(stamp_offsets):
        current = output.column("delete_horizon_ms")
        stamp = pc.and_(pc.is_in(output.column("offset"), stamp_offsets), pc.is_null(current))
        horizons = pc.if_else(stamp, pa.scalar(group.horizon_ms, pa.int64()), current)
        output = output.set_column(output.column_names.index("delete_horizon_ms"), "delete_horizon_ms", horizons)
    if output.num_rows != len(keep_offsets):
        raise RuntimeError(f"segment group {group.group_id} of {tp}: {len(keep_offsets)} survivors decided but "
                           f"{output.num_rows} found in the source segments")
    segment = group.store.write_segment(tp, output, group.base_offset, group.next_offset, created_ms=group.created_ms)
    return {"segment": segment.model_dump_json(), "records_read": records_read,
            "bytes_read": sum(s.size_bytes for s in group.sources), "records_written": output.num_rows,
            "bytes_written": segment.size_bytes}


def rewrite_group_arrow(key: tuple[Any, ...], kept: pa.Table, groups: dict[tuple[str, int, int], RewriteGroup]
                        ) -> pa.Table:
    """applyInArrow body for one (topic, partition, group_id)."""
    topic, partition, group_id = (k.as_py() for k in key)
    group = groups[(topic, partition, group_id)]
    row: dict[str, Any] = {"topic": topic, "partition": partition, "group_id": group_id, "segment": None,
                           "records_read": 0, "bytes_read": 0, "records_written": 0, "bytes_written": 0,
                           "error": None}
    try:
        row.update(rewrite_group(group, kept))
    except Exception as err:
        row["error"] = f"{type(err).__name__}: {err}"
    return pa.Table.from_pylist([row], schema=pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("group_id", pa.int32()), ("segment", pa.string()),
        ("records_read", pa.int64()), ("bytes_read", pa.int64()), ("records_written", pa.int64()),
        ("bytes_written", pa.int64()), ("error", pa.string())]))


def segment_from_json(text: str) -> SegmentMeta:
    return SegmentMeta.model_validate(json.loads(text))
