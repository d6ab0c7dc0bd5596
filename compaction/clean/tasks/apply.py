"""Stage 2: the verdicts applied: rewrite a group of segments into one, or extend a segment's deletion vector;
and a whole partition decided and applied in one task."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction import rules, winners
from compaction.clean.batches import BatchPolicy, Framed, frame_records, reframe, stale_empty_batches
from compaction.clean.layout import SegmentCounts, lay_out, takes_vector
from compaction.clean.payloads import (
    AppliedJob,
    ApplyJob,
    CleanedPartition,
    CleanRun,
    CleanTask,
    PassContext,
    SegmentVerdicts,
    Verdicts,
)
from compaction.clean.tasks.decide import TaskVerdicts, decide_facts, hand_over
from compaction.clean.tasks.erased import hidden_erased
from compaction.clean.tasks.facts import REMOTE_READ_AHEAD, RowFacts, ahead, facts_table
from compaction.clean.tasks.objects import object_id
from compaction.engine.phases import phase
from compaction.errors import SegmentChangedError
from compaction.store import TopicPartition
from compaction.store.formats import LogSegment, SegmentFormat
from compaction.store.manifest import SegmentMeta
from compaction.store.objects import read_log_bytes
from compaction.store.segment import timestamp_stats

#: A partition whose cleaned range holds at most this many bytes is read whole once (its decision and rewrites
#: share the read): a nightly increment leaves many partitions this small.
SHARED_READ_BYTES = 16 << 20


class Survivors:
    """The verdicts as the apply stage needs them: per source segment, which of its live rows stay, and the offsets of
    the kept markers to stamp."""

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def stamps(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        """The offsets of the source's kept markers that get their first delete horizon (its live rows' offsets
        given)."""
        raise NotImplementedError

    def live_count(self, segment: SegmentMeta, rows: int) -> int:
        """How many live records a source has, its records as given (:meth:`records`, :meth:`log_segment`) holding
        ``rows`` of them."""
        return rows

    def records(self, job: ApplyJob, segment: SegmentMeta) -> pa.Table:
        """A source segment's live records (or, held by the task, those of them its verdicts can keep)."""
        with phase("read"):
            return job.context.store.objects.read_segment(job.tp, segment, start=job.log_start_offset)

    def log_segment(self, job: ApplyJob, segment: SegmentMeta) -> LogSegment:
        """A ``.log`` source segment whole: every record and batch, deleted or not (held by the task: every batch,
        and the records of them its verdicts can keep)."""
        with phase("read"):
            return job.context.store.objects.read_log_segment(job.tp, segment)


