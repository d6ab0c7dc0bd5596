"""The reference model the cleaner is held to: SPEC §3 and Kafka's cleaner (reference §2-§3.12) written record by
record and batch by batch in plain Python, sharing no code with the job: which partitions a run selects, over which
range, in which order and why (Kafka's LogCleanerManager, the plan as ``plan --json`` prints it), what a pass keeps
of each record, every field of it, what it keeps of each ``.log`` batch (Kafka's ``filterTo``: copied, rebuilt,
kept empty for a producer that is still active or for the log's last offset, or dropped), and which objects the
pass writes (SPEC §9: a segment that loses records is rewritten, merged with its small neighbours, unless it is
clean and a deletion vector is enough).

The model keeps its own records, batches, producers and layout: which offsets each object covers, the records
written in it, when it was written (an appended segment when it was appended; a rewrite keeps its last source's
time, as Kafka keeps the last source's modification time) and when its deletion vector was (from the first record
it hid). Of the store it takes only each object's size in bytes and its name (an encoding's matters), once it has
checked that the job's manifest lays the log out as the model says (:meth:`Model.adopt`).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

#: Kafka's Long.MAX: the default max.compaction.lag.ms, and where sums of times saturate.
LONG_MAX = 2**63 - 1
#: The model's default delete.retention.ms (the settings it is compared under use the same unless they say).
RETENTION = 1000
WEEK = 7 * 86_400_000
DAY = 86_400_000
#: log.segment.bytes in the settings the model is compared under.
SEGMENT_BYTES = 65_536
#: A rewritten segment merges with its neighbours while its output is under segment.bytes / 8 (SPEC §9).
SMALL_DIVISOR = 8
#: deletion.vector.max.ratio's default: a clean segment takes a vector while at most this share is deleted.
VECTOR_MAX_RATIO = 0.2

K = TypeVar("K")


@dataclass
class Rec:
    """One record, every field the job keeps: a producer's epoch is -1 without a producer. In a ``.log`` partition,
    ``batch`` is the base offset of the batch that holds it, and ``timestamp`` what a reader sees (a LogAppendTime
    batch's records show the batch's append time)."""

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
    batch: int = -1

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
class Batch:
    """A ``.log`` record batch, its header as Kafka writes it: ``count`` records were written in it (0: an empty
    batch, kept for a producer's state or the log's last offset)."""

    base: int
    last: int
    count: int
    producer: int = -1
    epoch: int = -1
    sequence: int = -1
    codec: int = 0
    log_append_time: bool = False
    transactional: bool = False
    control: bool = False
    base_timestamp: int = -1
    max_timestamp: int = -1
    horizon: int | None = None

    def header(self) -> dict[str, Any]:
        """Every field of the header a reader compares (kafka-python's names)."""
        return {
            "base": self.base,
            "last": self.last,
            "count": self.count,
            "producer": self.producer,
            "epoch": self.epoch,
            "sequence": self.sequence,
            "codec": self.codec,
            "log_append_time": self.log_append_time,
            "transactional": self.transactional,
            "control": self.control,
            "base_timestamp": self.base_timestamp,
            "max_timestamp": self.max_timestamp,
            "horizon": self.horizon,
        }


@dataclass
class Producer:
    """What Kafka's producer state keeps of a producer: its epoch, its last batch's max timestamp (a data batch's or
    a marker's), and the last offset of its last data batch of that epoch (an epoch bump clears it)."""

    epoch: int
    last_timestamp: int
    last_data: int | None


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
    producer_id_expiration_ms: int = DAY
    segment_bytes: int = SEGMENT_BYTES

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
            "producer.id.expiration.ms": self.producer_id_expiration_ms,
            "segment.bytes": self.segment_bytes,
        }


@dataclass
class Segment:
    """One object of the log as the model lays it out: its offset range, when it was written, the offsets of the
    records written in it (a deletion vector hides some) and when its vector was first written. ``size`` (bytes)
    and ``path`` are the store's, taken once the model has checked the object (:meth:`Model.adopt`)."""

    base: int
    next: int
    created: int
    written: frozenset[int]
    vector_created: int | None = None
    size: int = 0
    path: str = ""


