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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction import rules
from compaction.kafka import encode
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


def retain_empty(segment: LogSegment, policy: BatchPolicy) -> np.ndarray:
    """Which batches are kept, empty if need be (``checkBatchRetention``'s RETAIN_EMPTY): the last batch before
    the first uncleanable offset, and each active producer's last batch (its last data batch, or with no data
    since an epoch bump, its markers of that epoch)."""
    batches = segment.batches
    return _retained(
        segment.batch_last_offsets,
        batches.column("producer_id").to_numpy(),
        batches.column("producer_epoch").to_numpy(),
        (batches.column("attributes").to_numpy() & CONTROL) != 0,
        policy,
    )


def _retained(
    last: np.ndarray, producer: np.ndarray, epoch: np.ndarray, control: np.ndarray, policy: BatchPolicy
) -> np.ndarray:
    keep: np.ndarray = last + 1 == policy.first_uncleanable_offset
    for pid in np.unique(producer[producer >= 0]).tolist():
        known = policy.active_producers.get(pid)
        if known is None:
            continue
        mine = producer == pid
        active_epoch, last_data = known
        keep |= mine & ((last == last_data) if last_data is not None else (control & (epoch == active_epoch)))
    return keep


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
            np.array([b.last_offset for b in empty]),
            np.array([b.producer_id for b in empty]),
            np.array([b.producer_epoch for b in empty]),
            np.array([b.control for b in empty]),
            policy,
        )
        if not kept.all():
            stale.add(segment.base_offset)
    return frozenset(stale)


@dataclass(frozen=True)
class Framed:
    """Record batches for an output segment: their bytes, their records (segment schema), their batch rows, and how
    many records got their first delete horizon."""

    data: bytes
    records: pa.Table
    batches: pa.Table
    stamped: int

    @classmethod
    def join(cls, parts: Sequence[Framed]) -> Framed:
        """The parts (at least one) of one output segment, in offset order."""
        return cls(
            b"".join(p.data for p in parts),
            pa.concat_tables([p.records for p in parts]),
            pa.concat_tables([p.batches for p in parts]),
            sum(p.stamped for p in parts),
        )


def frame_records(records: pa.Table, stamped: int) -> Framed:
    """Records without batches (from a Parquet segment) framed anew; ``stamped`` of them got their first horizon."""
    batches = frame_batches(records)
    return Framed(encode(records, batches), records, batches, stamped)


def reframe(
    segment: LogSegment,
    keep: np.ndarray,
    stamps: np.ndarray,
    horizon_ms: int,
    policy: BatchPolicy,
    load: Callable[[], Any] | None = None,
) -> Framed:
    """A ``.log`` segment's batches after a pass: ``keep`` says which of its records survive (every record of
    the segment, in order), ``stamps`` the offsets of markers that get their first horizon, ``horizon_ms`` the
    horizon this pass stamps. ``load`` gives the segment's bytes where ``segment.data`` is None, called only if a
    batch is copied whole."""
    batches = segment.batches
    n = batches.num_rows
    kept = segment.records if keep.all() else segment.records.filter(pa.array(keep))  # held pruned: often all
    kept_batch = segment.batch_index[keep]
    stamp = rules.needs_horizon(kept, stamps).to_numpy(zero_copy_only=False)
    counts = batches.column("record_count").to_numpy()
    survivors = np.bincount(kept_batch, minlength=n)
    stamped = np.bincount(kept_batch[stamp], minlength=n) > 0
    out = (survivors > 0) | retain_empty(segment, policy)  # the batches written: copied, rebuilt or kept empty
    copy = out & (survivors == counts) & ~stamped
    if stamped.any():
        # The horizon is the batch's: a decoder gives it to the batch's tombstones and markers (null values).
        concerned = pc.and_(
            pa.array(stamped[kept_batch]), pc.or_(pc.is_null(kept.column("value")), kept.column("is_control"))
        )
        horizons = pc.if_else(concerned, pa.scalar(horizon_ms), kept.column("delete_horizon_ms"))
        kept = kept.set_column(kept.column_names.index("delete_horizon_ms"), "delete_horizon_ms", horizons)
    rows = batches.filter(pa.array(out))
    rows = rows.set_column(
        rows.column_names.index("record_count"), "record_count", pa.array(survivors[out], pa.int32())
    )
    horizon = pc.if_else(pa.array(stamped[out]), pa.scalar(horizon_ms), rows.column("delete_horizon_ms"))
    rows = rows.set_column(rows.column_names.index("delete_horizon_ms"), "delete_horizon_ms", horizon)
    # The batches written anew, each in its turn: the rebuilt ones with their surviving records, the emptied ones.
    encoded = memoryview(encode(kept.filter(pa.array(~copy[kept_batch])), rows.filter(pa.array(~copy[out]))))
    data = segment.data
    if data is None and copy.any():
        if load is None:
            raise ValueError("reframe: a batch is copied whole, but the segment's bytes are neither held nor loadable")
        data = load()
    source = memoryview(data if data is not None else b"")
    positions = batches.column("position").to_numpy()
    ends = positions + batches.column("size").to_numpy()
    pieces: list[memoryview] = []
    at = 0
    for j in np.flatnonzero(out).tolist():
        if copy[j]:
            pieces.append(source[positions[j] : ends[j]])
            continue
        length = LOG_OVERHEAD + _LENGTH.unpack_from(encoded, at + 8)[0]
        pieces.append(encoded[at : at + length])
        at += length
    return Framed(b"".join(pieces), kept, rows, int(stamp.sum()))