class ListedRows(Survivors):
    """The survivors as the deciding stage listed them in the store (every key range's part of each source)."""

    def __init__(self, job: ApplyJob) -> None:
        if len(job.verdicts) != len(job.sources):
            raise RuntimeError(f"{job.ident} has verdicts on {len(job.verdicts)} of its {len(job.sources)} sources")
        wanted: dict[str, list[tuple[int, int]]] = {}  # verdicts object -> (source, row group) to read of it
        for source, verdicts in enumerate(job.verdicts):
            for path, group in verdicts.listed:
                wanted.setdefault(path, []).append((source, group))
        parts: list[list[pa.Table]] = [[] for _ in job.sources]
        with phase("read"):
            for path, groups in wanted.items():
                tables = job.context.store.objects.read_verdicts(job.tp, path, [g for _, g in groups])
                for (source, _), table in zip(groups, tables, strict=True):
                    parts[source].append(table)
        self.keep: dict[int, np.ndarray] = {}
        self.stamped: dict[int, np.ndarray] = {}
        for segment, verdicts, tables in zip(job.sources, job.verdicts, parts, strict=True):
            listed = np.zeros(verdicts.rows, dtype=bool)
            stamped = np.zeros(verdicts.rows, dtype=bool)
            for table in tables:
                positions = table.column("position").to_numpy()
                if len(positions) and (positions.min() < 0 or positions.max() >= verdicts.rows):
                    raise SegmentChangedError(
                        f"the verdicts on segment {segment.path} of {job.tp} name rows past "
                        f"its {verdicts.rows} live rows"
                    )
                listed[positions[table.column("listed").to_numpy(zero_copy_only=False)]] = True
                stamped[positions[table.column("stamp").to_numpy(zero_copy_only=False)]] = True
            self.keep[segment.base_offset] = listed if verdicts.kept else ~listed
            self.stamped[segment.base_offset] = stamped

    def _rows(self, segment: SegmentMeta, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keep, stamped = self.keep[segment.base_offset], self.stamped[segment.base_offset]
        if len(keep) != len(offsets):
            raise SegmentChangedError(f"segment {segment.path} changed between reading its keys and its records")
        return keep, stamped

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        return self._rows(segment, offsets)[0]

    def stamps(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        return cast(np.ndarray, offsets[self._rows(segment, offsets)[1]])


class HeldRows(Survivors):
    """The survivors straight from a whole partition's verdicts in this task (rows align with each segment's
    read)."""

    def __init__(self, decided: TaskVerdicts, segments: tuple[SegmentMeta, ...]) -> None:
        # Only what the rewrites need: not the facts' keys, which the task may free once it has these.
        facts = decided.facts
        self.code = decided.code
        self.stamp = decided.stamp
        self.records_cache, self.logs = facts.records, facts.logs
        self.slices = {s.base_offset: part for s, part in zip(segments, facts.segment_slices(), strict=True)}
        self.offsets = facts.table.column("offset").to_numpy()
        # Which of each segment's rows read the facts hold (None: all of them); the others are kept.
        self.held: dict[int, np.ndarray] | None = None
        if facts.selected is not None:
            ends = np.cumsum(facts.read_lengths)
            self.held = {
                s.base_offset: facts.selected[int(end - length) : int(end)]
                for s, end, length in zip(segments, ends, facts.read_lengths, strict=True)
            }
        # Of the segments whose held records are some of their live rows only, those rows' positions.
        self.held_rows = facts.held_rows

    def _part(self, segment: SegmentMeta, offsets: np.ndarray) -> tuple[slice | np.ndarray, np.ndarray | None]:
        """Where the facts hold the rows of ``offsets`` (the segment's live rows, or the records held of them), and
        which of those rows the facts hold (None: all of them)."""
        part: slice | np.ndarray = self.slices[segment.base_offset]
        held = None if self.held is None else self.held[segment.base_offset]
        rows = self.held_rows.get(segment.base_offset)
        if rows is not None:  # the facts hold every live row (a dirty segment's), the records some of them
            whole = cast(slice, part)
            part = np.arange(whole.start, whole.stop)[rows]
            if int((self.code[whole] == rules.KEPT).sum()) != int((self.code[part] == rules.KEPT).sum()):
                raise RuntimeError(f"segment {segment.path}: a record its verdicts keep was not held for its rewrite")
            held = None
        if held is not None and len(held) != len(offsets):
            raise SegmentChangedError(f"segment {segment.path} changed between reading its keys and its records")
        mine = offsets if held is None else offsets[held]
        if len(self.offsets[part]) != len(mine) or not np.array_equal(self.offsets[part], mine):
            raise SegmentChangedError(f"segment {segment.path} changed between reading its keys and its records")
        return part, held

    def keep_mask(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        part, held = self._part(segment, offsets)
        if held is None:
            return cast(np.ndarray, self.code[part] == rules.KEPT)
        keep = np.ones(len(offsets), dtype=bool)
        keep[held] = self.code[part] == rules.KEPT
        return keep

    def stamps(self, segment: SegmentMeta, offsets: np.ndarray) -> np.ndarray:
        part, held = self._part(segment, offsets)
        return cast(np.ndarray, (offsets if held is None else offsets[held])[self.stamp[part]])

    def live_count(self, segment: SegmentMeta, rows: int) -> int:
        part = self.slices[segment.base_offset]
        return part.stop - part.start if segment.base_offset in self.held_rows else rows

    def records(self, job: ApplyJob, segment: SegmentMeta) -> pa.Table:
        cached = self.records_cache.pop(segment.base_offset, None)  # used once: free it after
        return cached if cached is not None else super().records(job, segment)

    def log_segment(self, job: ApplyJob, segment: SegmentMeta) -> LogSegment:
        self.records_cache.pop(segment.base_offset, None)
        cached = self.logs.pop(segment.base_offset, None)
        return cached if cached is not None else super().log_segment(job, segment)


#: What extending a deletion vector reads of its segment: the offsets it deletes, and the live figures of the rest.
VECTOR_COLUMNS = ["offset", "timestamp", "delete_horizon_ms"]


def _extend_deletes(job: ApplyJob, survivors: Survivors) -> AppliedJob:
    """Extend a segment's deletion vector with the live rows it loses; the live figures go with it."""
    (segment,) = job.sources
    with phase("read"):
        table = job.context.store.objects.read_segment(job.tp, segment, VECTOR_COLUMNS, start=job.log_start_offset)
    keep = survivors.keep_mask(segment, table.column("offset").to_numpy())
    updated = write_vector(job.context, job.tp, segment, table, keep)
    return AppliedJob.of(job, segment=updated, bytes_written=updated.deletes.size_bytes if updated.deletes else 0)


def write_vector(
    context: PassContext, tp: TopicPartition, segment: SegmentMeta, table: pa.Table, keep: np.ndarray
) -> SegmentMeta:
    """Write ``segment``'s deletion vector extended with its live rows ``keep`` leaves out (``table``: its live rows'
    :data:`VECTOR_COLUMNS`, at least); returns the segment with it, and the live figures of what it keeps."""
    store, now_ms, pass_id = context.store, context.now_ms, context.pass_id
    offsets = table.column("offset").to_numpy()
    deleted = pa.array(offsets[~keep], pa.int64())
    created = now_ms
    if segment.deletes is not None:
        deleted = pa.concat_arrays([store.objects.read_deletes(tp, segment.deletes), deleted])
        created = segment.deletes.created_ms  # the deadline for physical removal counts from the first
    kept = table.filter(pa.array(keep))
    first, last = timestamp_stats(kept.column("timestamp"))
    vector = store.objects.write_deletes(
        tp,
        segment,
        deleted,
        created_ms=created,
        live_min_delete_horizon_ms=pc.min(kept.column("delete_horizon_ms")).as_py(),
        live_first_timestamp=first,
        live_max_timestamp=last,
        object_id=object_id(pass_id),
    )
    # Validated (model_copy is not): the driver commits this metadata as it stands.
    return SegmentMeta.model_validate({**segment.model_dump(), "deletes": vector})


def apply_job(job: ApplyJob, survivors: Survivors) -> AppliedJob:
    """Write the job's new object: a segment of the sources' surviving records, or a deletion vector.

    A rewrite that keeps no record writes nothing (``segment`` None): its range stays in the manifest as
    part of the log, without an object.
    """
    with phase("write"):
        if job.deletes_only:
            return _extend_deletes(job, survivors)
        if job.context.segment_format == SegmentFormat.KAFKA:
            return _rewrite_batches(job, survivors)
        return _rewrite(job, survivors)


def _rewrite(job: ApplyJob, survivors: Survivors) -> AppliedJob:
    """A rewrite into a Parquet segment of the sources' surviving records, read and encoded one source at a
    time: the task holds one source's records and the new object's bytes, never all the records."""
    figures = {"records_read": 0, "records_written": 0, "stamped": 0}

    def kept() -> Iterator[pa.Table]:
        for source in job.sources:
            table = survivors.records(job, source)
            figures["records_read"] += survivors.live_count(source, table.num_rows)
            offsets = table.column("offset").to_numpy()
            keep = survivors.keep_mask(source, offsets)
            piece, stamped = _stamp(
                table if keep.all() else table.filter(pa.array(keep)),
                survivors.stamps(source, offsets),
                job.context.horizon_ms,
            )
            del table
            figures["records_written"] += piece.num_rows
            figures["stamped"] += stamped
            yield piece

    # Kafka keeps the last source's modification time: records keep their age through rewrites.
    segment = job.context.store.objects.write_segment_pieces(
        job.tp,
        kept(),
        job.base_offset,
        job.next_offset,
        created_ms=job.sources[-1].created_ms,
        object_id=object_id(job.context.pass_id),
    )
    return AppliedJob.of(
        job,
        segment=segment,
        bytes_read=sum(s.size_bytes for s in job.sources),
        bytes_written=segment.size_bytes if segment is not None else 0,
        **figures,
    )


def _stamp(records: pa.Table, stamps: np.ndarray, horizon_ms: int) -> tuple[pa.Table, int]:
    """Kept records with the first delete horizon stamped where :func:`rules.needs_horizon` says (``stamps``: the
    offsets of the markers the verdicts named); and how many."""
    stamp = rules.needs_horizon(records, stamps)
    if not pc.any(stamp).as_py():
        return records, 0
    horizons = pc.if_else(stamp, pa.scalar(horizon_ms, pa.int64()), records.column("delete_horizon_ms"))
    return (
        records.set_column(records.column_names.index("delete_horizon_ms"), "delete_horizon_ms", horizons),
        pc.sum(stamp).as_py() or 0,
    )


def _rewrite_batches(job: ApplyJob, survivors: Survivors) -> AppliedJob:
    """A rewrite into a ``.log`` segment: each ``.log`` source's batches copied, rebuilt, kept empty or dropped
    (:mod:`compaction.clean.batches`), Parquet sources' records framed anew."""
    policy = job.batch_policy or BatchPolicy(first_uncleanable_offset=-1)
    parts, records_read = [], 0
    for source in job.sources:
        if source.format == SegmentFormat.KAFKA:
            log = survivors.log_segment(job, source)
            offsets = log.records.column("offset")
            live = job.context.store.objects.live_rows(job.tp, source, offsets, job.log_start_offset)
            keep = np.zeros(len(live), dtype=bool)
            live_offsets = offsets.to_numpy()[live]
            keep[live] = survivors.keep_mask(source, live_offsets)
            records_read += survivors.live_count(source, int(live.sum()))
            stamps = survivors.stamps(source, live_offsets)
            load = partial(read_log_bytes, job.context.store.storage, job.tp, source)
            parts.append(reframe(log, keep, stamps, job.context.horizon_ms, policy, load))
        else:
            table = survivors.records(job, source)
            records_read += survivors.live_count(source, table.num_rows)
            offsets = table.column("offset").to_numpy()
            keep = survivors.keep_mask(source, offsets)
            kept, stamped = _stamp(
                table.filter(pa.array(keep)), survivors.stamps(source, offsets), job.context.horizon_ms
            )
            parts.append(frame_records(kept, stamped))
    framed = Framed.join(parts)
    segment = None
    if framed.batches.num_rows:  # a segment of empty batches still keeps their offsets and producers
        segment = job.context.store.objects.write_segment(
            job.tp,
            framed.records,
            job.base_offset,
            job.next_offset,
            created_ms=job.sources[-1].created_ms,
            object_id=object_id(job.context.pass_id),
            segment_format=SegmentFormat.KAFKA,
            batches=framed.batches,
            encoded=framed.data,
        )
    return AppliedJob.of(
        job,
        segment=segment,
        records_read=records_read,
        bytes_read=sum(s.size_bytes for s in job.sources),
        records_written=framed.records.num_rows,
        stamped=framed.stamped,
        bytes_written=segment.size_bytes if segment is not None else 0,
    )


def apply_listed(job: ApplyJob) -> AppliedJob:
    """The apply stage of a partition decided in another stage: one job, with the verdicts on its sources (every
    key range's) read from the store."""
    return apply_job(job, ListedRows(job))


# A run of clean segments against the dirty keys ------------------------------------------------------------


def clean_run(run: CleanRun) -> Verdicts:
    """A run of a partition's clean segments decided against its dirty section's keys, and the deletion vectors of
    those the layout gives one written at once; or (no ``run.dirty``) its dirty segments decided and rewritten as
    the layout of them alone gives (:func:`rewrite_dirty`). The verdicts of the other segments are handed over for
    the apply stage (see ``paths.AGAINST_DIRTY_KEYS``).

    Under the offset strategy, with the clean keys unique and no transactions or erasures, a clean record whose key
    the dirty section holds is superseded, and a clean segment's verdicts need no other clean segment: the task
    reads each segment's offsets, keys, horizons and timestamps once, checks every key against the dirty keys in
    one pass, decides only the rows in doubt (those keys, tombstones and markers with a horizon, the keyless), and
    has the rest kept; a segment that only loses a few records gets its deletion vector from the same read.
    """
    task = run.task
    if not run.dirty:
        return rewrite_dirty(task)
    with phase("read"):
        contested = pa.chunked_array(
            [
                c
                for s in run.dirty
                for c in task.context.store.objects.read_segment(
                    task.tp, s, ["key"], start=task.cleaned.log_start_offset
                )
                .column("key")
                .chunks
            ],
            pa.binary(),
        )
        depth = 1 if task.context.store.storage.calls_fail_whole else REMOTE_READ_AHEAD
        tables = list(
            ahead(
                lambda s: task.context.store.objects.read_segment(
                    task.tp, s, ["key", *VECTOR_COLUMNS], start=task.cleaned.log_start_offset
                ),
                task.cleaned.segments,
                depth,
            )
        )
    with phase("decide"):
        keys = pa.chunked_array([c for t in tables for c in t.column("key").chunks], pa.binary())
        hit = winners.held_keys(keys, pc.drop_null(contested).combine_chunks())
        del keys, contested
    parts: list[pa.Table | None] = []
    found: list[tuple[int, SegmentCounts, int, SegmentMeta | None]] = []
    start = 0
    for segment, table in zip(task.cleaned.segments, tables, strict=True):
        beaten = hit[start : start + table.num_rows]
        start += table.num_rows
        with phase("decide"):
            code, stamp, doubt, counts = _decide_clean_segment(task, table, beaten)
        vector = None
        if takes_vector(segment, counts, task.cleaned.first_dirty_offset, task.policy):
            keep = np.ones(table.num_rows, dtype=bool)
            keep[doubt] = code == rules.KEPT
            with phase("write"):
                vector = write_vector(task.context, task.tp, segment, table, keep)
            parts.append(None)
        else:  # the rows it drops, and its markers to stamp, listed for the apply stage
            listed = code != rules.KEPT
            chosen = listed | stamp
            parts.append(
                pa.table(
                    {
                        "position": pa.array(np.flatnonzero(doubt)[chosen], pa.int32()),
                        "listed": listed[chosen],
                        "stamp": stamp[chosen],
                    }
                )
                if chosen.any()
                else None
            )
        found.append((segment.base_offset, counts, table.num_rows, vector))
    path: str | None = None
    groups: tuple[int | None, ...] = (None,) * len(parts)
    if any(part is not None for part in parts):
        with phase("write"):
            path, groups = task.context.store.objects.write_verdicts(
                task.tp,
                task.cleaned.segments[0].base_offset,
                parts,
                f"{object_id(task.context.pass_id)}-{task.cleaned.segments[0].base_offset}",
            )
    return Verdicts(
        tp=task.tp,
        path=path,
        segments=tuple(
            SegmentVerdicts(base, counts, rows, group, vector)
            for (base, counts, rows, vector), group in zip(found, groups, strict=True)
        ),
    )


def rewrite_dirty(task: CleanTask) -> Verdicts:
    """A partition's dirty section (``task`` narrowed to it) decided, its verdicts handed over, and its rewrites as
    the layout of its segments alone gives them written from the same read: the apply stage takes them where its
    layout of the whole range agrees, which it does unless it merges the dirty section with a clean segment before it.
    Under the offset strategy with a unique clean section no clean record decides a dirty one."""
    cleaned, verdicts = _decide_and_apply(task, handed=True)
    assert verdicts is not None
    return replace(verdicts, applied=cleaned.jobs)


def _decide_clean_segment(
    task: CleanTask, table: pa.Table, beaten: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, SegmentCounts]:
    """A unique clean segment's verdicts, its rows whose key the dirty section holds being ``beaten``: the codes and
    stamps of its rows in doubt (``doubt``, a mask of its rows), and its counts, every other row kept."""
    doubt = (
        beaten
        | pc.is_null(table.column("key")).to_numpy(zero_copy_only=False)
        | pc.is_valid(table.column("delete_horizon_ms")).to_numpy(zero_copy_only=False)
    )
    rows = table.filter(pa.array(doubt))
    n = rows.num_rows
    offsets = rows.column("offset")
    facts = facts_table(
        task,
        RowFacts.without_transactions(
            offsets, rows.column("key"), np.ones(n, dtype=np.int8), offsets.to_numpy(), rows.column("delete_horizon_ms")
        ),
    )
    decided = winners.decide(
        facts, now_ms=task.context.now_ms, keyless_drop=task.context.keyless_drop, beaten=beaten[doubt]
    )
    counts = SegmentCounts.from_verdicts(
        decided.code, decided.stamp, rules.upcoming_horizons(facts, decided.code, task.context.now_ms)
    )
    surely_kept = len(doubt) - n
    counts = replace(counts, records=counts.records + surely_kept, kept=counts.kept + surely_kept)
    return decided.code, decided.stamp, doubt, counts


# One task: decide and apply a whole partition ------------------------------------------------------------


def clean_in_task(task: CleanTask) -> CleanedPartition:
    """Decide a partition, lay out its new objects and write them, all in this task; returns metadata only."""
    return _decide_and_apply(task)[0]


def _decide_and_apply(task: CleanTask, handed: bool = False) -> tuple[CleanedPartition, Verdicts | None]:
    """The task's segments decided, laid out and written here; with ``handed``, its verdicts handed over too, for an
    apply stage that may lay them out with other segments (:func:`rewrite_dirty`)."""
    # The winner search reads the fact columns of Parquet segments only; the rewrites then read each source
    # whole, one at a time, so a task holds keys, not values. A .log segment is decoded whole in any case
    # (a batch's CRC covers all its records): its dirty ones are kept from the winner search for the rewrite, less
    # the records a later segment supersedes (facts.supersedes_as_read). A small partition's objects are read whole
    # once, for the winner search and the rewrites alike: reading a small object costs its opening more than its
    # bytes.
    small = sum(s.live_size_bytes for s in task.cleaned.segments) <= SHARED_READ_BYTES
    decided = decide_facts(
        task,
        frozenset(
            s.base_offset
            for s in task.cleaned.segments
            if small or (s.next_offset > task.cleaned.first_dirty_offset and s.format == SegmentFormat.KAFKA)
        ),
    )
    verdicts = hand_over(task, decided) if handed else None
    hidden = hidden_erased(task)  # records of erased keys that only the objects' bytes still hold
    segment_counts = {
        segment.base_offset: counts.with_hidden_erased(hidden.get(segment.base_offset, frozenset()))
        for segment, _, counts in decided.segment_counts(task.cleaned.segments)
    }
    survivors = HeldRows(decided, task.cleaned.segments)
    del decided  # the facts' keys and versions: the rewrites need the survivors only
    jobs = [
        apply_job(task.job(job_id, sources, deletes_only), survivors)
        for job_id, (sources, deletes_only) in enumerate(
            lay_out(
                task.cleaned.segments,
                segment_counts,
                task.cleaned.first_dirty_offset,
                task.policy,
                stale_empty_batches(task.cleaned.segments, task.batch_policy),
            )
        )
    ]
    return CleanedPartition(tp=task.tp, segment_counts=segment_counts, jobs=tuple(jobs)), verdicts
