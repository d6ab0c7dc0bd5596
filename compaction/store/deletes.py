"""The deletion-vector object format: a segment's removed offsets as one sorted Parquet column; write and read.

A deletion vector hides records of a segment without rewriting it. Its object is immutable like a segment's:
written before the manifest that names it is committed, and checked on every read against the size and
checksum that manifest recorded.
"""

from __future__ import annotations

import uuid
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compaction.errors import CorruptSegmentError
from compaction.store.manifest import DeletionVector, SegmentMeta, deletes_name
from compaction.store.names import TopicPartition
from compaction.store.segment import check_committed, checksum
from compaction.store.storage import Storage

DELETES_SCHEMA = pa.schema([("offset", pa.int64())])


def write_deletes(
    storage: Storage,
    tp: TopicPartition,
    segment: SegmentMeta,
    offsets: pa.Array,
    *,
    created_ms: int,
    live_min_delete_horizon_ms: int | None,
    live_first_timestamp: int | None = None,
    live_max_timestamp: int | None = None,
    object_id: str | None = None,
) -> DeletionVector:
    """Write a deletion vector (sorted, distinct offsets) for ``segment``; not yet committed. The caller gives
    the figures of the records it leaves visible (earliest delete horizon, first and largest timestamp) and
    may name the object (``object_id``, unique to this write; default a random one)."""
    offsets = pc.unique(offsets.cast(pa.int64()))
    offsets = offsets.take(pc.sort_indices(offsets))
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table([offsets], schema=DELETES_SCHEMA), sink, compression="zstd")
    data = sink.getvalue().to_pybytes()
    rel = deletes_name(segment.base_offset, object_id or uuid.uuid4().hex)
    storage.write_bytes(f"{tp.prefix}/{rel}", data, flush=False)  # the commit naming it flushes it
    return DeletionVector(
        path=rel,
        count=len(offsets),
        size_bytes=len(data),
        checksum=checksum(data),
        created_ms=created_ms,
        live_min_delete_horizon_ms=live_min_delete_horizon_ms,
        live_first_timestamp=live_first_timestamp,
        live_max_timestamp=live_max_timestamp,
    )


def read_deletes(storage: Storage, tp: TopicPartition, vector: DeletionVector) -> pa.Array:
    """The offsets a committed deletion vector removes; CorruptSegmentError if its object is not as committed."""
    rel = f"{tp.prefix}/{vector.path}"
    where = storage.describe(rel)
    data = storage.read_buffer(rel, vector.size_bytes)
    check_committed(data, "deletion vector", where, vector.size_bytes, vector.checksum)
    try:
        table = pq.read_table(pa.BufferReader(data), use_threads=False)
    except (pa.ArrowException, OSError) as err:
        raise CorruptSegmentError(f"deletion vector {where} is not a readable Parquet file: {err}") from err
    if table.schema != DELETES_SCHEMA:
        raise CorruptSegmentError(f"deletion vector {where} has columns {table.schema}, expected {DELETES_SCHEMA}")
    return table.column("offset").combine_chunks()


def members(offsets: np.ndarray, listed: np.ndarray) -> np.ndarray:
    """Which ``offsets`` occur in ``listed`` (ascending, as a deletion vector holds them): a binary search, with no
    hash set built for every batch a reader checks."""
    if not len(listed):
        return np.zeros(len(offsets), dtype=bool)
    at = np.searchsorted(listed, offsets)
    at[at == len(listed)] = 0
    return cast(np.ndarray, listed[at] == offsets)
