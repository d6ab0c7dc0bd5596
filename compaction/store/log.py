"""A partition log in the segment store: list partitions, read segments and the live log, append records.

Layout (SPEC §2)::

    <store>/<topic>/<partition>/segments/<20-digit base offset>-<unique id>.<parquet|log>   immutable objects
    <store>/<topic>/<partition>/_manifests/<20-digit version>.json                        one per version

A segment is Parquet (one row per record) or Kafka's record batches (``.log``); :mod:`.formats` reads both
to the same record schema.

:class:`Store` is the façade the rest of the product uses; it hands commits to
:mod:`~compaction.store.commit` and deletion vectors to :mod:`~compaction.store.deletes`.
Every call touches only the partition's own manifests and the objects it asks for.
"""

from __future__ import annotations

import fnmatch
import random
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.errors import (
    CommitConflictError,
    CorruptBatchError,
    CorruptSegmentError,
    InvalidArgumentError,
    InvalidRecordsError,
    OffsetOverlapError,
    StoreError,
    StoreNotFoundError,
)
from compaction.kafka.layout import CONTROL
from compaction.store import commit as commits
from compaction.store import deletes, inputs, verdicts
from compaction.store import pins as pinning
from compaction.store.commit import MAX_COMMIT_ATTEMPTS, Build, Replacement, Writer
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
from compaction.store.manifest import DeletionVector, EmptyBatch, Manifest, ProducerState, SegmentMeta, segment_name
from compaction.store.names import IllegalFolder, TopicPartition, partition_name_problem, topic_name_problem
from compaction.store.segment import (
    BATCH_ROWS,
    LONG_MAX,
    SEGMENT_SCHEMA,
    RowGroups,
    SegmentStats,
    check_committed,
    check_records,
    check_size,
    checksum,
    conform,
    decode_parquet,
    encode_parquet,
    encode_parquet_pieces,
    first_set,
    parquet_batches,
    segment_stats,
)
from compaction.store.storage import Storage

#: Objects up to this size on an object store are read in one request, whichever columns are asked for.
WHOLE_READ_BYTES = 8 << 20


