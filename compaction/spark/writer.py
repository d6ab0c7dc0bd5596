"""The write: Kafka-shaped rows become new segments in each task, committed on the driver per partition at once.

A task (:func:`write_task`) shapes its rows as records (:func:`shape`: the topic, the partition, Kafka's
partitioner for rows without one, the timestamp, the checks), holds each partition's records until a segment's worth
(or the task's memory budget) and writes them as a segment: at the offsets they carry, or at the next offsets of the
write's own sequence in that partition (:mod:`compaction.store.claims`: the tasks of a write never take the same
offsets). What it wrote comes back to the driver as :class:`WrittenPiece` s: object names and offset ranges, never
records.

The commit (:func:`commit_write`) checks every partition first (offsets at or below the log end, pieces that
overlap), so a refused write commits nothing; then each partition's pieces are appended in one commit of its
manifest (Kafka's partitions commit apart, as Kafka's do): claimed pieces land at the log end as found then, placed
again (their objects rewritten) where another writer moved it; a streaming write records its query's id and the
micro-batch in the same commit, and a batch a partition already holds is not appended again. A failed task or job
commits nothing; what it wrote waits for gc.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import WriterCommitMessage

from compaction.errors import CommitConflictError, InvalidRecordsError, OffsetOverlapError
from compaction.kafka.partitioner import default_partitions
from compaction.kafka.sizes import single_record_batch_bytes
from compaction.schema import HEADER_TYPE, RECORD_SCHEMA
from compaction.store import Manifest, SegmentFormat, SegmentMeta, Store, TopicPartition, Writer
from compaction.store.log import appended_state, read_manifests
from compaction.store.segment import check_records

#: A task writes a partition's records as a segment once it holds this many, and the partition holding most
#: once all it holds (as Arrow) passes :data:`TASK_BYTES`: a task's memory is bounded whatever its input.
SEGMENT_RECORDS = 1_000_000
TASK_BYTES = 256 << 20
#: Partitions committed at once on the driver.
COMMIT_THREADS = 32
WRITER_ID = "compaction-spark"


@dataclass(frozen=True)
class WritePlan:
    """What every task of one write knows, fixed on the driver when the write starts (it travels pickled)."""

    store: Store
    write_id: str
    time_ms: int  # the write's time: records of a frame without timestamps get it, as Kafka's producer stamps them
    topic: str | None  # the topic option, which overrides the column (as the Kafka sink's)
    partitions: Mapping[str, int]  # each topic's partition count
    max_bytes: Mapping[str, int]  # each topic's max.message.bytes
    formats: Mapping[str, SegmentFormat | None]  # each topic's segment.format, None: its partitions' own

    @classmethod
    def of(cls, store: Store, settings: Any, topic: str | None, time_ms: int) -> WritePlan:
        partitions: dict[str, int] = {}
        for tp in store.topic_partitions([topic] if topic is not None else None):
            partitions[tp.topic] = max(partitions.get(tp.topic, 0), tp.partition + 1)
        configs = {t: settings.topic_config(t) for t in partitions}
        return cls(
            store,
            uuid.uuid4().hex,
            time_ms,
            topic,
            partitions,
            {t: c.max_message_bytes for t, c in configs.items()},
            {t: c.segment_format for t, c in configs.items()},
        )


@dataclass(frozen=True)
class WrittenPiece:
    """A segment a task wrote for one partition, not committed: ``claimed`` when its offsets are the write's own
    (placed again at the commit if they no longer follow the log end), else the ones its rows carried."""

    topic: str
    partition: int
    segment: SegmentMeta
    claimed: bool

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass
class WriteMessage(WriterCommitMessage):
    """What a task hands the driver: the write it belongs to and the segments it wrote."""

    write_id: str
    pieces: tuple[WrittenPiece, ...] = ()


def _fail(where: str, problem: str) -> InvalidRecordsError:
    return InvalidRecordsError(f"{where}: {problem}")


@dataclass(frozen=True)
class _Rows:
    """A batch's rows by topic: the distinct topics, and each row's index among them."""

    names: list[str]
    index: np.ndarray

    def per_row(self, values: Mapping[str, int]) -> np.ndarray:
        return cast(np.ndarray, np.array([values[n] for n in self.names], dtype=np.int64)[self.index])

    def where(self, row: int, partitions: np.ndarray) -> str:
        return f"a record for {self.names[self.index[row]]}-{partitions[row]}"


def _topics(plan: WritePlan, batch: pa.RecordBatch) -> _Rows:
    if plan.topic is not None:
        return _Rows([plan.topic], np.zeros(batch.num_rows, dtype=np.int64))
    topics = batch.column("topic")
    if topics.null_count:
        row = int(np.flatnonzero(~topics.is_valid().to_numpy(zero_copy_only=False))[0])
        given = batch.column("partition")[row].as_py() if "partition" in batch.schema.names else None
        raise _fail(
            f"a record for partition {given}" if given is not None else "a record",
            "field topic is null (set it, or the topic option)",
        )
    encoded = topics.dictionary_encode()
    names = encoded.dictionary.to_pylist()
    for name in names:
        if name not in plan.partitions:
            raise _fail(f"a record for topic {name}", f"topic {name} does not exist in store {plan.store.url}")
    return _Rows(names, encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64))


def _partitions(plan: WritePlan, batch: pa.RecordBatch, rows: _Rows, start: int) -> np.ndarray:
    """Each row's partition: its own, else Kafka's partitioner's (murmur2 of the key; keyless rows in turn, from
    ``start``, so that a replayed task places them again where it did)."""
    counts = rows.per_row(plan.partitions)
    given = (
        batch.column("partition").cast(pa.int64())
        if "partition" in batch.schema.names
        else pa.nulls(batch.num_rows, pa.int64())
    )
    placed = given.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    bad = (placed < -1) | (placed >= counts) | ((placed == -1) & given.is_valid().to_numpy(zero_copy_only=False))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        topic = rows.names[rows.index[row]]
        raise _fail(
            rows.where(row, placed),
            f"field partition {placed[row]} is outside topic {topic}'s partitions 0 to {counts[row] - 1}",
        )
    unplaced = np.flatnonzero(placed == -1)
    if len(unplaced):
        keys = (
            batch.column("key").cast(pa.binary()).take(pa.array(unplaced))
            if "key" in batch.schema.names
            else pa.nulls(len(unplaced), pa.binary())
        )
        for count in np.unique(counts[unplaced]):
            mine = counts[unplaced] == count
            placed[unplaced[mine]] = default_partitions(keys.filter(pa.array(mine)), int(count))
        keyless = unplaced[placed[unplaced] == -1]
        placed[keyless] = (start + np.arange(len(keyless))) % counts[keyless]
    return cast(np.ndarray, placed)


def _timestamps(plan: WritePlan, batch: pa.RecordBatch, rows: _Rows, partitions: np.ndarray) -> pa.Array:
    """Each row's timestamp in ms: its own (floored; a null one stays null: the record has none, as a record read
    from the store without one), or the write's time for every row when the frame has no timestamp column (as Kafka's
    producer stamps a record); one before 1970 is refused."""
    if "timestamp" not in batch.schema.names:
        return pa.array(np.full(batch.num_rows, plan.time_ms, dtype=np.int64))
    micros = batch.column("timestamp").cast(pa.int64())
    floored = pc.subtract(micros, pc.if_else(pc.less(micros, 0), 999, 0))  # division truncates towards zero
    ms = pc.divide(floored, 1000)
    negative = pc.fill_null(pc.less(ms, 0), False).to_numpy(zero_copy_only=False)
    if negative.any():
        row = int(np.flatnonzero(negative)[0])
        raise _fail(
            rows.where(row, partitions),
            f"field timestamp {ms[row].as_py()} ms is before 1970-01-01: Kafka's timestamps are non-negative",
        )
    return ms


def _column(batch: pa.RecordBatch, name: str, type_: pa.DataType, default: Any = None) -> pa.Array:
    if name not in batch.schema.names:
        return (
            pa.array(np.full(batch.num_rows, default)).cast(type_)
            if default is not None
            else pa.nulls(batch.num_rows, type_)
        )
    column = batch.column(name)
    column = column if column.type == type_ else column.cast(type_)
    return column.fill_null(default) if default is not None and column.null_count else column


def _check_plain(batch: pa.RecordBatch, rows: _Rows, partitions: np.ndarray) -> None:
    """Transactions and markers come through ``compaction append`` (a .log file) or the Python API, not a write."""
    for name in ("is_transactional", "is_control"):
        if name in batch.schema.names:
            flags = pc.fill_null(batch.column(name), False).to_numpy(zero_copy_only=False)
            if flags.any():
                raise _fail(
                    rows.where(int(np.flatnonzero(flags)[0]), partitions),
                    f"field {name} is true: a Spark write takes plain records (transactions and their "
                    "markers are appended with compaction append or the Python API)",
                )


def shape(plan: WritePlan, batch: pa.RecordBatch, keyless_start: int) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """A batch of a write's rows as records in the segment schema, with each row's topic (as an index into
    ``sorted(plan.partitions)``) and partition; anything a topic does not take is refused, naming where."""
    rows = _topics(plan, batch)
    partitions = _partitions(plan, batch, rows, keyless_start)
    _check_plain(batch, rows, partitions)
    keys, values = _column(batch, "key", pa.binary()), _column(batch, "value", pa.binary())
    headers = _column(batch, "headers", HEADER_TYPE)
    sizes = single_record_batch_bytes(keys, values, headers)
    limits = rows.per_row(plan.max_bytes)
    over = sizes > limits
    if over.any():
        row = int(np.flatnonzero(over)[0])
        raise _fail(
            rows.where(row, partitions),
            f"field value makes a record of {int(sizes[row]):,} bytes (as a "
            f"Kafka batch), over topic {rows.names[rows.index[row]]}'s "
            f"max.message.bytes {int(limits[row]):,}",
        )
    n = batch.num_rows
    records = pa.table(
        {
            "offset": _column(batch, "offset", pa.int64()),
            "timestamp": _timestamps(plan, batch, rows, partitions),
            "key": keys,
            "value": values,
            "headers": headers,
            "producer_id": _column(batch, "producer_id", pa.int64(), -1),
            "producer_epoch": _column(batch, "producer_epoch", pa.int16(), -1),
            "is_transactional": pa.array(np.zeros(n, bool)),
            "is_control": pa.array(np.zeros(n, bool)),
            "control_type": pa.nulls(n, pa.string()),
            "delete_horizon_ms": pa.nulls(n, pa.int64()),
        },
        schema=RECORD_SCHEMA,
    )
    order = {t: i for i, t in enumerate(sorted(plan.partitions))}
    return records, rows.per_row(order), partitions


@dataclass
class _Held:
    """A task's records of one partition not yet written."""

    tables: list[pa.Table] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0


