"""What the planner measures of a partition (Kafka's ``LogToClean`` figures): whether the active segment rolls, what
retention drops before cleaning, the cleanable offsets with a checkpoint reset, and the figures the selection decides
on. Values only: :mod:`compaction.clean.planner` takes the steps that compute them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from compaction.clean.reasons import RetentionExpired
from compaction.rules import UncleanableBound
from compaction.store.manifest import ErasureRequest, SegmentMeta


class Roll(Enum):
    """Whether the active segment is cleaned this pass, and why: Kafka rolls a segment older than
    ``min(segment.ms, max.compaction.lag.ms)`` (KIP-354's forced roll, here offline); a pending erasure request rolls
    it for cleaning only, so that the pass covers its tombstone, while retention still waits for it to age out."""

    NONE = "none"
    AGED = "aged"
    FOR_ERASURE = "for erasure"


@dataclass(frozen=True)
class Retention:
    """What goes before cleaning (Kafka's ``deleteOldSegments``), and the log start it leaves: the segments wholly
    below the log start, then (``compact,delete``) the leading ones past ``retention.ms`` or ``retention.bytes``."""

    log_start_offset: int
    expired_segments: tuple[SegmentMeta, ...]
    below_log_start: int  # how many of the expired segments lay wholly below the manifest's log start
    past_retention: int  # how many retention expired

    @property
    def reason(self) -> RetentionExpired:
        return RetentionExpired(self.past_retention, self.below_log_start)


@dataclass(frozen=True)
class CheckpointReset:
    """A checkpoint outside the log, below its start or past its end, which Kafka resets to the log start (and
    writes at once, whether or not it cleans the partition)."""

    checkpoint: int
    log_start_offset: int
    log_end_offset: int

    @property
    def first_dirty_offset(self) -> int:
        """The checkpoint it is reset to."""
        return self.log_start_offset

    def __str__(self) -> str:
        if self.checkpoint < self.log_start_offset:
            return f"checkpoint {self.checkpoint} is below the log start {self.log_start_offset}"
        return f"checkpoint {self.checkpoint} is past the log end {self.log_end_offset}"


@dataclass(frozen=True)
class CleanableOffsets:
    """Kafka's ``cleanableOffsets``: where the dirty section starts (the validated checkpoint) and where cleaning
    must stop, before (``uncleanable_offset``) and after rounding down to a segment boundary (exclusive)."""

    first_dirty_offset: int
    checkpoint_reset: CheckpointReset | None  # None: the checkpoint lies in the log, as it is
    uncleanable_offset: int
    first_uncleanable_offset: int
    bound: UncleanableBound


@dataclass(frozen=True)
class Figures:
    """What the planner measured of a partition with segments left after retention (Kafka's ``LogToClean`` and
    ``maxCompactionDelay``): what ``plan`` prints of it and what the selection decides on."""

    offsets: CleanableOffsets
    clean_bytes: int
    cleanable_bytes: int
    cleanable_ratio: float
    compaction_delay_ms: int
    roll: Roll
    #: Tombstones and markers whose delete horizon has passed lie in the range.
    tombstones_due: bool
    #: How long the oldest deletion vector in range has been due for its rewrite (-1: none is due).
    deletion_vectors_overdue_ms: int
    #: How far the latest of ``erasures`` is past its deadline (0: within it; -1: no erasure request).
    erasures_overdue_ms: int
    #: How far past a bound on physical removal the partition is: its compaction delay past
    #: ``max.compaction.lag.ms``, its oldest deletion vector's age past ``deletion.vector.max.age.ms`` or an erasure
    #: request's deadline, the largest (0: due just now). None while within all. Such a partition goes first.
    overdue_ms: int | None
    #: The range to clean, ``[log start, first uncleanable offset)``.
    segments: tuple[SegmentMeta, ...]
    #: The pending erasure requests whose tombstones lie in the range: the pass carries them out.
    erasures: tuple[ErasureRequest, ...]

    @classmethod
    def nothing_left(cls, log_end_offset: int, erasures: tuple[ErasureRequest, ...], now_ms: int) -> Figures:
        """A log whose every segment goes: nothing to measure, the range ends at the log end, where the active
        segment's base would be; its erasure requests are carried out now, overdue as in a measured log."""
        erasing = erasures_overdue(erasures, now_ms)
        return cls(
            CleanableOffsets(log_end_offset, None, log_end_offset, log_end_offset, UncleanableBound.ACTIVE_SEGMENT),
            0,
            0,
            0.0,
            0,
            Roll.NONE,
            False,
            -1,
            erasing,
            erasing if erasing >= 0 else None,
            (),
            erasures,
        )

    @property
    def active_segment_rolled(self) -> bool:
        return self.roll is not Roll.NONE

    @property
    def lagging(self) -> bool:
        """Past ``max.compaction.lag.ms`` with something to clean (Kafka's ``needCompactionNow``, which still
        needs cleanable bytes)."""
        return self.compaction_delay_ms > 0 and self.cleanable_bytes > 0

    @property
    def tombstone_purge(self) -> bool:
        """Records to remove physically though nothing is dirty: expired tombstones, or aged deletion vectors."""
        return self.tombstones_due or self.deletion_vectors_overdue_ms >= 0


def erasures_overdue(erasures: Sequence[ErasureRequest], now_ms: int) -> int:
    """How far the latest of the erasure requests a pass carries out is past its deadline: they are due at once,
    so 0 within it (-1: no request)."""
    return max((max(now_ms - r.deadline_ms, 0) for r in erasures), default=-1)