@dataclass(frozen=True)
class Choice:
    """The model's plan of one partition: cleaned or not, what a pass then does, and every figure ``plan --json``
    prints of it (``figures`` False: the planner measured nothing, as for a log without segments)."""

    clean: bool
    why: str
    log_start: int | None
    first_dirty: int | None = None  # the checkpoint, validated
    first_uncleanable: int | None = None
    ratio: float = 0.0
    delay: int = 0
    overdue: int | None = None  # past a bound on physical removal by this much (None: within every bound)
    work: int = 0  # live bytes of the range
    dedupe: bool = False  # records are read (not retention alone)
    reset: str | None = None  # the checkpoint reset, as the plan says it
    reason: str = ""
    clean_bytes: int = 0
    cleanable_bytes: int = 0
    rolled: bool = False
    for_erasure: bool = False  # rolled for an erasure request alone (the range's last segment is written apart)
    purge: bool = False
    expired: tuple[str, ...] = ()
    erasures: tuple[str, ...] = ()
    segments: tuple[str, ...] = ()
    checkpoint: int | None = None
    version: int | None = None

    def plan_json(
        self, partition: str, *, deferred_by: int | None = None, first_in_budget: bool = False
    ) -> dict[str, Any]:
        """What ``plan --json`` prints of the partition, every field, given what the budget made of it."""
        reason = self.reason
        clean = self.clean and deferred_by is None
        if deferred_by is not None:
            reason = f"deferred: per-run byte budget {deferred_by} exhausted ({reason})"
        elif first_in_budget and self.overdue is not None:
            reason = f"{reason}; overdue, so first in the per-run byte budget"
        measured = self.first_dirty is not None
        return {
            "partition": partition,
            "decision": "clean" if clean else "skip",
            "reason": reason,
            "version": self.version,
            "checkpoint": self.checkpoint,
            "first_dirty_offset": self.first_dirty,
            "checkpoint_reset": self.reset,
            "first_uncleanable_offset": self.first_uncleanable,
            "log_start_offset": self.log_start,
            "clean_bytes": self.clean_bytes,
            "cleanable_bytes": self.cleanable_bytes,
            "cleanable_ratio": round(self.ratio, 6),
            "compaction_delay_ms": self.delay,
            "active_rolled": self.rolled,
            "tombstone_purge": self.purge,
            "overdue_ms": self.overdue,
            "expired_segments": list(self.expired),
            "erasures": list(self.erasures),
            "clean_range": [self.log_start, self.first_uncleanable] if clean and measured else None,
            "segments": list(self.segments),
        }


@dataclass(frozen=True)
class Bounds:
    """The cleaner's own settings a pass is planned and laid out under."""

    vector_max_age: int = WEEK
    vector_max_ratio: float = VECTOR_MAX_RATIO
    split: bool = False  # task.max.records tiny: a rewrite's work is shared, so a run of rewrites may be cut


def saturating_add(a: int, b: int) -> int:
    return min(LONG_MAX, a + b)


def duration(ms: int) -> str:
    """A duration as the plan's reasons write it: its two largest units of days, hours, minutes and seconds."""
    seconds = ms // 1000
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    shown = [f"{value}{unit}" for value, unit in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if value]
    return "".join(shown[:2]) if shown else f"{ms}ms"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


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


def plan_json(now: int, choices: Mapping[str, Choice], budget: int | None) -> dict[str, Any]:
    """The whole of ``plan --json`` for partitions named as the planner lists them: the selected in the order
    they are taken, then the skipped (those the budget deferred last), with Kafka's gauges."""
    taken, deferred = order(choices, budget)
    skipped = [k for k, c in choices.items() if not c.clean]
    measured = [c for c in choices.values() if c.first_dirty is not None and c.why != "nothing left"]
    return {
        "now_ms": now,
        "max_dirty_percent": int(
            100 * max((c.ratio for c in measured if c.clean_bytes + c.cleanable_bytes > 0), default=0.0)
        ),
        "max_compaction_delay_secs": max((c.delay for c in measured), default=0) // 1000,
        "delayed_partitions": sum(1 for c in measured if c.delay > 0),
        "byte_budget": budget,
        "partitions": [
            *(choices[k].plan_json(k, first_in_budget=budget is not None) for k in taken),
            *(choices[k].plan_json(k) for k in skipped),
            *(choices[k].plan_json(k, deferred_by=budget) for k in deferred),
        ],
    }


