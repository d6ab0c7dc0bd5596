"""The batch layer: how a pass's surviving records are framed in Kafka record batches (reference §3.7, §3.10-§3.12).

Which records survive is :mod:`compaction.rules`' verdict alone, record by record. This module only
decides, for a ``.log`` segment a pass rewrites, what becomes of each batch, as Kafka's ``MemoryRecords.filterTo``
does:

- a batch whose records all survive and that needs no new delete horizon is **copied** byte for byte
  (its CRC and compression as they were);
- a batch that loses records, or whose tombstones or marker get their first horizon, is **rebuilt** with the
  records that survive: same base offset and last offset (offsets inside may then have gaps), producer id and
  epoch, base sequence, partition leader epoch, attributes and codec; a new horizon is written as KIP-534 does
  (attribute bit 6, the horizon in the base timestamp, record timestamps unchanged);
- a batch that loses every record is **kept as an empty batch** (61 bytes: uncompressed, no records, base
  timestamp -1, no horizon bit, its last offset and max timestamp) when it must be (``RETAIN_EMPTY``): it is
  the last batch before the first uncleanable offset (it keeps the log's last offset, KAFKA-17076), or the
  last batch of a producer that is still active (it keeps the producer's epoch and sequence). Offline, a
  producer is active while its last batch's max timestamp is within ``producer.id.expiration.ms`` of the
  pass's ``now``, or while it has a transaction open. Otherwise the batch goes.

Records that come from Parquet segments have no batches: they are framed anew
(:func:`compaction.store.formats.frame_batches`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction import rules
from compaction.kafka import BATCH_SCHEMA, encode
from compaction.kafka.layout import CONTROL, LOG_OVERHEAD
from compaction.store.formats import LogSegment, frame_batches
from compaction.store.manifest import Manifest, SegmentMeta

_LENGTH = struct.Struct(">i")


@dataclass(frozen=True)
class BatchPolicy:
    """What keeps a batch that loses every record, in one partition's pass: the first uncleanable offset, and each
    active producer's epoch and last data offset (None: its last batch since an epoch bump is a marker)."""

    first_uncleanable_offset: int
    active_producers: dict[int, tuple[int, int | None]] = field(default_factory=dict)


def active_producers(manifest: Manifest, expiration_ms: int, now_ms: int) -> dict[int, tuple[int, int | None]]:
    """The producers still active at ``now_ms``: a transaction open, or a last batch whose max timestamp is less
    than ``producer.id.expiration.ms`` old (Kafka expires a producer at ``now - lastTimestamp >= expiration``)."""
    expired = {pid for pid, _ in manifest.expired_producers(expiration_ms, now_ms)}
    return {
        pid: (last.producer_epoch, last.last_data_offset)
        for pid, last in manifest.producer_state.items()
        if pid not in expired
    }


def last_offsets(batches: pa.Table) -> np.ndarray:
    last: np.ndarray = batches.column("base_offset").to_numpy() + batches.column("last_offset_delta").to_numpy().astype(
        np.int64
    )
    return last


def retain_empty(batches: pa.Table, policy: BatchPolicy) -> np.ndarray:
    """Which batches are kept, empty if need be (``checkBatchRetention``'s RETAIN_EMPTY): the last batch before
    the first uncleanable offset, and each active producer's last batch (its last data batch, or with no data
    since an epoch bump, its markers of that epoch)."""
    return _retained(
        last_offsets(batches),
        batches.column("producer_id").to_numpy(),
        batches.column("producer_epoch").to_numpy(),
        (batches.column("attributes").to_numpy() & CONTROL) != 0,
        policy,
    )


def _retained(
    last: np.ndarray, producer: np.ndarray, epoch: np.ndarray, control: np.ndarray, policy: BatchPolicy
) -> np.ndarray:
    keep = last + 1 == policy.first_uncleanable_offset
    for pid in np.unique(producer[producer >= 0]).tolist():
        known = policy.active_producers.get(pid)
        if known is None:
            continue
        mine = producer == pid
        active_epoch, last_data = known
        keep |= mine & ((last == last_data) if last_data is not None else (control & (epoch == active_epoch)))
    return cast(np.ndarray, keep)


def stale_empty_batches(segments: Sequence[SegmentMeta], policy: BatchPolicy | None) -> frozenset[int]:
    """The base offsets of ``.log`` segments holding an empty batch that no longer has to stay (its producer
    wrote again or expired, or the uncleanable offset moved on): a pass rewrites them, as Kafka's recopy drops
    such batches."""
    if policy is None:
        return frozenset()
    stale = set()
    for segment in segments:
        if not segment.empty_batches:
            continue
        empty = segment.empty_batches
        kept = _retained(
            np.array([b.last_offset for b in empty], dtype=np.int64),
            np.array([b.producer_id for b in empty], dtype=np.int64),
            np.array([b.producer_epoch for b in empty], dtype=np.int64),
            np.array([b.control for b in empty], dtype=bool),
            policy,
        )
        if not kept.all():
            stale.add(segment.base_offset)
    return frozenset(stale)


