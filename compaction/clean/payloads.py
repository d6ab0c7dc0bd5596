"""What crosses between the driver and the executors in a clean pass: one frozen, versioned type per unit of work
and per result (the row codec and the version check are :mod:`compaction.engine.codec`'s).

- :class:`PassContext` is what every unit of a pass over one topic shares (the store, the clock, the horizon, the
  pass's id, the format, the winner search and the rules' parameters): each unit refers to it and carries only what
  differs.
- :class:`CleanTask` is one partition's pass: its :class:`CleanedRange`, how verdicts become objects, its erasure
  requests, and its :class:`KeySplit`, which names one key range of a split partition; a run of its segments
  (the cleaned range narrowed) is what a split partition reads once for every key range.
- :class:`RunRead` is a run of a split partition's segments read once for every key range, and :class:`HandedRun`
  where it handed each range's rows over (:class:`Piece`, through the store: :mod:`compaction.store.handover`).
- :class:`Verdicts` is what a key range (or a Spark SQL winner search) decided of a partition's segments: the counts per
  segment, and where in the store the rows it keeps or drops are listed (a
  verdicts object: :mod:`compaction.store.handover`).
- :class:`ApplyJob` rewrites a group of segments into one, or extends one's deletion vector, with the verdicts on
  each source (:class:`SourceVerdicts`).
- :class:`AppliedJob` is an apply job's result: the object it wrote and its figures.
- :class:`CleanedPartition` is a partition decided and applied in one task.

Each result is metadata: counts, object names, offsets of segments; never one entry per record (SPEC §5).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from compaction import rules
from compaction.clean.batches import BatchPolicy
from compaction.clean.layout import ApplyPolicy, SegmentCounts
from compaction.engine.codec import Payload
from compaction.store import SegmentFormat, SegmentMeta, Store, TopicPartition


def lists_kept(segment: SegmentMeta, first_dirty_offset: int) -> bool:
    """Whether a pass's verdicts on a segment list the rows it keeps (a dirty segment, which loses most of its
    rows to newer versions) rather than those it drops (a clean one, which keeps most): the shorter list, by a rule
    every stage of the pass applies alike."""
    return segment.next_offset > first_dirty_offset


@dataclass(frozen=True, kw_only=True)
class PassContext:
    """What every unit of a pass over one topic shares, built once by the driver and referenced by each unit (a
    Spark task's bin of units pickles it once): where the store is, the pass's clock and id, the delete horizon it
    stamps, the format its rewrites write, how each key's winner is found and the topic's rules' parameters."""

    store: Store
    pass_id: str  # names the pass's objects (tasks.objects.object_id)
    now_ms: int
    horizon_ms: int  # the delete horizon this pass stamps
    segment_format: SegmentFormat  # what its rewrites write
    winner_search: rules.WinnerSearch = rules.WinnerSearch.ARROW  # how each key's winner is found (``dedupe.plan``)
    strategy: rules.Strategy = rules.Strategy.OFFSET
    strategy_header: str = ""
    keyless_drop: bool = False


@dataclass(frozen=True, kw_only=True)
class CleanedRange:
    """A partition's cleaned range ``[log_start_offset, end of segments)`` (or, for a unit of a run, the run), the
    checkpoint in it, and the segments beyond it (their markers and stale records matter)."""

    log_start_offset: int
    first_dirty_offset: int
    segments: tuple[SegmentMeta, ...]
    tail: tuple[SegmentMeta, ...] = ()
    clean_keys_unique: bool = False  # the manifest's promise (the Arrow winner search uses it)


@dataclass(frozen=True, kw_only=True)
class KeySplit:
    """How a partition is split into key ranges (a row's range is a hash of its key:
    :func:`~compaction.clean.tasks.key_ranges.key_range_of`), and which one a unit is; ``pieces``: the unit's key
    range's rows of each run, handed over in the store (read once per run)."""

    key_ranges: int = 1
    key_range: int = 0
    pieces: tuple[Piece, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CleanTask(Payload):
    """One partition's clean pass over its cleaned range, or one key range of it (``split``), or a run of its
    segments (``cleaned`` narrowed to the run); what is the same for every partition of its topic is in ``context``.
    Built by the driver (:meth:`~compaction.clean.cleaner.Cleaner.task`)."""

    context: PassContext
    tp: TopicPartition
    cleaned: CleanedRange
    policy: ApplyPolicy  # how verdicts become objects (the layout)
    batch_policy: BatchPolicy | None  # which batches its .log rewrites keep when they lose every record (.log only)
    # The erasure requests it carries out: per key digest, the request's tombstone offset (records below go).
    erasures: tuple[tuple[str, int], ...] = ()
    split: KeySplit = KeySplit()

    @property
    def ident(self) -> str:
        """The partition, or its key range: what its outcome (``Ok`` or ``Failed``) is matched to."""
        return str(self.tp) if self.split.key_ranges == 1 else f"{self.tp} key range {self.split.key_range}"

    @property
    def records(self) -> int:
        """Live records of the segments it covers."""
        return sum(s.live_records for s in self.cleaned.segments)

    def of_run(self, segments: tuple[SegmentMeta, ...]) -> CleanTask:
        """This task narrowed to a run of its segments."""
        return replace(self, cleaned=replace(self.cleaned, segments=segments))

    def of_range(self, key_range: int, pieces: tuple[Piece, ...] = ()) -> CleanTask:
        """Key range ``key_range`` of this split partition's task (with its rows of each run: ``pieces``)."""
        return replace(self, split=replace(self.split, key_range=key_range, pieces=pieces))

    def job(
        self,
        job_id: int,
        sources: tuple[SegmentMeta, ...],
        deletes_only: bool,
        verdicts: tuple[SourceVerdicts, ...] = (),
    ) -> ApplyJob:
        """Apply job ``job_id`` of this pass: rewrite ``sources`` into one segment, or extend a deletion vector
        (``verdicts``: where the verdicts on each source are listed, unless the job runs in the deciding task)."""
        return ApplyJob(
            context=self.context,
            tp=self.tp,
            log_start_offset=self.cleaned.log_start_offset,
            batch_policy=self.batch_policy,
            job_id=job_id,
            sources=sources,
            deletes_only=deletes_only,
            verdicts=verdicts,
        )


@dataclass(frozen=True)
class SourceVerdicts:
    """Where the verdicts on one source segment of an apply job are listed: ``rows`` live rows were decided (by
    every key range alike), and each ``(path, row group)`` of ``listed`` lists some of them, the kept ones when
    ``kept`` (else the dropped ones)."""

    rows: int
    kept: bool
    listed: tuple[tuple[str, int], ...]


@dataclass(frozen=True, kw_only=True)
class ApplyJob(Payload):
    """Stage 2: rewrite ``sources`` into one segment, or (``deletes_only``) extend one segment's deletion vector."""

    context: PassContext  # its pass's store, clock, horizon, id and format
    tp: TopicPartition
    log_start_offset: int
    batch_policy: BatchPolicy | None  # which batches a .log rewrite keeps when they lose every record
    job_id: int
    sources: tuple[SegmentMeta, ...]
    deletes_only: bool
    verdicts: tuple[SourceVerdicts, ...] = ()  # per source, where its verdicts are listed (none: decided in the task)

    @property
    def ident(self) -> str:
        return f"{self.tp} job {self.job_id}"

    @property
    def base_offset(self) -> int:
        return self.sources[0].base_offset

    @property
    def next_offset(self) -> int:
        return self.sources[-1].next_offset


@dataclass(frozen=True)
class Piece:
    """One run's rows of a key range, handed over through the store: the pieces object and the record batch holding
    them (None: the range has no row in the run); the live rows of each segment of the run as read, and of those
    the range's."""

    path: str
    batch: int | None
    read_lengths: tuple[int, ...]
    lengths: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class RunRead(Payload):
    """A run of a split partition's segments (its task narrowed to it), read once for every key range."""

    task: CleanTask

    @property
    def ident(self) -> str:
        return f"{self.task.tp} run {self.task.cleaned.segments[0].base_offset}"


@dataclass(frozen=True, kw_only=True)
class CleanRun(Payload):
    """A run of a partition's clean segments (its task narrowed to it) decided against the keys of its dirty
    segments ``dirty``; or, with no ``dirty``, the dirty segments themselves (see ``paths.AGAINST_DIRTY_KEYS``)."""

    task: CleanTask
    dirty: tuple[SegmentMeta, ...] = ()

    @property
    def ident(self) -> str:
        return f"{self.task.tp} run {self.task.cleaned.segments[0].base_offset}"

    @property
    def records(self) -> int:
        return self.task.records


@dataclass(frozen=True, kw_only=True)
class HandedRun(Payload):
    """A run read once, its rows handed over in the pieces object at ``path``: per key range its record batch (None:
    no row) and its rows of each segment (``lengths[range]``), and each segment's live rows as read."""

    first_segment: int
    path: str
    batches: tuple[int | None, ...]
    read_lengths: tuple[int, ...]
    lengths: tuple[tuple[int, ...], ...]

    def piece(self, key_range: int) -> Piece:
        return Piece(self.path, self.batches[key_range], self.read_lengths, self.lengths[key_range])


@dataclass(frozen=True)
class SegmentVerdicts:
    """What one key range (or a Spark SQL winner search) decided of one segment: the counts, the live rows it read
    (all of the segment's, its own and other ranges'), and the row group of ``Verdicts.path`` listing its part
    (None: its part lists no row); ``vector``: the segment with the deletion vector the deciding task already wrote
    (a task that decided the whole segment, which the layout gives a deletion vector on its own counts)."""

    segment_base: int
    counts: SegmentCounts
    rows: int
    row_group: int | None
    vector: SegmentMeta | None = None


@dataclass(frozen=True, kw_only=True)
class Verdicts(Payload):
    """The verdicts on some of a partition's segments, listed in the verdicts object at ``path`` (None:
    nothing written, no segment lists a row); ``applied``: the rewrites the deciding task made of them, laid out on
    their own, for the apply stage to take where its layout of the whole range agrees."""

    tp: TopicPartition
    path: str | None
    segments: tuple[SegmentVerdicts, ...]
    applied: tuple[AppliedJob, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AppliedJob(Payload):
    """An apply job's result: the object it wrote (``segment``; None when a rewrite kept no record) and its
    figures."""

    tp: TopicPartition
    job_id: int
    sources: tuple[int, ...]  # the base offsets of the segments the job replaces
    deletes_only: bool
    segment: SegmentMeta | None = None
    records_read: int = 0
    bytes_read: int = 0
    records_written: int = 0
    stamped: int = 0  # records given their first delete horizon
    bytes_written: int = 0

    @classmethod
    def of(cls, job: ApplyJob, **figures: Any) -> AppliedJob:
        """The result of ``job`` with the given figures (fields of this class)."""
        return cls(
            tp=job.tp,
            job_id=job.job_id,
            sources=tuple(s.base_offset for s in job.sources),
            deletes_only=job.deletes_only,
            **figures,
        )


@dataclass(frozen=True, kw_only=True)
class CleanedPartition(Payload):
    """A partition decided and applied in one task: the verdicts' counts per segment (by base offset) and
    each apply job's result."""

    tp: TopicPartition
    segment_counts: dict[int, SegmentCounts] = field(default_factory=dict)
    jobs: tuple[AppliedJob, ...] = ()
