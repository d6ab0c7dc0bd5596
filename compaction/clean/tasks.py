"""Executor-side work: read the facts a pass decides on, decide per partition, and apply the decisions.

Everything here runs inside Spark tasks on pyarrow and fsspec, so the same code reads local disk and S3.
A failure is caught at the partition's boundary and returned as a result with an ``error``: one bad
partition (a corrupt or missing segment) must not stop the others (SPEC §5).

Stage 1 ends with one *decision row* per segment (and key bucket): its counts and the rows it loses.
Stage 2 runs *apply jobs* over those rows: rewrite a group of segments into one, or extend a segment's
deletion vector. Tasks, rows and results are the typed, versioned payloads of :mod:`compaction.clean.payloads`.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from compaction.clean import arrow_dedupe, rules
from compaction.clean.batches import BatchPolicy, Framed, frame_records, reframe, stale_empty_batches
from compaction.clean.layout import SegmentOutcome, plan_jobs
from compaction.clean.payloads import (
    NO_SEGMENT,
    AppliedJob,
    ApplyJob,
    BucketPiece,
    CleanedPartition,
    DecisionRow,
    ReadTask,
    error_text,
)
from compaction.clean.phases import phase
from compaction.kafka.layout import CONTROL, TRANSACTIONAL
from compaction.store import TopicPartition
from compaction.store.formats import LogSegment
from compaction.store.manifest import SegmentMeta
from compaction.store.segment import SEGMENT_SCHEMA, timestamp_stats

#: Rows per Arrow batch a facts task hands to Spark SQL: large batches keep the per-batch overhead small,
#: and at a few dozen bytes a row (plus the key) one batch stays a few MB on its way into the JVM.
BATCH_ROWS = 131_072
#: The decision columns of the facts (what :func:`compaction.clean.rules.classify` and the plans read).
DECISION_COLUMNS = ("offset", "key", "version_valid", "version", "competes", "delete_horizon_ms", "is_control",
                    "aborted", "marker_pending", "guarded")


# Stage 1: facts -------------------------------------------------------------------------------------------


def _column(table: pa.Table, name: str, default: Any = None) -> pa.Array:
    if name in table.column_names:
        return table.column(name).combine_chunks()
    type_ = SEGMENT_SCHEMA.field(name).type
    return pa.nulls(table.num_rows, type_) if default is None else pa.repeat(pa.scalar(default, type_),
                                                                              table.num_rows)


def _has_transactions(segment: SegmentMeta) -> bool:
    return bool(segment.transactional_count or segment.control_count)


def has_transactions(task: ReadTask) -> bool:
    """Whether the task's range or tail holds transactions: their facts need every row of the range in one
    task, so such a split partition's stage 1 cannot read each segment once (:func:`bucket_pieces`)."""
    return any(_has_transactions(s) for s in (*task.segments, *task.tail))


def _columns_for(task: ReadTask) -> list[str]:
    """Only what the decision needs: never values (a data record with a delete horizon is a tombstone)."""
    return ["offset", "key", "delete_horizon_ms", *rules.strategy_columns(task.strategy)]


#: About how many keys a split partition's key range bounds are computed from: enough for even ranges.
SAMPLE_ROWS = 65_536
#: At most this many segments, spread over the cleaned range, give the sample.
SAMPLE_SEGMENTS = 8


