"""Differential test: random histories, under random configurations and clocks, are planned and cleaned by every
plan exactly as a small reference model plans and cleans them.

The model (:mod:`tests.helpers.model`) is SPEC §3 written record by record in plain Python, sharing no code with the
job. Each example draws every topic's configuration (``min.cleanable.dirty.ratio``, ``min.compaction.lag.ms``,
``max.compaction.lag.ms``, ``segment.ms``, ``compact,delete`` retention by time and by bytes,
``delete.retention.ms``), the cleaner's byte budget and deletion vectors' age, and a history of steps: in each, time
passes, every partition (two per strategy) receives appends whose records are of various ages, then the job plans and
runs at that ``now``. The model decides which partitions the run cleans, in which order and over which range: the
plan the command line prints (``compaction plan --json``) must say the same, and the run must clean exactly those.
After every run each partition's records must equal the model's field by field (offset, key, value, timestamp,
headers, producer id and epoch, the transactional and control fields, the delete horizon), with its checkpoint, log
start and pending erasure requests, and every object must begin where an append began.

The Arrow plan (whole partitions, and split into key ranges with a tiny ``task.max.records``) runs in this process
over hundreds of examples; every plan also runs on Spark, classic (through the ``compaction run`` command) and Spark
Connect. In ``.log`` partitions the appends are batches built by kafka-python (transactions, markers, every codec),
and after every run kafka-python parses every live object, checking every CRC, and finds the model's records in it.
Histories with erasure requests (``forget``: a tombstone and a request) check that an erasure removes the key's
older records and changes nothing else.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from compaction.clean import paths
from compaction.clean.cleaner import Cleaner
from compaction.cli import common
from compaction.engine import stages
from compaction.erasure import request_erasure
from compaction.store import SegmentFormat, Store, TopicPartition
from compaction.store.segment import records
from compaction.store.verify import verify
from tests.helpers.cli import call
from tests.helpers.inline import InlineSession
from tests.helpers.kafka_python import build_batch, marker_batch, parse
from tests.helpers.model import LONG_MAX, RETENTION, WEEK, Choice, Config, Model, Rec, Segment, order
from tests.helpers.settings import settings_with
from tests.helpers.toml import dumps

T0 = 10_000
STRATEGIES = {"off": "offset", "ts": "timestamp", "hdr": "header"}
PARTITIONS = [TopicPartition(topic, p) for topic in STRATEGIES for p in range(2)]
#: kafka-python's producers: an id and its epoch (a marker carries its producer's).
EPOCHS = {1: 0, 2: 3}
#: A control record's key and value, as kafka-python's batches carry them (the model keeps them as text).
MARKER_KEYS = {"commit": "\x00\x00\x00\x01", "abort": "\x00\x00\x00\x00"}
MARKER_VALUE = "\x00" * 6

KEYS = st.sampled_from(["a", "b", "c", None])
VERSIONS = st.one_of(st.integers(-3, 3).map(lambda n: n.to_bytes(8, "big", signed=True)), st.just(b"bad"))
#: Headers in any order, the version header ``v`` (8 bytes, or not) up to twice (the last one counts) and others.
HEADERS = st.lists(
    st.one_of(VERSIONS.map(lambda v: ("v", v)), st.tuples(st.just("trace"), st.binary(max_size=3))), max_size=3
).map(tuple)
#: How long before its append a record was written (None: no timestamp; a negative age: a clock ahead).
AGES = st.one_of(st.none(), st.sampled_from([500 * k for k in range(-1, 13)]))


@st.composite
def batches(draw: st.DrawFn, transactions: bool = True) -> dict[str, Any]:
    """One append: plain records, or a transaction's records with (usually) its marker, in one codec."""
    n = draw(st.integers(1, 4))
    rows = [
        {"key": draw(KEYS), "tombstone": draw(st.integers(0, 3)) == 0, "age": draw(AGES), "headers": draw(HEADERS)}
        for _ in range(n)
    ]
    producer = draw(st.sampled_from([None, None, 1, 2] if transactions else [None]))
    marker = draw(st.sampled_from(["commit", "abort", "commit", None])) if producer is not None else None
    codec = draw(st.sampled_from(["none", "none", "gzip", "snappy", "lz4", "zstd"]))
    return {"rows": rows, "producer": producer, "marker": marker, "codec": codec}


