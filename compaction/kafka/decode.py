"""Decoding: a buffer of v2 batches to records and batch rows, with numpy and Arrow over the whole buffer.

Each record is a zigzag varint length, an unused attributes byte, then varints for the timestamp delta, the
offset delta, the key length and key, the value length and value, the header count and the headers (each a
key length, key, value length, value). No Python code runs per record: record boundaries are found in
lockstep across batches (step ``s`` reads the ``s``-th record of every batch that has one), so that loop
runs once per record *position*; then every field of every record is read with a few numpy gathers, and
keys, values and headers are cut out of the buffer with one Arrow ``take`` each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import crc32c
import numpy as np
import pyarrow as pa

from compaction.kafka import compression, varint
from compaction.kafka.layout import (
    BATCH_SCHEMA,
    CODEC_MASK,
    CODECS,
    CONTROL,
    CONTROL_TYPES,
    CRC_AT,
    CRC_FROM,
    DELETE_HORIZON,
    HEADER,
    HEADER_BYTES,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_AT,
    TRANSACTIONAL,
    Decoded,
    corrupt,
)
from compaction.schema import HEADER_TYPE, RECORD_SCHEMA

# The smallest record: its length, the attributes byte and five one-byte varints.
_MIN_RECORD_BYTES = 7
# Declared zstd content sizes beyond this many times the segment's bytes are not allocated at once.
_MAX_DECLARED_RATIO = 64
# Below this many batches still being walked, the lockstep's numpy calls cost more than a plain loop.
_SCALAR_LANES = 8
# How far a record reaches from its first byte, by the two-byte window there: its length varint's size plus
# the length; 0 where the length takes three bytes or more (a record of 8 KiB or more) or is negative.
_REACH = np.where(
    (varint.SIZE_OF_WINDOW > 0) & (varint.VALUE_OF_WINDOW >= 0), varint.SIZE_OF_WINDOW + varint.VALUE_OF_WINDOW, 0
)


def decode(data: Any, *, where: str) -> Decoded:
    """Decode a buffer (bytes, memoryview, pyarrow or numpy buffer) of concatenated v2 batches.

    Every batch's framing and CRC-32C is checked before anything is decoded; any failure (a bad CRC, a
    truncated batch, a length past the end, magic 0/1 or unknown, an unknown codec, a stream that does not
    decompress, a malformed record) raises CorruptBatchError naming ``where`` and the batch's base offset.

    Record timestamps are Kafka's (``DefaultRecordBatch.RecordIterator``): the batch's max timestamp for
    LOG_APPEND_TIME batches, else the base timestamp plus the record's delta. That holds when attribute bit 6
    is set too: the base timestamp then holds the delete horizon and the deltas are relative to it
    (``MemoryRecordsBuilder`` sets ``baseTimestamp = deleteHorizonMs``). ``delete_horizon_ms`` is set on the
    tombstones (null values) and control records of batches that carry a horizon, the records it applies to;
    the batch row always carries it. A record with no headers gets null ``headers`` (Kafka does not tell an
    empty list from none). A control record's ``control_type`` is ``commit`` or ``abort`` from its key
    (null for other control types).
    """
    view = _bytes_view(data)
    positions = _frame(view, where)
    header = _batch_headers(view, positions, where)
    counts = header["record_count"].astype(np.int64)
    ends = positions + LOG_OVERHEAD + header["length"].astype(np.int64)
    records_buf, region_start, region_end = _records_regions(view, positions, ends, header, where)
    batch_index = np.repeat(np.arange(len(positions), dtype=np.int32), counts)
    fields = _record_fields(records_buf, region_start, region_end, header, batch_index, where)
    return Decoded(
        records=_records(records_buf, header, fields, batch_index, where),
        batches=_batches(header, positions, ends),
        batch_index=batch_index,
    )


def _batch_headers(view: memoryview, positions: np.ndarray, where: str) -> np.ndarray:
    """The fixed header (:data:`HEADER`) of each batch starting at ``positions``, its codec and count checked."""
    buf = np.frombuffer(view, dtype=np.uint8)
    header = np.ascontiguousarray(buf[positions[:, None] + np.arange(HEADER_BYTES)]).view(HEADER).reshape(-1)
    codecs = _codecs(header)
    counts = header["record_count"].astype(np.int64)
    for j in np.flatnonzero((codecs >= len(CODECS)) | (counts < 0)):
        problem = (
            f"an unknown compression codec id {codecs[j]}"
            if codecs[j] >= len(CODECS)
            else f"a negative record count {counts[j]}"
        )
        raise corrupt(where, int(header["base_offset"][j]), f"has {problem}")
    return header


def _codecs(header: np.ndarray) -> np.ndarray:
    """Each batch's compression codec id (an index of :data:`CODECS` once checked)."""
    return (header["attributes"].astype(np.int16) & CODEC_MASK).astype(np.int64)