def key_range_bounds(keys: pa.Array | pa.ChunkedArray, buckets: int) -> tuple[bytes, ...]:
    """The ``buckets - 1`` keys that split ``keys`` into ranges of about equal numbers of rows: quantiles of
    an evenly strided sample of the rows (about ``SAMPLE_ROWS`` of them, taken by position)."""
    n = len(keys)
    stride = max(1, n // SAMPLE_ROWS)
    chunks = keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]
    parts, start = [], 0
    for chunk in chunks:
        parts.append(chunk.take(pa.array(np.arange((-start) % stride, len(chunk), stride))))
        start += len(chunk)
    sample = pc.drop_null(pa.concat_arrays(parts)) if parts else pa.array([], pa.binary())
    if buckets <= 1 or len(sample) == 0:
        return ()
    sample = sample.take(pc.sort_indices(sample))
    return tuple(sample[len(sample) * i // buckets].as_py() for i in range(1, buckets))


def sample_bounds(task: ReadTask) -> tuple[bytes, ...]:
    """A split partition's key range bounds (run by the driver, before stage 1), from the keys of up to
    ``SAMPLE_SEGMENTS`` segments spread over the task's range.

    Every task of the partition gets the same bounds, so all of a key's records fall in one bucket however
    well the sample stands for the range; a poor sample only makes the buckets uneven.
    """
    segments = task.segments
    count = min(SAMPLE_SEGMENTS, len(segments))
    picked = sorted({round(i * (len(segments) - 1) / max(1, count - 1)) for i in range(count)})

    def keys(segment: SegmentMeta) -> pa.ChunkedArray:
        if segment.format == "kafka":
            return task.store.read_log_segment(task.tp, segment).records.column("key")
        return task.store.read_segment(task.tp, segment, ["key"], start=task.log_start_offset).column("key")

    with ThreadPoolExecutor(max_workers=4) as pool:
        columns = list(pool.map(keys, [segments[i] for i in picked]))
    chunks = [chunk for column in columns for chunk in column.chunks]
    return key_range_bounds(pa.chunked_array(chunks, pa.binary()), task.buckets) if chunks else ()


def key_bucket(keys: pa.Array | pa.ChunkedArray, bounds: tuple[bytes, ...]) -> np.ndarray:
    """Each row's key bucket: how many of the ascending ``bounds`` its key is not below (keyless rows: 0).

    All of a key's records share a bucket. Arrow's comparison kernels do the work: one pass over the keys
    per bound, no hashing of their bytes.
    """
    bucket = np.zeros(len(keys), dtype=np.int32)
    for bound in bounds:
        bucket += pc.fill_null(pc.greater_equal(keys, pa.scalar(bound, keys.type)), False).to_numpy(
            zero_copy_only=False)
    return bucket


def row_positions(read_lengths: np.ndarray) -> np.ndarray:
    """Each row's index among its segment's rows, for segments of ``read_lengths`` rows one after another."""
    ends = np.cumsum(read_lengths)
    return np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - read_lengths, read_lengths)


@dataclass(frozen=True)
class Facts:
    """What the decision reads of a task's rows (its key bucket of the cleaned range), in offset order."""

    table: pa.Table  # DECISION_COLUMNS
    lengths: np.ndarray  # rows of each segment in ``table``, in segment order
    read_lengths: np.ndarray  # live rows of each segment as read (before the key-bucket filter)
    selected: np.ndarray | None  # which rows read are the bucket's (None: all of them)
    records: dict[int, pa.Table] = field(default_factory=dict)  # whole records of segments read in full
    logs: dict[int, LogSegment] = field(default_factory=dict)  # and the batches of those that are .log

    def segment_slices(self) -> list[slice]:
        """Each segment's rows in ``table``."""
        ends = np.cumsum(self.lengths)
        return [slice(int(end - length), int(end)) for end, length in zip(ends, self.lengths, strict=True)]

    def positions(self) -> np.ndarray:
        """Each row's index among its segment's live rows."""
        read = row_positions(self.read_lengths)
        return read if self.selected is None else read[self.selected]

    def row_bitmaps(self, rows: np.ndarray) -> list[np.ndarray]:
        """Per segment, a packed bitmap over its live rows with the bits of ``rows`` (rows of ``table``)."""
        bits = np.zeros(int(self.read_lengths.sum()), dtype=bool)
        bits[np.flatnonzero(rows) if self.selected is None else np.flatnonzero(self.selected)[rows]] = True
        ends = np.cumsum(self.read_lengths)
        return [np.packbits(bits[end - length:end]) for end, length in zip(ends, self.read_lengths, strict=True)]


def _tail_versions(task: ReadTask) -> pa.Table:
    """``key``, ``version_valid``, ``version`` of the keyed data records beyond the cleaned range."""
    parts = []
    for segment in task.tail:
        columns = ["offset", "key", *rules.strategy_columns(task.strategy)]
        table = task.store.read_segment(task.tp, segment, [*columns, "is_control"] if segment.control_count
                                        else columns, start=task.log_start_offset)
        data = pc.is_valid(table.column("key"))
        if segment.control_count:
            data = pc.and_(data, pc.invert(pc.fill_null(table.column("is_control"), False)))
        table = table.filter(data)
        valid, version = rules.versions(table, task.strategy, task.strategy_header)
        parts.append(pa.table({"key": table.column("key"), "version_valid": pa.array(valid),
                               "version": pa.array(version)}))
    return pa.concat_tables(parts) if parts else pa.table({"key": pa.array([], pa.binary()),
                                                           "version_valid": pa.array([], pa.int8()),
                                                           "version": pa.array([], pa.int64())})


def empty_transactional_batches(log: LogSegment, start: int) -> pa.Table:
    """The empty transactional data batches of a ``.log`` segment, as rows of the transaction columns (at their last
    offset): they have no record, but still belong to their transaction."""
    batches = log.batches
    attributes = batches.column("attributes").to_numpy()
    last = batches.column("base_offset").to_numpy() + batches.column("last_offset_delta").to_numpy().astype(np.int64)
    rows = ((batches.column("record_count").to_numpy() == 0) & ((attributes & TRANSACTIONAL) != 0)
            & ((attributes & CONTROL) == 0) & (last >= start))
    n = int(rows.sum())
    return pa.table({"offset": pa.array(last[rows], pa.int64()),
                     "producer_id": batches.column("producer_id").filter(pa.array(rows)),
                     "is_transactional": pa.array(np.ones(n, dtype=bool)),
                     "is_control": pa.array(np.zeros(n, dtype=bool)), "control_type": pa.nulls(n, pa.string())})


def read_decision_facts(task: ReadTask, whole: frozenset[int] = frozenset()) -> Facts:
    """Read the live records the decision needs (deletion vectors applied, nothing below the log start),
    compute their facts with :mod:`compaction.clean.rules`, and keep the rows of the task's key bucket.

    Segments whose base offset is in ``whole`` are read with every column and kept in ``Facts.records``
    (a task that will rewrite them reads each object once).
    """
    transactional = has_transactions(task)
    plain = _columns_for(task)
    columns = [*plain, *rules.TRANSACTION_COLUMNS[1:]] if transactional else plain
    with phase("read"):
        parts, lengths, records, logs, empty = _read_range(task, whole, columns, plain)
    with phase("decide"):
        return _facts(task, parts, lengths, columns, transactional, empty, records, logs)


def _read_range(task: ReadTask, whole: frozenset[int], columns: list[str], plain: list[str]
                ) -> tuple[list[pa.Table], list[int], dict[int, pa.Table], dict[int, LogSegment], list[pa.Table]]:
    """The decision columns of the task's segments (and the whole records of those in ``whole``)."""
    parts: list[pa.Table] = []
    lengths: list[int] = []
    records: dict[int, pa.Table] = {}
    logs: dict[int, LogSegment] = {}
    empty: list[pa.Table] = []
    for segment in task.segments:
        if segment.format == "kafka":  # read whole in any case: a batch's CRC covers all its records
            log = task.store.read_log_segment(task.tp, segment)
            live = task.store.live_rows(task.tp, segment, log.records.column("offset"), task.log_start_offset)
            table = log.records.filter(pa.array(live))
            empty.append(empty_transactional_batches(log, task.log_start_offset))
            if segment.base_offset in whole:
                logs[segment.base_offset], records[segment.base_offset] = log, table
        elif segment.base_offset in whole:
            table = records[segment.base_offset] = task.store.read_segment(task.tp, segment,
                                                                           start=task.log_start_offset)
        else:
            table = task.store.read_segment(task.tp, segment, columns if _has_transactions(segment) else plain,
                                            start=task.log_start_offset)
        parts.append(pa.table({name: _column(table, name) for name in columns}))
        lengths.append(table.num_rows)
    return parts, lengths, records, logs, empty


def _facts(task: ReadTask, parts: list[pa.Table], lengths: list[int], columns: list[str], transactional: bool,
           empty: list[pa.Table], records: dict[int, pa.Table], logs: dict[int, LogSegment]) -> Facts:
    """The decision facts of the rows read (see :func:`read_decision_facts`)."""
    raw = pa.concat_tables(parts) if parts else SEGMENT_SCHEMA.empty_table().select(columns)
    n = raw.num_rows
    keyed = pc.is_valid(raw.column("key")).to_numpy(zero_copy_only=False)
    control = np.zeros(n, dtype=bool)
    aborted = np.zeros(n, dtype=bool)
    pending = np.zeros(n, dtype=bool)
    if transactional and n:
        control = pc.fill_null(raw.column("is_control"), False).to_numpy(zero_copy_only=False)
        later = [task.store.read_segment(task.tp, s, rules.TRANSACTION_COLUMNS, start=task.log_start_offset)
                 for s in task.tail if _has_transactions(s)]
        involved = raw.select(rules.TRANSACTION_COLUMNS)
        # An empty batch of a transaction still belongs to it, as Kafka's cleaner sees it: its marker stays
        # while the batch does (a broker reading the log back must find the transaction ended).
        rank = np.arange(n)
        extra = [t for t in empty if t.num_rows]
        if extra:
            involved = pa.concat_tables([involved, *(t.cast(involved.schema) for t in extra)])
            order = np.argsort(involved.column("offset").to_numpy(), kind="stable")
            involved = involved.take(pa.array(order))
            rank = np.argsort(order)[:n]
        found = rules.transaction_facts(pa.concat_tables([involved, *(t.cast(involved.schema) for t in later)]))
        aborted, pending = found.aborted[rank], found.marker_pending[rank]
    read_lengths = counts = np.array(lengths, dtype=np.int64)
    mine = None
    if task.buckets > 1 and n:  # after the transaction facts, which need every row; before the rest
        buckets = key_bucket(raw.column("key"), task.bounds)
        mine = buckets == task.bucket
        counts = bucket_counts(buckets, read_lengths, task.buckets)[:, task.bucket]
        raw = raw.filter(pa.array(mine))
        keyed, control, aborted, pending = keyed[mine], control[mine], aborted[mine], pending[mine]
    valid, version = rules.versions(raw, task.strategy, task.strategy_header)
    table = _decision_table(task, raw.column("offset"), raw.column("key"), valid, version,
                            raw.column("delete_horizon_ms"), keyed, control, aborted, pending)
    return Facts(table, counts, read_lengths, mine, records, logs)


def bucket_counts(bucket: np.ndarray, read_lengths: np.ndarray, buckets: int) -> np.ndarray:
    """Per segment (rows, ``read_lengths`` of them, one after another) and key bucket, how many rows
    ``bucket`` puts there: a (segments, buckets) array."""
    segment = np.repeat(np.arange(len(read_lengths), dtype=np.int64), read_lengths)
    return np.bincount(segment * buckets + bucket, minlength=len(read_lengths) * buckets).reshape(-1, buckets)


def _decision_table(task: ReadTask, offset: Any, key: Any, valid: np.ndarray, version: np.ndarray,
                    delete_horizon_ms: Any, keyed: np.ndarray, control: np.ndarray, aborted: np.ndarray,
                    pending: np.ndarray) -> pa.Table:
    """The decision facts (:data:`DECISION_COLUMNS`) of rows in offset order, with the tail guard applied."""
    facts = pa.table({
        "offset": offset, "key": key, "version_valid": pa.array(valid, pa.int8()),
        "version": pa.array(version, pa.int64()), "competes": pa.array(rules.competes(keyed, control, aborted)),
        "delete_horizon_ms": delete_horizon_ms, "is_control": pa.array(control), "aborted": pa.array(aborted),
        "marker_pending": pa.array(pending), "guarded": pa.array(np.zeros(len(keyed), dtype=bool)),
    })
    # A tombstone whose horizon passed may be guarded by a stale record of its key beyond the range; under
    # the offset strategy every record beyond has a higher version, so none is.
    candidates = facts.column("competes").to_numpy(zero_copy_only=False) & rules.expiring(facts, task.now_ms)
    if task.strategy is not rules.Strategy.OFFSET and candidates.any() and task.tail:
        guarded = rules.guarded_by_tail(facts, candidates, _tail_versions(task))
        facts = facts.set_column(facts.column_names.index("guarded"), "guarded", pa.array(guarded))
    return facts


# Stage 1 of a split partition without transactions: each run of segments read once -----------------------


def bucket_pieces(task: ReadTask) -> list[tuple[tuple[TopicPartition, int], BucketPiece]]:
    """Read a run of segments of a split partition (``task.segments``) once, and give each key bucket its
    rows as a :class:`BucketPiece`, keyed by partition and bucket for the shuffle to the bucket's task.

    Only for ranges without transactions: whether a record is aborted depends on every row before it, so
    those partitions' bucket tasks read the whole range instead (:func:`decision_rows`).
    """
    first = task.segments[0].base_offset
    try:
        columns = _columns_for(task)
        with phase("read"):
            parts, lengths, *_ = _read_range(task, frozenset(), columns, columns)
        with phase("decide"):
            raw = pa.concat_tables(parts) if parts else SEGMENT_SCHEMA.empty_table().select(columns)
            read_lengths = np.array(lengths, dtype=np.int64)
            rows = pa.table({"offset": raw.column("offset"), "key": raw.column("key"),
                             "delete_horizon_ms": raw.column("delete_horizon_ms"),
                             "position": pa.array(row_positions(read_lengths).astype(np.int32))})
            if task.strategy is not rules.Strategy.OFFSET:  # under it the version is the offset: rebuilt, not sent
                valid, version = rules.versions(raw, task.strategy, task.strategy_header)
                rows = rows.append_column("version_valid", pa.array(valid, pa.int8())).append_column(
                    "version", pa.array(version, pa.int64()))
            bucket = key_bucket(raw.column("key"), task.bounds)
            del raw, parts
            counts = bucket_counts(bucket, read_lengths, task.buckets)
            pieces = [((task.tp, b), BucketPiece.of(task.tp, first, read_lengths, counts[:, b],
                                                    rows.filter(pa.array(bucket == b))))
                      for b in range(task.buckets)]
            return pieces
    except Exception as err:  # isolate the partition; every bucket reports it
        return [((task.tp, b), BucketPiece(tp=task.tp, first_segment=first, read_lengths=np.zeros(0, np.int64),
                                           lengths=np.zeros(0, np.int64), error=error_text(err)))
                for b in range(task.buckets)]


class BucketDecisions:
    """Stage 1's second half for split partitions without transactions: a bucket's pieces become its
    decision rows (a class, not a closure, so that Spark ships the tasks it holds, not this module)."""

    def __init__(self, tasks: dict[tuple[TopicPartition, int], ReadTask]) -> None:
        self.tasks = tasks  # by partition and bucket: the bucket's task over the whole range

    def __call__(self, pairs: list[tuple[tuple[TopicPartition, int], BucketPiece]]) -> list[DecisionRow]:
        pieces: dict[tuple[TopicPartition, int], list[BucketPiece]] = {}
        for key, piece in pairs:
            pieces.setdefault(key, []).append(piece)
        return [row for key, found in pieces.items() for row in bucket_decision_rows(self.tasks[key], found)]


def bucket_decision_rows(task: ReadTask, pieces: list[BucketPiece]) -> list[DecisionRow]:
    """Decide one key bucket from its pieces of every run of the range (see :func:`bucket_pieces`)."""
    failed = next((p.error for p in pieces if p.error is not None), None)
    if failed is not None:
        return [DecisionRow.failed(task.tp, failed)]
    try:
        with phase("decide"):
            pieces = sorted(pieces, key=lambda p: p.first_segment)
            read_lengths = np.concatenate([np.zeros(0, np.int64), *(p.read_lengths for p in pieces)])
            if len(read_lengths) != len(task.segments) or len(pieces) != len({p.first_segment for p in pieces}):
                raise RuntimeError(f"key bucket {task.bucket} of {task.tp} got pieces of {len(read_lengths)} "
                                   f"segment(s) for a range of {len(task.segments)}")
            rows = pa.concat_tables([p.rows() for p in pieces])
            starts = np.cumsum(read_lengths) - read_lengths
            lengths = np.concatenate([np.zeros(0, np.int64), *(p.lengths for p in pieces)])
            selected = np.zeros(int(read_lengths.sum()), dtype=bool)
            selected[np.repeat(starts, lengths) + rows.column("position").to_numpy()] = True
            keyed = pc.is_valid(rows.column("key")).to_numpy(zero_copy_only=False)
            none = np.zeros(rows.num_rows, dtype=bool)
            valid, version = ((rows.column("version_valid").to_numpy(), rows.column("version").to_numpy())
                              if "version" in rows.column_names else
                              rules.versions(rows, task.strategy, task.strategy_header))
            table = _decision_table(task, rows.column("offset"), rows.column("key"), valid, version,
                                    rows.column("delete_horizon_ms"), keyed, none, none, none)
            del rows
        return _decision_rows(task, _decide(task, Facts(table, lengths, read_lengths, selected)))
    except Exception as err:  # isolate the partition; reported with its reason
        return [DecisionRow.failed(task.tp, error_text(err))]


def read_facts(task: ReadTask) -> pa.Table:
    """The Spark SQL plans' facts table: the decision facts with where each row lives."""
    facts = read_decision_facts(task)
    table = facts.table
    n = table.num_rows
    bases = np.repeat(np.array([s.base_offset for s in task.segments], dtype=np.int64), facts.lengths)
    return pa.table({
        "topic": pa.repeat(pa.scalar(task.tp.topic), n),
        "partition": pa.repeat(pa.scalar(task.tp.partition, pa.int32()), n),
        "segment_base": pa.array(bases, pa.int64()),
        "position": pa.array(facts.positions(), pa.int64()),
        **{name: table.column(name) for name in DECISION_COLUMNS},
        "error": pa.nulls(n, pa.string()),
    }, schema=rules.FACTS_SCHEMA)


def _error_row(task: ReadTask, err: BaseException) -> pa.Table:
    row: dict[str, list[Any]] = {name: [None] for name in rules.FACTS_SCHEMA.names}
    row.update(topic=[task.tp.topic], partition=[task.tp.partition], segment_base=[NO_SEGMENT], offset=[-1],
               error=[error_text(err)])
    return pa.table(row, schema=rules.FACTS_SCHEMA)


def read_facts_batches(batches: Iterator[pa.RecordBatch], tasks: dict[int, ReadTask]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the Spark SQL plans: each input row names a read task; yields its facts."""
    for batch in batches:
        for task_id in batch.column("task").to_pylist():
            task = tasks[task_id]
            try:
                table = read_facts(task)
            except Exception as err:  # isolate the partition; reported with its reason
                table = _error_row(task, err)
            yield from table.to_batches(max_chunksize=BATCH_ROWS)


# Stage 1: the in-task (Arrow) plan ------------------------------------------------------------------------


@dataclass(frozen=True)
class Decided:
    """A task's decision: per row of its facts the reason code (0 kept) and whether to stamp (markers)."""

    facts: Facts
    code: np.ndarray
    stamp: np.ndarray

    now_ms: int

    def outcomes(self, segments: tuple[SegmentMeta, ...]) -> list[tuple[SegmentMeta, slice, SegmentOutcome]]:
        """Per segment, its rows in ``code``/``stamp`` and the decision's counts for them."""
        result = []
        upcoming = rules.upcoming_horizons(self.facts.table, self.code, self.now_ms)
        for segment, part in zip(segments, self.facts.segment_slices(), strict=True):
            result.append((segment, part, SegmentOutcome.from_decision(self.code[part], self.stamp[part],
                                                                       upcoming[part])))
        return result


def decide_facts(task: ReadTask, whole: frozenset[int] = frozenset()) -> Decided:
    """Read and decide a task's rows with Arrow (no shuffle of records)."""
    return _decide(task, read_decision_facts(task, whole))


def _decide(task: ReadTask, facts: Facts) -> Decided:
    """The Arrow plan's decision over a task's facts."""
    with phase("decide"):
        decided = arrow_dedupe.decide(facts.table, now_ms=task.now_ms, keyless_drop=task.keyless_drop,
                                      unique_before=task.first_dirty_offset if task.clean_keys_unique else None)
    return Decided(facts, decided.code, decided.stamp, task.now_ms)


def decision_rows(task: ReadTask) -> list[DecisionRow]:
    """Stage 1 of a split partition (one key bucket, reading the whole range): per segment, this key bucket's
    counts, a bitmap of the rows it drops and the markers to stamp; or one row with the error that stopped the
    task."""
    try:
        decided = decide_facts(task)
    except Exception as err:  # isolate the partition; reported with its reason
        return [DecisionRow.failed(task.tp, error_text(err))]
    return _decision_rows(task, decided)


def _decision_rows(task: ReadTask, decided: Decided) -> list[DecisionRow]:
    offsets = decided.facts.table.column("offset").to_numpy()
    bitmaps = decided.facts.row_bitmaps(decided.code != rules.KEPT)
    return [DecisionRow(tp=task.tp, segment_base=segment.base_offset, outcome=outcome, rows=int(rows), dropped=bitmap,
                        stamps=offsets[part][decided.stamp[part]])
            for (segment, part, outcome), rows, bitmap in zip(decided.outcomes(task.segments),
                                                              decided.facts.read_lengths, bitmaps, strict=True)]


# Stage 2: apply -------------------------------------------------------------------------------------------


def object_id(pass_id: str) -> str:
    """The id in the names of the objects this task attempt writes: ``<pass id>-<task attempt id>``.

    The pass id is the driver's, new for every pass; the task attempt id is Spark's, unique in the
    application. So an attempt's names are its own: a retried or speculative attempt never writes over an
    object another attempt wrote, which the driver may already have committed, nor over one a committed
    manifest of an earlier pass names. The driver commits only the attempt whose result it collected; the
    objects of the others are garbage that gc removes after its grace period.
    """
    task = TaskContext.get()
    return f"{pass_id}-{task.taskAttemptId() if task is not None else 0}"


class Verdicts:
    """The decision as stage 2 needs it: per source segment, which live rows stay; the markers to stamp."""

    stamps: np.ndarray  # sorted offsets of kept markers to stamp

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def records(self, job: ApplyJob, segment: SegmentMeta) -> pa.Table:
        """A source segment's live records."""
        with phase("read"):
            return job.store.read_segment(job.tp, segment, start=job.log_start_offset)

    def log_segment(self, job: ApplyJob, segment: SegmentMeta) -> LogSegment:
        """A ``.log`` source segment whole: every record and batch, deleted or not."""
        with phase("read"):
            return job.store.read_log_segment(job.tp, segment)


class DroppedRows(Verdicts):
    """Verdicts from decision rows: per segment, the union of its key buckets' bitmaps of dropped rows."""

    def __init__(self, rows: list[DecisionRow]) -> None:
        self.bits: dict[int, np.ndarray] = {}
        for row in rows:
            bits = np.unpackbits(row.dropped, count=row.rows).view(bool)
            before = self.bits.get(row.segment_base)
            if before is not None and len(before) != len(bits):
                raise RuntimeError(f"decisions disagree on the rows of segment {row.segment_base}")
            self.bits[row.segment_base] = bits if before is None else before | bits
        self.stamps = np.sort(np.concatenate([np.zeros(0, dtype=np.int64),
                                              *(np.asarray(r.stamps, dtype=np.int64) for r in rows)]))

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        bits = self.bits.get(segment.base_offset, np.zeros(len(offsets), dtype=bool))  # no rows: nothing read
        if len(bits) != len(offsets):
            raise RuntimeError(f"segment {segment.path} changed between reading its keys and its records")
        return ~bits


class DecidedRows(Verdicts):
    """Verdicts straight from a whole partition's decision in this task (rows align with each segment's read)."""

    def __init__(self, decided: Decided, segments: tuple[SegmentMeta, ...]) -> None:
        # Only what the rewrites need: not the facts' keys, which the task may free once it has these.
        self.code = decided.code
        self.records_cache, self.logs = decided.facts.records, decided.facts.logs
        self.slices = {s.base_offset: part for s, part in zip(segments, decided.facts.segment_slices(), strict=True)}
        self.offsets = decided.facts.table.column("offset").to_numpy()
        self.stamps = self.offsets[decided.stamp]

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        part = self.slices[segment.base_offset]
        if part.stop - part.start != len(offsets) or not np.array_equal(self.offsets[part], offsets):
            raise RuntimeError(f"segment {segment.path} changed between reading its keys and its records")
        return self.code[part] == rules.KEPT

    def records(self, job: ApplyJob, segment: SegmentMeta) -> pa.Table:
        cached = self.records_cache.pop(segment.base_offset, None)  # used once: free it after
        return cached if cached is not None else super().records(job, segment)

    def log_segment(self, job: ApplyJob, segment: SegmentMeta) -> LogSegment:
        self.records_cache.pop(segment.base_offset, None)
        cached = self.logs.pop(segment.base_offset, None)
        return cached if cached is not None else super().log_segment(job, segment)


def _extend_deletes(job: ApplyJob, verdicts: Verdicts) -> AppliedJob:
    """Extend a segment's deletion vector with the live rows it loses; the live figures go with it."""
    (segment,) = job.sources
    with phase("read"):
        table = job.store.read_segment(job.tp, segment, ["offset", "timestamp", "delete_horizon_ms"],
                                       start=job.log_start_offset)
    offsets = table.column("offset").to_numpy()
    keep = verdicts.keep_mask(segment, offsets)
    deleted = pa.array(offsets[~keep], pa.int64())
    created = job.now_ms
    if segment.deletes is not None:
        deleted = pa.concat_arrays([job.store.read_deletes(job.tp, segment.deletes), deleted])
        created = segment.deletes.created_ms  # the deadline for physical removal counts from the first
    kept = table.filter(pa.array(keep))
    first, last = timestamp_stats(kept.column("timestamp"))
    vector = job.store.write_deletes(job.tp, segment, deleted, created_ms=created,
                                     live_min_delete_horizon_ms=pc.min(kept.column("delete_horizon_ms")).as_py(),
                                     live_first_timestamp=first, live_max_timestamp=last,
                                     object_id=object_id(job.pass_id))
    # Validated (model_copy is not): the driver commits this metadata as it stands.
    updated = SegmentMeta.model_validate({**segment.model_dump(), "deletes": vector})
    return AppliedJob.of(job, segment=updated, bytes_written=vector.size_bytes)


def apply_job(job: ApplyJob, verdicts: Verdicts) -> AppliedJob:
    """Write the job's new object: a segment of the sources' surviving records, or a deletion vector.

    A rewrite that keeps no record writes nothing (``segment`` None): its range stays in the manifest as
    part of the log, without an object.
    """
    with phase("write"):
        if job.deletes_only:
            return _extend_deletes(job, verdicts)
        if job.segment_format == "kafka":
            return _rewrite_batches(job, verdicts)
        return _rewrite(job, verdicts)


def _rewrite(job: ApplyJob, verdicts: Verdicts) -> AppliedJob:
    """A rewrite into a Parquet segment of the sources' surviving records, read and encoded one source at a
    time: the task holds one source's records and the new object's bytes, never all the records."""
    figures = {"records_read": 0, "records_written": 0, "stamped": 0}

    def kept() -> Iterator[pa.Table]:
        for source in job.sources:
            table = verdicts.records(job, source)
            figures["records_read"] += table.num_rows
            keep = verdicts.keep_mask(source, table.column("offset").to_numpy())
            piece, stamped = _stamp(table if keep.all() else table.filter(pa.array(keep)), verdicts, job.horizon_ms)
            del table
            figures["records_written"] += piece.num_rows
            figures["stamped"] += stamped
            yield piece

    # Kafka keeps the last source's modification time: records keep their age through rewrites.
    segment = job.store.write_segment_pieces(job.tp, kept(), job.base_offset, job.next_offset,
                                             created_ms=job.sources[-1].created_ms, object_id=object_id(job.pass_id))
    return AppliedJob.of(job, segment=segment, bytes_read=sum(s.size_bytes for s in job.sources),
                         bytes_written=segment.size_bytes if segment is not None else 0, **figures)


def _stamp(records: pa.Table, verdicts: Verdicts, horizon_ms: int) -> tuple[pa.Table, int]:
    """Kept records with the first delete horizon stamped where :func:`rules.needs_horizon` says; and how many."""
    stamp = rules.needs_horizon(records, verdicts.stamps)
    if not pc.any(stamp).as_py():
        return records, 0
    horizons = pc.if_else(stamp, pa.scalar(horizon_ms, pa.int64()), records.column("delete_horizon_ms"))
    return (records.set_column(records.column_names.index("delete_horizon_ms"), "delete_horizon_ms", horizons),
            pc.sum(stamp).as_py() or 0)


def _rewrite_batches(job: ApplyJob, verdicts: Verdicts) -> AppliedJob:
    """A rewrite into a ``.log`` segment: each ``.log`` source's batches copied, rebuilt, kept empty or dropped
    (:mod:`compaction.clean.batches`), Parquet sources' records framed anew."""
    policy = job.batch_policy or BatchPolicy(first_uncleanable_offset=-1)
    parts, records_read = [], 0
    for source in job.sources:
        if source.format == "kafka":
            log = verdicts.log_segment(job, source)
            offsets = log.records.column("offset")
            live = job.store.live_rows(job.tp, source, offsets, job.log_start_offset)
            keep = np.zeros(len(live), dtype=bool)
            keep[live] = verdicts.keep_mask(source, offsets.to_numpy()[live])
            records_read += int(live.sum())
            parts.append(reframe(log, keep, verdicts.stamps, job.horizon_ms, policy))
        else:
            table = verdicts.records(job, source)
            records_read += table.num_rows
            keep = verdicts.keep_mask(source, table.column("offset").to_numpy())
            kept, stamped = _stamp(table.filter(pa.array(keep)), verdicts, job.horizon_ms)
            parts.append(frame_records(kept, stamped))
    framed = Framed.join(parts, SEGMENT_SCHEMA)
    segment = None
    if framed.batches.num_rows:  # a segment of empty batches still keeps their offsets and producers
        segment = job.store.write_segment(job.tp, framed.records, job.base_offset, job.next_offset,
                                          created_ms=job.sources[-1].created_ms, object_id=object_id(job.pass_id),
                                          segment_format="kafka", batches=framed.batches, encoded=framed.data)
    return AppliedJob.of(job, segment=segment, records_read=records_read,
                         bytes_read=sum(s.size_bytes for s in job.sources), records_written=framed.records.num_rows,
                         stamped=framed.stamped, bytes_written=segment.size_bytes if segment is not None else 0)


def apply_rows(job: ApplyJob, rows: list[DecisionRow | None]) -> AppliedJob:
    """Stage 2 of a split partition: apply one job with the decision rows of its segments (every bucket)."""
    try:
        return apply_job(job, DroppedRows([r for r in rows if r is not None]))
    except Exception as err:  # isolate the partition; reported with its reason
        return AppliedJob.of(job, error=error_text(err))


# One task: decide and apply a whole partition ------------------------------------------------------------


def clean_in_task(task: ReadTask) -> CleanedPartition:
    """Decide a partition, lay out its new objects and write them, all in this task; returns metadata only."""
    assert task.policy is not None and task.buckets == 1
    # The decision reads the decision columns of Parquet segments only; the rewrites then read each source
    # whole, one at a time, so a task holds keys, not values. A .log segment is decoded whole in any case
    # (a batch's CRC covers all its records): its dirty ones are kept from the decision for the rewrite.
    decided = decide_facts(task, frozenset(s.base_offset for s in task.segments
                                           if s.next_offset > task.first_dirty_offset and s.format == "kafka"))
    outcomes = {segment.base_offset: outcome for segment, _, outcome in decided.outcomes(task.segments)}
    verdicts = DecidedRows(decided, task.segments)
    del decided  # the facts' keys and versions: the rewrites need the verdicts only
    jobs = [apply_job(ApplyJob(tp=task.tp, store=task.store, job_id=job_id, sources=sources,
                               horizon_ms=task.horizon_ms, now_ms=task.now_ms, log_start_offset=task.log_start_offset,
                               deletes_only=deletes_only, pass_id=task.pass_id, segment_format=task.segment_format,
                               batch_policy=task.batch_policy), verdicts)
            for job_id, (sources, deletes_only) in enumerate(plan_jobs(
                task.segments, outcomes, task.first_dirty_offset, task.policy,
                stale_empty_batches(task.segments, task.batch_policy)))]
    return CleanedPartition(tp=task.tp, outcomes=outcomes, jobs=tuple(jobs))


def clean_partition(task: ReadTask) -> CleanedPartition:
    """RDD body: clean one partition in this task; returns its metadata, or the error that stopped it."""
    try:
        return clean_in_task(task)
    except Exception as err:  # isolate the partition; reported with its reason
        return CleanedPartition(tp=task.tp, error=error_text(err))
