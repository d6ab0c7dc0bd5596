"""Executor-side work: read the facts a pass decides on, decide per partition, and apply the decisions.

Everything here runs inside Spark tasks on pyarrow and fsspec, so the same code reads local disk and S3.
A failure is caught at the partition's boundary and returned as an ``error`` row: one bad partition (a
corrupt or missing segment) must not stop the others (SPEC §5).

Stage 1 ends with one *decision row* per segment (and key bucket): its counts and the offsets it loses.
Stage 2 runs *jobs* over those rows: rewrite a group of segments into one, or extend a segment's
deletion vector.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction import arrow_dedupe
from compaction.dedupe import REASONS
from compaction.layout import ApplyPolicy, SegmentOutcome, plan_jobs
from compaction.manifest import SegmentMeta
from compaction.segment import HEADER_TYPE
from compaction.store import Store, TopicPartition
from compaction.transactions import transaction_facts

#: Per record of a cleaned range, for the Spark SQL plans (plus one ``error`` row for a partition that failed).
FACTS_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("segment_base", pa.int64()),
    ("offset", pa.int64()),
    ("key", pa.binary()),
    ("timestamp", pa.int64()),
    ("headers", HEADER_TYPE),
    ("delete_horizon_ms", pa.int64()),
    ("is_control", pa.bool_()),
    ("aborted", pa.bool_()),
    ("marker_pending", pa.bool_()),
    ("strategy", pa.string()),
    ("strategy_header", pa.string()),
    ("range_last_offset", pa.int64()),
    ("keyless_drop", pa.bool_()),
    ("error", pa.string()),
])
FACTS_DDL = ("topic string, partition int, segment_base long, offset long, key binary, timestamp long, "
             "headers array<struct<key:string,value:binary>>, delete_horizon_ms long, is_control boolean, "
             "aborted boolean, marker_pending boolean, strategy string, strategy_header string, "
             "range_last_offset long, keyless_drop boolean, error string")

_TXN_COLUMNS = ["offset", "producer_id", "is_transactional", "is_control", "control_type"]
BATCH_ROWS = 131_072


@dataclass(frozen=True)
class ReadTask:
    """Decide one partition's cleaned range, or one key bucket of it (``bucket`` of ``buckets``)."""

    tp: TopicPartition
    store: Store
    segments: tuple[SegmentMeta, ...]
    beyond: tuple[SegmentMeta, ...]  # later segments whose markers may decide transactions in the range
    strategy: str
    strategy_header: str
    keyless_drop: bool
    now_ms: int = 0
    bucket: int = 0
    buckets: int = 1
    # For a partition decided and applied in one task (the Arrow plan, one bucket):
    first_dirty_offset: int = 0
    policy: ApplyPolicy | None = None
    horizon_ms: int = 0


@dataclass(frozen=True)
class ApplyJob:
    """Stage 2: rewrite ``sources`` into one segment, or (``deletes_only``) extend one segment's deletion vector."""

    tp: TopicPartition
    store: Store
    job_id: int
    sources: tuple[SegmentMeta, ...]
    horizon_ms: int
    created_ms: int
    deletes_only: bool = False

    @property
    def base_offset(self) -> int:
        return self.sources[0].base_offset

    @property
    def next_offset(self) -> int:
        return self.sources[-1].next_offset


# Stage 1: facts -------------------------------------------------------------------------------------------


def _columns_for(task: ReadTask, segment: SegmentMeta) -> list[str]:
    """Only what the decision needs: never values (a data record with a delete horizon is a tombstone)."""
    columns = ["offset", "key", "delete_horizon_ms"]
    if task.strategy == "timestamp":
        columns.append("timestamp")
    if task.strategy == "header":
        columns.append("headers")
    if segment.control_count or segment.transactional_count:
        columns += ["producer_id", "is_transactional", "is_control", "control_type"]
    return columns


