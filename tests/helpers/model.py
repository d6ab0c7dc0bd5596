"""The reference model the cleaner is held to: SPEC §3 written record by record in plain Python, sharing no code
with the job (the differential tests and the kafka-python interop test compare the job's logs with it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The model's delete.retention.ms (the settings it is compared under use the same).
RETENTION = 1000


@dataclass
class Rec:
    offset: int
    key: str | None
    value: str | None
    timestamp: int | None = None
    header: bytes | None = None
    producer: int = -1
    transactional: bool = False
    control: str | None = None
    horizon: int | None = None

    def row(self) -> dict[str, Any]:
        return {"offset": self.offset, "key": self.key, "value": self.value, "timestamp": self.timestamp,
                "headers": [("v", self.header)] if self.header is not None else None,
                "producer_id": self.producer, "is_transactional": self.transactional,
                "is_control": self.control is not None, "control_type": self.control}


@dataclass
class Model:
    """The reference: a partition's log as a list of records, cleaned by SPEC §3's rules."""

    strategy: str
    log: list[Rec] = field(default_factory=list)
    bases: list[int] = field(default_factory=list)  # base offset of each appended segment
    end: int = 0
    checkpoint: int = 0
    last_clean: int | None = None
    open: dict[int, int] = field(default_factory=dict)  # producer -> first offset of its open transaction
    erasures: list[tuple[str, int]] = field(default_factory=list)  # pending requests: key, tombstone offset
    last_end: int = 0  # where the last pass's range ended (past the active segment when an erasure rolled it)

    def forget(self, key: str, now: int) -> Rec:
        """An erasure request: a tombstone for ``key``, appended as a segment of its own, and the request."""
        tombstone = Rec(self.end, key, None, timestamp=now)
        self.append([tombstone])
        self.erasures.append((key, tombstone.offset))
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

    def version(self, r: Rec) -> tuple[int, int]:
        """(has a version, the version): compared first, then the offset."""
        if self.strategy == "timestamp":
            return (1, r.timestamp) if r.timestamp is not None and r.timestamp >= 0 else (0, -1)
        if self.strategy == "header":
            if r.header is not None and len(r.header) == 8:
                return 1, int.from_bytes(r.header, "big", signed=True)
            return 0, -1
        return 1, r.offset

    def run(self, now: int) -> None:
        # The cleaned range ends at the segment holding min(last stable offset, active segment's base); a pending
        # erasure request rolls the active segment (its base is then the log end).
        stable = min(self.open.values(), default=self.end)
        active = self.end if self.erasures else self.bases[-1]
        uncleanable = max(self.checkpoint, min(stable, active))
        end = max(b for b in [*self.bases, active] if b <= uncleanable)
        in_range = [r for r in self.log if r.offset < end]
        # Selected when there is something new to clean, or a horizon passed since the last pass (of a record in
        # its range, which an erasure may have made larger than this one).
        horizon_passed = any(r.horizon is not None and r.horizon <= now and r.offset < max(end, self.last_end)
                             and (self.last_clean is None or r.horizon > self.last_clean) for r in self.log)
        if not in_range or not (self.checkpoint < end or horizon_passed):
            return
        self.last_end = end
        # The requests whose tombstones the range covers: their key's records below the tombstone go, and compete
        # for nothing.
        covered = [(key, offset) for key, offset in self.erasures if offset < end]
        self.erasures = [request for request in self.erasures if request not in covered]
        erased = {r.offset for r in self.log for key, offset in covered
                  if r.key == key and r.offset < offset and r.control is None}
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
        competing = [r for r in in_range if r.key is not None and r.control is None and r.offset not in aborted
                     and r.offset not in erased]
        best: dict[str | None, tuple[int, int, int]] = {}
        for r in competing:
            best[r.key] = max(best.get(r.key, (-1, -1, -1)), (*self.version(r), r.offset))
        beyond = [r for r in self.log if r.offset >= end and r.key is not None and r.control is None]

        def guarded(r: Rec) -> bool:  # a stale record of its key waits beyond the range
            return any(t.key == r.key and self.version(t) < self.version(r) for t in beyond)

        kept = []
        for r in self.log:
            passed = r.horizon is not None and now >= r.horizon
            if r.offset >= end:
                kept.append(r)
            elif r.offset in erased:
                continue
            elif r.control is not None:
                if r.offset in pending or not passed:
                    r.horizon = r.horizon if r.horizon is not None or r.offset in pending else now + RETENTION
                    kept.append(r)
            elif r.offset in aborted:
                continue
            elif r.key is None:
                kept.append(r)
            elif best[r.key] != (*self.version(r), r.offset):
                continue
            elif r.value is None:
                if not passed or guarded(r):
                    r.horizon = r.horizon if r.horizon is not None else now + RETENTION
                    kept.append(r)
            else:
                kept.append(r)
        self.log = kept
        self.checkpoint = max(self.checkpoint, end)
        self.last_clean = now
