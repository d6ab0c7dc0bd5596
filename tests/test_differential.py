"""Differential test: random logs cleaned by the job keep exactly what a small reference model keeps.

The model is written from SPEC §3 in plain Python, record by record, and shares no code with the job.
Each example is a few topics (one per strategy) whose partitions receive appends between runs at
increasing ``now``; after every run the (offset, delete horizon) pairs of each partition must match.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from compaction.cleaner import Cleaner
from compaction.config import Settings
from compaction.dedupe import PLANS
from compaction.segment import records
from compaction.store import Store, TopicPartition

pytestmark = [pytest.mark.spark, pytest.mark.slow]

RETENTION = 1000
T0 = 10_000
STEP = 700
TOPICS = {"off": "offset", "ts": "timestamp", "hdr": "header"}
CONFIG = Settings.load(overrides={
    "log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0,
    "log.cleaner.delete.retention.ms": RETENTION,
    "topics": {"ts": {"compaction.strategy": "timestamp"},
               "hdr": {"compaction.strategy": "header", "compaction.strategy.header": "v"}}}, environ={})
BUCKETED = Settings.load(overrides={**CONFIG.model_dump(by_alias=True, exclude={"cleaner", "store"}),
                                    "cleaner": {"task.max.records": 4}}, environ={})


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
    open: dict[int, int] = field(default_factory=dict)

    def append(self, recs: list[Rec]) -> None:
        self.bases.append(self.end)
        for r in recs:
            if r.control is not None:
                self.open.pop(r.producer, None)
            elif r.transactional:
                self.open.setdefault(r.producer, r.offset)
        self.log.extend(recs)
        self.end = recs[-1].offset + 1

    def version(self, r: Rec) -> tuple[int, int, int]:
        if self.strategy == "timestamp":
            ok = r.timestamp is not None and r.timestamp >= 0
            return (1, r.timestamp, r.offset) if ok else (0, -1, r.offset)  # type: ignore[return-value]
        if self.strategy == "header":
            ok = r.header is not None and len(r.header) == 8
            return (1, int.from_bytes(r.header, "big", signed=True), r.offset) if ok else (0, -1, r.offset)  # type: ignore[arg-type]
        return (1, r.offset, r.offset)

    def run(self, now: int) -> None:
        lso = min(self.open.values(), default=self.end)
        active = self.bases[-1]
        uncleanable = max(self.checkpoint, min(lso, active))
        end = active if uncleanable >= active else max(b for b in self.bases if b <= uncleanable)
        in_range = [r for r in self.log if r.offset < end]
        purge = any(r.horizon is not None and r.horizon <= now for r in in_range)
        if not (self.checkpoint < end or purge) or not in_range:
            return
        fate: dict[int, str] = {}
        members: dict[int, list[Rec]] = {}
        pending: dict[int, bool] = {}
        for r in self.log:
            if r.control is not None:
                txn = members.pop(r.producer, [])
                pending[r.offset] = bool(txn)
                for m in txn:
                    fate[m.offset] = r.control
            elif r.transactional:
                members.setdefault(r.producer, []).append(r)
        aborted = {o for o, kind in fate.items() if kind == "abort"}
        best: dict[str, tuple[int, int, int]] = {}
        for r in in_range:
            if r.key is not None and r.control is None and r.offset not in aborted:
                best[r.key] = max(best.get(r.key, (-1, -1, -1)), self.version(r))
        last = max(r.offset for r in in_range)
        kept = []
        for r in self.log:
            if r.offset >= end:
                kept.append(r)
                continue
            passed = r.horizon is not None and now >= r.horizon
            if r.control is not None:
                if pending[r.offset]:
                    kept.append(r)
                elif not passed:
                    r.horizon = r.horizon if r.horizon is not None else now + RETENTION
                    kept.append(r)
                continue
            if r.offset in aborted:
                continue
            if r.key is None:
                kept.append(r)
                continue
            winner = best[r.key] == self.version(r)
            if not winner and not (self.strategy != "offset" and r.offset == last):
                continue
            if r.value is None:
                if winner and passed:
                    continue
                if r.horizon is None:
                    r.horizon = now + RETENTION
            kept.append(r)
        self.log = kept
        self.checkpoint = max(self.checkpoint, end)


KEYS = st.sampled_from(["a", "b", "c", None])
HEADERS = st.one_of(st.none(), st.integers(-3, 3).map(lambda n: n.to_bytes(8, "big", signed=True)),
                    st.just(b"bad"))


@st.composite
def batches(draw: st.DrawFn) -> dict[str, Any]:
    """One append: plain records, or a transaction's records with (usually) its marker."""
    n = draw(st.integers(1, 5))
    rows = [{"key": draw(KEYS), "tombstone": draw(st.booleans()) and draw(st.booleans()),
             "timestamp": draw(st.one_of(st.none(), st.integers(-1, 50))), "header": draw(HEADERS)}
            for _ in range(n)]
    producer = draw(st.sampled_from([None, None, 1, 2]))
    marker = draw(st.sampled_from(["commit", "abort", "commit", None])) if producer is not None else None
    return {"rows": rows, "producer": producer, "marker": marker}


HISTORY = st.lists(st.lists(st.lists(batches(), min_size=1, max_size=3), min_size=2, max_size=2), min_size=3,
                   max_size=3)


@pytest.mark.parametrize("plan", [*PLANS, "arrow-buckets"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(history=HISTORY)
def test_job_keeps_exactly_what_the_reference_model_keeps(spark, plan: str, history) -> None:  # type: ignore[no-untyped-def]
    store = Store.open(tempfile.mkdtemp(prefix="differential-"))
    partitions = [TopicPartition(topic, p) for topic in TOPICS for p in range(2)]
    models = {tp: Model(TOPICS[tp.topic]) for tp in partitions}
    counter = 0
    for step, appends_per_partition in enumerate(history):
        now = T0 + step * STEP
        for index, tp in enumerate(partitions):
            model = models[tp]
            for batch in appends_per_partition[index % 2]:
                recs = []
                for row in batch["rows"]:
                    counter += 1
                    recs.append(Rec(model.end + len(recs), row["key"], None if row["tombstone"] else f"v{counter}",
                                    row["timestamp"], row["header"], batch["producer"] or -1,
                                    batch["producer"] is not None))
                if batch["marker"] is not None:
                    recs.append(Rec(model.end + len(recs), None, None, producer=batch["producer"],
                                    control=batch["marker"]))
                model.append(recs)
                store.append(tp, records([r.row() for r in recs]), now_ms=now)
        if plan == "arrow-buckets":  # every partition split into key buckets decided by separate tasks
            Cleaner(spark, store, BUCKETED, dedupe_plan="arrow").run(now)
        else:
            Cleaner(spark, store, CONFIG, dedupe_plan=plan).run(now)
        for tp in partitions:
            models[tp].run(now)
            table = store.read(tp, columns=["offset", "delete_horizon_ms"]).to_pylist()
            actual = [(r["offset"], r["delete_horizon_ms"]) for r in table]
            expected = [(r.offset, r.horizon) for r in models[tp].log]
            assert actual == expected, f"{tp} after run {step} at {now}"
            assert store.manifest(tp).first_dirty_offset == models[tp].checkpoint or not models[tp].bases