def _column(table: pa.Table, name: str, type_: pa.DataType, default: Any = None) -> pa.Array:
    if name in table.column_names:
        return table.column(name).combine_chunks()
    if default is None:
        return pa.nulls(table.num_rows, type_)
    return pa.repeat(pa.scalar(default, type_), table.num_rows)


_WEIGHTS = np.random.default_rng(20261122).integers(1, 2**63, size=64, dtype=np.uint64) | np.uint64(1)


def _mix(h: np.ndarray) -> np.ndarray:
    h = (h ^ (h >> np.uint64(33))) * np.uint64(0xFF51AFD7ED558CCD)
    return h ^ (h >> np.uint64(33))


def key_buckets(keys: pa.Array, buckets: int) -> np.ndarray:
    """A bucket in ``[0, buckets)`` per key, a function of the key's bytes alone; keyless rows get 0.

    A vectorised hash: the key's length plus the sum of its bytes times position weights, then a 64-bit
    finaliser. Keys of one length are hashed as a byte matrix, mixed lengths with ``np.add.reduceat``.
    """
    keys = keys.cast(pa.binary())
    n = len(keys)
    if buckets <= 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1, offset=keys.offset * 4).astype(np.int64)
    data = np.frombuffer(keys.buffers()[2], dtype=np.uint8) if keys.buffers()[2] is not None else np.zeros(0, np.uint8)
    valid = pc.is_valid(keys).to_numpy(zero_copy_only=False)
    lengths = np.diff(offsets)
    hashed = lengths.astype(np.uint64)
    raw = data[offsets[0]:offsets[-1]]
    widths = np.unique(lengths[valid])
    if len(widths) == 1 and widths[0] > 0:  # one length: a (keys x length) byte matrix (keyless rows hold no bytes)
        width = int(widths[0])
        matrix = raw.reshape(-1, width)
        total = np.zeros(len(matrix), dtype=np.uint64)
        for column in range(width):
            total += matrix[:, column].astype(np.uint64) * _WEIGHTS[column % len(_WEIGHTS)]
        hashed[valid] += total
    elif len(raw):
        position = np.arange(len(raw)) - np.repeat(offsets[:-1] - offsets[0], lengths)
        weighted = raw.astype(np.uint64) * _WEIGHTS[position % len(_WEIGHTS)]
        nonempty = lengths > 0
        hashed[nonempty] += np.add.reduceat(weighted, (offsets[:-1] - offsets[0])[nonempty])
    result = (_mix(hashed) % np.uint64(buckets)).astype(np.int64)
    result[~valid] = 0
    return result


@dataclass(frozen=True)
class Facts:
    """What the decision reads of a task's cleaned range, in offset order, and each segment's row count."""

    table: pa.Table  # offset, key, delete_horizon_ms, is_control, aborted, marker_pending (+ timestamp/headers)
    lengths: np.ndarray  # rows per segment of the task, in segment order (before any bucket filter)
    records: dict[int, pa.Table] = field(default_factory=dict)  # whole records of segments read in full

    @property
    def range_last_offset(self) -> int | None:
        return self.table.column("offset")[-1].as_py() if self.table.num_rows else None