class TaskWriter:
    """One task's share of a write: records held per partition, written as segments (:func:`write_task`)."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan
        self.topics = sorted(plan.partitions)
        self.held: dict[TopicPartition, _Held] = {}
        self.pieces: list[WrittenPiece] = []
        self.manifests: dict[TopicPartition, Manifest | None] = {}

    def add(self, records: pa.Table, topics: np.ndarray, partitions: np.ndarray) -> None:
        group = topics * (int(partitions.max(initial=0)) + 1) + partitions
        order = np.argsort(group, kind="stable")
        bounds = np.flatnonzero(np.diff(group[order])) + 1
        for rows in np.split(order, bounds):
            if not len(rows):
                continue
            tp = TopicPartition(self.topics[int(topics[rows[0]])], int(partitions[rows[0]]))
            taken = records.take(pa.array(rows))
            held = self.held.setdefault(tp, _Held())
            held.tables.append(taken)
            held.rows += taken.num_rows
            held.nbytes += taken.nbytes
            if held.rows >= SEGMENT_RECORDS:
                self.flush(tp)
        while sum(h.nbytes for h in self.held.values()) > TASK_BYTES:
            self.flush(max(self.held, key=lambda tp: self.held[tp].nbytes))

    def _manifest(self, tp: TopicPartition) -> Manifest | None:
        if tp not in self.manifests:
            self.manifests[tp] = self.plan.store.latest(tp)
        return self.manifests[tp]

    def _format(self, tp: TopicPartition) -> SegmentFormat:
        configured = self.plan.formats.get(tp.topic)
        manifest = self._manifest(tp)
        if configured is None and manifest is not None and manifest.segments:
            return manifest.segments[-1].format
        return configured or SegmentFormat.PARQUET

    def flush(self, tp: TopicPartition) -> None:
        held = self.held.pop(tp)
        table = pa.concat_tables(held.tables)
        where = f"records for {tp}"
        offsets = table.column("offset")
        if offsets.null_count not in (0, table.num_rows):
            raise _fail(where, "either every record of a partition carries an offset or none does")
        claimed = bool(offsets.null_count)
        if claimed:
            manifest = self._manifest(tp)
            base = self.plan.store.objects.claims.take(
                tp, self.plan.write_id, manifest.log_end_offset if manifest else 0, table.num_rows
            )
            table = table.set_column(0, "offset", pa.array(np.arange(base, base + table.num_rows, dtype=np.int64)))
        check_records(table, where)
        first, last = table.column("offset")[0].as_py(), table.column("offset")[-1].as_py()
        segment = self.plan.store.objects.write_segment(
            tp, table, first, last + 1, created_ms=self.plan.time_ms, segment_format=self._format(tp)
        )
        self.pieces.append(WrittenPiece(tp.topic, tp.partition, segment, claimed))

    def finish(self) -> WriteMessage:
        for tp in list(self.held):
            self.flush(tp)
        return WriteMessage(self.plan.write_id, tuple(self.pieces))


def write_task(plan: WritePlan, batches: Iterable[pa.RecordBatch], task: int) -> WriteMessage:
    """Write a task's rows (``task``: its Spark partition, where its keyless rows begin their turn)."""
    writer = TaskWriter(plan)
    start = task
    for batch in batches:
        if not batch.num_rows:
            continue
        records, topics, partitions = shape(plan, batch, start)
        start += batch.num_rows
        writer.add(records, topics, partitions)
    return writer.finish()


