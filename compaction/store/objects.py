"""The objects under a partition's folders besides its manifests: segments (every row, the live rows, new ones),
deletion vectors, what a pass hands between its stages (:mod:`.handover`), the offset ranges a write's tasks claim
(:mod:`.claims`), and the pins of readers outside the store.

:class:`Objects` is a store's ``objects``; the :class:`~compaction.store.log.Store` it belongs to lists partitions,
reads manifests and the live log, and commits. An object written here is not part of the log until a commit names
it. Every read of a segment's records goes through :meth:`Objects.segment_rows`, and every read of its live rows
through :meth:`Objects.live_batches` (:meth:`Objects.live_rows` for a caller that holds every record): the one place
a segment's deletion vector and the log start are applied.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.errors import CorruptSegmentError, InvalidRecordsError
from compaction.kafka.layout import CONTROL
from compaction.store import claims, deletes, handover
from compaction.store import pins as pinning
from compaction.store.deletes import members
from compaction.store.formats import (
    LogSegment,
    SegmentFormat,
    batch_producers,
    check_batch_offsets,
    check_format,
    decode_log,
    encode_log,
    frame_batches,
    record_producers,
)
from compaction.store.manifest import DeletionVector, EmptyBatch, ProducerState, SegmentMeta, segment_name
from compaction.store.names import TopicPartition
from compaction.store.segment import (
    BATCH_ROWS,
    SEGMENT_SCHEMA,
    RowGroups,
    SegmentStats,
    check_committed,
    check_size,
    checksum,
    decode_parquet,
    encode_parquet,
    encode_parquet_pieces,
    parquet_batches,
    segment_stats,
)
from compaction.store.storage import Storage

#: Objects up to this size on an object store are read in one request, whichever columns are asked for.
WHOLE_READ_BYTES = 8 << 20


@dataclass(frozen=True)
class _Encoded:
    """A segment's bytes as written, and what its manifest entry says of its records."""

    fmt: SegmentFormat
    data: bytes | memoryview
    stats: SegmentStats
    producers: list[dict[str, Any]]
    empty_batches: tuple[EmptyBatch, ...] = ()