class Store:
    """A segment store rooted at a URL."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @classmethod
    def open(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> Store:
        return cls(Storage.from_url(url, storage_options))

    @property
    def url(self) -> str:
        return self.storage.url

    def describe(self, tp: TopicPartition, rel: str = "") -> str:
        return self.storage.describe(f"{tp.prefix}/{rel}" if rel else tp.prefix)

    # Listing -----------------------------------------------------------------------------------------

    def require_exists(self) -> None:
        """Fail with StoreNotFoundError if the store's root does not exist (a typo, a missing bucket)."""
        # Listing (not exists(), which hides why) reports an unreachable endpoint or missing credentials.
        if not self.storage.list_dir("", detail=False) and not self.storage.exists(""):
            raise StoreNotFoundError(f"store {self.storage.describe('')} does not exist")

    def _folders(self, rel: str) -> list[str]:
        return sorted(e.name for e in self.storage.list_dir(rel, detail=False) if e.is_dir)

    def topics(self) -> list[str]:
        """The topics: folders at the root named as Kafka names topics."""
        return [name for name in self._folders("") if topic_name_problem(name) is None]

    def partitions(self, topic: str) -> list[int]:
        """A topic's partitions: its folders named by a partition number, written the one canonical way."""
        problem = topic_name_problem(topic)
        if problem:
            raise InvalidArgumentError(f"topic name {topic!r} {problem}")
        return sorted(int(name) for name in self._folders(topic) if partition_name_problem(name) is None)

    def scan(self, topics: str | Sequence[str] | None = None) -> tuple[list[TopicPartition], list[IllegalFolder]]:
        """All partitions, optionally of the topics matching glob pattern(s) such as ``orders*``, and the
        folders among them whose names cannot be a topic or a partition (reported, never read)."""
        patterns = [topics] if isinstance(topics, str) else list(topics or ["*"])
        illegal: list[IllegalFolder] = []
        names = []
        for name in self._folders(""):
            if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            problem = topic_name_problem(name)
            if problem:
                illegal.append(IllegalFolder(name, f"not a topic: the name {problem}"))
            else:
                names.append(name)
        with ThreadPoolExecutor(max_workers=16) as pool:
            per_topic = list(pool.map(self._folders, names))
        found = []
        for topic, folders in zip(names, per_topic, strict=True):
            for folder in folders:
                problem = partition_name_problem(folder)
                if problem:
                    illegal.append(IllegalFolder(f"{topic}/{folder}", f"not a partition of {topic}: the name "
                                                                      f"{problem}"))
                else:
                    found.append(TopicPartition(topic, int(folder)))
        return sorted(found), illegal

    def topic_partitions(self, topics: str | Sequence[str] | None = None) -> list[TopicPartition]:
        """All partitions, optionally of the topics matching glob pattern(s) such as ``orders*``."""
        return self.scan(topics)[0]

    # Manifests ---------------------------------------------------------------------------------------

    def versions(self, tp: TopicPartition) -> list[int]:
        """Committed manifest versions of a partition, ascending."""
        return commits.manifest_versions(self.storage, tp)

    def manifest(self, tp: TopicPartition, version: int | None = None) -> Manifest:
        """The partition's manifest at ``version`` (default: the newest); StoreNotFoundError if it has none."""
        return commits.read_manifest(self.storage, tp, version)

    def latest(self, tp: TopicPartition) -> Manifest | None:
        """The newest manifest, or None for a partition nobody has committed to yet."""
        return commits.newest_manifest(self.storage, tp)

    # Segments ----------------------------------------------------------------------------------------

    def write_segment(self, tp: TopicPartition, table: pa.Table, base_offset: int, next_offset: int,
                      created_ms: int, compression: str = "zstd", object_id: str | None = None, *,
                      segment_format: SegmentFormat = SegmentFormat.PARQUET, batches: pa.Table | None = None,
                      encoded: bytes | None = None) -> SegmentMeta:
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
            empty_batches = tuple(EmptyBatch(last_offset=b["base_offset"] + b["last_offset_delta"],
                                             producer_id=b["producer_id"], producer_epoch=b["producer_epoch"],
                                             control=bool(b["attributes"] & CONTROL)) for b in empty.to_pylist())
        else:
            data = encode_parquet(table, compression)
            producers = record_producers(table)
            empty_batches = ()
        return self._put_segment(tp, fmt, data, stats, producers, empty_batches, base_offset, next_offset,
                                 created_ms, object_id)

    def write_segment_pieces(self, tp: TopicPartition, pieces: Iterable[pa.Table], base_offset: int,
                             next_offset: int, created_ms: int, object_id: str | None = None) -> SegmentMeta | None:
        """:meth:`write_segment` for a Parquet segment whose records come in pieces (in offset order), each
        encoded as it comes, so that the records are never all held at once; None (nothing written) when
        no piece has a record."""
        encoded = encode_parquet_pieces(pieces)
        if encoded is None:
            return None
        data, summary = encoded
        return self._put_segment(tp, SegmentFormat.PARQUET, memoryview(data), segment_stats(summary),
                                 record_producers(summary), (), base_offset, next_offset, created_ms, object_id)

    def _put_segment(self, tp: TopicPartition, fmt: SegmentFormat, data: bytes | memoryview,
                     stats: SegmentStats, producers: list[dict[str, Any]], empty_batches: tuple[EmptyBatch, ...],
                     base_offset: int, next_offset: int, created_ms: int, object_id: str | None) -> SegmentMeta:
        rel = segment_name(base_offset, object_id or uuid.uuid4().hex, fmt.extension)
        self.storage.write_bytes(f"{tp.prefix}/{rel}", data)
        return SegmentMeta(
            path=rel, format=fmt, base_offset=base_offset, next_offset=next_offset,
            record_count=stats.record_count,
            size_bytes=len(data), checksum=checksum(data), created_ms=created_ms,
            first_timestamp=stats.first_timestamp, max_timestamp=stats.max_timestamp,
            tombstone_count=stats.tombstone_count, keyless_count=stats.keyless_count,
            transactional_count=stats.transactional_count, control_count=stats.control_count,
            min_delete_horizon_ms=stats.min_delete_horizon_ms,
            producers=tuple(ProducerState(**p) for p in producers), empty_batches=empty_batches,
        )

    def write_deletes(self, tp: TopicPartition, segment: SegmentMeta, offsets: pa.Array, created_ms: int,
                      live_min_delete_horizon_ms: int | None, live_first_timestamp: int | None = None,
                      live_max_timestamp: int | None = None, object_id: str | None = None) -> DeletionVector:
        """Write a deletion vector for ``segment``; not yet committed (see :func:`.deletes.write_deletes`)."""
        return deletes.write_deletes(self.storage, tp, segment, offsets, created_ms, live_min_delete_horizon_ms,
                                     live_first_timestamp, live_max_timestamp, object_id)

    def read_deletes(self, tp: TopicPartition, vector: DeletionVector) -> pa.Array:
        """The offsets a committed deletion vector removes, checked against its commit."""
        return deletes.read_deletes(self.storage, tp, vector)

    def write_verdicts(self, tp: TopicPartition, base_offset: int, parts: Sequence[pa.Table | None],
                       object_id: str) -> tuple[str, tuple[int | None, ...]]:
        """Hand a stage's verdicts on segments to the next stage of the pass (see :mod:`.verdicts`)."""
        return verdicts.write_verdicts(self.storage, tp, base_offset, parts, object_id)

    def read_verdicts(self, tp: TopicPartition, path: str, row_groups: Sequence[int]) -> list[pa.Table]:
        return verdicts.read_verdicts(self.storage, tp, path, row_groups)

    def delete_verdicts(self, tp: TopicPartition, paths: Sequence[str]) -> None:
        """Delete verdicts a pass is done with."""
        verdicts.delete_verdicts(self.storage, tp, paths)

    def pins(self, tp: TopicPartition) -> list[pinning.Pin]:
        """The manifest versions readers outside the store hold (gc keeps them; see :mod:`.pins`)."""
        return pinning.list_pins(self.storage, tp)

    def pin(self, tp: TopicPartition, version: int, holder: str, description: str) -> pinning.Pin:
        """Hold ``version`` for ``holder`` (an Iceberg snapshot about to be committed) until :meth:`unpin`."""
        return pinning.write_pin(self.storage, tp, version, holder, description)

    def unpin(self, tp: TopicPartition, pin: pinning.Pin) -> None:
        pinning.delete_pin(self.storage, tp, pin)

    # Reading segments: every read of a segment's records goes through segment_rows -------------------------

    def segment_rows(self, tp: TopicPartition, segment: SegmentMeta, columns: Sequence[str] | None = None, *,
                     row_groups: RowGroups | None = None, batch_rows: int | None = None) -> Iterator[pa.RecordBatch]:
        """Every record of a segment's object, deleted or not, as batches of ``columns`` (default: all), held to
        what its manifest recorded.

        A read of every column in one piece reads the whole object and checks its size and checksum; a read of
        some columns, or in ``batch_rows`` batches, checks the size and reads only their pages, which check their
        own CRCs. A ``.log`` segment is read whole (a batch's CRC covers all its records). The schema is checked
        either way. ``row_groups`` (given a Parquet footer) names the row groups worth reading (None: all).
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
            data = self.storage.read_buffer(rel)
            check_committed(data, "segment", where, segment.size_bytes, segment.checksum)
            yield from decode_parquet(data, where, None if columns is None else read).to_batches()
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

    def live_batches(self, tp: TopicPartition, segment: SegmentMeta, columns: Sequence[str] | None = None, *,
                     start: int | None = None, row_groups: RowGroups | None = None,
                     batch_rows: int | None = None, hidden: bool = False) -> Iterator[pa.RecordBatch]:
        """A segment's live rows, as a reader sees them: :meth:`segment_rows` without the records its deletion
        vector lists and, with ``start`` (the log start offset), those below it. With ``hidden``, the others
        instead: the records the object still holds that no reader sees."""
        wanted = _asked(columns)
        deleted = self.deleted_offsets(tp, segment)
        below = start if start is not None and segment.base_offset < start else None
        needs_offset = (deleted is not None or below is not None) and "offset" not in wanted
        read = ["offset", *wanted] if needs_offset else wanted
        for batch in self.segment_rows(tp, segment, None if columns is None else read, row_groups=row_groups,
                                       batch_rows=batch_rows):
            live = None
            if deleted is not None or below is not None:
                live = live_mask(batch.column("offset").to_numpy(), deleted, below)
            if hidden:
                batch = batch.slice(0, 0) if live is None else batch.filter(pa.array(~live))
            elif live is not None:
                batch = batch.filter(pa.array(live))
            yield batch.select(wanted) if needs_offset else batch

    def read_segment(self, tp: TopicPartition, segment: SegmentMeta, columns: Sequence[str] | None = None,
                     start: int | None = None, *, hidden: bool = False) -> pa.Table:
        """A segment's live records (the asked columns) as one table: :meth:`live_batches` in one piece (with
        ``hidden``, the records it holds that no reader sees)."""
        wanted = _asked(columns)
        schema = pa.schema([SEGMENT_SCHEMA.field(c) for c in wanted])
        batches = [b.cast(schema) for b in self.live_batches(tp, segment, columns, start=start, hidden=hidden)]
        return pa.Table.from_batches(batches, schema=schema)

    def deleted_offsets(self, tp: TopicPartition, segment: SegmentMeta) -> np.ndarray | None:
        """The offsets the segment's deletion vector lists, ascending (None: it has none)."""
        if segment.deletes is None:
            return None
        return self.read_deletes(tp, segment.deletes).to_numpy(zero_copy_only=False)

    def live_rows(self, tp: TopicPartition, segment: SegmentMeta, offsets: pa.Array | pa.ChunkedArray,
                  start: int | None = None) -> np.ndarray:
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
        rel = f"{tp.prefix}/{segment.path}"
        where = self.storage.describe(rel)
        data = self.storage.read_buffer(rel)
        check_committed(data, "segment", where, segment.size_bytes, segment.checksum)
        decoded = decode_log(data, where)
        check_batch_offsets(decoded, where, segment.base_offset, segment.next_offset)
        return decoded

    def read(self, tp: TopicPartition, start: int | None = None, end: int | None = None,
             columns: Sequence[str] | None = None, manifest: Manifest | None = None) -> pa.Table:
        """The partition's live log in offset order, optionally only offsets in ``[start, end)``."""
        manifest = manifest or self.manifest(tp)
        low = max(manifest.log_start_offset, start if start is not None else 0)
        high = manifest.log_end_offset if end is None else min(end, manifest.log_end_offset)
        wanted = list(columns) if columns is not None else list(SEGMENT_SCHEMA.names)
        read_columns = wanted if "offset" in wanted else ["offset", *wanted]
        tables = []
        for segment in manifest.segments:
            if segment.next_offset <= low or segment.base_offset >= high:
                continue
            table = self.read_segment(tp, segment, read_columns)
            if segment.base_offset < low or segment.next_offset > high:
                offsets = table.column("offset")
                table = table.filter(pc.and_(pc.greater_equal(offsets, low), pc.less(offsets, high)))
            tables.append(table)
        schema = pa.schema([SEGMENT_SCHEMA.field(c) for c in read_columns])
        result = pa.concat_tables([t.cast(schema) for t in tables]) if tables else schema.empty_table()
        return result.select(wanted)

    # Commits -----------------------------------------------------------------------------------------

    def commit(self, tp: TopicPartition, build: Build, *, writer: Writer, operation: str, now_ms: int,
               max_attempts: int = MAX_COMMIT_ATTEMPTS, rng: random.Random | None = None,
               expected: Manifest | None = None) -> Manifest:
        """Publish the next manifest version with ``build(latest)``'s log state (see :func:`.commit.commit`)."""
        return commits.commit(self.storage, tp, build, writer=writer, operation=operation, now_ms=now_ms,
                              max_attempts=max_attempts, rng=rng, expected=expected)

    def replace(self, tp: TopicPartition, change: Replacement, *, writer: Writer, now_ms: int,
                operation: str = "clean", expected: Manifest | None = None) -> Manifest:
        """Commit a cleaner's change; ``expected``: the version it was planned on (tried first, unread)."""
        return self.commit(tp, lambda latest: change.apply(latest, str(tp)), writer=writer,
                           operation=operation, now_ms=now_ms, expected=expected)

    def append(self, tp: TopicPartition, records: pa.Table, *, now_ms: int, writer: Writer | None = None,
               where: str | None = None, operation: str = "append",
               segment_format: SegmentFormat = SegmentFormat.PARQUET,
               annotate: Callable[[Manifest | None, pa.Table], Mapping[str, Any]] | None = None) -> Manifest:
        """Append records as one new segment (of ``segment_format``) at the log end and commit it.

        Offsets are assigned from the log end when the ``offset`` column is absent or all null; explicit
        offsets must be strictly increasing and start at or after the log end. On a lost race the records
        are re-based: auto-assigned offsets move to the new log end (a new object is written), explicit
        ones are kept if they still fit, else the append fails with CommitConflictError. ``annotate(latest,
        placed)`` adds to the commit's log state what goes with the records as placed (erasure requests naming
        their offsets), in the same commit.
        """
        where = where or f"records for {tp}"
        table = conform(records, where)
        if table.num_rows == 0:
            raise InvalidRecordsError(f"{where}: nothing to append (0 records)")
        explicit = table.column("offset").null_count == 0
        if not explicit and table.column("offset").null_count != table.num_rows:
            raise InvalidRecordsError(f"{where}: either every record has an offset or none has")
        if explicit:
            check_records(table, where)
        writer = writer or Writer()
        written: dict[int, SegmentMeta] = {}  # base offset -> object already written for that placement

        def build(latest: Manifest | None) -> dict[str, Any]:
            log_end = latest.log_end_offset if latest else 0
            if explicit:
                first = table.column("offset")[0].as_py()
                if latest is not None and first < log_end:
                    if written:
                        raise CommitConflictError(
                            f"{where}: a concurrent append took offsets up to {log_end}, past the explicit "
                            f"offset {first}")
                    raise OffsetOverlapError(
                        f"{where}: offsets start at {first}, but partition {self.describe(tp)} already holds "
                        f"offsets up to {log_end} (exclusive)")
                placed = table
                base = log_end if latest is not None else first
            else:
                if log_end + table.num_rows > LONG_MAX:
                    raise InvalidRecordsError(
                        f"{where}: {table.num_rows} record(s) from the log end {log_end} would leave no log end "
                        f"offset below Kafka's Long.MAX ({LONG_MAX})")
                offsets = pa.array(range(log_end, log_end + table.num_rows), pa.int64())
                placed = table.set_column(0, "offset", offsets)
                check_records(placed, where)
                base = log_end
            last = placed.column("offset")[placed.num_rows - 1].as_py()
            if base not in written:
                written[base] = self.write_segment(tp, placed, base, last + 1, created_ms=now_ms,
                                                   segment_format=segment_format)
            state = appended_state(latest, [written[base]], placed, where)
            return {**state, **annotate(latest, placed)} if annotate is not None else state

        return self.commit(tp, build, writer=writer, operation=operation, now_ms=now_ms)

    def append_log(self, tp: TopicPartition, data: Any, *, now_ms: int, writer: Writer | None = None,
                   where: str | None = None, operation: str = "append") -> Manifest:
        """Append a buffer of Kafka record batches (a ``.log`` file's bytes) as one new ``.log`` segment.

        The batches keep their offsets and bytes, so they must continue the log: the first batch's base offset
        is the log end offset (any offset for a partition nobody has written to). Bad bytes (a CRC that fails,
        a truncated batch, an unknown magic or codec), batches out of offset order, a delete horizon (the
        cleaner's alone, as for Parquet records) or a first offset elsewhere refuse the whole append, naming
        the batch's offset; nothing is written then.
        """
        where = where or f"batches for {tp}"
        try:
            segment = decode_log(data, where)
            check_batch_offsets(segment, where)
        except CorruptBatchError as err:
            raise InvalidRecordsError(str(err)) from err
        batches = segment.batches
        if batches.num_rows == 0:
            raise InvalidRecordsError(f"{where}: nothing to append (no record batch)")
        row = first_set(batches.column("delete_horizon_ms"))
        if row is not None:
            raise InvalidRecordsError(
                f"{where}: the batch at offset {batches.column('base_offset')[row].as_py()} carries a delete horizon "
                f"(attribute bit 6), which only the cleaner sets; appended batches must not")
        records = segment.records
        if records.num_rows:
            check_records(records, where)
        first = batches.column("base_offset")[0].as_py()
        next_offset = int(segment.batch_last_offsets[-1]) + 1
        if first < 0 or next_offset > LONG_MAX:
            raise InvalidRecordsError(f"{where}: batches cover offsets [{first}, {next_offset}), outside Kafka's "
                                      f"range [0, {LONG_MAX})")
        payload = bytes(data)
        written: list[SegmentMeta] = []

        def build(latest: Manifest | None) -> dict[str, Any]:
            if latest is not None and first != latest.log_end_offset:
                expected = latest.log_end_offset
                if written:
                    raise CommitConflictError(f"{where}: a concurrent append moved the log end to {expected}, "
                                              f"past the batches' first offset {first}")
                problem = (f"{where}: the first batch's base offset is {first}, but partition {self.describe(tp)} "
                           f"ends at offset {expected}: appended batches keep their offsets, so the first must "
                           f"be {expected}")
                raise OffsetOverlapError(problem) if first < expected else InvalidRecordsError(problem)
            if not written:
                written.append(self.write_segment(tp, records, first, next_offset, created_ms=now_ms,
                                                  segment_format=SegmentFormat.KAFKA, encoded=payload, batches=batches))
            return appended_state(latest, written, records, where)

        return self.commit(tp, build, writer=writer or Writer(), operation=operation, now_ms=now_ms)

    def append_file(self, tp: TopicPartition, path: str | Path, *, now_ms: int, writer: Writer | None = None,
                    fill_timestamps: bool = True) -> Manifest:
        """Append a file as one new segment: a Kafka ``.log`` file's batches as they are (:meth:`append_log`), or
        the records of a Parquet or JSON Lines file (:meth:`append`; without a timestamp they get ``now_ms``
        unless ``fill_timestamps`` is false)."""
        path = Path(path)
        if not path.exists():
            raise InvalidRecordsError(f"input file {path} does not exist")
        if path.suffix == ".log":  # Kafka record batches: kept byte for byte, offsets and all
            return self.append_log(tp, path.read_bytes(), now_ms=now_ms, writer=writer, where=str(path))
        table = inputs.read_records(path)
        if fill_timestamps:
            table = inputs.fill_timestamps(table, now_ms)
        return self.append(tp, table, now_ms=now_ms, writer=writer, where=str(path))


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