@st.composite
def configs(draw: st.DrawFn, strategy: str) -> Config:
    """A topic's configuration: Kafka's defaults but for a few bounds drawn near the histories' clocks."""
    return Config(
        strategy=strategy,
        min_cleanable_dirty_ratio=draw(st.sampled_from([0.0, 0.0, 0.2, 0.5, 0.8])),
        min_compaction_lag_ms=draw(st.sampled_from([0, 0, 400, 1500])),
        max_compaction_lag_ms=draw(st.sampled_from([LONG_MAX, LONG_MAX, 2000, 6000])),
        segment_ms=draw(st.sampled_from([WEEK, WEEK, 2500])),
        delete_retention_ms=draw(st.sampled_from([RETENTION, RETENTION, 0, 4000])),
        delete=draw(st.sampled_from([False, False, True])),
        retention_ms=draw(st.sampled_from([WEEK, 5000])),
        retention_bytes=draw(st.sampled_from([-1, -1, 500, 9000])),
    )


@dataclass(frozen=True)
class Setup:
    """What an example draws besides its history: each topic's configuration and the cleaner's bounds."""

    topics: Mapping[str, Config]
    budget: int | None = None  # max.bytes.per.run
    vector_age: int = WEEK  # deletion.vector.max.age.ms

    def settings(self, *, kafka: bool = False, split: bool = False) -> dict[str, Any]:
        """The configuration file's content (Kafka's names; the cleaner's in ``[cleaner]``)."""
        cleaner: dict[str, Any] = {"deletion.vector.max.age.ms": self.vector_age}
        if self.budget is not None:
            cleaner["max.bytes.per.run"] = self.budget
        if split:
            cleaner["task.max.records"] = 2
        # .log segments: producers expire at once, so that only the rules decide which batches keep records.
        return {
            "log.cleanup.policy": "compact",
            "log.segment.bytes": 65_536,
            **({"producer.id.expiration.ms": 1} if kafka else {}),
            "topics": {topic: config.kafka() for topic, config in self.topics.items()},
            "cleaner": cleaner,
        }


#: Kafka's defaults with no lag and no dirty-ratio bar: every run cleans what is cleanable.
PLAIN = Setup({topic: Config(strategy=strategy) for topic, strategy in STRATEGIES.items()})


@st.composite
def setups(draw: st.DrawFn) -> Setup:
    topics = {
        topic: draw(st.one_of(st.just(Config(strategy=strategy)), configs(strategy)))
        for topic, strategy in STRATEGIES.items()
    }
    return Setup(topics, draw(st.sampled_from([None, None, 400, 6000])), draw(st.sampled_from([WEEK, 3000])))


#: Steps: the time that passes before the run, and per partition its appends.
ELAPSED = st.sampled_from([1, 300, RETENTION + 1, 2600, 7000])
APPENDS = st.lists(st.lists(batches(), max_size=3), min_size=6, max_size=6)
HISTORY = st.lists(st.tuples(ELAPSED, APPENDS), min_size=2, max_size=5)
#: The same without transactions.
PLAIN_HISTORY = st.lists(
    st.tuples(ELAPSED, st.lists(st.lists(batches(transactions=False), max_size=3), min_size=6, max_size=6)),
    min_size=2,
    max_size=5,
)
#: The same, and per partition the key an erasure request forgets after the appends (mostly none).
FORGETTING = st.lists(
    st.tuples(ELAPSED, APPENDS, st.lists(st.sampled_from([None, None, "a", "b"]), min_size=6, max_size=6)),
    min_size=2,
    max_size=5,
)


def kafka_batches(recs: list[Rec], codec: str, sequences: dict[int, int]) -> bytes:
    """An append as kafka-python builds it: the data records in one batch (in ``codec``), a marker in its own."""
    parts = []
    data = [r for r in recs if r.control is None]
    if data:
        first = data[0]
        sequence = sequences.get(first.producer, 0) if first.producer >= 0 else -1
        if first.producer >= 0:
            sequences[first.producer] = sequence + len(data)
        parts.append(
            build_batch(
                first.offset,
                [
                    (
                        r.timestamp if r.timestamp is not None else -1,
                        None if r.key is None else r.key.encode(),
                        None if r.value is None else r.value.encode(),
                        list(r.headers),
                    )
                    for r in data
                ],
                codec=codec,
                producer=first.producer,
                epoch=first.epoch,
                sequence=sequence,
                transactional=first.transactional,
            )
        )
    for marker in (r for r in recs if r.control is not None):
        assert marker.timestamp is not None
        parts.append(
            marker_batch(
                marker.offset,
                producer=marker.producer,
                epoch=marker.epoch,
                commit=marker.control == "commit",
                timestamp=marker.timestamp,
            )
        )
    return b"".join(parts)


