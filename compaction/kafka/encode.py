"""Encoding: records and batch rows to v2 batches, with numpy and Arrow over all records at once.

Each record's varints are written with numpy into one buffer of "fixed" pieces; one Arrow ``take`` then lays
out fixed pieces, keys, values and headers in record order. Only the batch headers, the CRCs and the codecs
run once per batch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.errors import InvalidRecordsError
from compaction.kafka import varint
from compaction.kafka.compression import compress
from compaction.kafka.layout import (
    BATCH_SCHEMA,
    CODEC_MASK,
    CODECS,
    CONTROL,
    CONTROL_TYPES,
    DELETE_HORIZON,
    HEADER_BYTES,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    NO_TIMESTAMP,
    TRANSACTIONAL,
)
from compaction.schema import HEADER_TYPE

_FRONT = struct.Struct(">qiibI")  # base offset .. CRC
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. record count: the CRC's first 40 bytes

_BATCH_DEFAULTS: dict[str, Any] = {
    "last_offset_delta": None,
    "partition_leader_epoch": -1,
    "attributes": 0,
    "compression": "none",
    "base_timestamp": None,
    "max_timestamp": None,
    "producer_id": -1,
    "producer_epoch": -1,
    "base_sequence": -1,
    "delete_horizon_ms": None,
    "position": None,
    "size": None,
}


def batch_table(rows: Iterable[Mapping[str, Any]]) -> pa.Table:
    """Build batch rows in ``BATCH_SCHEMA`` from dicts; missing fields take Kafka's "none" values (no producer
    id, epoch or sequence, partition leader epoch -1, no compression, no horizon)."""
    rows = list(rows)
    data: dict[str, list[Any]] = {name: [] for name in BATCH_SCHEMA.names}
    for row in rows:
        unknown = set(row) - set(BATCH_SCHEMA.names)
        if unknown:
            raise InvalidRecordsError(f"batch rows: unknown field(s) {sorted(unknown)}")
        for name in BATCH_SCHEMA.names:
            if name not in row and name not in _BATCH_DEFAULTS:
                raise InvalidRecordsError(f"batch rows: every row needs {name!r}")
            data[name].append(row.get(name, _BATCH_DEFAULTS.get(name)))
    return pa.Table.from_pydict(data, schema=BATCH_SCHEMA)


def encode(records: pa.Table, batches: pa.Table, *, compression: str | None = None) -> bytes:
    """Encode records (``RECORD_SCHEMA``) as v2 batches: batch row ``j`` (``BATCH_SCHEMA``) takes the next
    ``record_count`` records, in order.

    Each batch keeps its row's base offset, last offset delta (null: the last record's; offsets may have
    gaps), partition leader epoch, producer id and epoch, base sequence and attribute bits 3-5 (timestamp
    type, transactional, control). The codec comes from the row's ``compression`` (so a decoded batch written
    back keeps its codec), or from the ``compression`` argument for every batch when given; the delete horizon from
    ``delete_horizon_ms`` (non-null: attribute bit 6 set and the base timestamp holds the horizon, KIP-534);
    ``base_timestamp``, ``position`` and ``size`` are ignored. Otherwise the base timestamp is the first
    record's; the max timestamp is the largest record timestamp (CREATE_TIME) or the row's (LOG_APPEND_TIME).

    A row with ``record_count`` 0 is written as Kafka's ``DefaultRecordBatch.writeEmptyHeader`` does: 61
    bytes, uncompressed, base timestamp -1, no horizon bit, the row's last offset delta and max timestamp.
    Keys, values and headers are copied in whole-array passes; only the batch headers and codecs run per
    batch. Record columns that restate batch fields (producer, flags) must agree with their batch.

    A control record written without a key gets Kafka's control key for its ``control_type`` (version 0,
    type 0 abort or 1 commit) and, without a value, an end transaction marker value (version 0, coordinator
    epoch 0); a key it has must name the same type. Bad input raises InvalidRecordsError.
    """
    if compression is not None:
        if compression not in CODECS:
            raise InvalidRecordsError(f"encode: no compression {compression!r}; Kafka's are {list(CODECS)}")
        batches = batches.drop_columns(["compression"]).append_column(
            "compression", pa.repeat(pa.scalar(compression), batches.num_rows)
        )
    rows = _BatchRows.of(batches, records.num_rows)
    offsets = _column(records, "offset", pa.int64())
    if offsets.null_count:
        raise InvalidRecordsError(f"encode: {offsets.null_count} record(s) have no offset")
    batch_of = np.repeat(np.arange(rows.size, dtype=np.int64), rows.counts)
    offset_delta = offsets.to_numpy() - rows.base_offset[batch_of]
    rows.check_offsets(offset_delta, batch_of)
    _check_record_flags(records, rows, batch_of)
    timestamps = _column(records, "timestamp", pa.int64()).fill_null(NO_TIMESTAMP).to_numpy()
    base_ts, max_ts = rows.timestamps(timestamps)
    control = ((rows.attributes & CONTROL) != 0)[batch_of]
    keys, values = _control_fields(records, control)
    region = _encode_records(records, keys, values, offset_delta, timestamps - base_ts[batch_of], rows.counts)

    parts: list[Any] = []
    view = memoryview(region.data)
    columns = zip(
        rows.base_offset.tolist(),
        rows.last_offset_delta.tolist(),
        rows.leader_epoch.tolist(),
        rows.attributes.tolist(),
        rows.codec.tolist(),
        base_ts.tolist(),
        max_ts.tolist(),
        rows.producer_id.tolist(),
        rows.producer_epoch.tolist(),
        rows.base_sequence.tolist(),
        rows.counts.tolist(),
        region.starts.tolist(),
        region.ends.tolist(),
        strict=True,
    )
    for (
        base_offset,
        last_offset_delta,
        leader_epoch,
        attributes,
        codec,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
        start,
        end,
    ) in columns:
        payload = view[start:end] if codec == 0 else compress(codec, view[start:end])
        tail = _TAIL.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        crc = crc32c.crc32c(payload, value=crc32c.crc32c(tail))
        length = HEADER_BYTES - LOG_OVERHEAD + len(payload)
        parts += [_FRONT.pack(base_offset, length, leader_epoch, MAGIC, crc), tail, payload]
    return b"".join(parts)


def _column(table: pa.Table, name: str, type_: pa.DataType) -> pa.Array:
    if name not in table.column_names:
        raise InvalidRecordsError(f"encode: no column {name!r}")
    column = table.column(name).combine_chunks()
    return column.cast(type_) if column.type != type_ else column


@dataclass(frozen=True)
class _BatchRows:
    """The batch rows as numpy arrays, checked, with the attributes each batch will be written with."""

    size: int
    counts: np.ndarray
    base_offset: np.ndarray
    last_offset_delta: np.ndarray
    has_last_offset_delta: np.ndarray
    leader_epoch: np.ndarray
    attributes: np.ndarray
    codec: np.ndarray
    given_max_ts: np.ndarray
    has_max_ts: np.ndarray
    horizon: np.ndarray
    has_horizon: np.ndarray
    producer_id: np.ndarray
    producer_epoch: np.ndarray
    base_sequence: np.ndarray

    @classmethod
    def of(cls, batches: pa.Table, record_total: int) -> _BatchRows:
        def required(name: str) -> np.ndarray:
            column = _column(batches, name, BATCH_SCHEMA.field(name).type)
            if column.null_count:
                raise InvalidRecordsError(f"encode: {column.null_count} batch row(s) have no {name}")
            return cast(np.ndarray, column.to_numpy(zero_copy_only=False))

        def optional(name: str) -> tuple[np.ndarray, np.ndarray]:
            column = _column(batches, name, BATCH_SCHEMA.field(name).type)
            return column.fill_null(0).to_numpy(), column.is_valid().to_numpy(zero_copy_only=False)

        counts = required("record_count").astype(np.int64)
        if (counts < 0).any():
            raise InvalidRecordsError("encode: a batch row has a negative record_count")
        if counts.sum() != record_total:
            raise InvalidRecordsError(
                f"encode: the batch rows hold {counts.sum()} records, but {record_total} were given"
            )
        codec_ids = pc.index_in(_column(batches, "compression", pa.string()), value_set=pa.array(CODECS))
        if codec_ids.null_count:
            raise InvalidRecordsError(f"encode: a batch row's compression is not one of {list(CODECS)}")
        codec = codec_ids.to_numpy(zero_copy_only=False).astype(np.int64)
        empty = counts == 0
        codec[empty] = 0
        last_offset_delta, has_last_offset_delta = optional("last_offset_delta")
        given_max_ts, has_max_ts = optional("max_timestamp")
        horizon, has_horizon = optional("delete_horizon_ms")
        has_horizon = has_horizon & ~empty
        attributes = required("attributes").astype(np.int64) & ~(CODEC_MASK | DELETE_HORIZON)
        attributes |= codec | np.where(has_horizon, DELETE_HORIZON, 0)
        need_max = empty | ((attributes & LOG_APPEND_TIME) != 0)
        if (need_max & ~has_max_ts).any():
            raise InvalidRecordsError("encode: an empty or LOG_APPEND_TIME batch row needs its max_timestamp")
        if (empty & ~has_last_offset_delta).any():
            raise InvalidRecordsError("encode: an empty batch row needs its last_offset_delta")
        return cls(
            size=len(counts),
            counts=counts,
            base_offset=required("base_offset").astype(np.int64),
            last_offset_delta=last_offset_delta.astype(np.int64),
            has_last_offset_delta=has_last_offset_delta,
            leader_epoch=required("partition_leader_epoch"),
            attributes=attributes.astype(np.int16),
            codec=codec,
            given_max_ts=given_max_ts,
            has_max_ts=has_max_ts,
            horizon=horizon,
            has_horizon=has_horizon,
            producer_id=required("producer_id"),
            producer_epoch=required("producer_epoch"),
            base_sequence=required("base_sequence"),
        )

    def check_offsets(self, offset_delta: np.ndarray, batch_of: np.ndarray) -> None:
        """Offsets must rise strictly inside a batch, from its base offset to at most its last offset; fills in
        a missing last offset delta from the batch's last record."""
        below = np.flatnonzero(offset_delta < 0)
        if below.size:
            base = self.base_offset[batch_of[below[0]]]
            raise InvalidRecordsError(
                f"encode: record at offset {base + offset_delta[below[0]]} is below its batch's base offset {base}"
            )
        same_batch = batch_of[1:] == batch_of[:-1]
        if (same_batch & (offset_delta[1:] <= offset_delta[:-1])).any():
            raise InvalidRecordsError("encode: offsets are not strictly increasing inside a batch")
        nonempty = np.flatnonzero(self.counts > 0)
        last = (np.cumsum(self.counts) - 1)[nonempty]
        missing = ~self.has_last_offset_delta[nonempty]
        self.last_offset_delta[nonempty[missing]] = offset_delta[last[missing]]
        beyond = offset_delta[last] > self.last_offset_delta[nonempty]
        if beyond.any():
            j = nonempty[int(np.argmax(beyond))]
            raise InvalidRecordsError(
                f"encode: batch at base offset {self.base_offset[j]} has a record past its "
                f"last offset {self.base_offset[j] + self.last_offset_delta[j]}"
            )
        if (self.last_offset_delta > np.iinfo(np.int32).max).any() or (self.last_offset_delta < 0).any():
            raise InvalidRecordsError("encode: a batch's last offset delta is outside [0, 2**31)")

    def timestamps(self, timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each batch's base and max timestamp (MemoryRecordsBuilder / writeEmptyHeader)."""
        nonempty = self.counts > 0
        first = (np.cumsum(self.counts) - self.counts)[nonempty]
        base = np.full(self.size, NO_TIMESTAMP, dtype=np.int64)
        base[nonempty] = timestamps[first]
        base = np.where(self.has_horizon, self.horizon, base)
        top = np.full(self.size, NO_TIMESTAMP, dtype=np.int64)
        if first.size:
            top[nonempty] = np.maximum(np.maximum.reduceat(timestamps, first), NO_TIMESTAMP)
        keep_given = ~nonempty | ((self.attributes & LOG_APPEND_TIME) != 0)
        return base, np.where(keep_given, self.given_max_ts, top)


def _check_record_flags(records: pa.Table, rows: _BatchRows, batch_of: np.ndarray) -> None:
    """Record columns that restate batch fields must agree with the batch they are written into."""
    expected = {
        "producer_id": rows.producer_id.astype(np.int64),
        "producer_epoch": rows.producer_epoch.astype(np.int64),
        "is_transactional": (rows.attributes & TRANSACTIONAL) != 0,
        "is_control": (rows.attributes & CONTROL) != 0,
    }
    for name, per_batch in expected.items():
        if name not in records.column_names:
            continue
        column = records.column(name).combine_chunks()
        given = column.fill_null(per_batch.dtype.type(0)).to_numpy(zero_copy_only=False)
        wrong = column.is_valid().to_numpy(zero_copy_only=False) & (given != per_batch[batch_of])
        if wrong.any():
            j = batch_of[int(np.argmax(wrong))]
            raise InvalidRecordsError(
                f"encode: a record's {name} is {given[int(np.argmax(wrong))]} but its batch "
                f"(base offset {rows.base_offset[j]}) has {per_batch[j]}"
            )


#: Kafka's control keys (ControlRecordType: version int16 0, type int16) by control type name, and the value of
#: an end transaction marker (EndTransactionMarker: version int16 0, coordinator epoch int32 0).
_CONTROL_KEYS = {name: struct.pack(">hh", 0, code) for code, name in CONTROL_TYPES.items()}
_MARKER_VALUE = struct.pack(">hi", 0, 0)


def _control_fields(records: pa.Table, control: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """The keys and values to write: a control record's missing key and value are Kafka's for its
    ``control_type``; a key it has must be a control key of that type."""
    keys = _column(records, "key", pa.binary())
    values = _column(records, "value", pa.binary())
    if not control.any():
        return keys, values
    n = records.num_rows
    types = (
        _column(records, "control_type", pa.string())
        if "control_type" in records.column_names
        else pa.nulls(n, pa.string())
    )
    names = pa.array(list(_CONTROL_KEYS))
    expected = pc.take(pa.array(list(_CONTROL_KEYS.values()), pa.binary()), pc.index_in(types, value_set=names))
    is_control = pa.array(control)
    keyless = pc.and_(is_control, keys.is_null())
    if pc.any(pc.and_(keyless, expected.is_null())).as_py():
        raise InvalidRecordsError(f"encode: a control record has no key and no control_type in {list(_CONTROL_KEYS)}")
    # Compare the type bytes only: Kafka reads a key's version but accepts any, and ignores bytes past 4.
    keyed = pc.and_(is_control, keys.is_valid())
    short = pc.less(pc.binary_length(keys), 4)
    wrong = pc.not_equal(pc.binary_slice(keys, 2, 4), pc.binary_slice(expected, 2, 4))
    if pc.any(pc.and_(keyed, pc.or_(short, wrong))).as_py():
        raise InvalidRecordsError(
            "encode: a control record's key is not a control key of its control_type "
            "(4 bytes: version, then 0 abort or 1 commit)"
        )
    keys = pc.if_else(keyless, expected, keys)
    values = pc.if_else(pc.and_(is_control, values.is_null()), pa.scalar(_MARKER_VALUE, pa.binary()), values)
    return keys, values


@dataclass(frozen=True)
class _Region:
    """Every batch's records, uncompressed and back to back, and each batch's ``[start, end)`` in them."""

    data: pa.Buffer
    starts: np.ndarray
    ends: np.ndarray


def _encode_records(
    records: pa.Table,
    keys: pa.Array,
    values: pa.Array,
    offset_delta: np.ndarray,
    ts_delta: np.ndarray,
    counts: np.ndarray,
) -> _Region:
    """Lay out every record's bytes with numpy (the varints) and one Arrow ``take`` (keys, values, headers).

    Each record is six pieces: its fixed prefix (length, attributes, timestamp delta, offset delta, key
    length), its key, its value length, its value, its header count and its headers; the take puts all the
    pieces in order into one buffer.
    """
    n = records.num_rows
    key_len = pc.binary_length(keys).fill_null(-1).to_numpy().astype(np.int64)
    value_len = pc.binary_length(values).fill_null(-1).to_numpy().astype(np.int64)
    header_blobs, header_bytes, header_count = _encode_headers(records)

    zz_ts, zz_offset = varint.zigzag(ts_delta), varint.zigzag(offset_delta)
    zz_key, zz_value, zz_count = varint.zigzag(key_len), varint.zigzag(value_len), varint.zigzag(header_count)
    s_ts, s_offset, s_key = varint.sizes(zz_ts), varint.sizes(zz_offset), varint.sizes(zz_key)
    s_value, s_count = varint.sizes(zz_value), varint.sizes(zz_count)
    body = (
        1
        + s_ts
        + s_offset
        + s_key
        + np.maximum(key_len, 0)
        + s_value
        + np.maximum(value_len, 0)
        + s_count
        + header_bytes
    )
    zz_body = varint.zigzag(body)
    s_body = varint.sizes(zz_body)

    # The fixed bytes of record r: prefix, then value length, then header count (three pieces).
    prefix = s_body + 1 + s_ts + s_offset + s_key
    fixed_size = prefix + s_value + s_count
    fixed_at = np.cumsum(fixed_size) - fixed_size
    fixed = np.zeros(int(fixed_size.sum()), dtype=np.uint8)
    at = fixed_at
    varint.write(fixed, at, zz_body, s_body)
    at = at + s_body + 1  # the attributes byte stays 0
    for encoded, nbytes in (
        (zz_ts, s_ts),
        (zz_offset, s_offset),
        (zz_key, s_key),
        (zz_value, s_value),
        (zz_count, s_count),
    ):
        varint.write(fixed, at, encoded, nbytes)
        at = at + nbytes
    bounds = np.empty(3 * n + 1, dtype=np.int64)
    bounds[0 : 3 * n : 3] = fixed_at
    bounds[1 : 3 * n : 3] = fixed_at + prefix
    bounds[2 : 3 * n : 3] = fixed_at + prefix + s_value
    bounds[3 * n] = len(fixed)

    total = int((body + s_body).sum())
    wide = total >= 2**31 or len(fixed) >= 2**31
    kind = pa.large_binary() if wide else pa.binary()
    fixed_pieces = pa.Array.from_buffers(
        kind, 3 * n, [None, pa.py_buffer(bounds if wide else bounds.astype(np.int32)), pa.py_buffer(fixed)]
    )
    source = pa.concat_arrays([fixed_pieces, keys.cast(kind), values.cast(kind), header_blobs.cast(kind)])
    rows = np.arange(n)
    # Per record: prefix, key, value length, value, header count, headers.
    order = rows[:, None] * np.array([3, 1, 3, 1, 3, 1]) + np.array([0, 3 * n, 1, 4 * n, 2, 5 * n])
    laid = source.take(pa.array(order.ravel()))
    piece_bounds = np.frombuffer(laid.buffers()[1], dtype=np.int64 if wide else np.int32)
    piece_bounds = piece_bounds[laid.offset : laid.offset + len(laid) + 1]
    record_first = np.concatenate([[0], np.cumsum(counts)]) * order.shape[1]
    region_bounds = piece_bounds[record_first].astype(np.int64)
    return _Region(laid.buffers()[2], region_bounds[:-1], region_bounds[1:])


def _encode_headers(records: pa.Table) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Each record's headers as one blob (without the count), its size, and the header count."""
    n = records.num_rows
    no_blobs = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(np.zeros(n + 1, dtype=np.int32)), pa.py_buffer(b"")]
    )
    if "headers" not in records.column_names:
        return no_blobs, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    headers = _column(records, "headers", HEADER_TYPE)
    count = pc.list_value_length(headers).fill_null(0).to_numpy().astype(np.int64)
    h = int(count.sum())
    if not h:
        return no_blobs, np.zeros(n, dtype=np.int64), count
    entries = pc.list_flatten(headers)
    names = entries.field("key")
    if names.null_count:
        raise InvalidRecordsError("encode: a header has a null key (Kafka header keys are non-null strings)")
    names = names.cast(pa.large_binary())
    contents = entries.field("value").cast(pa.large_binary())
    name_len = pc.binary_length(names).to_numpy().astype(np.int64)
    content_len = pc.binary_length(contents).fill_null(-1).to_numpy().astype(np.int64)
    zz_name, zz_content = varint.zigzag(name_len), varint.zigzag(content_len)
    s_name, s_content = varint.sizes(zz_name), varint.sizes(zz_content)
    fixed_size = s_name + s_content
    fixed_at = np.cumsum(fixed_size) - fixed_size
    fixed = np.zeros(int(fixed_size.sum()), dtype=np.uint8)
    varint.write(fixed, fixed_at, zz_name, s_name)
    varint.write(fixed, fixed_at + s_name, zz_content, s_content)
    bounds = np.empty(2 * h + 1, dtype=np.int64)
    bounds[0 : 2 * h : 2] = fixed_at
    bounds[1 : 2 * h : 2] = fixed_at + s_name
    bounds[2 * h] = len(fixed)
    fixed_pieces = pa.Array.from_buffers(pa.large_binary(), 2 * h, [None, pa.py_buffer(bounds), pa.py_buffer(fixed)])
    source = pa.concat_arrays([fixed_pieces, names, contents])
    rows = np.arange(h)
    # Per header: key length, key, value length, value.
    order = rows[:, None] * np.array([2, 1, 2, 1]) + np.array([0, 2 * h, 1, 3 * h])
    laid = source.take(pa.array(order.ravel()))
    piece_bounds = np.frombuffer(laid.buffers()[1], dtype=np.int64)[laid.offset : laid.offset + len(laid) + 1]
    blob_bounds = piece_bounds[np.concatenate([[0], np.cumsum(count)]) * 4]
    blobs = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(blob_bounds), laid.buffers()[2]])
    return blobs, np.diff(blob_bounds), count
