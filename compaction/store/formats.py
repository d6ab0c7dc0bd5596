"""Kafka's record batches (``.log``) as a segment format beside Parquet (:mod:`.segment`): decode, frame, summarise;
and :class:`SegmentFormat`, the name of either.

A store's :class:`~compaction.store.objects.Objects` read and write either through the same calls (``read_segment``,
``write_segment(segment_format=...)``), chosen by a segment's ``format``; both decode to the segment schema
(:data:`compaction.store.segment.SEGMENT_SCHEMA`), so everything above the store reads records the same way.
A ``.log`` segment also has its batch rows (:data:`compaction.kafka.BATCH_SCHEMA`: base offset, last offset
delta, attributes, producer fields, and where each batch's bytes lie), which the cleaner needs to copy batches
byte for byte and to rebuild them as Kafka does.

Records that come without batches (Parquet records written as ``.log``, appended rows, generated data) are
framed into batches by :func:`frame_batches`: one batch per run of records of the same producer, epoch and
kind (transactional, control), a control record alone, at most :data:`BATCH_RECORDS` records each.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction import kafka
from compaction.errors import CorruptBatchError, InvalidRecordsError
from compaction.kafka.layout import CONTROL, TRANSACTIONAL
from compaction.store.segment import SEGMENT_SCHEMA


class SegmentFormat(StrEnum):
    """A segment's format, named as manifests, ``segment.format`` and ``--format`` name it."""

    PARQUET = "parquet"  # one row per record, a .parquet object
    KAFKA = "kafka"  # Kafka's record batches (v2), a .log object

    @property
    def extension(self) -> str:
        """The extension of the object's name."""
        return "log" if self is SegmentFormat.KAFKA else "parquet"


#: The most records :func:`frame_batches` puts in one batch (a producer's batch.size holds ~1,000 small ones).
BATCH_RECORDS = 1000
#: A new batch starts before an offset this far from the previous one, so a batch's offset delta stays an int32.
_MAX_GAP = 2**30


@dataclass(frozen=True)
class LogSegment:
    """A decoded ``.log`` segment: its bytes, records (segment schema), batch rows and each record's batch.

    ``data`` is None where a task holds the decoded segment for a later rewrite without its bytes, which only
    batches copied whole need (:func:`compaction.clean.batches.reframe` reads them again then); ``records`` then
    holds only the records the rewrite can keep (live, and not superseded by a later segment: see
    :func:`compaction.clean.tasks.facts.supersedes_as_read`), with their ``batch_index``."""

    data: Any
    records: pa.Table
    batches: pa.Table
    batch_index: np.ndarray

    @property
    def batch_last_offsets(self) -> np.ndarray:
        """Each batch's last offset (inclusive), empty batches included."""
        last: np.ndarray = self.batches.column("base_offset").to_numpy() + self.batches.column(
            "last_offset_delta"
        ).to_numpy().astype(np.int64)
        return last


def decode_log(data: Any, where: str) -> LogSegment:
    """Decode a ``.log`` object; CorruptBatchError (naming ``where`` and the batch's base offset) on bad bytes."""
    decoded = kafka.decode(data, where=where)
    return LogSegment(data, decoded.records.cast(SEGMENT_SCHEMA), decoded.batches, decoded.batch_index)


def check_batch_offsets(
    segment: LogSegment, where: str, base_offset: int | None = None, next_offset: int | None = None
) -> None:
    """Batches must be in offset order without overlap and inside ``[base_offset, next_offset)`` when given."""
    bases = segment.batches.column("base_offset").to_numpy()
    lasts = segment.batch_last_offsets
    if not len(bases):
        return
    overlap = np.flatnonzero(bases[1:] <= lasts[:-1])
    if overlap.size:
        j = int(overlap[0]) + 1
        raise CorruptBatchError(
            f"segment {where}: batch at offset {bases[j]} starts at or before the previous "
            f"batch's last offset {lasts[j - 1]}",
            where=where,
            base_offset=int(bases[j]),
        )
    if base_offset is not None and bases[0] < base_offset:
        raise CorruptBatchError(
            f"segment {where}: batch at offset {bases[0]} starts before the segment's base offset {base_offset}",
            where=where,
            base_offset=int(bases[0]),
        )
    if next_offset is not None and lasts[-1] >= next_offset:
        raise CorruptBatchError(
            f"segment {where}: batch at offset {bases[-1]} ends at {lasts[-1]}, past the "
            f"segment's range (next offset {next_offset})",
            where=where,
            base_offset=int(bases[-1]),
        )