#: Runs the job at ``now``: returns the partitions it cleaned, in the order it cleaned them.
Runner = Callable[[Store, int], list[str]]


def through_cleaner(session: Any, plan: str, cleaner_settings: dict[str, Any]) -> Runner:
    """``Cleaner.run``, the Python API's run, on ``session`` (in-process stages, or a SparkSession)."""
    loaded = settings_with(cleaner_settings)

    def run(store: Store, now: int) -> list[str]:
        report = Cleaner(session, store, loaded, dedupe_plan=plan).run(now)
        assert not report.failed, [(r.partition, r.error, r.trace) for r in report.failed]
        return [r.partition for r in report.partitions if r.status == "cleaned"]

    return run


def through_command(plan: str, conf: Path) -> Runner:
    """``compaction run``, in this process (its SparkSession is the shared one), with its JSON report."""

    def run(store: Store, now: int) -> list[str]:
        report = conf.parent / "report.json"
        ran = call(
            "run",
            store.url,
            "--conf",
            str(conf),
            "--now",
            str(now),
            "--allow-future-now",
            "--plan",
            plan,
            "--report",
            str(report),
        )
        assert ran.code == 0, ran.out + ran.err
        return [p["partition"] for p in json.loads(report.read_text())["partitions"] if p["status"] == "cleaned"]

    return run


def expected_plan(choice: Choice, clean: bool) -> dict[str, Any]:
    """What ``plan --json`` says of a partition the model chose ``choice`` for."""
    return {
        "decision": "clean" if clean else "skip",
        "log_start_offset": choice.log_start,
        "first_dirty_offset": choice.first_dirty,
        "first_uncleanable_offset": choice.first_uncleanable,
        "cleanable_ratio": round(choice.ratio, 6),
        "compaction_delay_ms": choice.delay,
        "overdue_ms": choice.overdue,
        "checkpoint_reset": choice.reset,
    }


def planned(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        **{
            name: entry[name]
            for name in (
                "decision",
                "log_start_offset",
                "first_dirty_offset",
                "first_uncleanable_offset",
                "cleanable_ratio",
                "compaction_delay_ms",
                "overdue_ms",
            )
        },
        "checkpoint_reset": entry["checkpoint_reset"] is not None,
    }


