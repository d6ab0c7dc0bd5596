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
    ("position", pa.int64()),  # the row's index in its segment as read (deletion vector applied)
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
FACTS_DDL = ("topic string, partition int, segment_base long, offset long, position long, key binary, "
             "timestamp long, headers array<struct<key:string,value:binary>>, delete_horizon_ms long, "
             "is_control boolean, aborted boolean, marker_pending boolean, strategy string, "
             "strategy_header string, range_last_offset long, keyless_drop boolean, error string")

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
    first_dirty_offset: int = 0
    clean_keys_unique: bool = False  # the manifest's promise (the decision uses it under the offset strategy)
    # For a partition decided and applied in one task (the Arrow plan, one bucket):
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


SAMPLE_ROWS = 65_536


def key_range_bounds(keys: pa.Array | pa.ChunkedArray, buckets: int) -> list[pa.Scalar]:
    """The ``buckets - 1`` keys that split ``keys`` into ranges of about equal numbers of rows.

    They are quantiles of an evenly strided sample of the rows (about ``SAMPLE_ROWS`` of them, taken by
    position), so every task that reads the same keys in the same order computes the same bounds.
    """
    n = len(keys)
    stride = max(1, n // SAMPLE_ROWS)
    chunks = keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]
    parts, start = [], 0
    for chunk in chunks:
        parts.append(chunk.take(pa.array(np.arange((-start) % stride, len(chunk), stride))))
        start += len(chunk)
    sample = pc.drop_null(pa.concat_arrays(parts)) if parts else pa.array([], pa.binary())
    if buckets <= 1 or len(sample) == 0:
        return []
    sample = sample.take(pc.sort_indices(sample))
    return [sample[len(sample) * i // buckets] for i in range(1, buckets)]


def in_key_range(keys: pa.Array | pa.ChunkedArray, buckets: int, bucket: int) -> np.ndarray:
    """Which rows fall in key range ``bucket`` of ``buckets`` (keyless rows are in range 0).

    All of a key's records share a range, and the ranges hold about equal numbers of records. Arrow's
    comparison kernels do the work: at most two passes over the keys, no hashing of their bytes.
    """
    bounds = key_range_bounds(keys, buckets)
    if not bounds:
        return np.full(len(keys), bucket == 0)
    inside = None
    if bucket > 0:
        inside = pc.greater_equal(keys, bounds[bucket - 1])
    if bucket < len(bounds):
        below = pc.less(keys, bounds[bucket])
        inside = below if inside is None else pc.and_(inside, below)
    assert inside is not None
    return pc.fill_null(inside, bucket == 0).to_numpy(zero_copy_only=False)


@dataclass(frozen=True)
class Facts:
    """What the decision reads of a task's rows (its key bucket of the cleaned range), in offset order."""

    table: pa.Table  # offset, key, delete_horizon_ms, is_control, aborted, marker_pending (+ timestamp/headers)
    lengths: np.ndarray  # rows of each segment in ``table``, in segment order
    read_lengths: np.ndarray  # rows of each segment as read (before the key-bucket filter)
    selected: np.ndarray | None  # which rows read are the bucket's (None: all of them)
    range_last_offset: int | None  # the whole cleaned range's last offset (the log-end rule), None when empty
    records: dict[int, pa.Table] = field(default_factory=dict)  # whole records of segments read in full

    def segment_slices(self) -> list[slice]:
        """Each segment's rows in ``table``."""
        ends = np.cumsum(self.lengths)
        return [slice(int(end - length), int(end)) for end, length in zip(ends, self.lengths, strict=True)]

    def positions(self) -> np.ndarray:
        """Each row's index within its segment as read."""
        ends = np.cumsum(self.read_lengths)
        read = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - self.read_lengths, self.read_lengths)
        return read if self.selected is None else read[self.selected]

    def row_bitmaps(self, rows: np.ndarray) -> list[np.ndarray]:
        """Per segment, a packed bitmap over its rows as read with the bits of ``rows`` (rows of ``table``)."""
        bits = np.zeros(int(self.read_lengths.sum()), dtype=bool)
        bits[np.flatnonzero(rows) if self.selected is None else np.flatnonzero(self.selected)[rows]] = True
        ends = np.cumsum(self.read_lengths)
        return [np.packbits(bits[end - length:end]) for end, length in zip(ends, self.read_lengths, strict=True)]


def read_decision_facts(task: ReadTask, whole: frozenset[int] = frozenset()) -> Facts:
    """Read the decision's columns of every segment (deletion vectors applied) and the transaction facts,
    and keep the rows of the task's key bucket.

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
    last = facts.column("offset")[-1].as_py() if n else None
    read_lengths = counts = np.array(lengths, dtype=np.int64)
    mine = None
    if task.buckets > 1 and n:  # after the transaction facts, which need every row
        mine = in_key_range(facts.column("key"), task.buckets, task.bucket)
        ends = np.cumsum(counts)
        counts = np.array([np.count_nonzero(mine[end - length:end]) for end, length in zip(ends, counts, strict=True)],
                          dtype=np.int64)
        facts = facts.filter(pa.array(mine))
    return Facts(facts, counts, read_lengths, mine, last, records)


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

    return pa.table({
        "topic": constant(task.tp.topic, pa.string()),
        "partition": constant(task.tp.partition, pa.int32()),
        "segment_base": pa.array(bases),
        "offset": table.column("offset"),
        "position": pa.array(facts.positions()),
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
    code: np.ndarray
    stamp: np.ndarray

    def outcomes(self, segments: tuple[SegmentMeta, ...]) -> list[tuple[SegmentMeta, slice, SegmentOutcome]]:
        """Per segment, its rows in ``code``/``stamp`` and the decision's counts for them."""
        result = []
        for segment, part in zip(segments, self.facts.segment_slices(), strict=True):
            counts = np.bincount(self.code[part], minlength=len(REASONS) + 1)
            dropped = {reason: int(counts[code]) for reason, code in arrow_dedupe.CODES.items() if counts[code]}
            result.append((segment, part, SegmentOutcome(part.stop - part.start, int(counts[0]),
                                                         int(self.stamp[part].sum()), dropped)))
        return result


def decide_facts(task: ReadTask, whole: frozenset[int] = frozenset()) -> Decided:
    """Read and decide a task's rows with Arrow (no shuffle of records)."""
    facts = read_decision_facts(task, whole)
    if facts.table.num_rows == 0:
        return Decided(facts, np.zeros(0, dtype=np.int8), np.zeros(0, dtype=bool))
    decided = arrow_dedupe.decide(facts.table, strategy=task.strategy, header=task.strategy_header,
                                  now_ms=task.now_ms, keyless_drop=task.keyless_drop,
                                  range_last_offset=facts.range_last_offset or 0,
                                  unique_before=task.first_dirty_offset if task.clean_keys_unique else None)
    return Decided(facts, decided.code, decided.stamp)


def decision_rows(task: ReadTask) -> list[dict[str, Any]]:
    """Stage 1 of a split partition: per segment, this key bucket's counts, a bitmap of the rows it drops
    and the markers to stamp; or one row with the error that stopped the task."""
    try:
        decided = decide_facts(task)
    except Exception as err:  # isolate the partition; reported with its reason
        return [{"topic": task.tp.topic, "partition": task.tp.partition, "segment_base": -1,
                 "error": f"{type(err).__name__}: {err}"}]
    offsets = decided.facts.table.column("offset").to_numpy()
    bitmaps = decided.facts.row_bitmaps(decided.code != 0)
    return [{"topic": task.tp.topic, "partition": task.tp.partition, "segment_base": segment.base_offset,
             "records": outcome.records, "kept": outcome.kept, "stamped": outcome.stamped,
             "dropped_by": outcome.dropped, "rows": int(rows), "dropped": bitmap,
             "stamps": offsets[part][decided.stamp[part]], "error": None}
            for (segment, part, outcome), rows, bitmap in zip(decided.outcomes(task.segments),
                                                              decided.facts.read_lengths, bitmaps, strict=True)]


# Stage 2: apply -------------------------------------------------------------------------------------------


class Verdicts:
    """The decision as stage 2 needs it: per source segment, which rows stay and which offsets go."""

    stamps: np.ndarray  # sorted offsets of kept markers to stamp

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def deletions(self, job: ApplyJob, segment: SegmentMeta) -> tuple[np.ndarray, int | None]:
        """The offsets a segment loses, and the earliest delete horizon among the records it keeps."""
        raise NotImplementedError

    def records(self, job: ApplyJob, segment: SegmentMeta) -> pa.Table:
        """A source segment's records (deletion vector applied)."""
        return job.store.read_segment(job.tp, segment)


class DroppedRows(Verdicts):
    """Verdicts from decision rows: per segment, the union of its key buckets' bitmaps of dropped rows."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.bits: dict[int, np.ndarray] = {}
        for row in rows:
            bits = np.unpackbits(row["dropped"], count=row["rows"]).view(bool)
            before = self.bits.get(row["segment_base"])
            if before is not None and len(before) != len(bits):
                raise RuntimeError(f"decisions disagree on the rows of segment {row['segment_base']}")
            self.bits[row["segment_base"]] = bits if before is None else before | bits
        self.stamps = np.sort(np.concatenate([np.zeros(0, dtype=np.int64),
                                              *(np.asarray(r["stamps"], dtype=np.int64) for r in rows)]))

    def _bits(self, segment: SegmentMeta, rows: int) -> np.ndarray:
        bits = self.bits.get(segment.base_offset, np.zeros(rows, dtype=bool))  # no decision rows: nothing read
        if len(bits) != rows:
            raise RuntimeError(f"segment {segment.path} changed between reading its keys and its records")
        return bits

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        return ~self._bits(segment, len(offsets))

    def deletions(self, job: ApplyJob, segment: SegmentMeta) -> tuple[np.ndarray, int | None]:
        table = job.store.read_segment(job.tp, segment, ["offset", "delete_horizon_ms"])
        bits = self._bits(segment, table.num_rows)
        return (table.column("offset").to_numpy()[bits],
                pc.min(table.column("delete_horizon_ms").filter(pa.array(~bits))).as_py())


class DecidedRows(Verdicts):
    """Verdicts straight from a whole partition's decision in this task (rows align with each segment's read)."""

    def __init__(self, decided: Decided, segments: tuple[SegmentMeta, ...]) -> None:
        self.decided = decided
        self.slices = {s.base_offset: part for s, part in zip(segments, decided.facts.segment_slices(), strict=True)}
        offsets = decided.facts.table.column("offset").to_numpy()
        self.offsets = offsets
        self.stamps = offsets[decided.stamp]

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        part = self.slices[segment.base_offset]
        if part.stop - part.start != len(offsets) or not np.array_equal(self.offsets[part], offsets):
            raise RuntimeError(f"segment {segment.path} changed between reading its keys and its records")
        return self.decided.code[part] == 0

    def deletions(self, job: ApplyJob, segment: SegmentMeta) -> tuple[np.ndarray, int | None]:
        part = self.slices[segment.base_offset]
        lost = self.decided.code[part] != 0
        horizons = self.decided.facts.table.column("delete_horizon_ms").slice(part.start, part.stop - part.start)
        return self.offsets[part][lost], pc.min(horizons.filter(pa.array(~lost))).as_py()

    def records(self, job: ApplyJob, segment: SegmentMeta) -> pa.Table:
        cached = self.decided.facts.records.pop(segment.base_offset, None)  # used once: free it after
        return cached if cached is not None else super().records(job, segment)


def apply_job(job: ApplyJob, verdicts: Verdicts) -> dict[str, Any]:
    """Write the job's new object: a segment of the sources' surviving records, or a deletion vector."""
    tp = job.tp
    if job.deletes_only:
        (segment,) = job.sources
        lost, live_horizon = verdicts.deletions(job, segment)
        deleted = pa.array(lost, pa.int64())
        created = job.created_ms
        if segment.deletes is not None:
            deleted = pa.concat_arrays([job.store.read_deletes(tp, segment.deletes), deleted])
            created = segment.deletes.created_ms  # the deadline for physical removal counts from the first
        vector = job.store.write_deletes(tp, segment, deleted, created_ms=created,
                                         live_min_delete_horizon_ms=live_horizon)
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
        result.update(apply_job(job, DroppedRows([r for r in rows if r is not None])))
    except Exception as err:  # isolate the partition; reported with its reason
        result["error"] = f"{type(err).__name__}: {err}"
    return result


# One task: decide and apply a whole partition ------------------------------------------------------------


def clean_in_task(task: ReadTask) -> dict[str, Any]:
    """Decide a partition, lay out its new objects and write them, all in this task; returns metadata only."""
    assert task.policy is not None and task.buckets == 1
    # Dirty segments nearly always change (duplicates, first tombstone horizons): read them whole, once.
    decided = decide_facts(task, frozenset(s.base_offset for s in task.segments
                                           if s.next_offset > task.first_dirty_offset))
    outcomes = {segment.base_offset: outcome for segment, _, outcome in decided.outcomes(task.segments)}
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
    result: dict[str, Any] = {"topic": task.tp.topic, "partition": task.tp.partition, "error": None}
    try:
        result.update(clean_in_task(task))
    except Exception as err:  # isolate the partition; reported with its reason
        result["error"] = f"{type(err).__name__}: {err}"
    return result


def segment_from_json(text: str) -> SegmentMeta:
    return SegmentMeta.model_validate(json.loads(text))