class Objects:
    """A store's objects, by partition: written new, read back against what their commit recorded, deleted."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.claims = claims.Claims(storage)  # the offset ranges a write's tasks take before it commits

    # Writing: new objects, not yet committed ---------------------------------------------------------

    def write_segment(
        self,
        tp: TopicPartition,
        table: pa.Table,
        base_offset: int,
        next_offset: int,
        created_ms: int,
        *,
        compression: str = "zstd",
        object_id: str | None = None,
        segment_format: SegmentFormat = SegmentFormat.PARQUET,
        batches: pa.Table | None = None,
        encoded: bytes | None = None,
    ) -> SegmentMeta:
        """Write records as a new segment object covering ``[base_offset, next_offset)``; not yet committed.

        ``object_id`` (default: a random one) names the object and must be unique to this write. A ``kafka``
        segment is written in ``batches`` (batch rows), framed anew when none are given, or is ``encoded``
        already (bytes holding exactly the records of ``table``); ``compression`` is Parquet's codec."""
        fmt = check_format(segment_format)
        stats = segment_stats(table)
        if fmt == SegmentFormat.KAFKA:
            if batches is None:
                if encoded is not None:
                    raise InvalidRecordsError("write_segment: encoded batches need their batch rows")
                batches = frame_batches(table)
            data = encoded if encoded is not None else encode_log(table, batches)
            producers = batch_producers(batches)
            empty = batches.filter(pc.equal(batches.column("record_count"), 0))
            empty_batches = tuple(
                EmptyBatch(
                    last_offset=b["base_offset"] + b["last_offset_delta"],
                    producer_id=b["producer_id"],
                    producer_epoch=b["producer_epoch"],
                    control=bool(b["attributes"] & CONTROL),
                )
                for b in empty.to_pylist()
            )
        else:
            data = encode_parquet(table, compression)
            producers = record_producers(table)
            empty_batches = ()
        return self._put_segment(
            tp, _Encoded(fmt, data, stats, producers, empty_batches), base_offset, next_offset, created_ms, object_id
        )

    def write_segment_pieces(
        self,
        tp: TopicPartition,
        pieces: Iterable[pa.Table],
        base_offset: int,
        next_offset: int,
        created_ms: int,
        object_id: str | None = None,
    ) -> SegmentMeta | None:
        """:meth:`write_segment` for a Parquet segment whose records come in pieces (in offset order), each
        encoded as it comes, so that the records are never all held at once; None (nothing written) when
        no piece has a record."""
        encoded = encode_parquet_pieces(pieces)
        if encoded is None:
            return None
        data, summary = encoded
        segment = _Encoded(SegmentFormat.PARQUET, memoryview(data), segment_stats(summary), record_producers(summary))
        return self._put_segment(tp, segment, base_offset, next_offset, created_ms, object_id)

    def _put_segment(
        self,
        tp: TopicPartition,
        encoded: _Encoded,
        base_offset: int,
        next_offset: int,
        created_ms: int,
        object_id: str | None,
    ) -> SegmentMeta:
        fmt, data, stats = encoded.fmt, encoded.data, encoded.stats
        rel = segment_name(base_offset, object_id or uuid.uuid4().hex, fmt.extension)
        self.storage.write_bytes(f"{tp.prefix}/{rel}", data, flush=False)  # the commit naming it flushes it
        return SegmentMeta(
            path=rel,
            format=fmt,
            base_offset=base_offset,
            next_offset=next_offset,
            record_count=stats.record_count,
            size_bytes=len(data),
            checksum=checksum(data),
            created_ms=created_ms,
            first_timestamp=stats.first_timestamp,
            max_timestamp=stats.max_timestamp,
            tombstone_count=stats.tombstone_count,
            keyless_count=stats.keyless_count,
            transactional_count=stats.transactional_count,
            control_count=stats.control_count,
            min_delete_horizon_ms=stats.min_delete_horizon_ms,
            producers=tuple(ProducerState(**p) for p in encoded.producers),
            empty_batches=encoded.empty_batches,
        )

    def write_deletes(
        self,
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
        """Write a deletion vector for ``segment``; not yet committed (see :func:`.deletes.write_deletes`)."""
        return deletes.write_deletes(
            self.storage,
            tp,
            segment,
            offsets,
            created_ms=created_ms,
            live_min_delete_horizon_ms=live_min_delete_horizon_ms,
            live_first_timestamp=live_first_timestamp,
            live_max_timestamp=live_max_timestamp,
            object_id=object_id,
        )

    def read_deletes(self, tp: TopicPartition, vector: DeletionVector) -> pa.Array:
        """The offsets a committed deletion vector removes, checked against its commit."""
        return deletes.read_deletes(self.storage, tp, vector)

    def write_verdicts(
        self, tp: TopicPartition, base_offset: int, parts: Sequence[pa.Table | None], object_id: str
    ) -> tuple[str, tuple[int | None, ...]]:
        """Hand a stage's verdicts on segments to the next stage of the pass (see :mod:`.handover`)."""
        return handover.write_verdicts(self.storage, tp, base_offset, parts, object_id)

    def read_verdicts(self, tp: TopicPartition, path: str, row_groups: Sequence[int]) -> list[pa.Table]:
        return handover.read_verdicts(self.storage, tp, path, row_groups)

    def write_pieces(
        self, tp: TopicPartition, base_offset: int, parts: Sequence[pa.Table], object_id: str
    ) -> tuple[str, tuple[int | None, ...]]:
        """Hand a run's rows to the next stage, a record batch per key range (see :mod:`.handover`)."""
        return handover.write_pieces(self.storage, tp, base_offset, parts, object_id)

    def read_piece(self, tp: TopicPartition, path: str, batch: int) -> pa.Table:
        return handover.read_piece(self.storage, tp, path, batch)

    def delete_handed(self, tp: TopicPartition, paths: Sequence[str]) -> None:
        """Delete the hand-over objects a pass is done with (others wait for gc)."""
        handover.delete_handed(self.storage, tp, paths)

    def pins(self, tp: TopicPartition) -> list[pinning.Pin]:
        """The manifest versions readers outside the store hold (gc keeps them; see :mod:`.pins`)."""
        return pinning.list_pins(self.storage, tp)

    def pin(self, tp: TopicPartition, version: int, holder: str, description: str) -> pinning.Pin:
        """Hold ``version`` for ``holder`` (an Iceberg snapshot about to be committed) until :meth:`unpin`."""
        return pinning.write_pin(self.storage, tp, version, holder, description)

    def unpin(self, tp: TopicPartition, pin: pinning.Pin) -> None:
        pinning.delete_pin(self.storage, tp, pin)

    # Reading segments: every read of a segment's records goes through segment_rows -------------------------

    def segment_rows(
        self,
        tp: TopicPartition,
        segment: SegmentMeta,
        columns: Sequence[str] | None = None,
        *,
        row_groups: RowGroups | None = None,
        batch_rows: int | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Every record of a segment's object, deleted or not, as batches of ``columns`` (default: all), held to
        what its manifest recorded.

        A read of every column in one piece reads the whole object and checks its size and checksum, which covers
        its pages (their CRCs are not checked again); a read of some columns, or in ``batch_rows`` batches, checks
        the size and reads only their pages, which check their own CRCs. A ``.log`` segment is read whole (a batch's
        CRC covers all its records). The schema is checked either way. ``row_groups`` (given a Parquet footer) names
        the row groups worth reading (None: all).
        """
        read = _asked(columns)
        if segment.format == SegmentFormat.KAFKA:
            records = self.read_log_segment(tp, segment).records.select(read)
            yield from records.to_batches(max_chunksize=batch_rows)
            return
        rel = f"{tp.prefix}/{segment.path}"
        where = self.storage.describe(rel)
        whole = set(read) >= set(SEGMENT_SCHEMA.names)
        # A small object on an object store is fetched in one request rather than a footer and column chunks
        # apart: there a request's round trip costs more than the bytes.
        small = not self.storage.is_local and segment.size_bytes <= WHOLE_READ_BYTES
        if batch_rows is None and row_groups is None and (whole or small):
            data = self.storage.read_buffer(rel, segment.size_bytes)
            check_committed(data, "segment", where, segment.size_bytes, segment.checksum)
            yield from decode_parquet(data, where, None if columns is None else read, pages_checked=False).to_batches()
            return
        source, size = self.storage.open_input(rel)
        try:
            check_size("segment", where, size, segment.size_bytes)
            if batch_rows is None and row_groups is None:
                yield from decode_parquet(source, where, read).to_batches()
            else:
                yield from parquet_batches(source, where, read, row_groups, batch_rows or BATCH_ROWS)
        finally:
            source.close()

    def live_batches(
        self,
        tp: TopicPartition,
        segment: SegmentMeta,
        columns: Sequence[str] | None = None,
        *,
        start: int | None = None,
        row_groups: RowGroups | None = None,
        batch_rows: int | None = None,
        hidden: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """A segment's live rows, as a reader sees them: :meth:`segment_rows` without the records its deletion
        vector lists and, with ``start`` (the log start offset), those below it. With ``hidden``, the others
        instead: the records the object still holds that no reader sees."""
        wanted = _asked(columns)
        deleted = self.deleted_offsets(tp, segment)
        below = start if start is not None and segment.base_offset < start else None
        needs_offset = (deleted is not None or below is not None) and "offset" not in wanted
        read = ["offset", *wanted] if needs_offset else wanted
        for batch in self.segment_rows(
            tp, segment, None if columns is None else read, row_groups=row_groups, batch_rows=batch_rows
        ):
            live = None
            if deleted is not None or below is not None:
                live = live_mask(batch.column("offset").to_numpy(), deleted, below)
            if hidden:
                batch = batch.slice(0, 0) if live is None else batch.filter(pa.array(~live))
            elif live is not None:
                batch = batch.filter(pa.array(live))
            yield batch.select(wanted) if needs_offset else batch

    def read_segment(
        self,
        tp: TopicPartition,
        segment: SegmentMeta,
        columns: Sequence[str] | None = None,
        start: int | None = None,
        *,
        hidden: bool = False,
    ) -> pa.Table:
        """A segment's live records (the asked columns) as one table: :meth:`live_batches` in one piece (with
        ``hidden``, the records it holds that no reader sees)."""
        wanted = _asked(columns)
        schema = pa.schema([SEGMENT_SCHEMA.field(c) for c in wanted])
        batches = [
            b if b.schema.equals(schema) else b.cast(schema)
            for b in self.live_batches(tp, segment, columns, start=start, hidden=hidden)
        ]
        return pa.Table.from_batches(batches, schema=schema)

    def deleted_offsets(self, tp: TopicPartition, segment: SegmentMeta) -> np.ndarray | None:
        """The offsets the segment's deletion vector lists, ascending (None: it has none)."""
        if segment.deletes is None:
            return None
        return cast("np.ndarray | None", self.read_deletes(tp, segment.deletes).to_numpy(zero_copy_only=False))

    def live_rows(
        self, tp: TopicPartition, segment: SegmentMeta, offsets: pa.Array | pa.ChunkedArray, start: int | None = None
    ) -> np.ndarray:
        """Which of a segment's records (given by their offsets, as :meth:`segment_rows` or a ``.log`` segment's
        records give them) a reader sees: the rule of :meth:`live_batches`, for callers that need every record."""
        below = start if start is not None and segment.base_offset < start else None
        live = live_mask(np.asarray(offsets), self.deleted_offsets(tp, segment), below)
        return np.ones(len(offsets), dtype=bool) if live is None else live

    def read_log_segment(self, tp: TopicPartition, segment: SegmentMeta) -> LogSegment:
        """A ``.log`` segment whole: its bytes (checked against the commit), every record and every batch.

        Deletion vectors and the log start are not applied: :meth:`live_rows` says which records are live.
        """
        if segment.format != SegmentFormat.KAFKA:
            raise CorruptSegmentError(f"segment {segment.path} is {segment.format}, not Kafka record batches")
        where = self.storage.describe(f"{tp.prefix}/{segment.path}")
        decoded = decode_log(read_log_bytes(self.storage, tp, segment), where)
        check_batch_offsets(decoded, where, segment.base_offset, segment.next_offset)
        return decoded


def read_log_bytes(storage: Storage, tp: TopicPartition, segment: SegmentMeta) -> pa.Buffer:
    """A ``.log`` segment's bytes, checked against the commit (not decoded)."""
    rel = f"{tp.prefix}/{segment.path}"
    data = storage.read_buffer(rel, segment.size_bytes)
    check_committed(data, "segment", storage.describe(rel), segment.size_bytes, segment.checksum)
    return data


def _asked(columns: Sequence[str] | None) -> list[str]:
    """The columns a read asks for, each once, in order (every column by default)."""
    return list(SEGMENT_SCHEMA.names) if columns is None else list(dict.fromkeys(columns))


def live_mask(offsets: np.ndarray, deleted: np.ndarray | None, start: int | None) -> np.ndarray | None:
    """Which rows (by offset) a reader sees: none that the deletion vector (``deleted``, ascending) lists, and with
    ``start`` (the log start offset) none below it. None when every row is live."""
    live = None if start is None else offsets >= start
    if deleted is not None and len(deleted):
        kept = ~members(offsets, deleted)
        live = kept if live is None else live & kept
    return None if live is None or live.all() else live