def _record_fields(
    records_buf: Any,
    region_start: np.ndarray,
    region_end: np.ndarray,
    header: np.ndarray,
    batch_index: np.ndarray,
    where: str,
) -> _Fields:
    """Every record's fields in the uncompressed records (each batch's ``[region_start, region_end)`` of
    ``records_buf``); CorruptBatchError when a batch claims more records than its bytes hold, or a record's
    fields do not fill its length."""
    base_offsets = header["base_offset"].astype(np.int64)
    counts = header["record_count"].astype(np.int64)
    too_many = np.flatnonzero(counts * _MIN_RECORD_BYTES > region_end - region_start)
    if too_many.size:
        j = too_many[0]
        raise corrupt(
            where,
            int(base_offsets[j]),
            f"claims {counts[j]} records in {region_end[j] - region_start[j]} bytes of records",
        )
    rb = np.frombuffer(records_buf, dtype=np.uint8)
    body, size = _record_bounds(records_buf, rb, region_start, region_end, counts)
    fields = _Fields.parse(rb, body, size)
    if not fields.ok.all():
        first = int(np.argmax(~fields.ok))
        j = batch_index[first]
        within = first - int(np.searchsorted(batch_index, j))
        raise corrupt(
            where,
            int(base_offsets[j]),
            f"has a malformed record (record {within} of {counts[j]}): "
            "its fields do not fill its length, or the records do not fill the batch",
        )
    return fields


def _records(records_buf: Any, header: np.ndarray, fields: _Fields, batch_index: np.ndarray, where: str) -> pa.Table:
    """The records (:data:`RECORD_SCHEMA`), each with its batch's fields (``batch_index``: each record's batch)."""
    arrow_buf = pa.py_buffer(records_buf)
    attributes = header["attributes"].astype(np.int16)
    base_offsets = header["base_offset"].astype(np.int64)
    is_control = ((attributes & CONTROL) != 0)[batch_index]
    horizon_set = (attributes & DELETE_HORIZON) != 0
    base_ts = header["base_timestamp"].astype(np.int64)
    log_append = ((attributes & LOG_APPEND_TIME) != 0)[batch_index]
    timestamps = np.where(
        log_append, header["max_timestamp"].astype(np.int64)[batch_index], base_ts[batch_index] + fields.ts_delta
    )
    record_horizon = horizon_set[batch_index] & ((fields.value_len < 0) | is_control)
    return pa.Table.from_arrays(
        [
            pa.array(base_offsets[batch_index] + fields.offset_delta, pa.int64()),
            pa.array(timestamps, pa.int64()),
            _binary(arrow_buf, fields.key_start, fields.key_len),
            _binary(arrow_buf, fields.value_start, fields.value_len),
            _headers(arrow_buf, fields, where, base_offsets, batch_index),
            pa.array(header["producer_id"].astype(np.int64)[batch_index], pa.int64()),
            pa.array(header["producer_epoch"].astype(np.int16)[batch_index], pa.int16()),
            pa.array(((attributes & TRANSACTIONAL) != 0)[batch_index], pa.bool_()),
            pa.array(is_control, pa.bool_()),
            _control_types(
                np.frombuffer(records_buf, dtype=np.uint8), fields, is_control, where, base_offsets, batch_index
            ),
            pa.array(base_ts[batch_index], pa.int64(), mask=~record_horizon),
        ],
        schema=RECORD_SCHEMA,
    )


