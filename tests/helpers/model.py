"""The reference model the cleaner is held to: SPEC §3 written record by record in plain Python, sharing no code
with the job: which partitions a run selects, over which range and in which order (Kafka's LogCleanerManager), and
what a pass keeps of each record, every field of it (the differential tests and the kafka-python interop test
compare the job's plans and logs with it).

The model keeps its own records. Of the store it takes only the layout, from the manifest the job committed: which
offsets each object covers, its size in bytes and how many records were written in it, when it was written and
when its deletion vector was (the layout has tests of its own). Every figure the planner decides on (live bytes,
first and largest timestamps, delete horizons, the checkpoint, the last stable offset) the model computes from its
own records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

#: Kafka's Long.MAX: the default max.compaction.lag.ms, and where sums of times saturate.
LONG_MAX = 2**63 - 1
#: The model's default delete.retention.ms (the settings it is compared under use the same unless they say).
RETENTION = 1000
WEEK = 7 * 86_400_000

K = TypeVar("K")


@dataclass
class Rec:
    """One record, every field the job keeps: a producer's epoch is -1 without a producer."""

    offset: int
    key: str | None
    value: str | None
    timestamp: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    producer: int = -1
    transactional: bool = False
    control: str | None = None
    horizon: int | None = None
    epoch: int = -1

    @property
    def tombstone(self) -> bool:
        return self.control is None and self.key is not None and self.value is None

    def row(self) -> dict[str, Any]:
        """The record as the job's record builder takes it for an append (no horizon: none is appended)."""
        return {
            "offset": self.offset,
            "key": self.key,
            "value": self.value,
            "timestamp": self.timestamp,
            "headers": list(self.headers) or None,
            "producer_id": self.producer,
            "producer_epoch": self.epoch,
            "is_transactional": self.transactional,
            "is_control": self.control is not None,
            "control_type": self.control,
        }

    def record(self) -> dict[str, Any]:
        """The record as a reader of the clean log sees it, every column (keys and values as bytes)."""
        return {
            "offset": self.offset,
            "timestamp": self.timestamp,
            "key": None if self.key is None else self.key.encode(),
            "value": None if self.value is None else self.value.encode(),
            "headers": [{"key": k, "value": v} for k, v in self.headers] or None,
            "producer_id": self.producer,
            "producer_epoch": self.epoch,
            "is_transactional": self.transactional,
            "is_control": self.control is not None,
            "control_type": self.control,
            "delete_horizon_ms": self.horizon,
        }


@dataclass(frozen=True)
class Config:
    """A topic's configuration in Kafka's terms (``delete``: ``cleanup.policy=compact,delete``)."""

    strategy: str = "offset"
    header: str = "v"
    min_cleanable_dirty_ratio: float = 0.0
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    segment_ms: int = WEEK
    delete_retention_ms: int = RETENTION
    delete: bool = False
    retention_ms: int = WEEK
    retention_bytes: int = -1

    def kafka(self) -> dict[str, Any]:
        """The same, in Kafka's topic-level names, as a configuration file states it."""
        return {
            "cleanup.policy": "compact,delete" if self.delete else "compact",
            "compaction.strategy": self.strategy,
            "compaction.strategy.header": self.header,
            "min.cleanable.dirty.ratio": self.min_cleanable_dirty_ratio,
            "min.compaction.lag.ms": self.min_compaction_lag_ms,
            "max.compaction.lag.ms": self.max_compaction_lag_ms,
            "segment.ms": self.segment_ms,
            "delete.retention.ms": self.delete_retention_ms,
            "retention.ms": self.retention_ms,
            "retention.bytes": self.retention_bytes,
        }


@dataclass(frozen=True)
class Segment:
    """One live object as the job's manifest lists it: the layout, which the model takes as given."""

    base: int
    next: int
    size: int  # bytes of the object
    stored: int  # records written in it (a deletion vector hides some)
    created: int
    vector_created: int | None = None

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> Segment:
        """From a manifest's segment entry as JSON."""
        vector = entry.get("deletes")
        return cls(
            entry["base_offset"],
            entry["next_offset"],
            entry["size_bytes"],
            entry["record_count"],
            entry["created_ms"],
            vector["created_ms"] if vector else None,
        )


@dataclass(frozen=True)
class Choice:
    """The model's plan of one partition: cleaned or not, and what a pass then does."""

    clean: bool
    why: str
    log_start: int
    first_dirty: int | None = None  # the checkpoint, validated
    first_uncleanable: int | None = None
    ratio: float = 0.0
    delay: int = 0
    overdue: int | None = None  # past a bound on physical removal by this much (None: within every bound)
    work: int = 0  # live bytes of the range
    dedupe: bool = False  # records are read (not retention alone)
    reset: bool = False  # the checkpoint was below the log start or past the log end