def frame_batches(records: pa.Table, compression: str = "none") -> pa.Table:
    """Batch rows (``BATCH_SCHEMA``) for records in offset order that have none.

    A batch holds records of one producer id and epoch and one kind (transactional or not; a control record
    is a batch of its own), at most :data:`BATCH_RECORDS`, and its tombstones and markers share one delete
    horizon (Kafka keeps the horizon per batch). Sequences are unknown (-1), as is the leader epoch.
    """
    n = records.num_rows
    if not n:
        return kafka.batch_table([])
    producer = pc.fill_null(records.column("producer_id"), -1).to_numpy(zero_copy_only=False)
    epoch = pc.fill_null(records.column("producer_epoch"), -1).to_numpy(zero_copy_only=False)
    txn = pc.fill_null(records.column("is_transactional"), False).to_numpy(zero_copy_only=False)
    control = pc.fill_null(records.column("is_control"), False).to_numpy(zero_copy_only=False)
    offsets = records.column("offset").to_numpy()
    start = np.zeros(n, dtype=bool)
    start[0] = True
    start[1:] = (
        (producer[1:] != producer[:-1])
        | (epoch[1:] != epoch[:-1])
        | (txn[1:] != txn[:-1])
        | control[1:]
        | control[:-1]
        | (offsets[1:] - offsets[:-1] > _MAX_GAP)
    )
    horizon = records.column("delete_horizon_ms")
    deletes = pc.or_(pc.is_null(records.column("value")), records.column("is_control"))
    concerned = np.flatnonzero(pc.fill_null(deletes, False).to_numpy(zero_copy_only=False))
    if concerned.size > 1:
        values = pc.fill_null(horizon, -(2**63)).to_numpy(zero_copy_only=False)[concerned]
        start[concerned[1:][values[1:] != values[:-1]]] = True
    run = np.cumsum(start) - 1
    run_start = np.flatnonzero(start)
    position = np.arange(n) - run_start[run]
    start |= position % BATCH_RECORDS == 0
    first = np.flatnonzero(start)
    counts = np.diff(np.append(first, n))
    batch_of = np.cumsum(start) - 1
    # Each batch's one horizon, from its tombstones and markers (none: no horizon bit).
    batch_horizon = np.zeros(len(first), dtype=np.int64)
    has_horizon = np.zeros(len(first), dtype=bool)
    if concerned.size:
        valid = pc.is_valid(horizon).to_numpy(zero_copy_only=False)[concerned]
        batch_horizon[batch_of[concerned]] = pc.fill_null(horizon, 0).to_numpy(zero_copy_only=False)[concerned]
        has_horizon[batch_of[concerned]] = valid
    attributes = np.where(txn[first], TRANSACTIONAL, 0) | np.where(control[first], CONTROL, 0)
    last = np.append(first[1:], n) - 1
    stamps = pc.fill_null(records.column("timestamp"), -1).to_numpy(zero_copy_only=False)
    return pa.Table.from_arrays(
        [
            pa.array(offsets[first], pa.int64()),
            pa.array((offsets[last] - offsets[first]).astype(np.int32)),
            pa.array(np.full(len(first), -1, dtype=np.int32)),
            pa.array(attributes.astype(np.int16)),
            # Markers are written uncompressed, as the coordinator writes them (MemoryRecords.withEndTransactionMarker).
            pa.array(np.where(control[first], "none", compression), pa.string()),
            pa.nulls(len(first), pa.int64()),
            pa.array(np.maximum(np.maximum.reduceat(stamps, first), -1), pa.int64()),
            pa.array(producer[first].astype(np.int64)),
            pa.array(epoch[first].astype(np.int16)),
            pa.array(np.full(len(first), -1, dtype=np.int32)),
            pa.array(counts.astype(np.int32)),
            pa.array(batch_horizon, pa.int64(), mask=~has_horizon),
            pa.nulls(len(first), pa.int64()),
            pa.nulls(len(first), pa.int32()),
        ],
        schema=kafka.BATCH_SCHEMA,
    )


