"""What crosses between the driver and the executors: one frozen, versioned type per task and per result.

Spark pickles these values: tasks on the way out, results on the way back, decision rows through a shuffle
and a persisted RDD. Each carries the :data:`PAYLOAD_VERSION` of the library that built it, and unpickling
it (on the receiving side) refuses another version with :class:`~compaction.errors.PayloadVersionError`, so
a driver and executors that run different builds of this library fail with both versions named, not with
a missing field deep inside a task or a wrong answer.

- :class:`ReadTask` decides one partition's cleaned range, or one key bucket of it (stage 1); with a
  policy, the same task also applies the decision. Stage 1 of a split partition without transactions also
  uses it to read a run of segments once and hand each key bucket its :class:`BucketPiece` (a shuffle).
- :class:`ApplyJob` rewrites a group of segments into one, or extends one's deletion vector (stage 2).
- :class:`BucketPiece` is one key bucket's rows of a run of segments, on their way to the bucket's task.
- :class:`DecisionRow` is stage 1's result for one segment and key bucket.
- :class:`AppliedJob` is an apply job's result: the object it wrote and its figures.
- :class:`CleanedPartition` is a partition decided and applied in one task.

Rows that stay inside Spark SQL are typed by Arrow schemas instead (:data:`compaction.clean.rules.FACTS_SCHEMA`).
"""

from __future__ import annotations

import uuid
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
PAYLOAD_VERSION = 3

#: ``segment_base`` of a decision row that carries an error instead of a segment's decision.
NO_SEGMENT = -1


def error_text(err: BaseException) -> str:
    """How a task reports the error that stopped its partition: one line, with the exception's type."""
    return f"{type(err).__name__}: {err}"


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
class ReadTask(Payload):
    """Decide one partition's cleaned range, or one key bucket of it (``bucket`` of ``buckets``)."""

    tp: TopicPartition
    store: Store
    segments: tuple[SegmentMeta, ...]
    tail: tuple[SegmentMeta, ...]  # the segments beyond the range (their markers and stale records matter)
    strategy: rules.Strategy
    strategy_header: str
    keyless_drop: bool
    now_ms: int = 0
    log_start_offset: int = 0
    bucket: int = 0
    buckets: int = 1
    bounds: tuple[bytes, ...] = ()  # a split partition's key range bounds (``buckets - 1``; the same in all its tasks)
    first_dirty_offset: int = 0
    clean_keys_unique: bool = False  # the manifest's promise (the Arrow plan's winner search uses it)
    # For a partition decided and applied in one task (the Arrow plan, one bucket):
    policy: ApplyPolicy | None = None
    horizon_ms: int = 0
    segment_format: str = "parquet"  # what its rewrites write
    batch_policy: BatchPolicy | None = None  # which batches its .log rewrites keep when they lose every record
    pass_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # names its objects (tasks.object_id)


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
    deletes_only: bool = False
    pass_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # names its object (tasks.object_id)
    segment_format: str = "parquet"  # what a rewrite writes
    batch_policy: BatchPolicy | None = None  # which batches a .log rewrite keeps when they lose every record

    @property
    def base_offset(self) -> int:
        return self.sources[0].base_offset

    @property
    def next_offset(self) -> int:
        return self.sources[-1].next_offset


@dataclass(frozen=True, kw_only=True, eq=False)
class BucketPiece(Payload):
    """A key bucket's rows of a run of consecutive segments (read once for every bucket): the columns a
    decision needs that no other bucket's rows affect, with each row's position among its segment's live
    rows; or (``error`` set) what stopped the read."""

    tp: TopicPartition
    first_segment: int  # the base offset of the run's first segment
    read_lengths: np.ndarray  # live rows of each segment of the run, as read
    lengths: np.ndarray  # of which this bucket's
    # The rows (offset, key, delete_horizon_ms, position; version_valid and version unless the strategy is
    # offset, whose version is the offset) as Arrow IPC.
    data: bytes = b""
    error: str | None = None

    @classmethod
    def of(cls, tp: TopicPartition, first_segment: int, read_lengths: np.ndarray, lengths: np.ndarray,
           rows: pa.Table) -> BucketPiece:
        """A piece holding ``rows`` as a zstd-compressed Arrow IPC stream: a third of the bytes to shuffle, and
        cheaper to write and read than a pickled table."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
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
    """Stage 1's result for one segment and key bucket: the decision's counts, a packed bitmap over the
    segment's live rows as read with the bits of the rows it drops, and the offsets of the markers to stamp;
    or (``error`` set, ``segment_base`` :data:`NO_SEGMENT`) what stopped the partition."""

    tp: TopicPartition
    segment_base: int = NO_SEGMENT
    outcome: SegmentOutcome = field(default_factory=SegmentOutcome.empty)
    rows: int = 0  # the segment's live rows as read: the bitmap's length
    dropped: np.ndarray = field(default_factory=_no_bits)
    stamps: np.ndarray = field(default_factory=_no_offsets)
    error: str | None = None

    @classmethod
    def failed(cls, tp: TopicPartition, error: str) -> DecisionRow:
        return cls(tp=tp, error=error)

    def counts(self) -> DecisionRow:
        """The row without its bitmap and stamps: what the driver collects to lay out the apply jobs."""
        return replace(self, dropped=_no_bits(), stamps=_no_offsets())


@dataclass(frozen=True, kw_only=True)
class AppliedJob(Payload):
    """An apply job's result: the object it wrote (``segment``; None when a rewrite kept no record) and its
    figures; or the error that stopped it."""

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
    error: str | None = None

    @classmethod
    def of(cls, job: ApplyJob, **figures: Any) -> AppliedJob:
        """The result of ``job`` with the given figures (fields of this class)."""
        return cls(tp=job.tp, job_id=job.job_id, sources=tuple(s.base_offset for s in job.sources),
                   deletes_only=job.deletes_only, **figures)


@dataclass(frozen=True, kw_only=True)
class CleanedPartition(Payload):
    """A partition decided and applied in one task: the decision's counts per segment (by base offset) and
    each apply job's result; or the error that stopped it (then nothing of it may be committed)."""

    tp: TopicPartition
    outcomes: dict[int, SegmentOutcome] = field(default_factory=dict)
    jobs: tuple[AppliedJob, ...] = ()
    error: str | None = None
