"""Why the planner decides as it does: one class per reason, with the figures it names, and the text ``plan``, the
run's report and ``compaction erasure`` print of it (part of their published output).

A partition's plan carries :class:`Reasons`: the reason that decided, then the others that also hold. (Why a
*record* drops is another thing: :class:`compaction.rules.DropReason`.)
"""

from __future__ import annotations

from dataclasses import dataclass

from compaction.display import format_duration
from compaction.rules import UncleanableBound


@dataclass(frozen=True)
class Reason:
    """One reason of the planner's. Each kind is a class of its own with the figures it names; its text (``str``)
    is what ``plan``, the run's report and ``compaction erasure`` print, and is part of their published output."""

    def __str__(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class ManifestUnreadable(Reason):
    error: str

    def __str__(self) -> str:
        return self.error


@dataclass(frozen=True)
class NotCompacted(Reason):
    cleanup_policy: tuple[str, ...]
    #: Pending erasure requests, which a tombstone cannot carry out where the log is not compacted.
    stranded_erasures: int

    def __str__(self) -> str:
        stranded = (
            (f"; {self.stranded_erasures} erasure request(s) cannot be carried out (a tombstone deletes nothing there)")
            if self.stranded_erasures
            else ""
        )
        return f"cleanup.policy={','.join(self.cleanup_policy)}: not compacted{stranded}"


@dataclass(frozen=True)
class EmptyLog(Reason):
    def __str__(self) -> str:
        return "empty log"


@dataclass(frozen=True)
class NoDirtyRecords(Reason):
    def __str__(self) -> str:
        return "no dirty records"


@dataclass(frozen=True)
class NothingCleanable(Reason):
    """Dirty records, none of them below the first uncleanable offset: the bound that holds them says why."""

    bound: UncleanableBound
    last_stable_offset: int

    def __str__(self) -> str:
        match self.bound:
            case UncleanableBound.ACTIVE_SEGMENT:
                return "active segment only"
            case UncleanableBound.LAST_STABLE_OFFSET:
                return f"nothing cleanable below the last stable offset {self.last_stable_offset} (open transaction)"
            case UncleanableBound.MIN_COMPACTION_LAG:
                return "dirty segments are newer than min.compaction.lag.ms"


@dataclass(frozen=True)
class DirtyRatio(Reason):
    """The dirty ratio against ``min.cleanable.dirty.ratio``: above it (strictly, as Kafka) selects."""

    ratio: float
    min_ratio: float

    def __str__(self) -> str:
        return f"dirty ratio {self.ratio:.2f} {'>' if self.ratio > self.min_ratio else '<='} {self.min_ratio:.2f}"


@dataclass(frozen=True)
class MaxLagExceeded(Reason):
    delay_ms: int

    def __str__(self) -> str:
        return f"max.compaction.lag.ms exceeded by {format_duration(self.delay_ms)}"


@dataclass(frozen=True)
class TombstonesExpired(Reason):
    def __str__(self) -> str:
        return "tombstones expired: delete horizon passed"


@dataclass(frozen=True)
class DeletionVectorsAged(Reason):
    overdue_ms: int  # past deletion.vector.max.age.ms (0: due just now)

    def __str__(self) -> str:
        due = f"due for {format_duration(self.overdue_ms)}" if self.overdue_ms > 0 else "due now"
        return f"deletion vectors at least deletion.vector.max.age.ms old ({due}): rewrite to remove records physically"


@dataclass(frozen=True)
class RetentionExpired(Reason):
    """Segments that go before cleaning: past retention (``compact,delete``), or wholly below the log start."""

    past_retention: int
    below_log_start: int

    def __str__(self) -> str:
        notes = (
            (self.past_retention, f"retention: {self.past_retention} segment(s) expired"),
            (self.below_log_start, f"{self.below_log_start} segment(s) below the log start"),
        )
        return "; ".join(note for count, note in notes if count)


@dataclass(frozen=True)
class ErasureRequested(Reason):
    keys: int
    past_deadline_ms: int  # 0 or less: within the deadline

    def __str__(self) -> str:
        late = f", past the deadline by {format_duration(self.past_deadline_ms)}" if self.past_deadline_ms > 0 else ""
        return f"erasure requested for {self.keys} key(s){late}"


@dataclass(frozen=True)
class NothingLeftToRewrite(Reason):
    past_deadline_ms: int  # 0: within the deadline

    def __str__(self) -> str:
        late = f", past the deadline by {format_duration(self.past_deadline_ms)}" if self.past_deadline_ms > 0 else ""
        return f"erasure requested: no segment is left to rewrite{late}"


@dataclass(frozen=True)
class ErasuresWait(Reason):
    """Pending erasure requests whose tombstones lie past the cleaned range, and the bound they wait for."""

    requests: int
    bound: UncleanableBound
    last_stable_offset: int

    def __str__(self) -> str:
        # Never for the active segment: a pending request rolls it, and every tombstone lies below the log end.
        bound = (
            "min.compaction.lag.ms"
            if self.bound is UncleanableBound.MIN_COMPACTION_LAG
            else f"an open transaction (the last stable offset {self.last_stable_offset})"
        )
        return f"{self.requests} erasure request(s) wait for {bound}"


@dataclass(frozen=True)
class OverdueFirstInBudget(Reason):
    def __str__(self) -> str:
        return "overdue, so first in the per-run byte budget"


@dataclass(frozen=True)
class Reasons:
    """Why the plan decided as it did: the reason that decided, then the others that also hold, in that order."""

    first: Reason
    also: tuple[Reason, ...] = ()

    def __str__(self) -> str:
        return "; ".join(str(reason) for reason in (self.first, *self.also))

    def adding(self, *more: Reason) -> Reasons:
        return Reasons(self.first, (*self.also, *more))


@dataclass(frozen=True)
class Deferred(Reason):
    """Selected, then left for a later run: the per-run byte budget was spent on partitions before it."""

    budget: int
    selected_for: Reasons

    def __str__(self) -> str:
        return f"deferred: per-run byte budget {self.budget} exhausted ({self.selected_for})"