def _batches(header: np.ndarray, positions: np.ndarray, ends: np.ndarray) -> pa.Table:
    """The batch rows (:data:`BATCH_SCHEMA`) of the batches at ``[positions, ends)``."""
    attributes = header["attributes"].astype(np.int16)
    base_ts = header["base_timestamp"].astype(np.int64)
    return pa.Table.from_arrays(
        [
            pa.array(header["base_offset"].astype(np.int64), pa.int64()),
            pa.array(header["last_offset_delta"].astype(np.int32), pa.int32()),
            pa.array(header["partition_leader_epoch"].astype(np.int32), pa.int32()),
            pa.array(attributes, pa.int16()),
            pa.DictionaryArray.from_arrays(pa.array(_codecs(header).astype(np.int8)), pa.array(CODECS)).cast(
                pa.string()
            ),
            pa.array(base_ts, pa.int64()),
            pa.array(header["max_timestamp"].astype(np.int64), pa.int64()),
            pa.array(header["producer_id"].astype(np.int64), pa.int64()),
            pa.array(header["producer_epoch"].astype(np.int16), pa.int16()),
            pa.array(header["base_sequence"].astype(np.int32), pa.int32()),
            pa.array(header["record_count"].astype(np.int32), pa.int32()),
            pa.array(base_ts, pa.int64(), mask=~((attributes & DELETE_HORIZON) != 0)),
            pa.array(positions, pa.int64()),
            pa.array((ends - positions).astype(np.int32), pa.int32()),
        ],
        schema=BATCH_SCHEMA,
    )


def _bytes_view(data: Any) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _frame(view: memoryview, where: str) -> np.ndarray:
    """The byte position of each batch, after checking its length, magic and CRC-32C (a loop per batch)."""
    positions = []
    n = len(view)
    pos = 0
    while pos < n:
        left = n - pos
        base_offset = int.from_bytes(view[pos : pos + 8], "big", signed=True) if left >= 8 else None
        if left < LOG_OVERHEAD:
            raise corrupt(where, base_offset, f"at byte {pos} is truncated: {left} bytes left of its header")
        length = int.from_bytes(view[pos + 8 : pos + LOG_OVERHEAD], "big", signed=True)
        if left > MAGIC_AT and view[pos + MAGIC_AT] != MAGIC:
            magic = view[pos + MAGIC_AT]
            known = "the message format v0/v1 of Kafka before 0.11" if magic in (0, 1) else "no known format"
            raise corrupt(
                where,
                base_offset,
                f"at byte {pos} has magic {magic} ({known}); only record batch v2 (magic {MAGIC}) is supported",
            )
        if left < HEADER_BYTES:
            raise corrupt(
                where, base_offset, f"at byte {pos} is truncated: {left} of its {HEADER_BYTES}-byte header are left"
            )
        if length < HEADER_BYTES - LOG_OVERHEAD:
            raise corrupt(where, base_offset, f"at byte {pos} has length {length}, less than a batch header")
        end = pos + LOG_OVERHEAD + length
        if end > n:
            raise corrupt(
                where,
                base_offset,
                f"at byte {pos} declares {LOG_OVERHEAD + length} bytes, but the "
                f"buffer ends {left} bytes after its start (truncated, or a length past the end)",
            )
        stored = int.from_bytes(view[pos + CRC_AT : pos + CRC_FROM], "big")
        computed = crc32c.crc32c(view[pos + CRC_FROM : end])
        if stored != computed:
            raise corrupt(
                where, base_offset, f"at byte {pos} fails its CRC-32C: stored {stored:#010x}, computed {computed:#010x}"
            )
        positions.append(pos)
        pos = end
    return np.array(positions, dtype=np.int64)


def _records_regions(
    view: memoryview,
    positions: np.ndarray,
    ends: np.ndarray,
    header: np.ndarray,
    where: str,
) -> tuple[Any, np.ndarray, np.ndarray]:
    """One buffer holding every batch's records uncompressed, and each batch's ``[start, end)`` in it (``header``:
    the batches' headers).

    Without compressed batches that is the input itself. An empty batch's bytes are ignored, as Kafka's
    iterator does (``count() == 0`` returns no records without decompressing).
    """
    codecs, counts = _codecs(header), header["record_count"].astype(np.int64)
    base_offsets = header["base_offset"].astype(np.int64)
    starts = positions + HEADER_BYTES
    ends = np.where(counts > 0, ends, starts)
    compressed = (codecs != 0) & (counts > 0)
    if not compressed.any():
        return view, starts, ends
    one_buffer = _zstd_into_one(view, starts, ends, compressed, codecs)
    if one_buffer is not None:
        return one_buffer
    pieces: list[Any] = []
    for j, (start, end, codec) in enumerate(zip(starts.tolist(), ends.tolist(), codecs.tolist(), strict=True)):
        if not compressed[j]:
            pieces.append(view[start:end])
            continue
        try:
            pieces.append(compression.decompress(codec, view[start:end]))
        except ValueError as err:
            raise corrupt(where, int(base_offsets[j]), f"does not decompress: {err}") from err
    lengths = np.array([len(piece) for piece in pieces], dtype=np.int64)
    region_end = np.cumsum(lengths)
    return b"".join(pieces), region_end - lengths, region_end


