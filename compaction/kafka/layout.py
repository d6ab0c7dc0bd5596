"""Record batch v2's fixed layout, and the two tables a buffer of batches decodes to."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from compaction.errors import CorruptBatchError

# Attribute bits (DefaultRecordBatch).
CODEC_MASK = 0x07
LOG_APPEND_TIME = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
DELETE_HORIZON = 0x40

MAGIC = 2
#: ``RECORD_BATCH_OVERHEAD``: the header, and so the whole size of an empty batch.
HEADER_BYTES = 61
#: Base offset and length: the bytes a batch's length field does not count.
LOG_OVERHEAD = 12
MAGIC_AT = 16
CRC_AT = 17
#: The CRC covers the attributes to the end, so the partition leader epoch can change without it.
CRC_FROM = 21
NO_TIMESTAMP = -1
#: ControlRecordType: the type in a control record's key (version int16, type int16).
CONTROL_TYPES = {0: "abort", 1: "commit"}
#: Codec names by id (attribute bits 0-2); ids 5-7 are unassigned.
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

#: The batch header, big-endian, as a numpy record (``DefaultRecordBatch``'s field order).
HEADER = np.dtype(
    [
        ("base_offset", ">i8"),
        ("length", ">i4"),
        ("partition_leader_epoch", ">i4"),
        ("magic", "i1"),
        ("crc", ">u4"),
        ("attributes", ">i2"),
        ("last_offset_delta", ">i4"),
        ("base_timestamp", ">i8"),
        ("max_timestamp", ">i8"),
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("base_sequence", ">i4"),
        ("record_count", ">i4"),
    ]
)
assert HEADER.itemsize == HEADER_BYTES

#: One row per batch, in log order. ``compression`` and ``delete_horizon_ms`` restate attribute bits 0-2 and
#: 6 (the horizon is the base timestamp when bit 6 is set); ``position`` and ``size`` locate the batch's
#: bytes in the decoded buffer, so that a batch kept whole can be copied byte for byte.
BATCH_SCHEMA = pa.schema(
    [
        ("base_offset", pa.int64()),
        ("last_offset_delta", pa.int32()),
        ("partition_leader_epoch", pa.int32()),
        ("attributes", pa.int16()),
        ("compression", pa.string()),
        ("base_timestamp", pa.int64()),
        ("max_timestamp", pa.int64()),
        ("producer_id", pa.int64()),
        ("producer_epoch", pa.int16()),
        ("base_sequence", pa.int32()),
        ("record_count", pa.int32()),
        ("delete_horizon_ms", pa.int64()),
        ("position", pa.int64()),
        ("size", pa.int32()),
    ]
)


@dataclass(frozen=True)
class Decoded:
    """What a buffer of batches decodes to: its records, its batches, and which batch holds each record."""

    #: In ``RECORD_SCHEMA``, in log order.
    records: pa.Table
    #: In ``BATCH_SCHEMA``, one row per batch (empty batches included), in log order.
    batches: pa.Table
    #: For each record, the row of its batch in ``batches`` (int32).
    batch_index: np.ndarray


def corrupt(where: str, base_offset: int | None, problem: str) -> CorruptBatchError:
    """The error for a batch that cannot be read: ``segment <where>: batch at offset <n> <problem>``."""
    at = f"batch at offset {base_offset}" if base_offset is not None else "batch"
    return CorruptBatchError(f"segment {where}: {at} {problem}", where=where, base_offset=base_offset)
