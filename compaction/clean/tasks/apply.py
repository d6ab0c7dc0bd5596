"""Stage 2: the decisions applied: rewrite a group of segments into one, or extend a segment's deletion vector;
and a whole partition decided and applied in one task."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from compaction.clean import rules
from compaction.clean.batches import BatchPolicy, Framed, frame_records, reframe, stale_empty_batches
from compaction.clean.layout import plan_jobs
from compaction.clean.payloads import AppliedJob, ApplyJob, CleanedPartition, CleanTask, DecisionRow
from compaction.clean.phases import phase
from compaction.clean.tasks.decide import Decided, decide_facts
from compaction.clean.tasks.facts import hidden_erased
from compaction.errors import SegmentChangedError
from compaction.store.formats import LogSegment
from compaction.store.manifest import SegmentMeta
from compaction.store.segment import SEGMENT_SCHEMA, timestamp_stats


def object_id(pass_id: str) -> str:
    """The id in the names of the objects this task attempt writes: ``<pass id>-<task attempt id>``.

    The pass id is the driver's, new for every pass; the task attempt id is Spark's, unique in the
    application. So an attempt's names are its own: a retried or speculative attempt never writes over an
    object another attempt wrote, which the driver may already have committed, nor over one a committed
    manifest of an earlier pass names. The driver commits only the attempt whose result it collected; the
    objects of the others are garbage that gc removes after its grace period. An engine without Spark's task
    context (Sail, which runs tasks in its own process; the in-process stages of the tests) gives each call a
    random id instead, so that an attempt it ran again would not write over the first's objects either.
    """
    task = TaskContext.get()
    return f"{pass_id}-{task.taskAttemptId() if task is not None else uuid.uuid4().hex[:16]}"


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
                raise SegmentChangedError(f"the key ranges' decisions disagree on the rows of segment "
                                          f"{row.segment_base} of {row.tp}")
            self.bits[row.segment_base] = bits if before is None else before | bits
        self.stamps = np.sort(np.concatenate([np.zeros(0, dtype=np.int64),
                                              *(np.asarray(r.stamps, dtype=np.int64) for r in rows)]))

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        bits = self.bits.get(segment.base_offset, np.zeros(len(offsets), dtype=bool))  # no rows: nothing read
        if len(bits) != len(offsets):
            raise SegmentChangedError(f"segment {segment.path} changed between reading its keys and its records")
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
            raise SegmentChangedError(f"segment {segment.path} changed between reading its keys and its records")
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


def apply_decided(job: tuple[ApplyJob, list[DecisionRow]]) -> AppliedJob:
    """Stage 2 of a split partition: apply one job with the decision rows of its segments (every key range)."""
    apply, rows = job
    return apply_job(apply, DroppedRows(rows))


# One task: decide and apply a whole partition ------------------------------------------------------------


def clean_in_task(task: CleanTask) -> CleanedPartition:
    """Decide a partition, lay out its new objects and write them, all in this task; returns metadata only."""
    # The decision reads the decision columns of Parquet segments only; the rewrites then read each source
    # whole, one at a time, so a task holds keys, not values. A .log segment is decoded whole in any case
    # (a batch's CRC covers all its records): its dirty ones are kept from the decision for the rewrite.
    decided = decide_facts(task, frozenset(s.base_offset for s in task.segments
                                           if s.next_offset > task.first_dirty_offset and s.format == "kafka"))
    hidden = hidden_erased(task)  # records of erased keys that only the objects' bytes still hold
    outcomes = {segment.base_offset: outcome.with_hidden_erased(hidden.get(segment.base_offset, frozenset()))
                for segment, _, outcome in decided.outcomes(task.segments)}
    verdicts = DecidedRows(decided, task.segments)
    del decided  # the facts' keys and versions: the rewrites need the verdicts only
    jobs = [apply_job(task.job(job_id, sources, deletes_only), verdicts)
            for job_id, (sources, deletes_only) in enumerate(plan_jobs(
                task.segments, outcomes, task.first_dirty_offset, task.policy,
                stale_empty_batches(task.segments, task.batch_policy)))]
    return CleanedPartition(tp=task.tp, outcomes=outcomes, jobs=tuple(jobs))