def saturating_add(a: int, b: int) -> int:
    return min(LONG_MAX, a + b)


def _floor(segments: Sequence[Segment], offset: int) -> int:
    """Index of the first segment that ends past ``offset`` (Kafka's floor, skipping a gap)."""
    return next((i for i, s in enumerate(segments) if offset < s.next), len(segments))


def order(choices: Mapping[K, Choice], budget: int | None = None) -> tuple[list[K], list[K]]:
    """The partitions a run cleans, in the order it takes them, and those a byte budget defers.

    ``choices`` come in the order the planner lists partitions (topic, then partition). Those past a bound go first,
    the most overdue first; then the dirtiest. The budget bounds the live bytes of the ranges taken, but the first
    is always taken.
    """
    selected = sorted(
        (k for k, c in choices.items() if c.clean),
        key=lambda k: (choices[k].overdue is None, -(choices[k].overdue or 0), -choices[k].ratio),
    )
    if budget is None:
        return selected, []
    taken: list[K] = []
    deferred: list[K] = []
    spent = 0
    for k in selected:
        if taken and spent + choices[k].work > budget:
            deferred.append(k)
        else:
            taken.append(k)
            spent += choices[k].work
    return taken, deferred


@dataclass
class Model:
    """The reference: a partition's log as a list of records, planned and cleaned by SPEC §3's rules."""

    strategy: str
    header: str = "v"
    log: list[Rec] = field(default_factory=list)
    bases: list[int] = field(default_factory=list)  # base offset of each append
    end: int = 0
    log_start: int = 0
    checkpoint: int = 0
    last_clean: int | None = None  # when the last pass that read records ran
    next_horizon: int | None = None  # the earliest horizon still to come in that pass's range, after it
    open: dict[int, int] = field(default_factory=dict)  # producer -> first offset of its open transaction
    erasures: list[tuple[str, int, int]] = field(default_factory=list)  # pending requests: key, tombstone, deadline

    # Writing -------------------------------------------------------------------------------------------------

    def forget(self, key: str, now: int, deadline: int) -> Rec:
        """An erasure request: a tombstone for ``key``, appended as a segment of its own, and the request."""
        tombstone = Rec(self.end, key, None, timestamp=now)
        self.append([tombstone])
        self.erasures.append((key, tombstone.offset, deadline))
        return tombstone

    def append(self, recs: list[Rec]) -> None:
        self.bases.append(self.end)
        for r in recs:
            if r.control is not None:
                self.open.pop(r.producer, None)
            elif r.transactional:
                self.open.setdefault(r.producer, r.offset)
        self.log.extend(recs)
        self.end = recs[-1].offset + 1

    @property
    def last_stable(self) -> int:
        """The first offset of the earliest open transaction, or the log end."""
        return min(self.open.values(), default=self.end)

    def version(self, r: Rec) -> tuple[int, int]:
        """(has a version, the version): compared first, then the offset."""
        if self.strategy == "timestamp":
            return (1, r.timestamp) if r.timestamp is not None and r.timestamp >= 0 else (0, -1)
        if self.strategy == "header":
            last = [v for k, v in r.headers if k == self.header]
            if last and len(last[-1]) == 8:
                return 1, int.from_bytes(last[-1], "big", signed=True)
            return 0, -1
        return 1, r.offset

    # Live figures of a segment, from the model's own records --------------------------------------------------

    def live(self, s: Segment) -> list[Rec]:
        return [r for r in self.log if s.base <= r.offset < s.next]

    def live_bytes(self, s: Segment) -> int:
        """The object's size, less the share of its records no reader sees."""
        count = len(self.live(s))
        return s.size if count == s.stored or not s.stored else s.size * count // s.stored

    def first_timestamp(self, s: Segment) -> int | None:
        """The first live record's timestamp (none when it has none, or a negative one)."""
        live = self.live(s)
        first = live[0].timestamp if live else None
        return first if first is not None and first >= 0 else None

    def time(self, s: Segment) -> int:
        """The segment's age for retention and min.compaction.lag.ms: its largest live timestamp, else when it was
        written."""
        stamps = [r.timestamp for r in self.live(s) if r.timestamp is not None and r.timestamp >= 0]
        return max(stamps) if stamps else s.created

    def min_horizon(self, s: Segment) -> int | None:
        return min((r.horizon for r in self.live(s) if r.horizon is not None), default=None)

    # Choosing (LogCleanerManager) --------------------------------------------------------------------------------

    def expired(self, segments: Sequence[Segment], config: Config, now: int, rolled: bool) -> int:
        """How many leading segments retention drops (``compact,delete``): past retention.ms, or beyond
        retention.bytes; the last one only once it counts as rolled."""
        if not config.delete:
            return 0
        candidates = segments if rolled else segments[:-1]
        by_time = 0
        if config.retention_ms >= 0:
            while by_time < len(candidates) and now - self.time(candidates[by_time]) > config.retention_ms:
                by_time += 1
        by_size = 0
        if config.retention_bytes >= 0:
            excess = sum(self.live_bytes(s) for s in segments) - config.retention_bytes
            for s in candidates:
                if excess < self.live_bytes(s):
                    break
                excess -= self.live_bytes(s)
                by_size += 1
        return max(by_time, by_size)

    def plan(self, now: int, segments: Sequence[Segment], config: Config, vector_max_age: int = WEEK) -> Choice:
        """Whether a run at ``now`` cleans this partition, over which range, and with what figures."""
        segments = list(segments)
        last = segments[-1] if segments else None
        first_of_last = None if last is None else self.first_timestamp(last)
        aged_out = last is not None and now - (first_of_last if first_of_last is not None else last.created) > min(
            config.segment_ms, config.max_compaction_lag_ms
        )
        rolled = aged_out or (last is not None and bool(self.erasures))
        below = len([s for s in segments if s.next <= self.log_start])
        retained = self.expired(segments[below:], config, now, aged_out)
        segments = segments[below + retained :]
        log_start = (segments[0].base if segments else self.end) if retained else self.log_start
        if not segments:
            if below + retained or self.erasures:  # the requests are carried out now: due at once, or overdue
                overdue = max((max(now - deadline, 0) for _, _, deadline in self.erasures), default=None)
                return Choice(True, "nothing left", log_start, self.end, self.end, overdue=overdue)
            return Choice(False, "empty", log_start)

        first_dirty, reset = self.checkpoint, False
        if not log_start <= first_dirty <= self.end:
            first_dirty, reset = log_start, True
        active_base = self.end if rolled else segments[-1].base
        non_active = segments if rolled else segments[:-1]
        bounds = [active_base, self.last_stable]
        if config.min_compaction_lag_ms > 0:
            young = [
                s.base
                for s in non_active[_floor(non_active, first_dirty) :]
                if self.time(s) > now - config.min_compaction_lag_ms
            ]
            bounds += young[:1]
        uncleanable = max(first_dirty, min(bounds))
        first_uncleanable = (
            active_base
            if uncleanable >= active_base
            else next((s.base for s in non_active if uncleanable < s.next), active_base)
        )

        clean = sum(self.live_bytes(s) for s in segments if s.base < first_dirty)
        start = _floor(segments, min(first_dirty, first_uncleanable))
        cleanable = sum(self.live_bytes(s) for s in segments[start:] if s.base < first_uncleanable)
        ratio = cleanable / (clean + cleanable) if clean + cleanable else 0.0

        firsts = [
            t
            for s in non_active[_floor(non_active, first_dirty) :]
            if (t := self.first_timestamp(s)) is not None and t > 0
        ]
        due = now - config.max_compaction_lag_ms
        delay = due - min(firsts) if firsts and min(firsts) < due else 0

        in_range = [s for s in segments if s.base < first_uncleanable]
        if self.last_clean is None or cleanable > 0:
            purge = any((h := self.min_horizon(s)) is not None and h <= now for s in in_range)
        else:  # the horizons that had passed at the last pass and stayed are guarded until the range grows
            purge = bool(in_range) and self.next_horizon is not None and self.next_horizon <= now
        vectors = max(
            (now - saturating_add(s.vector_created, vector_max_age) for s in in_range if s.vector_created is not None),
            default=-1,
        )
        lagging = delay > 0 and cleanable > 0
        erasures = [deadline for _, offset, deadline in self.erasures if offset < first_uncleanable]
        erasing = max((max(now - deadline, 0) for deadline in erasures), default=-1)
        overdue = max(delay if lagging else -1, vectors, erasing)

        why = next(
            (
                why
                for why, holds in (
                    ("erasure", erasures),
                    ("max lag", lagging),
                    ("dirty ratio", ratio > config.min_cleanable_dirty_ratio),
                    ("tombstones", purge),
                    ("deletion vectors", vectors >= 0),
                )
                if holds
            ),
            None,
        )
        work = sum(self.live_bytes(s) for s in in_range)
        figures = dict(
            first_dirty=first_dirty,
            first_uncleanable=first_uncleanable,
            ratio=ratio,
            delay=delay,
            overdue=overdue if overdue >= 0 else None,
            work=work,
            reset=reset,
        )
        if why is not None:
            return Choice(True, why, log_start, dedupe=True, **figures)  # type: ignore[arg-type]
        dropped = below + retained
        return Choice(bool(dropped), "retention" if dropped else "skip", log_start, **figures)  # type: ignore[arg-type]

    # Cleaning ------------------------------------------------------------------------------------------------

    def skip(self, choice: Choice) -> None:
        """A partition the run does not clean: only a checkpoint the planner reset is written."""
        if choice.reset:
            assert choice.first_dirty is not None
            self.checkpoint = choice.first_dirty

    def clean(self, choice: Choice, now: int, config: Config, stamp_from: int | None = None) -> None:
        """A pass over the chosen range at ``now``; a horizon it stamps counts from ``stamp_from`` (the wall clock
        when it is later than ``now``)."""
        assert choice.clean and choice.first_dirty is not None and choice.first_uncleanable is not None
        self.log = [r for r in self.log if r.offset >= choice.log_start]
        self.log_start = choice.log_start
        if not choice.dedupe:
            self.checkpoint = max(choice.first_dirty, choice.log_start)
            # (requests are carried out without reading records only when no segment is left)
            self.erasures = [request for request in self.erasures if request[1] >= choice.first_uncleanable]
            return
        stamp = saturating_add(max(now, stamp_from or now), config.delete_retention_ms)
        end = choice.first_uncleanable
        in_range = [r for r in self.log if r.offset < end]
        # The requests whose tombstones the range covers: their key's records below the tombstone go, and compete
        # for nothing.
        covered = [(key, offset) for key, offset, _ in self.erasures if offset < end]
        self.erasures = [request for request in self.erasures if request[1] >= end]
        erased = {
            r.offset
            for r in self.log
            for key, offset in covered
            if r.key == key and r.offset < offset and r.control is None
        }
        # Transactions: a producer's records up to its next marker; an abort marker aborts them.
        aborted: set[int] = set()
        pending: set[int] = set()  # markers with records of their transaction still before them
        members: dict[int, list[Rec]] = {}
        for r in self.log:
            if r.control is not None:
                txn = members.pop(r.producer, [])
                if txn:
                    pending.add(r.offset)
                if r.control == "abort":
                    aborted |= {m.offset for m in txn}
            elif r.transactional:
                members.setdefault(r.producer, []).append(r)
        competing = [
            r
            for r in in_range
            if r.key is not None and r.control is None and r.offset not in aborted and r.offset not in erased
        ]
        best: dict[str | None, tuple[int, int, int]] = {}
        for r in competing:
            best[r.key] = max(best.get(r.key, (-1, -1, -1)), (*self.version(r), r.offset))
        beyond = [r for r in self.log if r.offset >= end and r.key is not None and r.control is None]

        def guarded(r: Rec) -> bool:  # a stale record of its key waits beyond the range
            return any(t.key == r.key and self.version(t) < self.version(r) for t in beyond)

        kept: list[Rec] = []
        upcoming: list[int] = []  # horizons still to come among the records kept in the range
        for r in self.log:
            passed = r.horizon is not None and now >= r.horizon
            if r.offset >= end:
                kept.append(r)
                continue
            if r.offset in erased or (r.control is None and r.offset in aborted):
                continue
            if r.control is not None:
                keep = r.offset in pending or not passed
                stamped = r.horizon is None and r.offset not in pending
            elif r.key is None:
                keep, stamped = True, False
            elif best[r.key] != (*self.version(r), r.offset):
                continue
            elif r.value is None:
                keep = not passed or guarded(r)
                stamped = r.horizon is None
            else:
                keep, stamped = True, False
            if not keep:
                continue
            if stamped:
                r.horizon = stamp
                upcoming.append(stamp)
            elif r.horizon is not None and r.horizon > now:
                upcoming.append(r.horizon)
            kept.append(r)
        self.log = kept
        self.checkpoint = max(choice.first_dirty, end)
        self.last_clean = now
        self.next_horizon = min(upcoming, default=None)

    def run(self, now: int, segments: Sequence[Segment], config: Config | None = None) -> Choice:
        """Plan and clean one partition on its own (no budget)."""
        config = config or Config(strategy=self.strategy, header=self.header)
        choice = self.plan(now, segments, config)
        if choice.clean:
            self.clean(choice, now, config)
        else:
            self.skip(choice)
        return choice