# The commit, on the driver -----------------------------------------------------------------------------------


class _AlreadyCommitted(Exception):
    """A partition already holds the micro-batch a streaming write commits again (a replay after a crash)."""


@dataclass(frozen=True)
class Stream:
    """A streaming write's micro-batch: its query's id and the batch's id."""

    query_id: str
    batch_id: int


def _by_partition(messages: Sequence[WriteMessage | None]) -> dict[TopicPartition, list[WrittenPiece]]:
    grouped: dict[TopicPartition, list[WrittenPiece]] = {}
    for message in messages:
        for piece in message.pieces if message is not None else ():
            grouped.setdefault(piece.tp, []).append(piece)
    return {tp: sorted(pieces, key=lambda p: p.segment.base_offset) for tp, pieces in sorted(grouped.items())}


def _check(tp: TopicPartition, pieces: Sequence[WrittenPiece], latest: Manifest | None) -> None:
    """Refuse a partition's pieces before anything commits: rows with offsets beside rows without, offsets that
    two tasks both wrote, or offsets at or below the log end."""
    claimed = {p.claimed for p in pieces}
    if len(claimed) > 1:
        raise InvalidRecordsError(
            f"records for {tp}: either every record of a partition carries an offset or none does (tasks wrote both)"
        )
    if claimed == {True}:
        return
    for before, after in itertools.pairwise(pieces):
        if after.segment.base_offset < before.segment.next_offset:
            raise OffsetOverlapError(
                f"records for {tp}: offsets [{before.segment.base_offset}, {before.segment.next_offset}) and "
                f"[{after.segment.base_offset}, {after.segment.next_offset}) come from two tasks and overlap: a "
                "partition's rows with offsets must reach the write in offset order (repartition by topic and "
                "partition, and sort by offset)"
            )
    log_end = latest.log_end_offset if latest is not None else 0
    if latest is not None and pieces[0].segment.base_offset < log_end:
        raise OffsetOverlapError(
            f"records for {tp}: offsets from {pieces[0].segment.base_offset} are at or below "
            f"the partition's log end {log_end} (offsets up to {log_end - 1} are taken)"
        )