def encode_log(records: pa.Table, batches: pa.Table | None = None, compression: str = "none") -> bytes:
    """Encode records as record batches: in the given batch rows, or framed by :func:`frame_batches`."""
    return kafka.encode(records, batches if batches is not None else frame_batches(records, compression))


def producer_summaries(
    producer_id: np.ndarray,
    producer_epoch: np.ndarray,
    last_offset: np.ndarray,
    max_timestamp: np.ndarray,
    control: np.ndarray,
) -> list[dict[str, Any]]:
    """Each producer's last batch among batches (or records) in log order: the fields of
    :class:`~compaction.store.manifest.ProducerState`. Rows without a producer id (-1) are no producer's."""
    rows = np.flatnonzero(producer_id >= 0)
    if not rows.size:
        return []
    order = rows[np.argsort(producer_id[rows], kind="stable")]
    pid, epoch = producer_id[order], producer_epoch[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = pid[1:] != pid[:-1]
    group_last = np.append(np.flatnonzero(new_group)[1:] - 1, len(order) - 1)
    # Kafka clears a producer's batch metadata when its epoch changes: only its last epoch's data counts.
    new_run = new_group.copy()
    new_run[1:] |= epoch[1:] != epoch[:-1]
    run = np.cumsum(new_run)
    group = np.cumsum(new_group) - 1
    in_last_run = run == run[group_last][group]
    data = in_last_run & ~control[order]
    last_data = np.full(len(group_last), -1, dtype=np.int64)
    np.maximum.at(last_data, group[data], last_offset[order][data])
    picked = order[group_last]
    return [
        {
            "producer_id": int(p),
            "producer_epoch": int(e),
            "last_offset": int(o),
            "max_timestamp": int(t),
            "last_data_offset": int(d) if d >= 0 else None,
        }
        for p, e, o, t, d in zip(
            producer_id[picked],
            producer_epoch[picked],
            last_offset[picked],
            max_timestamp[picked],
            last_data,
            strict=True,
        )
    ]


def batch_producers(batches: pa.Table) -> list[dict[str, Any]]:
    """:func:`producer_summaries` of a ``.log`` segment's batch rows."""
    attributes = batches.column("attributes").to_numpy()
    return producer_summaries(
        batches.column("producer_id").to_numpy(),
        batches.column("producer_epoch").to_numpy(),
        batches.column("base_offset").to_numpy() + batches.column("last_offset_delta").to_numpy().astype(np.int64),
        pc.fill_null(batches.column("max_timestamp"), -1).to_numpy(),
        (attributes & CONTROL) != 0,
    )


def record_producers(records: pa.Table) -> list[dict[str, Any]]:
    """:func:`producer_summaries` of Parquet records, each record its own batch."""
    return producer_summaries(
        pc.fill_null(records.column("producer_id"), -1).to_numpy(zero_copy_only=False),
        pc.fill_null(records.column("producer_epoch"), -1).to_numpy(zero_copy_only=False),
        records.column("offset").to_numpy(),
        pc.fill_null(records.column("timestamp"), -1).to_numpy(zero_copy_only=False),
        pc.fill_null(records.column("is_control"), False).to_numpy(zero_copy_only=False),
    )


def check_format(name: str) -> SegmentFormat:
    """The segment format ``name`` names, else InvalidRecordsError listing the formats."""
    try:
        return SegmentFormat(name)
    except ValueError:
        raise InvalidRecordsError(
            f"no segment format {name!r}; the formats are {[str(f) for f in SegmentFormat]}"
        ) from None