def read_decision_facts(task: ReadTask, whole: frozenset[int] = frozenset()) -> Facts:
    """Read the decision's columns of every segment (deletion vectors applied) and the transaction facts.

    Segments whose base offset is in ``whole`` are read with every column and kept in ``Facts.records``
    (a task that will rewrite them reads each object once).
    """
    transactional = any(s.transactional_count or s.control_count for s in (*task.segments, *task.beyond))
    parts, lengths, records = [], [], {}
    for segment in task.segments:
        if segment.base_offset in whole:
            table = records[segment.base_offset] = task.store.read_segment(task.tp, segment)
        else:
            table = task.store.read_segment(task.tp, segment, _columns_for(task, segment))
        columns: dict[str, Any] = {"offset": _column(table, "offset", pa.int64()),
                                   "key": _column(table, "key", pa.binary()),
                                   "delete_horizon_ms": _column(table, "delete_horizon_ms", pa.int64())}
        if task.strategy == "timestamp":
            columns["timestamp"] = _column(table, "timestamp", pa.int64())
        if task.strategy == "header":
            columns["headers"] = _column(table, "headers", HEADER_TYPE)
        if transactional:
            columns.update({
                "producer_id": _column(table, "producer_id", pa.int64(), -1),
                "is_transactional": pc.fill_null(_column(table, "is_transactional", pa.bool_(), False), False),
                "is_control": pc.fill_null(_column(table, "is_control", pa.bool_(), False), False),
                "control_type": _column(table, "control_type", pa.string()),
            })
        parts.append(pa.table(columns))
        lengths.append(table.num_rows)
    facts = pa.concat_tables(parts) if parts else pa.table({"offset": pa.array([], pa.int64()),
                                                            "key": pa.array([], pa.binary()),
                                                            "delete_horizon_ms": pa.array([], pa.int64())})
    n = facts.num_rows
    aborted = np.zeros(n, dtype=bool)
    pending = np.zeros(n, dtype=bool)
    if transactional and n:
        txn_schema = facts.select(_TXN_COLUMNS).schema
        later = [task.store.read_segment(task.tp, s, _TXN_COLUMNS).cast(txn_schema) for s in task.beyond]
        found = transaction_facts(pa.concat_tables([facts.select(_TXN_COLUMNS), *later]))
        aborted, pending = found.aborted[:n], found.marker_pending[:n]
        facts = facts.drop_columns(["producer_id", "is_transactional", "control_type"])
    else:
        facts = facts.append_column("is_control", pa.array(np.zeros(n, dtype=bool)))
    facts = facts.append_column("aborted", pa.array(aborted)).append_column("marker_pending", pa.array(pending))
    return Facts(facts, np.array(lengths, dtype=np.int64), records)


def _bucket_rows(task: ReadTask, facts: Facts) -> np.ndarray | None:
    """The rows of this task's key bucket (None: all rows)."""
    if task.buckets <= 1:
        return None
    return key_buckets(facts.table.column("key").combine_chunks(), task.buckets) == task.bucket


def read_facts(task: ReadTask) -> pa.Table:
    """The Spark SQL plans' facts table: the decision facts with the partition's constants on every row."""
    facts = read_decision_facts(task)
    table = facts.table
    n = table.num_rows
    if n == 0:
        return FACTS_SCHEMA.empty_table()
    bases = np.repeat(np.array([s.base_offset for s in task.segments], dtype=np.int64), facts.lengths)

    def constant(value: Any, type_: pa.DataType) -> pa.Array:
        return pa.nulls(n, type_) if value is None else pa.repeat(pa.scalar(value, type_), n)

    result = pa.table({
        "topic": constant(task.tp.topic, pa.string()),
        "partition": constant(task.tp.partition, pa.int32()),
        "segment_base": pa.array(bases),
        "offset": table.column("offset"),
        "key": table.column("key"),
        "timestamp": _column(table, "timestamp", pa.int64()),
        "headers": _column(table, "headers", HEADER_TYPE),
        "delete_horizon_ms": table.column("delete_horizon_ms"),
        "is_control": table.column("is_control"),
        "aborted": table.column("aborted"),
        "marker_pending": table.column("marker_pending"),
        "strategy": constant(task.strategy, pa.string()),
        "strategy_header": constant(task.strategy_header, pa.string()),
        "range_last_offset": constant(facts.range_last_offset, pa.int64()),
        "keyless_drop": constant(task.keyless_drop, pa.bool_()),
        "error": constant(None, pa.string()),
    }, schema=FACTS_SCHEMA)
    rows = _bucket_rows(task, facts)
    return result if rows is None else result.filter(pa.array(rows))


def _error_row(task: ReadTask, err: BaseException, schema: pa.Schema) -> pa.Table:
    row: dict[str, list[Any]] = {name: [None] for name in schema.names}
    row.update(topic=[task.tp.topic], partition=[task.tp.partition], segment_base=[-1],
               error=[f"{type(err).__name__}: {err}"])
    if "offset" in row:
        row["offset"] = [-1]
    return pa.table(row, schema=schema)