@dataclass(frozen=True)
class Framed:
    """Record batches for an output segment: their bytes, their records (segment schema) and their batch rows."""

    data: bytes
    records: pa.Table
    batches: pa.Table
    stamped: int = 0  # records given their first delete horizon

    @classmethod
    def join(cls, parts: Sequence[Framed], schema: pa.Schema) -> Framed:
        return cls(
            b"".join(p.data for p in parts),
            pa.concat_tables([p.records for p in parts]) if parts else schema.empty_table(),
            pa.concat_tables([p.batches for p in parts]) if parts else BATCH_SCHEMA.empty_table(),
            sum(p.stamped for p in parts),
        )


def frame_records(records: pa.Table, stamped: int = 0) -> Framed:
    """Records without batches (from a Parquet segment) framed anew."""
    batches = frame_batches(records)
    return Framed(encode(records, batches) if records.num_rows else b"", records, batches, stamped)


def reframe(segment: LogSegment, keep: np.ndarray, stamps: np.ndarray, horizon_ms: int, policy: BatchPolicy) -> Framed:
    """A ``.log`` segment's batches after a pass: ``keep`` says which of its records survive (every record of
    the segment, in order), ``stamps`` the offsets of markers that get their first horizon, ``horizon_ms`` the
    horizon this pass stamps."""
    batches = segment.batches
    n = batches.num_rows
    index = segment.batch_index
    kept = segment.records.filter(pa.array(keep))
    kept_batch = index[keep]
    stamp = pc.fill_null(rules.needs_horizon(kept, stamps), False).to_numpy(zero_copy_only=False)
    counts = batches.column("record_count").to_numpy().astype(np.int64)
    survivors = np.bincount(kept_batch, minlength=n)
    stamped = np.bincount(kept_batch[stamp], minlength=n) > 0
    guarded = retain_empty(batches, policy)
    copy = (survivors == counts) & ~stamped & ((counts > 0) | guarded)
    rebuild = (survivors > 0) & ~copy
    empty = (survivors == 0) & (counts > 0) & guarded
    if stamped.any():
        # The horizon is the batch's: a decoder gives it to the batch's tombstones and markers (null values).
        concerned = pc.and_(
            pa.array(stamped[kept_batch]), pc.or_(pc.is_null(kept.column("value")), kept.column("is_control"))
        )
        horizons = pc.if_else(concerned, pa.scalar(horizon_ms, pa.int64()), kept.column("delete_horizon_ms"))
        kept = kept.set_column(kept.column_names.index("delete_horizon_ms"), "delete_horizon_ms", horizons)
    written = rebuild | empty
    rows = batches.filter(pa.array(written))
    if rows.num_rows:
        new_counts = np.where(empty, 0, survivors)[written]
        horizon = pc.if_else(
            pa.array(stamped[written]), pa.scalar(horizon_ms, pa.int64()), rows.column("delete_horizon_ms")
        )
        rows = rows.set_column(
            rows.column_names.index("record_count"), "record_count", pa.array(new_counts, pa.int32())
        )
        rows = rows.set_column(rows.column_names.index("delete_horizon_ms"), "delete_horizon_ms", horizon)
        encoded = memoryview(encode(kept.filter(pa.array(rebuild[kept_batch])), rows))
    else:
        encoded = memoryview(b"")
    source = memoryview(segment.data).cast("B") if not isinstance(segment.data, memoryview) else segment.data
    positions = batches.column("position").to_numpy()
    sizes = batches.column("size").to_numpy().astype(np.int64)
    pieces: list[memoryview] = []
    run_start = run_end = -1  # a run of copied batches, sliced once
    at = 0
    for j in np.flatnonzero(copy | written).tolist():
        if copy[j]:
            if positions[j] == run_end:
                run_end += sizes[j]
                continue
            if run_end > run_start:
                pieces.append(source[run_start:run_end])
            run_start, run_end = int(positions[j]), int(positions[j] + sizes[j])
            continue
        if run_end > run_start:
            pieces.append(source[run_start:run_end])
            run_start = run_end = -1
        length = LOG_OVERHEAD + _LENGTH.unpack_from(encoded, at + 8)[0]
        pieces.append(encoded[at : at + length])
        at += length
    if run_end > run_start:
        pieces.append(source[run_start:run_end])
    out_rows = batches.filter(pa.array(copy | written))
    out_counts = np.where(empty, 0, survivors)[copy | written]
    out_rows = out_rows.set_column(
        out_rows.column_names.index("record_count"), "record_count", pa.array(out_counts, pa.int32())
    )
    return Framed(b"".join(pieces), kept, out_rows, int(stamp.sum()))