class Differential:
    """One example: a store, the model of each of its partitions, and the job run on both after every step."""

    def __init__(
        self,
        setup: Setup,
        runner: Callable[[Path], Runner],
        *,
        kafka: bool = False,
        split: bool = False,
        memory: bool = False,
    ) -> None:
        folder = Path(tempfile.mkdtemp(prefix="differential-"))
        # In memory when the job runs in this process: the local folder's fsyncs would take most of the time.
        self.store = Store.open(f"memory://{folder.name}" if memory else str(folder / "store"))
        self.setup, self.kafka = setup, kafka
        self.conf = folder / "conf.toml"
        self.conf.write_text(dumps(setup.settings(kafka=kafka, split=split)))
        self.run_job = runner(self.conf)
        self.models = {tp: Model(STRATEGIES[tp.topic]) for tp in PARTITIONS}
        self.appended: set[tuple[int, int]] = set()  # (base, last offset) of every .log batch appended
        self.sequences: dict[int, int] = {}
        self.counter = 0
        self.now = T0

    def append(self, tp: TopicPartition, batch: dict[str, Any]) -> None:
        model = self.models[tp]
        producer = batch["producer"]
        # .log batches are written at least 1 ms before the run, which expires their producers at once
        # (producer.id.expiration.ms = 1): so only the rules decide which batches keep records.
        written = self.now - 1 if self.kafka else self.now
        recs: list[Rec] = []
        for row in batch["rows"]:
            self.counter += 1
            # A keyless null value would take its batch's delete horizon (Kafka's is per batch): in .log segments
            # keyless records have values, as a compacted topic's producers must.
            tombstone = row["tombstone"] and not (self.kafka and row["key"] is None)
            # (a .log batch from a clock ahead would keep its producer active)
            age = row["age"] if row["age"] is None or not self.kafka else max(row["age"], 0)
            timestamp = (-1 if self.kafka else None) if age is None else written - age
            recs.append(
                Rec(
                    model.end + len(recs),
                    row["key"],
                    None if tombstone else f"v{self.counter}",
                    timestamp,
                    row["headers"],
                    producer if producer is not None else -1,
                    producer is not None,
                    epoch=EPOCHS[producer] if producer is not None else -1,
                )
            )
        if batch["marker"] is not None:
            key, value = (MARKER_KEYS[batch["marker"]], MARKER_VALUE) if self.kafka else (None, None)
            recs.append(
                Rec(
                    model.end + len(recs),
                    key,
                    value,
                    written,
                    producer=producer,
                    transactional=True,
                    control=batch["marker"],
                    epoch=EPOCHS[producer],
                )
            )
        model.append(recs)
        if self.kafka:
            data = kafka_batches(recs, batch["codec"], self.sequences)
            self.store.append_log(tp, data, now_ms=self.now)
            self.appended |= {(b.base, b.last) for b in parse(data)}
        else:
            self.store.append(tp, records([r.row() for r in recs]), now_ms=self.now)

    def forget(self, tp: TopicPartition, key: str) -> None:
        model = self.models[tp]
        deadline = self.now + RETENTION
        tombstone = model.forget(key, self.now, deadline)
        (offset,) = request_erasure(
            self.store,
            tp,
            [key.encode()],
            now_ms=self.now,
            deadline_ms=deadline,
            segment_format=SegmentFormat.KAFKA if self.kafka else SegmentFormat.PARQUET,
        )
        assert offset == tombstone.offset
        if self.kafka:
            self.appended.add((offset, offset))

    def step(
        self, index: int, elapsed: int, appends: list[list[dict[str, Any]]], forgets: list[str | None] | None = None
    ) -> None:
        self.now += elapsed
        for tp, batches_of_tp, forget in zip(PARTITIONS, appends, forgets or [None] * len(PARTITIONS), strict=True):
            for batch in batches_of_tp:
                self.append(tp, batch)
            if forget is not None and self.models[tp].bases:
                self.forget(tp, forget)
        where = f"run {index} at {self.now}"
        # The planner takes partitions by topic, then partition: the order the budget and ties follow.
        live = sorted((tp for tp in PARTITIONS if self.models[tp].bases), key=lambda tp: (tp.topic, tp.partition))
        if not live:
            return
        choices = {
            tp: self.models[tp].plan(self.now, self.layout(tp), self.setup.topics[tp.topic], self.setup.vector_age)
            for tp in live
        }
        taken, _ = order(choices, self.setup.budget)

        ran = call("plan", self.store.url, "--conf", str(self.conf), "--now", str(self.now), "--json")
        assert ran.code == 0, ran.out + ran.err
        listed = json.loads(ran.out)["partitions"]
        assert [p["partition"] for p in listed if p["decision"] == "clean"] == [str(tp) for tp in taken], (
            f"the partitions selected, in order, {where}"
        )
        by_name = {p["partition"]: p for p in listed}
        for tp, choice in choices.items():
            assert planned(by_name[str(tp)]) == expected_plan(choice, tp in taken), f"{tp}'s plan {where}"

        cleaned = self.run_job(self.store, self.now)
        assert cleaned == [str(tp) for tp in taken], f"the partitions cleaned {where}"
        for tp in live:
            model = self.models[tp]
            if tp in taken:
                model.clean(choices[tp], self.now, self.setup.topics[tp.topic])
            else:
                model.skip(choices[tp])
            self.check(tp, where)

    def layout(self, tp: TopicPartition) -> list[Segment]:
        return [Segment.of(s.model_dump()) for s in self.store.manifest(tp).segments]

    def check(self, tp: TopicPartition, where: str) -> None:
        model = self.models[tp]
        manifest = self.store.manifest(tp)
        assert self.store.read(tp).to_pylist() == [r.record() for r in model.log], f"{tp}'s records after {where}"
        assert (manifest.first_dirty_offset, manifest.log_start_offset) == (model.checkpoint, model.log_start), (
            f"{tp}'s checkpoint and log start after {where}"
        )
        pending = [(r.key_sha256, r.tombstone_offset) for r in manifest.erasures if r.state == "pending"]
        assert pending == [(hashlib.sha256(k.encode()).hexdigest(), o) for k, o, _ in model.erasures], (
            f"{tp}'s erasure requests after {where}"
        )
        # An object begins where an append began (a rewrite takes its first source's base offset).
        assert {s.base_offset for s in manifest.segments} <= set(model.bases), f"{tp}'s objects after {where}"
        if self.kafka:
            self.check_log_segments(tp, where)

    def check_log_segments(self, tp: TopicPartition, where: str) -> None:
        """kafka-python parses every live object, every CRC valid, and finds in it the model's records (and those
        of its deletion vector, which no reader sees); every batch keeps the offsets it was appended with."""
        model = self.models[tp]
        for segment in self.store.manifest(tp).segments:
            parsed = parse(
                self.store.storage.read_buffer(f"{tp.prefix}/{segment.path}").to_pybytes(),
                f"{tp}/{segment.path} after {where}",
            )
            kept = {(b.base, b.last) for b in parsed}
            assert kept <= self.appended, f"{tp}/{segment.path} after {where}: batches {sorted(kept - self.appended)}"
            assert all(segment.base_offset <= b.base and b.last < segment.next_offset for b in parsed)
            hidden = set(self.store.objects.read_deletes(tp, segment.deletes).to_pylist()) if segment.deletes else set()
            found = [kafka_python_view(b, r) for b in parsed for r in b.records if r["offset"] not in hidden]
            expected = [
                kafka_python_expected(r) for r in model.log if segment.base_offset <= r.offset < segment.next_offset
            ]
            assert found == expected, f"{tp}/{segment.path} read by kafka-python after {where}"
            assert hidden <= {r["offset"] for b in parsed for r in b.records}


