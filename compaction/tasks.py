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
from dataclasses import dataclass
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

#: Stage 1's result: per segment (and key bucket), the counts and the offsets dropped / markers to stamp.
DECISIONS_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("segment_base", pa.int64()), ("records", pa.int64()),
    ("kept", pa.int64()), *[(reason, pa.int64()) for reason in REASONS],
    ("dropped", pa.list_(pa.int64())), ("stamps", pa.list_(pa.int64())), ("error", pa.string()),
])
DECISIONS_DDL = ("topic string, partition int, segment_base long, records long, kept long, "
                 + "".join(f"{reason} long, " for reason in REASONS)
                 + "dropped array<long>, stamps array<long>, error string")

RESULTS_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("job_id", pa.int32()), ("segment", pa.string()),
    ("records_read", pa.int64()), ("bytes_read", pa.int64()), ("records_written", pa.int64()),
    ("bytes_written", pa.int64()), ("error", pa.string()),
])
CLEANED_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("payload", pa.string()),
                            ("error", pa.string())])
CLEANED_DDL = "topic string, partition int, payload string, error string"

RESULTS_DDL = ("topic string, partition int, job_id int, segment string, records_read long, bytes_read long, "
               "records_written long, bytes_written long, error string")

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


_WEIGHTS = np.random.default_rng(20261122).integers(1, 2**63, size=3, dtype=np.uint64) | np.uint64(1)


def key_buckets(keys: pa.Array, buckets: int) -> np.ndarray:
    """A bucket in ``[0, buckets)`` per key, the same for equal keys in every task; keyless rows get 0.

    Mixes the key's length with little-endian words read at its start, middle and end (vectorised).
    """
    keys = keys.cast(pa.binary())
    n = len(keys)
    if buckets <= 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1, offset=keys.offset * 4).astype(np.int64)
    data = np.frombuffer(keys.buffers()[2], dtype=np.uint8) if keys.buffers()[2] is not None else np.zeros(0, np.uint8)
    padded = np.concatenate([data[: offsets[-1]], np.zeros(8, dtype=np.uint8)])
    starts, lengths = offsets[:-1], np.diff(offsets)
    mixed = lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for weight, at in zip(_WEIGHTS, (starts, starts + lengths // 2, starts + np.maximum(lengths - 8, 0)), strict=True):
        word = np.zeros(n, dtype=np.uint64)
        for k in range(8):
            inside = k < lengths - (at - starts)
            byte = np.where(inside, padded[np.minimum(at + k, len(padded) - 1)], 0).astype(np.uint64)
            word |= byte << np.uint64(8 * k)
        mixed = (mixed ^ word) * weight
    result = ((mixed >> np.uint64(33)) % np.uint64(buckets)).astype(np.int64)
    result[~pc.is_valid(keys).to_numpy(zero_copy_only=False)] = 0
    return result


def read_facts(task: ReadTask) -> pa.Table:
    """Facts of the task's cleaned range (its bucket's keys, plus keyless and control rows in bucket 0)."""
    parts = []
    for segment in task.segments:
        table = task.store.read_segment(task.tp, segment, _columns_for(task, segment))
        n = table.num_rows
        parts.append(pa.table({
            "segment_base": pa.repeat(pa.scalar(segment.base_offset, pa.int64()), n),
            "offset": _column(table, "offset", pa.int64()),
            "key": _column(table, "key", pa.binary()),
            "timestamp": _column(table, "timestamp", pa.int64()),
            "headers": _column(table, "headers", HEADER_TYPE),
            "delete_horizon_ms": _column(table, "delete_horizon_ms", pa.int64()),
            "is_control": pc.fill_null(_column(table, "is_control", pa.bool_(), False), False),
            "producer_id": _column(table, "producer_id", pa.int64(), -1),
            "is_transactional": pc.fill_null(_column(table, "is_transactional", pa.bool_(), False), False),
            "control_type": _column(table, "control_type", pa.string()),
        }))
    facts = pa.concat_tables(parts) if parts else None
    if facts is None or facts.num_rows == 0:
        return FACTS_SCHEMA.empty_table()
    n = facts.num_rows
    aborted = np.zeros(n, dtype=bool)
    pending = np.zeros(n, dtype=bool)
    if any(s.transactional_count or s.control_count for s in (*task.segments, *task.beyond)):
        txn_schema = facts.select(_TXN_COLUMNS).schema
        later = [task.store.read_segment(task.tp, s, _TXN_COLUMNS).cast(txn_schema) for s in task.beyond]
        found = transaction_facts(pa.concat_tables([facts.select(_TXN_COLUMNS), *later]))
        aborted, pending = found.aborted[:n], found.marker_pending[:n]
    last_offset = pc.max(facts.column("offset")).as_py()

    def constant(value: Any, type_: pa.DataType) -> pa.Array:
        return pa.nulls(n, type_) if value is None else pa.repeat(pa.scalar(value, type_), n)

    result = pa.table({
        "topic": constant(task.tp.topic, pa.string()),
        "partition": constant(task.tp.partition, pa.int32()),
        "segment_base": facts.column("segment_base"),
        "offset": facts.column("offset"),
        "key": facts.column("key"),
        "timestamp": facts.column("timestamp"),
        "headers": facts.column("headers"),
        "delete_horizon_ms": facts.column("delete_horizon_ms"),
        "is_control": facts.column("is_control"),
        "aborted": pa.array(aborted),
        "marker_pending": pa.array(pending),
        "strategy": constant(task.strategy, pa.string()),
        "strategy_header": constant(task.strategy_header, pa.string()),
        "range_last_offset": constant(last_offset, pa.int64()),
        "keyless_drop": constant(task.keyless_drop, pa.bool_()),
        "error": constant(None, pa.string()),
    }, schema=FACTS_SCHEMA)
    if task.buckets > 1:
        result = result.filter(pa.array(key_buckets(result.column("key").combine_chunks(), task.buckets)
                                        == task.bucket))
    return result


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


def decide_in_task(task: ReadTask) -> pa.Table:
    """The decision rows of one read task, decided with Arrow in this task (no shuffle of records)."""
    facts = read_facts(task)
    bases = np.array([s.base_offset for s in task.segments], dtype=np.int64)
    rows: dict[str, list[Any]] = {name: [] for name in DECISIONS_SCHEMA.names}
    if facts.num_rows:
        decided = arrow_dedupe.decide(facts, strategy=task.strategy, header=task.strategy_header,
                                      now_ms=task.now_ms, keyless_drop=task.keyless_drop,
                                      range_last_offset=facts.column("range_last_offset")[0].as_py())
        offsets = facts.column("offset").to_numpy()
        segment_index = np.searchsorted(bases, facts.column("segment_base").to_numpy())
        bounds = np.searchsorted(segment_index, np.arange(len(bases) + 1))
    else:
        bounds = np.zeros(len(bases) + 1, dtype=np.int64)
    for i, base in enumerate(bases.tolist()):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        code = decided.code[lo:hi] if facts.num_rows else np.zeros(0, dtype=np.int8)
        counts = np.bincount(code, minlength=len(REASONS) + 1)
        rows["topic"].append(task.tp.topic)
        rows["partition"].append(task.tp.partition)
        rows["segment_base"].append(base)
        rows["records"].append(hi - lo)
        rows["kept"].append(int(counts[0]))
        for reason, code_value in arrow_dedupe.CODES.items():
            rows[reason].append(int(counts[code_value]))
        rows["dropped"].append(offsets[lo:hi][code != 0] if facts.num_rows else np.zeros(0, np.int64))
        rows["stamps"].append(offsets[lo:hi][decided.stamp[lo:hi]] if facts.num_rows else np.zeros(0, np.int64))
        rows["error"].append(None)
    return pa.table({name: _lists(values) if name in ("dropped", "stamps")
                     else pa.array(values, DECISIONS_SCHEMA.field(name).type)
                     for name, values in rows.items()}, schema=DECISIONS_SCHEMA)


def _lists(arrays: list[np.ndarray]) -> pa.ListArray:
    """A list<int64> column from numpy arrays, without going through Python lists."""
    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(np.int64)))