def read_facts_batches(batches: Iterator[pa.RecordBatch], tasks: dict[int, ReadTask]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the Spark SQL plans: each input row names a read task; yields its facts."""
    for batch in batches:
        for task_id in batch.column("task").to_pylist():
            task = tasks[task_id]
            try:
                table = read_facts(task)
            except Exception as err:  # isolate the partition; reported with its reason
                table = _error_row(task, err, FACTS_SCHEMA)
            yield from table.to_batches(max_chunksize=BATCH_ROWS)


# Stage 1: the in-task (Arrow) plan ------------------------------------------------------------------------


@dataclass(frozen=True)
class Decided:
    """A task's decision: per row of its facts the reason code (0 kept) and whether to stamp (markers)."""

    facts: Facts
    rows: np.ndarray | None  # the task's bucket rows of facts.table (None: all)
    code: np.ndarray
    stamp: np.ndarray

    def segment_slices(self) -> list[slice]:
        """Each segment's rows in ``code`` and ``stamp`` (only without buckets, where rows are all rows)."""
        ends = np.cumsum(self.facts.lengths)
        return [slice(int(end - length), int(end)) for end, length in zip(ends, self.facts.lengths, strict=True)]


def decide_facts(task: ReadTask, whole: frozenset[int] = frozenset()) -> Decided:
    """Read and decide a task's rows with Arrow (no shuffle of records)."""
    facts = read_decision_facts(task, whole)
    rows = _bucket_rows(task, facts)
    table = facts.table if rows is None else facts.table.filter(pa.array(rows))
    if table.num_rows == 0:
        return Decided(facts, rows, np.zeros(0, dtype=np.int8), np.zeros(0, dtype=bool))
    decided = arrow_dedupe.decide(table, strategy=task.strategy, header=task.strategy_header, now_ms=task.now_ms,
                                  keyless_drop=task.keyless_drop, range_last_offset=facts.range_last_offset or 0)
    return Decided(facts, rows, decided.code, decided.stamp)


def decision_rows(task: ReadTask) -> list[dict[str, Any]]:
    """Stage 1 of a split partition: per segment, this key bucket's counts, dropped offsets and markers to
    stamp; or one row with the error that stopped the task."""
    try:
        decided = decide_facts(task)
    except Exception as err:  # isolate the partition; reported with its reason
        return [{"topic": task.tp.topic, "partition": task.tp.partition, "segment_base": -1,
                 "error": f"{type(err).__name__}: {err}"}]
    offsets_all = decided.facts.table.column("offset").to_numpy()
    segment_of = np.repeat(np.arange(len(task.segments)), decided.facts.lengths)
    if decided.rows is not None:
        offsets_all, segment_of = offsets_all[decided.rows], segment_of[decided.rows]
    bounds = np.searchsorted(segment_of, np.arange(len(task.segments) + 1))
    rows = []
    for i, segment in enumerate(task.segments):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        code = decided.code[lo:hi]
        counts = np.bincount(code, minlength=len(REASONS) + 1)
        rows.append({"topic": task.tp.topic, "partition": task.tp.partition, "segment_base": segment.base_offset,
                     "records": hi - lo, "kept": int(counts[0]), "stamped": int(decided.stamp[lo:hi].sum()),
                     "dropped_by": {r: int(counts[c]) for r, c in arrow_dedupe.CODES.items() if counts[c]},
                     "dropped": offsets_all[lo:hi][code != 0], "stamps": offsets_all[lo:hi][decided.stamp[lo:hi]],
                     "error": None})
    return rows


# Stage 2: apply -------------------------------------------------------------------------------------------


class Verdicts:
    """The decision as stage 2 needs it: per source segment, which rows stay and which offsets go."""

    stamps: np.ndarray  # sorted offsets of kept markers to stamp

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def dropped(self, segment: SegmentMeta) -> np.ndarray:
        raise NotImplementedError

    def records(self, job: ApplyJob, segment: SegmentMeta) -> pa.Table:
        """A source segment's records (deletion vector applied)."""
        return job.store.read_segment(job.tp, segment)


class DroppedOffsets(Verdicts):
    """Verdicts from decision rows: the sorted offsets dropped across the job's segments (all key buckets)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        empty = np.zeros(0, dtype=np.int64)
        self.offsets = np.sort(np.concatenate([empty, *(np.asarray(r["dropped"], dtype=np.int64) for r in rows)]))
        self.stamps = np.sort(np.concatenate([empty, *(np.asarray(r["stamps"], dtype=np.int64) for r in rows)]))

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        if not len(self.offsets):
            return np.ones(len(offsets), dtype=bool)
        at = np.minimum(np.searchsorted(self.offsets, offsets), len(self.offsets) - 1)
        return self.offsets[at] != offsets

    def dropped(self, segment: SegmentMeta) -> np.ndarray:
        lo, hi = np.searchsorted(self.offsets, [segment.base_offset, segment.next_offset])
        return self.offsets[lo:hi]


class DecidedRows(Verdicts):
    """Verdicts straight from a whole partition's decision in this task (rows align with each segment's read)."""

    def __init__(self, decided: Decided, segments: tuple[SegmentMeta, ...]) -> None:
        self.decided = decided
        self.slices = {s.base_offset: part for s, part in zip(segments, decided.segment_slices(), strict=True)}
        offsets = decided.facts.table.column("offset").to_numpy()
        self.offsets = offsets
        self.stamps = offsets[decided.stamp]

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        part = self.slices[segment.base_offset]
        if part.stop - part.start != len(offsets) or not np.array_equal(self.offsets[part], offsets):
            raise RuntimeError(f"segment {segment.path} changed between reading its keys and its records")
        return self.decided.code[part] == 0

    def dropped(self, segment: SegmentMeta) -> np.ndarray:
        part = self.slices[segment.base_offset]
        return self.offsets[part][self.decided.code[part] != 0]

    def records(self, job: ApplyJob, segment: SegmentMeta) -> pa.Table:
        cached = self.decided.facts.records.pop(segment.base_offset, None)  # used once: free it after
        return cached if cached is not None else super().records(job, segment)


def apply_job(job: ApplyJob, verdicts: Verdicts) -> dict[str, Any]:
    """Write the job's new object: a segment of the sources' surviving records, or a deletion vector."""
    tp = job.tp
    if job.deletes_only:
        (segment,) = job.sources
        deleted = pa.array(verdicts.dropped(segment), pa.int64())
        created = job.created_ms
        if segment.deletes is not None:
            deleted = pa.concat_arrays([job.store.read_deletes(tp, segment.deletes), deleted])
            created = segment.deletes.created_ms  # the deadline for physical removal counts from the first
        vector = job.store.write_deletes(tp, segment, deleted, created_ms=created)
        updated = segment.model_copy(update={"deletes": vector})
        return {"segment": updated.model_dump_json(), "records_read": 0, "bytes_read": 0,
                "records_written": 0, "bytes_written": vector.size_bytes}
    pieces, records_read = [], 0
    for source in job.sources:
        table = verdicts.records(job, source)
        records_read += table.num_rows
        keep = verdicts.keep_mask(source, table.column("offset").to_numpy())
        pieces.append(table if keep.all() else table.filter(pa.array(keep)))
    output = pa.concat_tables(pieces)
    horizons = output.column("delete_horizon_ms")
    # Stamp the first pass's horizon on kept tombstones (data records with a key and no value) and on the
    # markers the decision named.
    tombstone = pc.and_(pc.and_(pc.invert(output.column("is_control")), pc.is_valid(output.column("key"))),
                        pc.is_null(output.column("value")))
    marked = pc.is_in(output.column("offset"), pa.array(verdicts.stamps)) if len(verdicts.stamps) else \
        pa.array(np.zeros(output.num_rows, dtype=bool))
    stamp = pc.and_(pc.is_null(horizons), pc.or_(tombstone, marked))
    if pc.any(stamp).as_py():
        output = output.set_column(output.column_names.index("delete_horizon_ms"), "delete_horizon_ms",
                                   pc.if_else(stamp, pa.scalar(job.horizon_ms, pa.int64()), horizons))
    segment = job.store.write_segment(tp, output, job.base_offset, job.next_offset, created_ms=job.created_ms)
    return {"segment": segment.model_dump_json(), "records_read": records_read,
            "bytes_read": sum(s.size_bytes for s in job.sources), "records_written": output.num_rows,
            "bytes_written": segment.size_bytes}


def apply_rows(job: ApplyJob, rows: list[dict[str, Any] | None]) -> dict[str, Any]:
    """Stage 2 of a split partition: apply one job with the decision rows of its segments (every bucket)."""
    result: dict[str, Any] = {"topic": job.tp.topic, "partition": job.tp.partition, "job_id": job.job_id,
                              "error": None}
    try:
        result.update(apply_job(job, DroppedOffsets([r for r in rows if r is not None])))
    except Exception as err:  # isolate the partition; reported with its reason
        result["error"] = f"{type(err).__name__}: {err}"
    return result


# One task: decide and apply a whole partition ------------------------------------------------------------


def outcomes_of(decided: Decided, segments: tuple[SegmentMeta, ...]) -> dict[int, SegmentOutcome]:
    """Per segment base offset, the decision's counts (for a task that decided the whole partition)."""
    outcomes = {}
    for segment, part in zip(segments, decided.segment_slices(), strict=True):
        counts = np.bincount(decided.code[part], minlength=len(REASONS) + 1)
        dropped = {reason: int(counts[code]) for reason, code in arrow_dedupe.CODES.items() if counts[code]}
        outcomes[segment.base_offset] = SegmentOutcome(part.stop - part.start, int(counts[0]),
                                                       int(decided.stamp[part].sum()), dropped)
    return outcomes