def kafka_python_view(batch: Any, record: dict[str, Any]) -> dict[str, Any]:
    """A record as kafka-python reads it, with its batch's fields; the batch's delete horizon goes with a tombstone
    or a marker (KIP-534)."""
    horizon_holder = batch.control or (record["key"] is not None and record["value"] is None)
    return {
        **record,
        "headers": [tuple(h) for h in record["headers"]],
        "producer_id": batch.producer,
        "producer_epoch": batch.epoch,
        "is_transactional": batch.transactional,
        "is_control": batch.control,
        "delete_horizon_ms": batch.horizon if horizon_holder else None,
    }


def kafka_python_expected(r: Rec) -> dict[str, Any]:
    return {
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": None if r.key is None else r.key.encode(),
        "value": None if r.value is None else r.value.encode(),
        "headers": list(r.headers),
        "producer_id": r.producer,
        "producer_epoch": r.epoch,
        "is_transactional": r.transactional,
        "is_control": r.control is not None,
        "delete_horizon_ms": r.horizon,
    }


def check_history(
    setup: Setup,
    runner: Callable[[Path], Runner],
    history: list[Any],
    *,
    kafka: bool = False,
    split: bool = False,
    memory: bool = False,
) -> None:
    differential = Differential(setup, runner, kafka=kafka, split=split, memory=memory)
    try:
        for index, (elapsed, appends, *forgets) in enumerate(history):
            differential.step(index, elapsed, appends, forgets[0] if forgets else None)
        assert [p for r in verify(differential.store) for p in r.problems] == []
    finally:
        fs = differential.store.storage.fs
        if memory and fs.exists(differential.store.url):
            fs.rm(differential.store.url, recursive=True)


def inline(setup: Setup, *, kafka: bool = False, split: bool = False) -> Callable[[Path], Runner]:
    return lambda _: through_cleaner(InlineSession(), "arrow", setup.settings(kafka=kafka, split=split))