@dataclass(frozen=True)
class Group:
    """A run of consecutive segments of the range and what the pass does with it: ``keep`` it, give its one segment
    a deletion ``vector``, or ``rewrite`` it into one object; ``must`` holds the segments that have to be rewritten
    on their own account (the others are small neighbours merged in)."""

    segments: tuple[Segment, ...]
    action: str
    must: frozenset[int] = frozenset()
    vector: frozenset[int] = frozenset()  # those that would take a deletion vector on their own


@dataclass
class Pass:
    """What the model's pass decided, before the store says how the job laid out its rewrites: the groups, and per
    segment of the range the offsets it keeps."""

    groups: list[Group]
    kept: set[int]  # offsets of the records the pass keeps in its range
    hidden_before: dict[int, frozenset[int]]  # per segment base, the offsets its object holds that no reader saw
    now: int
    horizon: int
    first_uncleanable: int
    stamped: set[int]  # offsets of records given their first horizon by this pass


@dataclass
class Model:
    """The reference: a partition's log as records (and, in ``.log`` partitions, batches) in objects, planned and
    cleaned by SPEC §3's rules."""

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
    layout: list[Segment] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)  # every batch the live objects hold (.log), in offset order
    producers: dict[int, Producer] = field(default_factory=dict)
    appended: dict[int, Rec] = field(default_factory=dict)  # every record ever appended, as appended
    version: int = 0  # the manifest version the model has seen last
    pending: Pass | None = None  # a pass whose layout the store has yet to show
    events: Counter[str] = field(default_factory=Counter)  # what the passes did to batches, for the tests' floors

    # Writing -------------------------------------------------------------------------------------------------

    def forget(self, key: str, now: int, deadline: int, batch: Batch | None = None) -> Rec:
        """An erasure request: a tombstone for ``key``, appended as a segment of its own, and the request."""
        tombstone = Rec(self.end, key, None, timestamp=now, batch=self.end if batch is not None else -1)
        self.append([tombstone], now, [batch] if batch is not None else None)
        self.erasures.append((key, tombstone.offset, deadline))
        return tombstone

    def append(self, recs: list[Rec], now: int, batches: list[Batch] | None = None) -> None:
        """An append at ``now``: a segment of its own holding ``recs`` (framed in ``batches`` in ``.log``)."""
        self.bases.append(self.end)
        self.version += 1
        for r in recs:
            if r.control is not None:
                self.open.pop(r.producer, None)
            elif r.transactional:
                self.open.setdefault(r.producer, r.offset)
        for b in batches or ():
            if b.producer < 0:
                continue
            known = self.producers.get(b.producer)
            same_epoch = known is not None and known.epoch == b.epoch
            last_data = (known.last_data if same_epoch else None) if b.control else b.last  # type: ignore[union-attr]
            self.producers[b.producer] = Producer(b.epoch, b.max_timestamp, last_data)
        self.log.extend(recs)
        self.appended.update({r.offset: replace(r) for r in recs})
        self.batches.extend(batches or ())
        next_offset = max([recs[-1].offset, *(b.last for b in batches or ())]) + 1
        self.layout.append(Segment(self.end, next_offset, now, frozenset(r.offset for r in recs)))
        self.end = next_offset

    @property
    def last_stable(self) -> int:
        """The first offset of the earliest open transaction, or the log end."""
        return min(self.open.values(), default=self.end)

    def version_of(self, r: Rec) -> tuple[int, int]:
        """(has a version, the version): compared first, then the offset."""
        if self.strategy == "timestamp":
            return (1, r.timestamp) if r.timestamp is not None and r.timestamp >= 0 else (0, -1)
        if self.strategy == "header":
            last = [v for k, v in r.headers if k == self.header]
            if last and len(last[-1]) == 8:
                return 1, int.from_bytes(last[-1], "big", signed=True)
            return 0, -1
        return 1, r.offset

    def active(self, producer: int, now: int, config: Config) -> Producer | None:
        """The producer's state while it is active at ``now``: a transaction open, or its last batch less than
        producer.id.expiration.ms old (Kafka expires it at ``now - lastTimestamp >= expiration``)."""
        state = self.producers.get(producer)
        if state is None or (
            producer not in self.open and now - state.last_timestamp >= config.producer_id_expiration_ms
        ):
            return None
        return state

    def retained_empty(self, b: Batch, first_uncleanable: int, now: int, config: Config) -> str | None:
        """Why a batch that holds no record is kept (``checkBatchRetention``'s RETAIN_EMPTY), or None: it is the
        last batch before the first uncleanable offset (KAFKA-17076), or an active producer's last batch: its last
        data batch, or with no data since an epoch bump, its markers of that epoch."""
        if b.last + 1 == first_uncleanable:
            return "the last batch before the first uncleanable offset"
        state = self.active(b.producer, now, config) if b.producer >= 0 else None
        if state is None:
            return None
        last = b.last == state.last_data if state.last_data is not None else b.control and b.epoch == state.epoch
        return "an active producer's last batch" if last else None

    # Live figures of a segment, from the model's own records --------------------------------------------------

    def live(self, s: Segment) -> list[Rec]:
        return [r for r in self.log if s.base <= r.offset < s.next]

    def live_bytes(self, s: Segment) -> int:
        """The object's size, less the share of its records no reader sees."""
        count = len(self.live(s))
        stored = len(s.written)
        return s.size if count == stored or not stored else s.size * count // stored

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

    def plan(self, now: int, config: Config, bounds: Bounds = Bounds()) -> Choice:
        """Whether a run at ``now`` cleans this partition, over which range, with what figures, and why."""
        segments = list(self.layout)
        last = segments[-1] if segments else None
        first_of_last = None if last is None else self.first_timestamp(last)
        aged_out = last is not None and now - (first_of_last if first_of_last is not None else last.created) > min(
            config.segment_ms, config.max_compaction_lag_ms
        )
        rolled = aged_out or (last is not None and bool(self.erasures))
        below = len([s for s in segments if s.next <= self.log_start])
        retained = self.expired(segments[below:], config, now, aged_out)
        gone = segments[: below + retained]
        segments = segments[below + retained :]
        log_start = (segments[0].base if segments else self.end) if retained else self.log_start
        common = dict(version=self.version, checkpoint=self.checkpoint, expired=tuple(s.path for s in gone))
        notes = [
            note
            for count, note in (
                (retained, f"retention: {retained} segment(s) expired"),
                (below, f"{below} segment(s) below the log start"),
            )
            if count
        ]
        retention = "; ".join(notes)
        if not segments:
            if gone or self.erasures:  # the requests are carried out now: due at once, or overdue
                overdue = max((max(now - deadline, 0) for _, _, deadline in self.erasures), default=None)
                late = f", past the deadline by {duration(overdue)}" if overdue else ""
                why = retention or f"erasure requested: no segment is left to rewrite{late}"
                return Choice(
                    True,
                    "nothing left",
                    log_start,
                    self.end,
                    self.end,
                    overdue=overdue,
                    reason=why,
                    erasures=tuple(digest(k) for k, _, _ in self.erasures),
                    **common,  # type: ignore[arg-type]
                )
            return Choice(False, "empty", log_start, reason="empty log", **common)  # type: ignore[arg-type]

        first_dirty, reset = self.checkpoint, None
        if first_dirty < log_start:
            first_dirty, reset = log_start, f"checkpoint {self.checkpoint} is below the log start {log_start}"
        elif first_dirty > self.end:
            first_dirty, reset = log_start, f"checkpoint {self.checkpoint} is past the log end {self.end}"
        active_base = self.end if rolled else segments[-1].base
        non_active = segments if rolled else segments[:-1]
        bound, name = active_base, "active"
        if self.last_stable < bound:
            bound, name = self.last_stable, "lso"
        if config.min_compaction_lag_ms > 0:
            young = [
                s.base
                for s in non_active[_floor(non_active, first_dirty) :]
                if self.time(s) > now - config.min_compaction_lag_ms
            ]
            if young and young[0] < bound:
                bound, name = young[0], "lag"
        uncleanable = max(first_dirty, bound)
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
            tombstones_due = any((h := self.min_horizon(s)) is not None and h <= now for s in in_range)
        else:  # the horizons that had passed at the last pass and stayed are guarded until the range grows
            tombstones_due = bool(in_range) and self.next_horizon is not None and self.next_horizon <= now
        vectors = max(
            (
                now - saturating_add(s.vector_created, bounds.vector_max_age)
                for s in in_range
                if s.vector_created is not None
            ),
            default=-1,
        )
        lagging = delay > 0 and cleanable > 0
        erasures = [(key, deadline) for key, offset, deadline in self.erasures if offset < first_uncleanable]
        erasing = max((max(now - deadline, 0) for _, deadline in erasures), default=-1)
        overdue = max(delay if lagging else -1, vectors, erasing)

        ratio_note = (
            f"dirty ratio {ratio:.2f} {'>' if ratio > config.min_cleanable_dirty_ratio else '<='} "
            f"{config.min_cleanable_dirty_ratio:.2f}"
        )
        aged_note = (
            f"deletion vectors at least deletion.vector.max.age.ms old ("
            f"{f'due for {duration(vectors)}' if vectors > 0 else 'due now'}): rewrite to remove records "
            "physically"
        )
        grounds = [
            (why, note)
            for why, holds, note in (
                (
                    "erasure",
                    erasures,
                    f"erasure requested for {len(erasures)} key(s)"
                    f"{f', past the deadline by {duration(erasing)}' if erasing > 0 else ''}",
                ),
                ("max lag", lagging, f"max.compaction.lag.ms exceeded by {duration(delay)}"),
                ("dirty ratio", ratio > config.min_cleanable_dirty_ratio, ratio_note),
                ("tombstones", tombstones_due, "tombstones expired: delete horizon passed"),
                ("deletion vectors", vectors >= 0, aged_note),
                ("retention", bool(gone), retention),
            )
            if holds
        ]
        waiting = len(self.erasures) - len(erasures)
        wait = (
            "min.compaction.lag.ms"
            if name == "lag"
            else f"an open transaction (the last stable offset {self.last_stable})"
        )
        assert not waiting or name != "active", "a pending request rolls the active segment"
        waits = [f"{waiting} erasure request(s) wait for {wait}"] if waiting else []
        work = sum(self.live_bytes(s) for s in in_range)
        figures = dict(
            first_dirty=first_dirty,
            first_uncleanable=first_uncleanable,
            ratio=ratio,
            delay=delay,
            overdue=overdue if overdue >= 0 else None,
            work=work,
            reset=reset,
            clean_bytes=clean,
            cleanable_bytes=cleanable,
            rolled=rolled,
            for_erasure=rolled and not aged_out,
            purge=tombstones_due or vectors >= 0,
            erasures=tuple(digest(k) for k, _ in erasures),
            segments=tuple(s.path for s in in_range),
            **common,
        )
        if not grounds:
            if cleanable > 0:
                why = ratio_note
            elif first_dirty >= self.end:
                why = "no dirty records"
            else:
                why = {
                    "active": "active segment only",
                    "lso": f"nothing cleanable below the last stable offset {self.last_stable} (open transaction)",
                    "lag": "dirty segments are newer than min.compaction.lag.ms",
                }[name]
            return Choice(False, "skip", log_start, reason="; ".join([why, *waits]), **figures)  # type: ignore[arg-type]
        first, note = grounds[0]
        also = [*waits, *(n for w, n in grounds[1:] if w in ("deletion vectors", "retention"))]
        return Choice(True, first, log_start, dedupe=first != "retention", reason="; ".join([note, *also]), **figures)  # type: ignore[arg-type]

    # Cleaning ------------------------------------------------------------------------------------------------

    def skip(self, choice: Choice) -> None:
        """A partition the run does not clean: only a checkpoint the planner reset is written."""
        if choice.reset:
            assert choice.first_dirty is not None
            self.checkpoint = choice.first_dirty
            self.version += 1

    def clean(
        self, choice: Choice, now: int, config: Config, bounds: Bounds = Bounds(), stamp_from: int | None = None
    ) -> None:
        """A pass over the chosen range at ``now``; a horizon it stamps counts from ``stamp_from`` (the wall clock
        when it is later than ``now``). The objects it writes are laid out once the store shows them
        (:meth:`adopt`)."""
        assert choice.clean and choice.first_dirty is not None and choice.first_uncleanable is not None
        assert choice.log_start is not None
        self.version += 1
        # The producers the pass finds expired leave the producer state (as Kafka removes them): one that writes
        # again starts afresh, a marker of it then holding no last data offset.
        self.producers = {pid: p for pid, p in self.producers.items() if self.active(pid, now, config) is not None}
        dropped = [s for s in self.layout if s.base < choice.log_start]
        self.layout = [s for s in self.layout if s.base >= choice.log_start]
        self.log = [r for r in self.log if r.offset >= choice.log_start]
        self.batches = [b for b in self.batches if b.base >= choice.log_start]
        self.log_start = choice.log_start
        assert all(s.next <= choice.log_start for s in dropped)
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
        # Transactions: a producer's records up to its next marker; an abort marker aborts them. A transaction's
        # empty .log batch (kept for its producer) still belongs to it, as Kafka's cleaner reads it: its marker stays
        # while the batch does (an empty marker batch changes nothing).
        aborted: set[int] = set()
        pending: set[int] = set()  # markers with records of their transaction still before them
        members: dict[int, list[int]] = {}
        empty = [(b.last, b.producer) for b in self.batches if not b.count and b.transactional and not b.control]
        for offset, producer, control in sorted(
            [
                *((r.offset, r.producer, r.control) for r in self.log if r.control is not None or r.transactional),
                *((last, producer, None) for last, producer in empty),
            ]
        ):
            if control is not None:
                txn = members.pop(producer, [])
                if txn:
                    pending.add(offset)
                if control == "abort":
                    aborted |= set(txn)
            else:
                members.setdefault(producer, []).append(offset)
        competing = [
            r
            for r in in_range
            if r.key is not None and r.control is None and r.offset not in aborted and r.offset not in erased
        ]
        best: dict[str | None, tuple[int, int, int]] = {}
        for r in competing:
            best[r.key] = max(best.get(r.key, (-1, -1, -1)), (*self.version_of(r), r.offset))
        beyond = [r for r in self.log if r.offset >= end and r.key is not None and r.control is None]

        def guarded(r: Rec) -> bool:  # a stale record of its key waits beyond the range
            return any(t.key == r.key and self.version_of(t) < self.version_of(r) for t in beyond)

        kept: set[int] = set()
        stamped: set[int] = set()
        upcoming: list[int] = []  # horizons still to come among the records kept in the range
        for r in in_range:
            passed = r.horizon is not None and now >= r.horizon
            if r.offset in erased or (r.control is None and r.offset in aborted):
                continue
            if r.control is not None:
                keep = r.offset in pending or not passed
                stamps = r.horizon is None and r.offset not in pending
            elif r.key is None:
                keep, stamps = True, False
            elif best[r.key] != (*self.version_of(r), r.offset):
                continue
            elif r.value is None:
                keep = not passed or guarded(r)
                stamps = r.horizon is None
            else:
                keep, stamps = True, False
            if not keep:
                continue
            kept.add(r.offset)
            if stamps:
                stamped.add(r.offset)
                upcoming.append(stamp)
            elif r.horizon is not None and r.horizon > now:
                upcoming.append(r.horizon)
        live = {r.offset for r in self.log}
        hidden_before = {s.base: s.written - live for s in self.layout}
        groups = self.lay_out(choice, kept, stamped, covered, now, config, bounds)
        self.pending = Pass(groups, kept, hidden_before, now, stamp, end, stamped)
        self.checkpoint = max(choice.first_dirty, end)
        self.last_clean = now
        self.next_horizon = min(upcoming, default=None)

    def lay_out(
        self,
        choice: Choice,
        kept: set[int],
        stamped: set[int],
        covered: list[tuple[str, int]],
        now: int,
        config: Config,
        bounds: Bounds,
    ) -> list[Group]:
        """Which objects the pass writes (SPEC §9): a segment that loses records or holds an erased key's record,
        or has horizons to stamp (markers, or tombstones while it is dirty), or a deletion vector past its age, or
        a ``.log`` empty batch that no longer has to stay, is rewritten; but a clean one that only loses records
        and stays within deletion.vector.max.ratio deleted takes a deletion vector instead, and stands alone however
        small (merging it would recopy its records for the few it loses). Rewritten segments merge with their small
        unchanged neighbours while the output stays within segment.bytes (the segment rolled for an erasure alone
        stays apart, the log's last); a large segment that need not be rewritten stands alone."""
        assert choice.first_dirty is not None and choice.first_uncleanable is not None
        end = choice.first_uncleanable
        in_range = [s for s in self.layout if s.base < end]
        live = {r.offset: r for r in self.log}
        apart = in_range[-1].base if choice.for_erasure and in_range else None
        groups: list[Group] = []
        group: list[Segment] = []
        must: set[int] = set()
        vector: set[int] = set()
        size = 0

        def close() -> None:
            nonlocal group, size
            if len(group) > 1 or (group and group[0].base in must):
                groups.append(
                    Group(
                        tuple(group),
                        "rewrite",
                        frozenset(s.base for s in group if s.base in must),
                        frozenset(s.base for s in group if s.base in vector),
                    )
                )
            elif group:
                groups.append(Group(tuple(group), "vector" if group[0].base in vector else "keep"))
            group, size = [], 0

        for s in in_range:
            records = [o for o in s.written if o in live]
            lost = len([o for o in records if o not in kept])
            dirty = s.next > choice.first_dirty
            tombstones = any(self.appended[o].tombstone for o in s.written)
            needs_stamp = any(o in stamped and live[o].control is not None for o in records) or (dirty and tombstones)
            aged = s.vector_created is not None and saturating_add(s.vector_created, bounds.vector_max_age) <= now
            erased = any(
                (r := self.appended[o]).key == key and o < offset and r.control is None
                for o in s.written
                for key, offset in covered
            )
            stale = any(
                b.count == 0 and not self.retained_empty(b, end, now, config)
                for b in self.batches
                if s.base <= b.base < s.next
            )
            deleted = len(s.written) - len(records) + lost
            if (
                lost
                and not (dirty or needs_stamp or aged or erased)
                and bounds.vector_max_ratio > 0
                and deleted <= bounds.vector_max_ratio * len(s.written)
            ):
                vector.add(s.base)
            elif lost or erased or needs_stamp or aged or stale:
                must.add(s.base)
            estimate = self.live_bytes(s) * (len(records) - lost) // len(records) if records else 0
            if s.base in vector or (s.base not in must and estimate >= config.segment_bytes // SMALL_DIVISOR):
                close()
                groups.append(Group((s,), "vector" if s.base in vector else "keep"))
                continue
            if group and (size + estimate > config.segment_bytes or s.base == apart):
                close()
            group.append(s)
            size += estimate
        close()
        return groups

    def adopt(self, objects: Sequence[Mapping[str, Any]], config: Config, bounds: Bounds = Bounds()) -> None:
        """Check the job's manifest (its segment entries as JSON) against the model's layout, then take each
        object's size and name: the objects a pass left as they were, gave a deletion vector or wrote (each
        rewrite covering consecutive segments of one of the model's groups, all of them when a rewrite's work is
        not shared, and holding exactly the records the model keeps there, written when its last source was), the
        segments a rewrite that kept nothing removed, and every appended segment as appended."""
        by_base = {entry["base_offset"]: entry for entry in objects}
        if self.pending is not None:
            self._apply(self.pending, by_base, config, bounds)
            self.pending = None
        assert [(e["base_offset"], e["next_offset"]) for e in objects] == [(s.base, s.next) for s in self.layout], (
            "the objects of the log"
        )
        live = {r.offset for r in self.log}
        for s, entry in zip(self.layout, objects, strict=True):
            vector = entry.get("deletes")
            hidden = len(s.written - live)
            assert (entry["created_ms"], entry["record_count"]) == (s.created, len(s.written)), (
                f"the object at {s.base}: when it was written and how many records it holds"
            )
            assert (vector["created_ms"] if vector else None, vector["count"] if vector else 0) == (
                s.vector_created,
                hidden if s.vector_created is not None else 0,
            ), f"the deletion vector at {s.base}"
            s.size, s.path = entry["size_bytes"], entry["path"]

    def settled(self, config: Config) -> Model:
        """The model as a pending pass leaves it when each of its groups is written whole (as a job whose rewrites
        are not shared writes them)."""
        probe = copy.deepcopy(self)
        if probe.pending is not None:
            probe._apply(probe.pending, {}, config, Bounds())
            probe.pending = None
        return probe

    def _apply(self, done: Pass, objects: Mapping[int, Mapping[str, Any]], config: Config, bounds: Bounds) -> None:
        """The pass's groups as the job laid them out: each group whole, or (a rewrite's work shared) cut into
        runs, checked, then applied to the model's layout, records and batches."""
        live_after: list[Rec] = [r for r in self.log if r.offset >= done.first_uncleanable or r.offset in done.kept]
        layout: list[Segment] = []
        batches: list[Batch] = [b for b in self.batches if b.base >= done.first_uncleanable]
        for group in done.groups:
            for run, action in self._runs(group, objects, bounds):
                first = run[0]
                if action == "keep":
                    layout.append(first)
                elif action == "vector":
                    layout.append(
                        replace(
                            first, vector_created=first.vector_created if first.vector_created is not None else done.now
                        )
                    )
                    self.events[
                        "deletion vector extended" if first.vector_created is not None else "deletion vector"
                    ] += 1
                else:
                    written = frozenset(o for s in run for o in s.written if o in done.kept)
                    framed = [b for s in run for b in self._reframe(s, done, config)]
                    if written or framed:
                        layout.append(Segment(first.base, run[-1].next, run[-1].created, written))
                    self.events["rewritten" if written or framed else "rewritten, nothing kept"] += 1
                    batches.extend(framed)
                    continue
                batches.extend(b for b in self.batches if first.base <= b.base < first.next)
        beyond = [s for s in self.layout if s.base >= done.first_uncleanable]
        self.layout = layout + beyond
        self.batches = sorted(batches, key=lambda b: b.base)
        for r in live_after:
            if r.offset in done.stamped:
                r.horizon = done.horizon
        self.log = live_after

    def _runs(
        self, group: Group, objects: Mapping[int, Mapping[str, Any]], bounds: Bounds
    ) -> list[tuple[tuple[Segment, ...], str]]:
        """How the job laid out one of the model's groups: the group itself, unless a shared rewrite cut it into
        runs, each of which is then laid out by the same rules (a segment alone is rewritten only if it must be,
        else left as it is or given its deletion vector)."""
        if group.action != "rewrite" or not bounds.split:
            return [(group.segments, group.action)]
        runs: list[tuple[tuple[Segment, ...], str]] = []
        i = 0
        while i < len(group.segments):
            s = group.segments[i]
            entry = objects.get(s.base)
            if entry is not None and entry["path"] == s.path:  # the same object: left alone, or a vector
                assert s.base not in group.must, f"the object at {s.base} must be rewritten"
                runs.append(((s,), "vector" if s.base in group.vector else "keep"))
                i += 1
                continue
            if entry is not None:  # a new object: the run of segments it covers
                run = tuple(t for t in group.segments[i:] if t.base < entry["next_offset"])
                assert run[-1].next == entry["next_offset"], f"a rewrite at {s.base} ends inside a segment"
            else:  # segments a rewrite that kept nothing removed
                run = tuple(itertools.takewhile(lambda t: t.base not in objects, group.segments[i:]))
            assert len(run) > 1 or s.base in group.must, f"the object at {s.base} is rewritten alone, needlessly"
            runs.append((run, "rewrite"))
            i += len(run)
        return runs

    def _reframe(self, s: Segment, done: Pass, config: Config) -> list[Batch]:
        """A rewritten ``.log`` segment's batches (Kafka's ``filterTo``): copied when every record stays and no
        horizon is new, rebuilt with the survivors (same offsets, producer, sequence, codec and timestamp type; a
        new horizon as KIP-534 writes it), kept empty when it must be, or dropped."""
        out = []
        for b in (b for b in self.batches if s.base <= b.base < s.next):
            written = sorted(o for o in s.written if b.base <= o <= b.last)
            survivors = [o for o in written if o in done.kept and o not in done.hidden_before[s.base]]
            stamps = any(o in done.stamped for o in survivors)
            kept_empty = self.retained_empty(b, done.first_uncleanable, done.now, config)
            if len(survivors) == b.count and not stamps and (b.count or kept_empty):
                out.append(b)
                self.events[f"kept empty: {kept_empty}" if not b.count else "copied"] += 1
            elif survivors:
                horizon = done.horizon if stamps and b.horizon is None else b.horizon
                first = self.appended[survivors[0]].timestamp
                timestamps = [t if (t := self.appended[o].timestamp) is not None else -1 for o in survivors]
                out.append(
                    replace(
                        b,
                        count=len(survivors),
                        horizon=horizon,
                        base_timestamp=horizon if horizon is not None else (first if first is not None else -1),
                        max_timestamp=b.max_timestamp if b.log_append_time else max(timestamps),
                    )
                )
                self.events["rebuilt with LogAppendTime" if b.log_append_time else "rebuilt"] += 1
            elif b.count and kept_empty:
                out.append(replace(b, count=0, codec=0, horizon=None, base_timestamp=-1))
                self.events[f"emptied: {kept_empty}"] += 1
            else:
                self.events["dropped, empty" if not b.count else "dropped"] += 1
        return out
