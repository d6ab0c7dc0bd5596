"""How many bytes each record takes as a record batch of its own: what a topic's ``max.message.bytes`` bounds.

Kafka's broker refuses a batch larger than the topic's ``max.message.bytes`` (a producer sends a record too large
for it nowhere); a record alone in an uncompressed batch is the smallest that holds it: the batch's 61-byte header
and the record (its length, attributes, timestamp and offset deltas of 0, key, value and headers, as varints and
bytes), as :mod:`~compaction.kafka.encode` lays it out.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.kafka import varint
from compaction.kafka.layout import HEADER_BYTES


def _length(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each value's byte length, -1 for a null (as a record's key and value lengths are written)."""
    return cast(np.ndarray, pc.binary_length(values.cast(pa.large_binary())).fill_null(-1).to_numpy().astype(np.int64))


def _field(length: np.ndarray) -> np.ndarray:
    """The bytes of a length-prefixed field: its varint length and its bytes (none for a null)."""
    return cast(np.ndarray, varint.sizes(varint.zigzag(length)) + np.maximum(length, 0))


def single_record_batch_bytes(
    keys: pa.Array | pa.ChunkedArray,
    values: pa.Array | pa.ChunkedArray,
    headers: pa.Array | pa.ChunkedArray | None = None,
) -> np.ndarray:
    """Per record, the size in bytes of an uncompressed record batch holding only it."""
    rows = len(keys)
    header_bytes = np.zeros(rows, dtype=np.int64)
    count = np.zeros(rows, dtype=np.int64)
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    if headers is not None and headers.null_count < rows:
        count = pc.list_value_length(headers).fill_null(0).to_numpy().astype(np.int64)
        if count.any():
            entries = pc.list_flatten(headers)
            each = _field(_length(entries.field("key"))) + _field(_length(entries.field("value")))
            owner = pc.list_parent_indices(headers).to_numpy()
            header_bytes = np.bincount(owner, weights=each, minlength=rows).astype(np.int64)
    # Attributes, and the timestamp and offset deltas (0: one byte each).
    body = 3 + _field(_length(keys)) + _field(_length(values)) + varint.sizes(varint.zigzag(count)) + header_bytes
    return cast(np.ndarray, HEADER_BYTES + body + varint.sizes(varint.zigzag(body)))