def _placed(
    store: Store,
    tp: TopicPartition,
    pieces: Sequence[WrittenPiece],
    log_end: int,
    rewritten: dict[tuple[str, int], SegmentMeta],
    time_ms: int,
) -> list[SegmentMeta]:
    """Claimed pieces from ``log_end`` on, one after another: a piece whose offsets no longer fit (another writer
    appended first, or a failed task attempt left its claim unused) is written again at the offsets it takes now."""
    placed = []
    target = log_end
    for piece in pieces:
        segment = piece.segment
        if segment.base_offset != target:
            if (segment.path, target) not in rewritten:
                table = store.objects.read_segment(tp, segment)
                moved = table.set_column(
                    0, "offset", pa.array(np.arange(target, target + table.num_rows, dtype=np.int64))
                )
                rewritten[segment.path, target] = store.objects.write_segment(
                    tp, moved, target, target + table.num_rows, created_ms=time_ms, segment_format=segment.format
                )
            segment = rewritten[segment.path, target]
        placed.append(segment)
        target = segment.next_offset
    return placed


def _commit_partition(
    store: Store,
    tp: TopicPartition,
    pieces: Sequence[WrittenPiece],
    latest: Manifest | None,
    *,
    time_ms: int,
    run_id: str,
    stream: Stream | None = None,
) -> Manifest | None:
    """Append one partition's pieces in one commit; None when it already holds the streaming write's batch."""
    rewritten: dict[tuple[str, int], SegmentMeta] = {}
    claimed = pieces[0].claimed

    def build(newest: Manifest | None) -> dict[str, Any]:
        if stream is not None and newest is not None and newest.streams.get(stream.query_id, -1) >= stream.batch_id:
            raise _AlreadyCommitted
        log_end = newest.log_end_offset if newest is not None else 0
        if claimed:
            segments = _placed(store, tp, pieces, log_end, rewritten, time_ms)
        elif newest is not None and pieces[0].segment.base_offset < log_end:
            raise CommitConflictError(
                f"records for {tp}: a concurrent writer took offsets up to {log_end}, past "
                f"the written offset {pieces[0].segment.base_offset}"
            )
        else:
            segments = [p.segment for p in pieces]
        state = appended_state(newest, segments, RECORD_SCHEMA.empty_table(), f"records for {tp}")
        if stream is not None:
            state["streams"] = {**(newest.streams if newest is not None else {}), stream.query_id: stream.batch_id}
        return state

    try:
        return store.commit(
            tp, build, writer=Writer(id=WRITER_ID, run_id=run_id), operation="append", now_ms=time_ms, expected=latest
        )
    except _AlreadyCommitted:
        return None