def _zstd_into_one(
    view: memoryview, starts: np.ndarray, ends: np.ndarray, compressed: np.ndarray, codecs: np.ndarray
) -> tuple[pa.Buffer, np.ndarray, np.ndarray] | None:
    """:func:`_records_regions`'s buffer where every compressed batch is zstd declaring its content size (the frames
    this product writes): each batch decompressed straight into its place in one buffer from Arrow's pool, not into
    a buffer of its own then joined to the others (a K1 partition's 10 segments of 500 batches, 62 MB each
    decompressed, decode in 2.3 s against 3.0-3.2 s, one process). None otherwise, and where a stream does not
    decompress to the size it declares: the batch by batch path then decodes or refuses it."""
    if (codecs[compressed] != CODECS.index("zstd")).any():
        return None
    lengths = ends - starts
    for j in np.flatnonzero(compressed).tolist():
        size = compression.zstd_content_size(view[starts[j] : ends[j]])
        if size is None:
            return None
        lengths[j] = size
    region_end = np.cumsum(lengths)
    if len(region_end) and region_end[-1] > _MAX_DECLARED_RATIO * len(view) + (1 << 20):
        return None  # sizes no writer's frames declare: not trusted with an allocation
    region_start = region_end - lengths
    out = pa.allocate_buffer(int(region_end[-1]) if len(region_end) else 0)
    target = memoryview(out).cast("B")
    for j, (start, end, at, size) in enumerate(
        zip(starts.tolist(), ends.tolist(), region_start.tolist(), lengths.tolist(), strict=True)
    ):
        if not compressed[j]:
            target[at : at + size] = view[start:end]
        elif not compression.decompress_zstd_into(view[start:end], target[at : at + size]):
            return None
    return out, region_start, region_end