@pytest.fixture(autouse=True)
def wall_clock_behind_the_histories(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line's wall clock reads 0, so that its runs stamp horizons from ``--now`` alone (as the model
    does), whatever the date."""
    monkeypatch.setattr(common, "wall_clock_ms", lambda: 0)


@pytest.mark.slow
@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups(), history=HISTORY)
def test_the_arrow_plan_plans_and_keeps_exactly_what_the_reference_model_does(
    split: bool, setup: Setup, history: list[Any]
) -> None:
    check_history(setup, inline(setup, split=split), history, split=split, memory=True)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups(), history=PLAIN_HISTORY)
def test_partitions_cleaned_against_their_dirty_keys_keep_exactly_what_the_reference_model_does(
    setup: Setup, history: list[Any]
) -> None:
    """Histories without transactions, whose clean sections are unique-keyed after a run: every partition that can
    be (the offset strategy) is cleaned against its dirty keys on later runs, however small
    (:data:`compaction.clean.paths.DIRTY_KEYS_FROM_BYTES`)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(paths, "DIRTY_KEYS_FROM_BYTES", -1)
        check_history(setup, inline(setup), history, memory=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("split", "kafka"), [(False, False), (True, False), (True, True)], ids=["whole", "split", "log-split"]
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=FORGETTING)
def test_erasure_requests_remove_the_keys_older_records_and_nothing_else(
    split: bool, kafka: bool, history: list[Any]
) -> None:
    check_history(PLAIN, inline(PLAIN, kafka=kafka, split=split), history, kafka=kafka, split=split, memory=True)


@pytest.mark.slow
@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups(), history=HISTORY)
def test_log_segments_of_kafka_python_batches_keep_exactly_what_the_reference_model_keeps(
    split: bool, setup: Setup, history: list[Any]
) -> None:
    """The same histories appended as kafka-python's batches, cleaned at batch level and parsed by kafka-python."""
    check_history(setup, inline(setup, kafka=True, split=split), history, kafka=True, split=split, memory=True)


def on_spark(
    session: Any, plan: str, setup: Setup, *, kafka: bool = False, split: bool = False
) -> Callable[[Path], Runner]:
    """A classic session runs the job through ``compaction run``; Spark Connect through ``Cleaner.run``."""
    if not type(session).__module__.startswith("pyspark.sql.connect"):
        return lambda conf: through_command(plan, conf)
    return lambda _: through_cleaner(session, plan, setup.settings(kafka=kafka, split=split))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("plan", ["arrow", "arrow-split", "window", "aggregate"])
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(setup=setups(), history=HISTORY)
def test_every_plan_on_spark_plans_and_keeps_exactly_what_the_reference_model_does(
    any_spark, plan: str, setup: Setup, history: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a classic session and on Spark Connect; the histories hold transactions in some partitions and not in
    others, and few records or many, so a split partition takes each of its ways (its ranges reading the whole
    range, or its runs read once and shuffled). The split and aggregate plans' stages take their payloads in
    their rows, the others with their functions (:data:`compaction.engine.stages.CARRIED_BYTES`). The Arrow plan
    cleans every partition that can be against its dirty keys (:data:`compaction.clean.paths.DIRTY_KEYS_FROM_BYTES`)."""
    split = plan == "arrow-split"
    if plan in ("arrow-split", "aggregate"):
        monkeypatch.setattr(stages, "CARRIED_BYTES", 0)
    if plan == "arrow":  # a partition that can be is cleaned against its dirty keys, however small
        monkeypatch.setattr(paths, "DIRTY_KEYS_FROM_BYTES", -1)
    check_history(setup, on_spark(any_spark, "arrow" if split else plan, setup, split=split), history, split=split)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("plan", ["arrow", "arrow-split", "window"])
@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(setup=setups(), history=HISTORY)
def test_log_segments_on_spark_keep_exactly_what_the_reference_model_keeps(
    any_spark, plan: str, setup: Setup, history: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """kafka-python's batches, cleaned by the Arrow plan and a Spark SQL plan; the split partitions' stages take
    their payloads in their rows (``stages.CARRIED_BYTES``)."""
    split = plan == "arrow-split"
    if split:
        monkeypatch.setattr(stages, "CARRIED_BYTES", 0)
    check_history(
        setup,
        on_spark(any_spark, "arrow" if split else plan, setup, kafka=True, split=split),
        history,
        kafka=True,
        split=split,
    )
