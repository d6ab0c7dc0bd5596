"""What crosses between the driver and the executors: one frozen, versioned type per task and per result,
and the Arrow schemas of the rows that carry them.

A stage's tasks travel as rows of a small DataFrame (:data:`TASK_SCHEMA`: the task's index and its pickled
payload) and its results come back as rows the driver collects (:data:`RESULT_SCHEMA`: the pickled result,
the error that stopped the task, and the task's time by phase). Each payload carries the
:data:`PAYLOAD_VERSION` of the library that built it, and unpickling it (on the receiving side) refuses another
version with :class:`~compaction.errors.PayloadVersionError`, so a driver and executors that run different
builds of this library fail with both versions named, not with a missing field deep inside a task or a wrong
answer.

- :class:`CleanTask` is one partition's pass, every field set: the cleaned range, the rules' parameters and how
  decisions become objects. Its ``bucket`` names one key range of a split partition (stage 1), and a run of
  its segments (``segments`` narrowed) is what a split partition reads once for every key range.
- :class:`ApplyJob` rewrites a group of segments into one, or extends one's deletion vector (stage 2).
- :class:`BucketPiece` is one key range's rows of a run of segments, on their way to the range's task.
- :class:`DecisionRow` is stage 1's result for one segment and key range.
- :class:`AppliedJob` is an apply job's result: the object it wrote and its figures.
- :class:`CleanedPartition` is a partition decided and applied in one task.

Rows that stay inside Spark SQL are typed by Arrow schemas instead (:data:`compaction.clean.rules.FACTS_SCHEMA`).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from compaction.clean import rules
from compaction.clean.batches import BatchPolicy
from compaction.clean.layout import ApplyPolicy, SegmentOutcome
from compaction.errors import PayloadVersionError
from compaction.store import SegmentMeta, Store, TopicPartition

#: The version of the payloads in this module. Bump it whenever one of them changes a field or its meaning.
PAYLOAD_VERSION = 5

#: The phases of a task's time (:mod:`compaction.clean.phases`), each a column of :data:`RESULT_SCHEMA`.
PHASES = ("read", "decide", "write")

#: A stage's input: one row per task.
TASK_SCHEMA = pa.schema([("task", pa.int32()), ("payload", pa.binary())])
#: A stage's output: per task (or per result of a task), its pickled result, or what stopped it: ``error`` is
#: ``Type: message``; ``internal`` marks an error that is not the data's or the store's (a bug), whose
#: executor traceback is in ``trace``. Then the seconds the task spent in each phase.
RESULT_SCHEMA = pa.schema([("task", pa.int32()), ("payload", pa.binary()), ("error", pa.string()),
                           ("internal", pa.bool_()), ("trace", pa.string()),
                           *((f"{name}_s", pa.float64()) for name in PHASES)])
#: The rows between the two halves of a split partition's stage 1: per key range (``group``), its task once
#: (``task`` set) and its pieces from every run of segments (``piece`` set).
PIECE_SCHEMA = pa.schema([("group", pa.int32()), ("task", pa.binary()), ("piece", pa.binary())])


def dumps(value: Any) -> bytes:
    """A payload (or a list or tuple of them) as the bytes a row carries."""
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    """The payload a row carries (a payload of another version is refused as it unpickles)."""
    return pickle.loads(data)


@dataclass(frozen=True)
class Payload:
    """A value shipped between the driver and executors, stamped with the payload version that built it."""

    payload_version: int = field(default=PAYLOAD_VERSION, kw_only=True)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle, refusing a payload of another version before anything reads its fields."""
        found = state.get("payload_version")
        if found != PAYLOAD_VERSION:
            raise PayloadVersionError(
                f"{type(self).__name__} payload of version {found if found is not None else 'none'} cannot be read "
                f"by this library, which reads payload version {PAYLOAD_VERSION}: the driver and the executors run "
                "different versions of compaction")
        self.__dict__.update(state)