def _record_bounds(
    records_buf: Any, rb: np.ndarray, region_start: np.ndarray, region_end: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Where each record's body starts (after its length varint), and its length; -1 marks a bad record.

    Step ``s`` reads the length of the ``s``-th record of every batch ("lane") that has one, lanes sorted by
    record count so those still going are a prefix: one table lookup per record, a handful of numpy calls
    per step. Lanes that meet a record of 8 KiB or more (a three-byte length) are walked again record by
    record, as are the few longest lanes once fewer than ``_SCALAR_LANES`` are left: their records are few
    per byte, or their lanes too few for numpy calls to pay.
    """
    total = int(counts.sum())
    body = np.zeros(total, dtype=np.int64)
    size = np.full(total, -1, dtype=np.int64)
    if not total:
        return body, size
    first = np.cumsum(counts) - counts
    order = np.argsort(-counts, kind="stable")
    sorted_counts = counts[order]
    lanes = np.searchsorted(-sorted_counts, -np.arange(sorted_counts[0]), side="left")  # lanes with > s records
    cursor = region_start[order].copy()
    slot = first[order].copy()
    start = np.zeros(total, dtype=np.int64)
    windows = varint.windows(rb)
    one = np.ones(len(order), dtype=np.int64)
    step = 0
    try:
        while step < len(lanes) and lanes[step] >= _SCALAR_LANES:
            k = lanes[step]
            at, index = cursor[:k], slot[:k]
            start[index] = at
            np.add(at, _REACH[windows[at]], out=at)  # a lane stuck on a long length stays in place
            np.add(index, one[:k], out=index)
            step += 1
    except IndexError:  # a corrupt length ran a cursor off the buffer: walk every lane one record at a time
        step = 0
    stepped = np.minimum(sorted_counts, step)
    visited = np.repeat(first[order], stepped) + _ranges(stepped)
    window = windows[start[visited]]
    reach = _REACH[window]
    two = (window & 0x80) != 0  # the length took two bytes
    body[visited] = start[visited] + 1 + two
    size[visited] = np.where(reach > 0, reach - 1 - two, -1)
    stuck = np.zeros(len(order), dtype=bool)
    stuck[np.repeat(np.arange(len(order)), stepped)[reach == 0]] = True

    view = memoryview(records_buf)
    for lane in range(len(order)):
        if stuck[lane]:
            from_step, pos = 0, int(region_start[order[lane]])
        elif step < sorted_counts[lane]:
            from_step, pos = step, int(cursor[lane] if step else region_start[order[lane]])
        else:
            continue
        b = int(order[lane])
        _walk(view, (pos, int(region_end[b])), int(first[b]), from_step, int(counts[b]), (body, size))

    # The records must tile their batch's bytes: none ends past it, and the last ends exactly at its end.
    batch_of = np.repeat(np.arange(len(counts)), counts)
    ends = body + size
    size[ends > region_end[batch_of]] = -1
    nonempty = counts > 0
    last = (first + counts - 1)[nonempty]
    size[last[ends[last] != region_end[nonempty]]] = -1
    return body, size


def _ranges(lengths: np.ndarray) -> np.ndarray:
    """``0 .. n-1`` for each ``n`` in ``lengths``, concatenated."""
    return cast(np.ndarray, np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths))


def _walk(
    view: memoryview,
    region: tuple[int, int],
    first: int,
    from_step: int,
    count: int,
    out: tuple[np.ndarray, np.ndarray],
) -> None:
    """Read one batch's record lengths one by one, from record ``from_step`` at the region's start (up to its end),
    into ``out`` (each record's body position and size, from index ``first``); a bad length stops the walk, marking
    it and the records after it bad."""
    pos, end = region
    body, size = out
    bodies: list[int] = []
    sizes: list[int] = []
    for _ in range(from_step, count):
        raw = shift = 0
        value = -1
        while pos < end and shift < 7 * varint.INT_BYTES:
            byte = view[pos]
            pos += 1
            raw |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                value = (raw >> 1) ^ -(raw & 1)
                break
        bodies.append(pos)
        sizes.append(value)
        if value < 0:
            break
        pos += value
    index = first + from_step
    body[index : index + len(bodies)] = bodies
    size[index : index + len(sizes)] = sizes
    size[index + len(sizes) : first + count] = -1


@dataclass(frozen=True)
class _Fields:
    """Each record's fields, as parallel arrays over all records (headers over all headers)."""

    ok: np.ndarray
    ts_delta: np.ndarray
    offset_delta: np.ndarray
    key_start: np.ndarray
    key_len: np.ndarray
    value_start: np.ndarray
    value_len: np.ndarray
    header_count: np.ndarray
    header_key_start: np.ndarray
    header_key_len: np.ndarray
    header_value_start: np.ndarray
    header_value_len: np.ndarray

    @classmethod
    def parse(cls, rb: np.ndarray, body: np.ndarray, size: np.ndarray) -> _Fields:
        """Read every record's fields at once; ``ok`` is false where the record's bounds are bad, a field is
        malformed, or the fields do not exactly fill the record's length."""
        pos = body + 1  # the record attributes byte: unused by Kafka
        ts_delta, nbytes, bad = varint.read(rb, pos, varint.LONG_BYTES)
        pos = pos + nbytes
        offset_delta, nbytes, bad_offset = varint.read(rb, pos, varint.INT_BYTES)
        pos += nbytes
        key_len, nbytes, bad_key = varint.read(rb, pos, varint.INT_BYTES)
        pos += nbytes
        key_start = pos.copy()
        pos += np.maximum(key_len, 0)
        value_len, nbytes, bad_value = varint.read(rb, pos, varint.INT_BYTES)
        pos += nbytes
        value_start = pos.copy()
        pos += np.maximum(value_len, 0)
        header_count, nbytes, bad_count = varint.read(rb, pos, varint.INT_BYTES)
        pos += nbytes
        end = body + size
        ok = (size >= 0) & ~(bad | bad_offset | bad_key | bad_value | bad_count)
        ok &= (key_len >= -1) & (value_len >= -1) & (offset_delta >= 0)
        # A header takes at least two bytes: a corrupt count must not size the arrays below.
        ok &= (header_count >= 0) & (header_count * 2 <= end - pos)
        counts = np.where(ok, header_count, 0)
        total = int(counts.sum())
        hk_start, hk_len, hv_start, hv_len = (np.zeros(total, dtype=np.int64) for _ in range(4))
        if total:
            first = np.cumsum(counts) - counts
            active = np.flatnonzero(counts)
            at = pos[active]
            for h in range(int(counts.max())):  # once per header position, over every record that has one
                keep = counts[active] > h
                active, at = active[keep], at[keep]
                index = first[active] + h
                length, nbytes, bad_hk = varint.read(rb, at, varint.INT_BYTES)
                at = at + nbytes
                hk_start[index], hk_len[index] = at, length
                at = at + np.maximum(length, 0)
                vlength, nbytes, bad_hv = varint.read(rb, at, varint.INT_BYTES)
                at = at + nbytes
                hv_start[index], hv_len[index] = at, vlength
                at = at + np.maximum(vlength, 0)
                # Header keys are non-null strings (DefaultRecord.readHeaders).
                ok[active[bad_hk | bad_hv | (length < 0) | (vlength < -1)]] = False
                pos[active] = at
        ok &= pos == end
        return cls(
            ok,
            ts_delta,
            offset_delta,
            key_start,
            key_len,
            value_start,
            value_len,
            counts,
            hk_start,
            hk_len,
            hv_start,
            hv_len,
        )


def _binary(data: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of the byte ranges ``[start, start + length)`` of ``data``; a length of -1 is null.

    The ranges are increasing and disjoint, so they and the gaps between them form one binary array over
    ``data`` (no copy); taking its even elements copies the ranges out in one C++ pass.
    """
    n = len(starts)
    if not n:
        return pa.array([], pa.binary())
    ends = starts + np.maximum(lengths, 0)
    bounds = np.empty(2 * n + 1, dtype=np.int64)
    bounds[0 : 2 * n : 2] = starts
    bounds[1 : 2 * n : 2] = ends
    bounds[2 * n] = ends[-1]
    wide = bounds[-1] >= 2**31
    valid = np.ones(2 * n, dtype=bool)
    valid[0::2] = lengths >= 0
    spread = pa.Array.from_buffers(
        pa.large_binary() if wide else pa.binary(),
        2 * n,
        [
            pa.py_buffer(np.packbits(valid, bitorder="little")),
            pa.py_buffer(bounds if wide else bounds.astype(np.int32)),
            data,
        ],
        null_count=int(2 * n - valid.sum()),
    )
    picked = spread.take(pa.array(np.arange(0, 2 * n, 2)))
    return picked.cast(pa.binary()) if wide else picked


def _headers(
    data: pa.Buffer, fields: _Fields, where: str, base_offsets: np.ndarray, batch_index: np.ndarray
) -> pa.Array:
    keys = _binary(data, fields.header_key_start, fields.header_key_len)
    try:
        keys = keys.cast(pa.string())
    except pa.ArrowInvalid as err:
        index = next(i for i, key in enumerate(keys.to_pylist()) if not _is_utf8(key))
        record = int(np.searchsorted(np.cumsum(fields.header_count), index, side="right"))
        raise corrupt(
            where,
            int(base_offsets[batch_index[record]]),
            f"has a header key that is not UTF-8: {keys[index].as_py()!r}",
        ) from err
    values = _binary(data, fields.header_value_start, fields.header_value_len)
    entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE.value_type))
    offsets = np.zeros(len(fields.header_count) + 1, dtype=np.int32)
    np.cumsum(fields.header_count, out=offsets[1:])
    return pa.ListArray.from_arrays(
        pa.array(offsets), entries, type=HEADER_TYPE, mask=pa.array(fields.header_count == 0)
    )


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _control_types(
    rb: np.ndarray,
    fields: _Fields,
    is_control: np.ndarray,
    where: str,
    base_offsets: np.ndarray,
    batch_index: np.ndarray,
) -> pa.Array:
    """``commit``/``abort`` from each control record's key (version int16, type int16); null for data
    records and for control types this product does not know (Kafka's UNKNOWN)."""
    codes = np.full(len(is_control), -1, dtype=np.int8)
    control = np.flatnonzero(is_control)
    if control.size:
        short = control[fields.key_len[control] < 4]
        if short.size:
            raise corrupt(
                where,
                int(base_offsets[batch_index[short[0]]]),
                "has a control record whose key is shorter than the 4 bytes of a control key",
            )
        at = fields.key_start[control] + 2
        kind = (rb[at].astype(np.int16) << 8) | rb[at + 1].astype(np.int16)
        codes[control] = np.where(np.isin(kind, list(CONTROL_TYPES)), kind, -1)
    names = pa.array([CONTROL_TYPES[code] for code in sorted(CONTROL_TYPES)])
    return pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0), names).cast(pa.string())