@dataclass(frozen=True)
class CommitResult:
    """Per partition written, the manifest version committed, or None where a replayed batch was already in."""

    versions: dict[TopicPartition, int | None]


def commit_write(
    store: Store, messages: Sequence[WriteMessage | None], *, time_ms: int, stream: Stream | None = None
) -> CommitResult:
    """Commit a write's pieces, each partition's in one commit of its manifest (see the module's docstring)."""
    grouped = _by_partition(messages)
    newest = read_manifests(store, list(grouped)) if grouped else {}
    for tp, pieces in grouped.items():
        found = newest[tp]
        latest = found if isinstance(found, Manifest) else None
        _check(tp, pieces, latest)
    run_id = stream.query_id if stream is not None else next((m.write_id for m in messages if m is not None), "")

    def one(tp: TopicPartition) -> tuple[TopicPartition, int | None]:
        found = newest[tp]
        latest = found if isinstance(found, Manifest) else None
        committed = _commit_partition(store, tp, grouped[tp], latest, time_ms=time_ms, run_id=run_id, stream=stream)
        return tp, committed.version if committed is not None else None

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(COMMIT_THREADS, len(grouped)))) as pool:
            versions = dict(pool.map(one, grouped))
    finally:
        abort_write(store, messages)
    return CommitResult(versions)


def abort_write(store: Store, messages: Sequence[WriteMessage | None]) -> None:
    """Give a write's claims back (its objects wait for gc): the commit does once it is done, an abort at once."""
    ids = {m.write_id for m in messages if m is not None}
    tps = {piece.tp for m in messages if m is not None for piece in m.pieces}
    for write_id in ids:
        for tp in tps:
            store.objects.claims.delete(tp, write_id)


def wall_clock_ms() -> int:
    """The write's time, read once where it starts (on the driver): Spark's own verbs are this package's edge."""
    return int(datetime.now(UTC).timestamp() * 1000)  # clock-ok: a write is stamped when Spark starts it