def decide_batches(batches: Iterator[pa.RecordBatch], tasks: dict[int, ReadTask]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the Arrow plan: each input row names a read task; yields its decision rows."""
    for batch in batches:
        for task_id in batch.column("task").to_pylist():
            task = tasks[task_id]
            try:
                table = decide_in_task(task)
            except Exception as err:  # isolate the partition; reported with its reason
                table = _error_row(task, err, DECISIONS_SCHEMA)
            yield from table.to_batches(max_chunksize=1024)


# Stage 2: apply -------------------------------------------------------------------------------------------


def _offsets(column: pa.ChunkedArray) -> pa.Array:
    flat = [pc.list_flatten(chunk) for chunk in column.chunks]
    return pa.concat_arrays(flat).cast(pa.int64()) if flat else pa.array([], pa.int64())


def apply_job(job: ApplyJob, decisions: pa.Table) -> dict[str, Any]:
    """Apply the decision rows of the job's segments (all key buckets): a new segment or deletion vector."""
    tp = job.tp
    dropped = _offsets(decisions.column("dropped"))
    stamps = _offsets(decisions.column("stamps"))
    if job.deletes_only:
        (segment,) = job.sources
        deleted = dropped
        created = job.created_ms
        if segment.deletes is not None:
            deleted = pa.concat_arrays([job.store.read_deletes(tp, segment.deletes), dropped])
            created = segment.deletes.created_ms  # the deadline for physical removal counts from the first
        vector = job.store.write_deletes(tp, segment, deleted, created_ms=created)
        updated = segment.model_copy(update={"deletes": vector})
        return {"segment": updated.model_dump_json(), "records_read": 0, "bytes_read": 0,
                "records_written": 0, "bytes_written": vector.size_bytes}
    dropped_sorted = np.sort(dropped.to_numpy(zero_copy_only=False))
    pieces, records_read = [], 0
    for source in job.sources:
        table = job.store.read_segment(tp, source)
        records_read += table.num_rows
        if len(dropped_sorted):
            offsets = table.column("offset").to_numpy()
            at = np.minimum(np.searchsorted(dropped_sorted, offsets), len(dropped_sorted) - 1)
            table = table.filter(pa.array(dropped_sorted[at] != offsets))
        pieces.append(table)
    output = pa.concat_tables(pieces)
    horizons = output.column("delete_horizon_ms")
    # Stamp the first pass's horizon on kept tombstones (data records with a key and no value) and on the
    # markers stage 1 named.
    tombstone = pc.and_(pc.and_(pc.invert(output.column("is_control")), pc.is_valid(output.column("key"))),
                        pc.is_null(output.column("value")))
    stamp = pc.and_(pc.is_null(horizons), pc.or_(tombstone, pc.is_in(output.column("offset"), stamps)))
    if pc.any(stamp).as_py():
        output = output.set_column(output.column_names.index("delete_horizon_ms"), "delete_horizon_ms",
                                   pc.if_else(stamp, pa.scalar(job.horizon_ms, pa.int64()), horizons))
    segment = job.store.write_segment(tp, output, job.base_offset, job.next_offset, created_ms=job.created_ms)
    return {"segment": segment.model_dump_json(), "records_read": records_read,
            "bytes_read": sum(s.size_bytes for s in job.sources), "records_written": output.num_rows,
            "bytes_written": segment.size_bytes}


def apply_job_arrow(key: tuple[Any, ...], decisions: pa.Table, jobs: dict[tuple[str, int, int], ApplyJob]
                    ) -> pa.Table:
    """applyInArrow body for one (topic, partition, job_id)."""
    topic, partition, job_id = (k.as_py() for k in key)
    job = jobs[(topic, partition, job_id)]
    row: dict[str, Any] = {"topic": topic, "partition": partition, "job_id": job_id, "segment": None,
                           "records_read": 0, "bytes_read": 0, "records_written": 0, "bytes_written": 0,
                           "error": None}
    try:
        row.update(apply_job(job, decisions))
    except Exception as err:  # isolate the partition; reported with its reason
        row["error"] = f"{type(err).__name__}: {err}"
    return pa.Table.from_pylist([row], schema=RESULTS_SCHEMA)


# One task: decide and apply a whole partition ------------------------------------------------------------


def outcomes_of(decisions: pa.Table) -> dict[int, SegmentOutcome]:
    """Per segment base offset, the outcome summed over the decision rows (one per key bucket)."""
    outcomes: dict[int, SegmentOutcome] = {}
    for row in decisions.drop_columns(["dropped", "stamps"]).to_pylist():
        outcome = SegmentOutcome(row["records"], row["kept"], 0, {r: row[r] for r in REASONS if row[r]})
        previous = outcomes.get(row["segment_base"])
        outcomes[row["segment_base"]] = previous.merge(outcome) if previous else outcome
    for base, stamps in zip(decisions.column("segment_base").to_pylist(),
                            pc.list_value_length(decisions.column("stamps")).to_pylist(), strict=True):
        if stamps:
            o = outcomes[base]
            outcomes[base] = SegmentOutcome(o.records, o.kept, o.stamped + stamps, o.dropped)
    return outcomes


def clean_in_task(task: ReadTask) -> dict[str, Any]:
    """Decide a partition, lay out its new objects and write them, all in this task; returns metadata only."""
    assert task.policy is not None
    decisions = decide_in_task(task)
    outcomes = outcomes_of(decisions)
    bases = decisions.column("segment_base")
    jobs = []
    for job_id, (sources, deletes_only) in enumerate(plan_jobs(task.segments, outcomes, task.first_dirty_offset,
                                                               task.policy)):
        job = ApplyJob(task.tp, task.store, job_id, sources, task.horizon_ms, task.now_ms, deletes_only)
        rows = decisions.filter(pc.is_in(bases, pa.array([s.base_offset for s in sources], pa.int64())))
        jobs.append({"job_id": job_id, "sources": [s.base_offset for s in sources], "deletes_only": deletes_only,
                     **apply_job(job, rows)})
    return {"outcomes": {str(base): [o.records, o.kept, o.stamped, o.dropped] for base, o in outcomes.items()},
            "jobs": jobs}


def clean_batches(batches: Iterator[pa.RecordBatch], tasks: dict[int, ReadTask]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: each input row names a partition to clean in this task; yields one metadata row."""
    for batch in batches:
        for task_id in batch.column("task").to_pylist():
            task = tasks[task_id]
            payload, error = None, None
            try:
                payload = json.dumps(clean_in_task(task))
            except Exception as err:  # isolate the partition; reported with its reason
                error = f"{type(err).__name__}: {err}"
            yield pa.RecordBatch.from_pylist([{"topic": task.tp.topic, "partition": task.tp.partition,
                                               "payload": payload, "error": error}], schema=CLEANED_SCHEMA)


def segment_from_json(text: str) -> SegmentMeta:
    return SegmentMeta.model_validate(json.loads(text))

