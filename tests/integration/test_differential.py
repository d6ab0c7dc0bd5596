"""Differential test: random logs cleaned by every plan keep exactly what a small reference model keeps.

The model is SPEC §3 written record by record in plain Python, sharing no code with the job. Each
example is a history of steps; in each, every partition (one topic per strategy) receives appends, then
the job runs at a later ``now`` (sometimes past the tombstones' horizons). After every run, each
partition's (offset, delete horizon) pairs and checkpoint must equal the model's.

The Arrow plan (whole partitions, and split into key ranges with a tiny ``task.max.records``) runs in
this process over hundreds of examples; every plan also runs on Spark over a smaller fixed set. Histories with
erasure requests (``forget``: a tombstone and a request) check that an erasure removes the key's older records and
changes nothing else.
"""

from __future__ import annotations

import hashlib
import tempfile
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from compaction.clean.cleaner import Cleaner
from compaction.config import Settings
from compaction.engine import stages
from compaction.erasure import request_erasure
from compaction.kafka import batch_table, encode
from compaction.store import SegmentFormat, Store, TopicPartition
from compaction.store.formats import decode_log
from compaction.store.segment import records
from compaction.store.verify import verify
from tests.helpers.inline import InlineSession
from tests.helpers.model import RETENTION, Model, Rec
from tests.helpers.settings import settings_with

T0 = 10_000
TOPICS = {"off": "offset", "ts": "timestamp", "hdr": "header"}
BASE = {"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0,
        "log.cleaner.delete.retention.ms": RETENTION, "log.segment.bytes": 65_536,
        "topics": {"ts": {"compaction.strategy": "timestamp"},
                   "hdr": {"compaction.strategy": "header", "compaction.strategy.header": "v"}}}
WHOLE = settings_with(BASE)
SPLIT = settings_with({**BASE, "cleaner": {"task.max.records": 2}})
#: .log segments: producers expire at once, so that only the rules decide which batches keep records.
KAFKA = {**BASE, "producer.id.expiration.ms": 1}
KAFKA_WHOLE = settings_with(KAFKA)
KAFKA_SPLIT = settings_with({**KAFKA, "cleaner": {"task.max.records": 2}})


KEYS = st.sampled_from(["a", "b", "c", None])
HEADERS = st.one_of(st.none(), st.integers(-3, 3).map(lambda n: n.to_bytes(8, "big", signed=True)),
                    st.just(b"bad"))


@st.composite
def batches(draw: st.DrawFn) -> dict[str, Any]:
    """One append: plain records, or a transaction's records with (usually) its marker."""
    n = draw(st.integers(1, 4))
    rows = [{"key": draw(KEYS), "tombstone": draw(st.integers(0, 3)) == 0,
             "timestamp": draw(st.one_of(st.none(), st.integers(-1, 50))), "header": draw(HEADERS)}
            for _ in range(n)]
    producer = draw(st.sampled_from([None, None, 1, 2]))
    marker = draw(st.sampled_from(["commit", "abort", "commit", None])) if producer is not None else None
    return {"rows": rows, "producer": producer, "marker": marker}


#: Steps: the time that passes before the run (sometimes past every horizon), and per partition its appends.
HISTORY = st.lists(st.tuples(st.sampled_from([1, 300, RETENTION + 1]),
                             st.lists(st.lists(batches(), max_size=3), min_size=6, max_size=6)),
                   min_size=2, max_size=5)


#: The same, and per partition the key an erasure request forgets after the appends (mostly none).
FORGETTING = st.lists(st.tuples(st.sampled_from([1, 300, RETENTION + 1]),
                                st.lists(st.lists(batches(), max_size=3), min_size=6, max_size=6),
                                st.lists(st.sampled_from([None, None, "a", "b"]), min_size=6, max_size=6)),
                      min_size=2, max_size=5)


def log_batches(recs: list[Rec]) -> bytes:
    """An append as Kafka record batches: the data records in one batch, a marker in its own."""
    data = [r for r in recs if r.control is None]
    parts = []
    for group in (data, [r for r in recs if r.control is not None]):
        if not group:
            continue
        first = group[0]
        rows = [{**r.row(), "timestamp": r.timestamp if r.timestamp is not None else -1,
                 "producer_epoch": 0 if r.producer >= 0 else -1} for r in group]
        parts.append(encode(records(rows), batch_table([{
            "base_offset": first.offset, "record_count": len(group), "producer_id": first.producer,
            "producer_epoch": 0 if first.producer >= 0 else -1,
            "attributes": (0x10 if first.transactional else 0) | (0x20 if first.control else 0)}])))
    return b"".join(parts)