def clean_in_task(task: ReadTask) -> dict[str, Any]:
    """Decide a partition, lay out its new objects and write them, all in this task; returns metadata only."""
    assert task.policy is not None and task.buckets == 1
    # Dirty segments nearly always change (duplicates, first tombstone horizons): read them whole, once.
    decided = decide_facts(task, frozenset(s.base_offset for s in task.segments
                                           if s.next_offset > task.first_dirty_offset))
    outcomes = outcomes_of(decided, task.segments)
    verdicts = DecidedRows(decided, task.segments)
    jobs = []
    for job_id, (sources, deletes_only) in enumerate(plan_jobs(task.segments, outcomes, task.first_dirty_offset,
                                                               task.policy)):
        job = ApplyJob(task.tp, task.store, job_id, sources, task.horizon_ms, task.now_ms, deletes_only)
        jobs.append({"job_id": job_id, "sources": [s.base_offset for s in sources], "deletes_only": deletes_only,
                     **apply_job(job, verdicts)})
    return {"outcomes": {str(base): [o.records, o.kept, o.stamped, o.dropped] for base, o in outcomes.items()},
            "jobs": jobs}


def clean_partition(task: ReadTask) -> dict[str, Any]:
    """RDD body: clean one partition in this task; returns its metadata, or the error that stopped it."""
    started = time.perf_counter()
    result: dict[str, Any] = {"topic": task.tp.topic, "partition": task.tp.partition, "error": None}
    try:
        result.update(clean_in_task(task))
    except Exception as err:  # isolate the partition; reported with its reason
        result["error"] = f"{type(err).__name__}: {err}"
    result["task_ms"] = int((time.perf_counter() - started) * 1000)
    return result


def segment_from_json(text: str) -> SegmentMeta:
    return SegmentMeta.model_validate(json.loads(text))