def appended_state(latest: Manifest | None, segments: Sequence[SegmentMeta], records: pa.Table,
                   where: str) -> dict[str, Any]:
    """The log state (for :meth:`Store.commit`) once ``segments``, which hold ``records``, follow ``latest``.

    The segments start at or after ``latest``'s log end; none appends nothing. The last stable offset is
    Kafka's: the first offset of the earliest transaction still open (those ``latest`` left open, less those
    the records' markers end, plus those they begin), or the log end when none is.
    """
    log_end = latest.log_end_offset if latest else 0
    base = segments[0].base_offset if segments else log_end
    next_offset = segments[-1].next_offset if segments else log_end
    open_txns = dict(latest.open_transactions) if latest else {}
    _track_transactions(records, open_txns, where)
    # An empty log (never written, or emptied by retention) starts where the new records do.
    kept = latest if latest is not None and latest.segments else None
    return {
        "log_start_offset": kept.log_start_offset if kept else base,
        "log_end_offset": next_offset,
        "last_stable_offset": min(open_txns.values(), default=next_offset),
        "first_dirty_offset": kept.first_dirty_offset if kept else base,
        "open_transactions": open_txns,
        "segments": (*(latest.segments if latest else ()), *segments),
    }


def _track_transactions(table: pa.Table, open_txns: dict[int, int], where: str) -> None:
    """Update producer id -> first offset of its open transaction with the records' transactional rows."""
    is_control = pc.fill_null(table.column("is_control"), False)
    transactional = pc.or_(is_control, pc.fill_null(table.column("is_transactional"), False))
    if not pc.any(transactional).as_py():
        return
    rows = table.filter(transactional).select(["offset", "producer_id", "is_control"]).to_pylist()
    for row in rows:
        producer = row["producer_id"]
        if producer is None or producer < 0:
            raise InvalidRecordsError(f"{where}: transactional record at offset {row['offset']} has no producer id")
        if row["is_control"]:
            open_txns.pop(producer, None)
        else:
            open_txns.setdefault(producer, row["offset"])


#: Requests at once when many partitions' manifests are read: on an object store each read is two round trips
#: (list the versions, read the newest), so a store of 10,000 partitions is read in the time of a few hundred.
MANIFEST_READ_THREADS = 64


def read_manifests(store: Store, partitions: Iterable[TopicPartition],
                   threads: int = MANIFEST_READ_THREADS) -> dict[TopicPartition, Manifest | StoreError]:
    """Newest manifest of each partition, read in parallel; a failure is returned in place of the manifest."""

    def one(tp: TopicPartition) -> Manifest | StoreError:
        try:
            return store.manifest(tp)
        except StoreError as err:
            return err

    partitions = list(partitions)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(partitions)))) as pool:
        return dict(zip(partitions, pool.map(one, partitions), strict=True))