def check_history(spark: Any, plan: str, cleaner_settings: Settings, history: list[Any], kafka: bool = False) -> None:
    store = Store.open(tempfile.mkdtemp(prefix="differential-"))
    appended: set[tuple[int, int]] = set()  # (base, last offset) of every batch appended
    partitions = [TopicPartition(topic, p) for topic in TOPICS for p in range(2)]
    models = {tp: Model(TOPICS[tp.topic]) for tp in partitions}
    counter = 0
    now = T0
    for step, (elapsed, appends, *forgets) in enumerate(history):
        now += elapsed
        for tp, batches_of_tp, forget in zip(partitions, appends, forgets[0] if forgets else [None] * len(appends),
                                             strict=True):
            model = models[tp]
            for batch in batches_of_tp:
                recs: list[Rec] = []
                for row in batch["rows"]:
                    counter += 1
                    # A keyless null value would take its batch's delete horizon (Kafka's is per batch): in
                    # .log segments keyless records have values, as a compacted topic's producers must.
                    tombstone = row["tombstone"] and not (kafka and row["key"] is None)
                    recs.append(Rec(model.end + len(recs), row["key"], None if tombstone else f"v{counter}",
                                    row["timestamp"], row["header"], batch["producer"] or -1,
                                    batch["producer"] is not None))
                if batch["marker"] is not None:
                    recs.append(Rec(model.end + len(recs), None, None, producer=batch["producer"],
                                    transactional=True, control=batch["marker"]))
                model.append(recs)
                if kafka:
                    data = log_batches(recs)
                    store.append_log(tp, data, now_ms=now)
                    log = decode_log(data, "appended")
                    appended |= set(zip(log.batches.column("base_offset").to_pylist(),
                                        log.batch_last_offsets.tolist(), strict=True))
                else:
                    store.append(tp, records([r.row() for r in recs]), now_ms=now)
            if forget is not None and model.bases:
                tombstone = model.forget(forget, now)
                (offset,) = request_erasure(store, tp, [forget.encode()], now_ms=now, deadline_ms=now + RETENTION,
                                            segment_format=SegmentFormat.KAFKA if kafka else SegmentFormat.PARQUET)
                assert offset == tombstone.offset
                if kafka:
                    appended.add((offset, offset))
        report = Cleaner(spark, store, cleaner_settings, dedupe_plan=plan).run(now)
        assert not report.failed, [r.error for r in report.failed]
        for tp in partitions:
            model = models[tp]
            if not model.bases:
                continue
            model.run(now)
            table = store.read(tp, columns=["offset", "delete_horizon_ms"]).to_pylist()
            actual = [(r["offset"], r["delete_horizon_ms"]) for r in table]
            expected = [(r.offset, r.horizon) for r in model.log]
            assert actual == expected, f"{tp} after run {step} at {now}"
            assert store.manifest(tp).first_dirty_offset == model.checkpoint, f"{tp} checkpoint after run {step}"
            pending = [(r.key_sha256, r.tombstone_offset) for r in store.manifest(tp).erasures if r.state == "pending"]
            assert pending == [(hashlib.sha256(k.encode()).hexdigest(), o) for k, o in model.erasures], \
                f"{tp} erasure requests after run {step}"
            if kafka:  # every batch keeps the base and last offset it was appended with
                for segment in store.manifest(tp).segments:
                    log = store.objects.read_log_segment(tp, segment)
                    kept = set(zip(log.batches.column("base_offset").to_pylist(), log.batch_last_offsets.tolist(),
                                   strict=True))
                    assert kept <= appended, f"{tp} after run {step}: batches {sorted(kept - appended)}"
    assert [p for r in verify(store) for p in r.problems] == []


@pytest.mark.slow
@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=HISTORY)
def test_the_arrow_plan_keeps_exactly_what_the_reference_model_keeps(split: bool, history: list[Any]) -> None:
    check_history(InlineSession(), "arrow", SPLIT if split else WHOLE, history)


@pytest.mark.slow
@pytest.mark.parametrize(("split", "kafka"), [(False, False), (True, False), (True, True)],
                         ids=["whole", "split", "log-split"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=FORGETTING)
def test_erasure_requests_remove_the_keys_older_records_and_nothing_else(split: bool, kafka: bool,
                                                                          history: list[Any]) -> None:
    if kafka:
        check_history(InlineSession(), "arrow", KAFKA_SPLIT, history, kafka=True)
    else:
        check_history(InlineSession(), "arrow", SPLIT if split else WHOLE, history)


@pytest.mark.slow
@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=HISTORY)
def test_log_segments_keep_exactly_what_the_reference_model_keeps(split: bool, history: list[Any]) -> None:
    """The same histories appended as Kafka record batches, cleaned at batch level."""
    check_history(InlineSession(), "arrow", KAFKA_SPLIT if split else KAFKA_WHOLE, history, kafka=True)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("plan", ["arrow", "arrow-split", "window", "aggregate"])
@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(history=HISTORY)
def test_every_plan_on_spark_keeps_exactly_what_the_reference_model_keeps(any_spark, plan: str, history: list[Any],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """On a classic session and on Spark Connect; the histories hold transactions in some partitions and not in
    others, and few records or many, so a split partition takes each of its ways (its ranges reading the whole
    range, or its runs read once and shuffled). The split and aggregate plans' stages take their payloads in
    their rows, the others with their functions (:data:`compaction.engine.stages.CARRIED_BYTES`)."""
    split = plan == "arrow-split"
    if plan in ("arrow-split", "aggregate"):
        monkeypatch.setattr(stages, "CARRIED_BYTES", 0)
    check_history(any_spark, "arrow" if split else plan, SPLIT if split else WHOLE, history)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
@settings(max_examples=2, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(history=HISTORY)
def test_log_segments_on_spark_keep_exactly_what_the_reference_model_keeps(any_spark, split: bool, history: list[Any],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The split partitions' stages take their payloads in their rows (``stages.CARRIED_BYTES``)."""
    if split:
        monkeypatch.setattr(stages, "CARRIED_BYTES", 0)
    check_history(any_spark, "arrow", KAFKA_SPLIT if split else KAFKA_WHOLE, history, kafka=True)