@dataclass(frozen=True, kw_only=True)
class CleanTask(Payload):
    """One partition's clean pass over ``[log_start_offset, end of segments)``, or one key range of it
    (``bucket`` of ``buckets``); every field is set by the driver (:meth:`~compaction.clean.cleaner.Cleaner.task`)."""

    tp: TopicPartition
    store: Store
    segments: tuple[SegmentMeta, ...]  # the cleaned range (or, for a read of a run, the run)
    tail: tuple[SegmentMeta, ...]  # the segments beyond the range (their markers and stale records matter)
    strategy: rules.Strategy
    strategy_header: str
    keyless_drop: bool
    now_ms: int
    log_start_offset: int
    first_dirty_offset: int
    clean_keys_unique: bool  # the manifest's promise (the Arrow plan's winner search uses it)
    policy: ApplyPolicy  # how decisions become objects
    horizon_ms: int  # the delete horizon this pass stamps
    segment_format: str  # what its rewrites write
    batch_policy: BatchPolicy | None  # which batches its .log rewrites keep when they lose every record (.log only)
    pass_id: str  # names its objects (tasks.apply.object_id)
    # The erasure requests it carries out: per key digest, the request's tombstone offset (records below go).
    erasures: tuple[tuple[str, int], ...]
    buckets: int = 1
    bucket: int = 0
    bounds: tuple[bytes, ...] = ()  # a split partition's key range bounds (``buckets - 1``; the same in all its tasks)

    def job(self, job_id: int, sources: tuple[SegmentMeta, ...], deletes_only: bool) -> ApplyJob:
        """Apply job ``job_id`` of this pass: rewrite ``sources`` into one segment, or extend a deletion vector."""
        return ApplyJob(tp=self.tp, store=self.store, job_id=job_id, sources=sources, horizon_ms=self.horizon_ms,
                        now_ms=self.now_ms, log_start_offset=self.log_start_offset, deletes_only=deletes_only,
                        pass_id=self.pass_id, segment_format=self.segment_format, batch_policy=self.batch_policy)


@dataclass(frozen=True, kw_only=True)
class ApplyJob(Payload):
    """Stage 2: rewrite ``sources`` into one segment, or (``deletes_only``) extend one segment's deletion vector."""

    tp: TopicPartition
    store: Store
    job_id: int
    sources: tuple[SegmentMeta, ...]
    horizon_ms: int
    now_ms: int
    log_start_offset: int
    deletes_only: bool
    pass_id: str  # names its object (tasks.apply.object_id)
    segment_format: str  # what a rewrite writes
    batch_policy: BatchPolicy | None  # which batches a .log rewrite keeps when they lose every record

    @property
    def base_offset(self) -> int:
        return self.sources[0].base_offset

    @property
    def next_offset(self) -> int:
        return self.sources[-1].next_offset


@dataclass(frozen=True, kw_only=True, eq=False)
class BucketPiece(Payload):
    """A key range's rows of a run of consecutive segments (read once for every range): the columns a
    decision needs that no other range's rows affect, with each row's position among its segment's live
    rows; or (``error`` set) what stopped the read. ``phases`` is the read's time, carried by one piece of
    each run."""

    tp: TopicPartition
    first_segment: int  # the base offset of the run's first segment
    read_lengths: np.ndarray  # live rows of each segment of the run, as read
    lengths: np.ndarray  # of which this range's
    # The rows (offset, key, delete_horizon_ms, position; version_valid and version unless the strategy is
    # offset, whose version is the offset) as an Arrow IPC stream.
    data: bytes = b""
    error: str | None = None
    internal: bool = False
    trace: str | None = None
    phases: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, tp: TopicPartition, first_segment: int, read_lengths: np.ndarray, lengths: np.ndarray,
           rows: pa.Table) -> BucketPiece:
        """A piece holding ``rows`` as an lz4-compressed Arrow IPC stream: cheaper to write and read than a
        pickled table, and half the bytes for the shuffle to hold (the JVM's memory) and move. lz4, not zstd:
        a fifth of the time, which was a third of the pieces'."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
            writer.write_table(rows)
        return cls(tp=tp, first_segment=first_segment, read_lengths=read_lengths, lengths=lengths,
                   data=sink.getvalue().to_pybytes())

    def rows(self) -> pa.Table:
        return pa.ipc.open_stream(self.data).read_all()


def _no_bits() -> np.ndarray:
    return np.zeros(0, dtype=np.uint8)


def _no_offsets() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, kw_only=True, eq=False)
class DecisionRow(Payload):
    """Stage 1's result for one segment and key range: the decision's counts, a packed bitmap over the
    segment's live rows as read with the bits of the rows it drops, and the offsets of the markers to stamp."""

    tp: TopicPartition
    segment_base: int
    outcome: SegmentOutcome = field(default_factory=SegmentOutcome.empty)
    rows: int = 0  # the segment's live rows as read: the bitmap's length
    dropped: np.ndarray = field(default_factory=_no_bits)
    stamps: np.ndarray = field(default_factory=_no_offsets)

    def counts(self) -> DecisionRow:
        """The row without its bitmap and stamps: what the driver needs to lay out the apply jobs."""
        return replace(self, dropped=_no_bits(), stamps=_no_offsets())


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
        return cls(tp=job.tp, job_id=job.job_id, sources=tuple(s.base_offset for s in job.sources),
                   deletes_only=job.deletes_only, **figures)


@dataclass(frozen=True, kw_only=True)
class CleanedPartition(Payload):
    """A partition decided and applied in one task: the decision's counts per segment (by base offset) and
    each apply job's result."""

    tp: TopicPartition
    outcomes: dict[int, SegmentOutcome] = field(default_factory=dict)
    jobs: tuple[AppliedJob, ...] = ()
