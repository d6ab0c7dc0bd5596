"""Erasure requests end to end: forget a key, run, gc, and prove from every object that its values are gone.

The key's values lie where a tombstone alone leaves them: in a clean segment where the pass would use a deletion
vector (and under one already), in a superseded version inside gc's grace, in a ``.log`` partition, and in an
orphaned object. After ``forget``, a run and ``gc``, ``attest`` passes, and an independent scan of every object
under the topic (pyarrow and the Kafka codec, not the store's reader) finds no value of the key. The runs use the
job's own stages in this process (:class:`tests.inline.InlineStages`); the Spark paths are at the end.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families

from compaction import kafka
from compaction.clean.cleaner import Cleaner
from compaction.clean.results import RunReport
from compaction.cli import EXIT_FAILED, EXIT_OK, main
from compaction.config import Settings
from compaction.erasure import forget
from compaction.errors import PublishError
from compaction.job import JobOptions, publish_target, run_job
from compaction.publish import publish_topic
from compaction.publish.table import open_catalog
from compaction.read.scan import scan
from compaction.store import Store, TopicPartition
from compaction.store.erasure import KeyMatch, log_findings
from compaction.store.formats import encode_log
from compaction.store.gc import collect_garbage
from compaction.store.manifest import MANIFEST_DIR, manifest_name
from compaction.store.segment import records
from compaction.store.storage import Storage
from tests.helpers.builders import keyed
from tests.helpers.inline import InlineStages

TOPIC = "orders"
P0, P1, P2 = (TopicPartition(TOPIC, p) for p in range(3))
HOUR = 3_600_000
DAY = 24 * HOUR
WALL = int(time.time() * 1000)
T0 = WALL - 10 * HOUR  # the scenario's times: in the past, so that no --now is refused as future
ALICE = hashlib.sha256(b"alice").hexdigest()
#: Small segments count as large (segment.bytes / 8 = 128 bytes): a clean segment that loses a record takes a
#: deletion vector instead of merging into its rewritten neighbours.
CONF = """
"log.cleanup.policy" = "compact"
"log.segment.bytes" = 1024
[cleaner]
"gc.grace.ms" = 86400000
"""


def settings(tmp_path: Path, extra: str = "") -> tuple[Settings, Path]:
    path = tmp_path / "conf.toml"
    path.write_text(CONF + extra)
    return Settings.load(str(path), environ={}), path


def run_pass(store: Store, config: Settings, now_ms: int) -> None:
    report = Cleaner(InlineStages(), store, config).run(now_ms)
    assert not report.failed, [r.error for r in report.failed]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def store_args(store: Store) -> list[str]:
    options = store.storage.storage_options
    endpoint = options.get("client_kwargs", {}).get("endpoint_url")
    return [store.url, *(["--storage-option", f"client_kwargs.endpoint_url={endpoint}"] if endpoint else [])]


def log_batches(rows: list[dict[str, Any]]) -> bytes:
    return encode_log(records(rows))


def build(store: Store, config: Settings) -> dict[str, Any]:
    """alice's values in every place a tombstone alone leaves them; returns what the test checks against."""
    # orders-0, Parquet: a clean segment of 41 records, one of them alice=v1 ...
    store.append(
        P0,
        records(
            [{"key": f"k{i:02d}", "value": "x" * 20, "timestamp": T0} for i in range(40)]
            + [{"key": "alice", "value": "v1", "timestamp": T0}]
        ),
        now_ms=T0,
    )
    store.append(P0, keyed("bob=1"), now_ms=T0)
    run_pass(store, config, T0 + 1)
    # ... then alice=v2 among ten others: the next pass hides alice=v1 under a deletion vector and leaves the
    # replaced objects in a superseded version (gc's grace is a day); alice=v2's segment becomes clean too.
    store.append(P0, keyed("alice=v2 " + " ".join(f"c{i}=1" for i in range(10))), now_ms=T0 + 2)
    store.append(P0, keyed("dave=1"), now_ms=T0 + 2)
    run_pass(store, config, T0 + 3)
    clean, _, live = store.manifest(P0).segments[:3]
    assert clean.deletes is not None and store.objects.read_deletes(P0, clean.deletes).to_pylist() == [40]
    assert live.base_offset == 42 and live.next_offset == 53 and live.deletes is None
    # An orphan: the object of a writer that crashed before its commit.
    orphan = store.objects.write_segment(P0, keyed("alice=crashed", start=5), 5, 6, created_ms=T0)
    # orders-1, Kafka's record batches.
    store.append_log(
        P1,
        log_batches(
            [
                {"offset": 0, "key": "alice", "value": "log-1", "timestamp": T0},
                {"offset": 1, "key": "erin", "value": "e", "timestamp": T0},
            ]
        ),
        now_ms=T0,
    )
    store.append_log(P1, log_batches([{"offset": 2, "key": "alice", "value": "log-2", "timestamp": T0}]), now_ms=T0)
    # orders-2 never saw alice.
    store.append(P2, keyed("frank=1"), now_ms=T0)
    return {"clean": clean.path, "live": live.path, "orphan": orphan.path}


def independent_scan(store: Store) -> list[tuple[str, int, bytes | None]]:
    """Every record of alice in every object under the topic, read with pyarrow and the Kafka codec from the raw
    bytes (``(object, offset, value)``); also fails if any object holds alice's key bytes unreadably."""
    fs, root = store.storage.fs, store.storage.path(TOPIC)
    fs.invalidate_cache()
    paths = sorted(fs.find(root))
    fs.invalidate_cache()  # s3fs would answer later opens of new objects from this listing
    found = []
    for path in paths:
        data = fs.cat_file(path)
        if data[:4] == b"PAR1":
            table = pq.read_table(pa.BufferReader(data))
            if "key" not in table.column_names:  # a deletion vector: offsets only
                assert table.column_names == ["offset"], path
                continue
        elif path.endswith(".json"):
            assert b"alice" not in data, f"{path} holds the key's bytes"
            continue
        else:
            table = kafka.decode(data, where=path).records
        for row in table.select(["offset", "key", "value"]).to_pylist():
            if row["key"] == b"alice":
                found.append((path.rsplit("/", 3)[-3] + "/" + path.rsplit("/", 1)[-1], row["offset"], row["value"]))
    return found


@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_forget_run_and_gc_leave_no_value_of_the_key_anywhere(
    backend: str, store_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = store_factory(backend)
    config, conf = settings(tmp_path)
    placed = build(store, config)
    before = independent_scan(store)
    assert {value for _, _, value in before} == {b"v1", b"v2", b"crashed", b"log-1", b"log-2"}

    code, out = cli(
        capsys, "forget", *store_args(store), TOPIC, "--key", "alice", "--conf", str(conf), "--now", str(T0 + 10)
    )
    assert code == EXIT_OK, out
    assert (
        f"key sha256:{ALICE[:16]}: tombstone appended and erasure requested in orders-0 at offset 54, "
        "orders-1 at offset 3" in out
    )
    assert "alice" not in out  # only the digest is printed
    assert [r.tombstone_offset for r in store.manifest(P0).erasures] == [54]
    assert store.manifest(P1).segments[-1].format == "kafka"  # a .log partition stays one
    assert store.manifest(P2).erasures == ()

    code, out = cli(capsys, "erasure", *store_args(store), "--conf", str(conf), "--now", str(T0 + 11))
    assert code == EXIT_OK and "2 request(s): 2 pending, 0 rewritten, 0 gone" in out
    assert "waits for the next run carries it out" in out

    run_pass(store, config, T0 + 20)
    for tp in (P0, P1):
        (request,) = store.manifest(tp).erasures
        assert request.state == "rewritten" and request.held
    # Both clean segments were rewritten: alice=v2's lost 1 record of 11, where a plain pass uses a deletion vector
    # (test_a_plain_tombstone_leaves_the_value_under_a_deletion_vector), and alice=v1's vector only hid it.
    held = {h.path for h in store.manifest(P0).erasures[0].held}
    assert {placed["clean"], placed["live"]} <= held
    assert not held & {s.path for s in store.manifest(P0).segments}
    live = store.read(P0, columns=["offset", "key", "value"]).to_pylist()
    assert [r for r in live if r["key"] == b"alice"] == [{"offset": 54, "key": b"alice", "value": None}]
    code, out = cli(capsys, "attest", *store_args(store), TOPIC, "--key", "alice", "-o", str(tmp_path / "early.json"))
    assert code == EXIT_FAILED and "PROBLEM" in out  # superseded and orphaned objects still hold it

    code, out = cli(capsys, "gc", *store_args(store), "--conf", str(conf), "--erasure-grace", "0")
    assert code == EXIT_OK, out
    assert f"orders-0: erasure of key sha256:{ALICE[:16]} is complete" in out
    request = store.manifest(P0).erasures[0]
    assert request.state == "gone" and placed["orphan"] in {h.path for h in request.held}
    assert all(h.removed_ms is not None for h in request.held)

    code, out = cli(capsys, "attest", *store_args(store), TOPIC, "--key", "alice", "-o", str(tmp_path / "proof.json"))
    assert code == EXIT_OK, out
    proof = json.loads((tmp_path / "proof.json").read_text())
    assert proof["passed"] and proof["key_sha256"] == ALICE and proof["program"]["name"] == "compaction"
    assert [p["manifest_version"] for p in proof["partitions"]] == [store.manifest(tp).version for tp in (P0, P1, P2)]
    records_found = [
        (p["partition"], r["offset"], r["tombstone"], r["where"])
        for p in proof["partitions"]
        for o in p["objects"]
        for r in o["records"]
    ]
    assert set(records_found) == {(0, 54, True, "the request's tombstone"), (1, 3, True, "the request's tombstone")}
    assert all(o["sha256"] and o["size"] >= 0 for p in proof["partitions"] for o in p["objects"])
    assert "alice" not in (tmp_path / "proof.json").read_text()

    after = independent_scan(store)
    assert {(offset, value) for _, offset, value in after} == {(54, None), (3, None)}
    assert [name for name, _, value in after if value is not None] == []
    code, out = cli(capsys, "erasure", *store_args(store), "--conf", str(conf), "--json")
    doc = json.loads(out)
    assert code == EXIT_OK and [r["state"] for r in doc["requests"]] == ["gone", "gone"]
    code, out = cli(capsys, "verify", *store_args(store))
    assert code == EXIT_OK, out


def test_a_plain_tombstone_leaves_the_value_under_a_deletion_vector(tmp_path: Path) -> None:
    """What forget changes: with a tombstone alone, the pass gives alice=v2's clean segment a deletion vector, and
    its object keeps the value."""
    store = Store.open(str(tmp_path / "store"))
    _, conf = settings(tmp_path)
    config = Settings.load(str(conf), overrides={"log.cleaner.min.cleanable.ratio": 0.01}, environ={})
    placed = build(store, config)
    store.append(P0, records([{"key": "alice", "value": None, "timestamp": T0 + 10}]), now_ms=T0 + 10)
    store.append(P0, keyed("zed=1"), now_ms=T0 + 10)  # the tombstone's segment is no longer the active one
    run_pass(store, config, T0 + 20)
    live = next(s for s in store.manifest(P0).segments if s.path == placed["live"])
    assert live.deletes is not None and store.objects.read_deletes(P0, live.deletes).to_pylist() == [42]
    assert (42, b"v2") in {(offset, value) for _, offset, value in independent_scan(store)}


def test_a_reader_pinned_to_an_old_version_within_the_grace_reads_it_to_the_end(tmp_path: Path) -> None:
    store = Store.open(str(tmp_path / "store"))
    config, _ = settings(tmp_path)
    for i in range(8):
        store.append(P0, keyed(f"alice=v{i} k{i}=1"), now_ms=T0)
    version = store.manifest(P0).version
    reader = iter(scan(store, TOPIC, 0, version=version, batch_rows=1, read_ahead=1).batches())
    first = next(reader)

    forgotten = Store.open(store.url)
    forget(forgotten, TOPIC, [b"alice"], now_ms=T0 + 10)
    run_pass(forgotten, config, T0 + 11)
    rewritten = _written(store, store.manifest(P0).version)
    within = collect_garbage(store, P0, wall_ms=rewritten + HOUR - 1, grace_ms=DAY, erasure_grace_ms=HOUR)
    assert within.deleted_objects == [] and within.erasures_completed == []

    rows = pa.Table.from_batches([first, *reader]).to_pylist()
    assert [r["value"] for r in rows if r["key"] == b"alice"] == [f"v{i}".encode() for i in range(8)]
    after = collect_garbage(store, P0, wall_ms=rewritten + HOUR, grace_ms=DAY, erasure_grace_ms=HOUR)
    assert after.erasures_completed == [ALICE] and len(after.erased_objects) == 8


def _written(store: Store, version: int) -> int:
    return next(
        cast(int, e.mtime_ms)
        for e in store.storage.list_dir(f"{P0.prefix}/{MANIFEST_DIR}")
        if e.name == manifest_name(version)
    )


def test_a_key_found_nowhere_is_reported_and_nothing_is_appended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store.open(str(tmp_path / "store"))
    for tp in (P0, P1, P2):
        store.append(tp, keyed("alice=1"), now_ms=T0)
    code, out = cli(
        capsys,
        "forget",
        store.url,
        TOPIC,
        "--key",
        "bWFsbG9yeQ==",
        "--key",
        "YWxpY2U=",
        "--base64",
        "--now",
        str(T0 + 1),
    )  # base64 of mallory and of alice
    assert code == EXIT_OK
    mallory = hashlib.sha256(b"mallory").hexdigest()
    assert (
        f"key sha256:{mallory[:16]}: found nowhere in orders (3 partition(s) searched): nothing to erase, no "
        "tombstone appended" in out
    )
    assert (
        f"key sha256:{ALICE[:16]}: tombstone appended and erasure requested in orders-0 at offset 1, orders-1 "
        "at offset 1, orders-2 at offset 1" in out
    )
    # With the topic's partition count, only the partition Kafka's default partitioner sends the key to is searched:
    # murmur2(b"alice") & 0x7fffffff is 1951417749, so partition 0 of 3, and 4 of 5 (which has no log).
    code, out = cli(capsys, "forget", store.url, TOPIC, "--key", "alice", "--partitions", "3", "--now", str(T0 + 2))
    assert code == EXIT_OK and "in orders-0 at offset 2;" in out and "orders-1" not in out
    code, out = cli(capsys, "forget", store.url, TOPIC, "--key", "alice", "--partitions", "5", "--now", str(T0 + 3))
    assert code == EXIT_OK
    assert "found nowhere in orders (1 partition(s) searched; orders-4 has no log in the store)" in out
    code, out = cli(capsys, "forget", store.url, TOPIC, "--key", "mallory", "--json", "--now", str(T0 + 4))
    assert code == EXIT_OK and json.loads(out)["keys"][0]["found"] is False
    assert [len(store.manifest(tp).erasures) for tp in (P0, P1, P2)] == [2, 1, 1]


class FailingWrites(Storage):
    """Storage whose writes of new segment objects at one base offset fail, as a store that goes away mid-pass."""

    def __init__(self, inner: Storage, failing: str) -> None:
        super().__init__(inner.fs, inner.root, inner.url, inner.storage_options)
        self.failing = failing

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "failing": self.failing}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.failing = state["failing"]

    def write_bytes(self, rel: str, data: bytes | memoryview, *, flush: bool = True) -> None:
        if f"/segments/{self.failing}" in rel:
            raise OSError(f"connection reset writing {rel}")
        super().write_bytes(rel, data, flush=flush)


def test_a_run_that_fails_midway_leaves_the_request_pending_never_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, conf = settings(tmp_path)
    store = Store.open(str(tmp_path / "store"))
    build(store, config)
    forget(store, TOPIC, [b"alice"], now_ms=T0 + 10)
    objects = len(store.storage.fs.find(store.storage.path(P0.prefix)))
    # The clean segment is rewritten first (each segment stands alone here); the rewrite of alice=v2's, at offset
    # 42, fails.
    broken = Store(FailingWrites(store.storage, f"{42:020d}"))
    report = Cleaner(InlineStages(), broken, config).run(T0 + 20)
    (failed,) = report.failed
    assert failed.partition == "orders-0" and "connection reset" in (failed.error or "")
    assert len(store.storage.fs.find(store.storage.path(P0.prefix))) > objects  # the first rewrite's object, orphaned
    assert store.manifest(P0).erasures[0].state == "pending"
    assert store.manifest(P1).erasures[0].state == "rewritten"  # the other partition committed

    code, out = cli(capsys, "gc", store.url, "--conf", str(conf), "--erasure-grace", "0", "--grace", "0")
    assert code == EXIT_OK
    assert store.manifest(P0).erasures[0].state == "pending"
    code, out = cli(capsys, "erasure", store.url, "--conf", str(conf), "--now", str(T0 + 21))
    assert code == EXIT_OK and "pending" in out and "gone" in out
    code, out = cli(capsys, "attest", store.url, TOPIC, "--key", "alice", "--partitions", "3")
    assert code == EXIT_FAILED
    # The clean segment's hidden alice=v1 and the live alice=v2, both under the tombstone at 54.
    assert "holds 1 record(s) of the key below its erasure request's tombstone at offset 54 (offsets 40)" in out
    assert "(offsets 42)" in out

    run_pass(store, config, T0 + 30)  # the next run carries it out
    code, _ = cli(capsys, "gc", store.url, "--conf", str(conf), "--erasure-grace", "0")
    assert code == EXIT_OK and store.manifest(P0).erasures[0].state == "gone"


def test_a_request_past_its_deadline_fails_erasure_and_shows_in_the_gauge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = tmp_path / "metrics.prom"
    config, conf = settings(tmp_path, f'"metrics.textfile" = "{metrics}"\n')
    store = Store.open(str(tmp_path / "store"))
    store.append(P0, keyed("alice=1 bob=1"), now_ms=T0)
    code, _ = cli(capsys, "forget", store.url, TOPIC, "--key", "alice", "--max-delay", "1h", "--now", str(T0))
    assert code == EXIT_OK

    code, out = cli(capsys, "erasure", store.url, "--conf", str(conf), "--now", str(T0 + HOUR))
    assert code == EXIT_OK and "0 late" in out
    code, out = cli(capsys, "erasure", store.url, "--conf", str(conf), "--now", str(T0 + HOUR + 1))
    assert code == EXIT_FAILED and "pending OVERDUE" in out and "1 late" in out
    run_pass(store, config, T0 + HOUR + 2)
    # Carried out: physically gone is due the erasure grace period (here gc's day) after the deadline.
    code, out = cli(
        capsys, "erasure", store.url, "--conf", str(conf), "--now", str(T0 + HOUR + DAY), "--allow-future-now"
    )
    assert code == EXIT_OK and "rewritten" in out and "0 late" in out
    code, out = cli(
        capsys, "erasure", store.url, "--conf", str(conf), "--now", str(T0 + HOUR + DAY + 1), "--allow-future-now"
    )
    assert code == EXIT_FAILED and "rewritten OVERDUE" in out

    def no_spark() -> Any:
        raise AssertionError("nothing to clean: no Spark")

    late = T0 + HOUR + DAY + 1
    code, report = run_job(store, JobOptions(now_ms=late, wall_ms=WALL), config, no_spark)
    assert code == 0
    samples = {s.name: s.value for f in text_string_to_metric_families(metrics.read_text()) for s in f.samples}
    assert samples["compaction_erasure_overdue_requests"] == 1
    wall = int(time.time() * 1000)  # gc's grace is on the wall clock: the rewrite's manifest is seconds old
    code, report = run_job(
        store,
        JobOptions(now_ms=late, wall_ms=wall, gc=True),
        Settings.load(str(conf), overrides={"cleaner": {"erasure.grace.ms": 0}}, environ={}),
        no_spark,
    )
    gc = cast(RunReport, report).gc
    assert code == 0 and gc is not None and gc.skipped == {}
    samples = {s.name: s.value for f in text_string_to_metric_families(metrics.read_text()) for s in f.samples}
    assert samples["compaction_erasure_overdue_requests"] == 0  # gc finished it within the run


# Every path of the engine ---------------------------------------------------------------------------------


def _erased_everywhere(store: Store, config: Settings, spark: Any, plan: str, tmp_path: Path) -> None:
    build(store, config)
    # orders-2: alice inside a committed transaction, so that a split partition decides each key range from the
    # whole range (the transaction facts need every row), beside orders-0's ranges read once per run.
    store.append(
        P2,
        records(
            [
                {"key": "alice", "value": "txn", "producer_id": 7, "producer_epoch": 0, "is_transactional": True},
                {
                    "key": None,
                    "value": None,
                    "producer_id": 7,
                    "producer_epoch": 0,
                    "is_transactional": True,
                    "is_control": True,
                    "control_type": "commit",
                },
            ]
        ),
        now_ms=T0,
    )
    (outcome,) = forget(store, TOPIC, [b"alice"], now_ms=T0 + 10)
    assert sorted(outcome.tombstones) == [0, 1, 2]
    report = Cleaner(spark, store, config, dedupe_plan=plan).run(T0 + 20)
    assert not report.failed, [r.error for r in report.failed]
    for tp in (P0, P1, P2):
        manifest = store.manifest(tp)
        (request,) = manifest.erasures
        assert request.state == "rewritten", tp
        left = [
            (f.path, r.offset)
            for f in log_findings(store, tp, manifest, KeyMatch.of_keys([b"alice"]))
            for r in f.records
            if r.offset < request.tombstone_offset
        ]
        assert left == [], tp
        erased = next(r for r in report.partitions if r.partition == str(tp)).stats.dropped.get("erased", 0)
        assert erased >= 1, tp
    clean = store.manifest(P0).erasures[0].held
    assert any(h.path.startswith("segments/00000000000000000000-") for h in clean)  # the vector's segment


@pytest.mark.spark
@pytest.mark.slow
def test_a_split_partition_erases_on_classic_spark_and_spark_connect(any_spark: Any, tmp_path: Path) -> None:
    config, _ = settings(tmp_path, '"task.max.records" = 2\n')
    _erased_everywhere(Store.open(str(tmp_path / "store")), config, any_spark, "arrow", tmp_path)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("plan", ["window", "aggregate"])
def test_the_spark_sql_plans_erase_too(spark: Any, plan: str, tmp_path: Path) -> None:
    config, _ = settings(tmp_path)
    _erased_everywhere(Store.open(str(tmp_path / "store")), config, spark, plan, tmp_path)


# Published snapshots ----------------------------------------------------------------------------------------


def test_a_snapshot_from_before_an_erasure_expires_after_the_erasure_grace_and_an_old_version_is_not_published(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    lake = tmp_path / "lake"
    lake.mkdir()
    conf = tmp_path / "conf.toml"
    conf.write_text(
        CONF.replace("[cleaner]", '[cleaner]\n"erasure.grace.ms" = 3600000') + '[publish]\ncatalog = "t"\n'
        f'type = "sql"\nuri = "sqlite:///{lake}/c.db"\nwarehouse = "file://{lake}/w"\n'
    )
    config = Settings.load(str(conf), environ={})
    target = publish_target(config)
    store = Store.open(str(tmp_path / "store"))
    store.append(P0, keyed("alice=1 bob=1"), now_ms=T0)
    store.append(P0, keyed("carol=1"), now_ms=T0)
    first = publish_topic(store, TOPIC, target, wall_ms=WALL)
    forget(store, TOPIC, [b"alice"], now_ms=T0 + 1)
    run_pass(store, config, T0 + 2)
    rewritten = store.manifest(P0).erasures[0].rewritten_version
    assert rewritten == 4

    predates = (
        r"version 2 of partition orders-0 predates an erasure \(its log is clean from version 4\): a "
        r"snapshot of it would keep the erased records readable"
    )
    with pytest.raises(PublishError, match=predates):
        publish_topic(store, TOPIC, target, wall_ms=WALL, version={0: 2})
    wall = int(time.time() * 1000)
    blocked = collect_garbage(store, P0, wall_ms=wall + HOUR, grace_ms=DAY, erasure_grace_ms=0)
    assert any(f"pinned by Iceberg snapshot {first.snapshot_id}" in w for w in blocked.erasure_waits)
    code, out = cli(capsys, "erasure", store.url, "--conf", str(conf))
    assert code == EXIT_OK and f"is pinned by Iceberg snapshot {first.snapshot_id}" in out

    second = publish_topic(store, TOPIC, target, wall_ms=wall)  # replaces the first snapshot, which stays for now
    assert second.snapshot_id is not None
    replaced = (
        open_catalog("t", config.publish.properties)  # type: ignore[union-attr]
        .load_table(("default", TOPIC))
        .snapshot_by_id(second.snapshot_id)
        .timestamp_ms
    )
    assert publish_topic(store, TOPIC, target, wall_ms=replaced + HOUR - 1).expired == []
    # After erasure.grace.ms, not gc's day: what it reads holds an erased key.
    assert publish_topic(store, TOPIC, target, wall_ms=replaced + HOUR).expired == [first.snapshot_id]
    assert [p.version for p in store.objects.pins(P0)] == [second.versions[0]]  # only the second snapshot's pin is left
    done = collect_garbage(store, P0, wall_ms=int(time.time() * 1000) + HOUR, grace_ms=DAY, erasure_grace_ms=HOUR)
    assert done.erasures_completed == [ALICE]


def test_forget_refuses_a_topic_its_configuration_does_not_compact_and_bad_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store.open(str(tmp_path / "store"))
    store.append(P0, keyed("alice=1"), now_ms=T0)
    conf = tmp_path / "delete.toml"
    conf.write_text('"log.cleanup.policy" = "delete"\n')
    code, out = cli(capsys, "forget", store.url, TOPIC, "--key", "alice", "--conf", str(conf))
    assert (
        code == 4
        and "topic orders has cleanup.policy=delete in this configuration: a tombstone deletes nothing there" in out
    )
    code, out = cli(capsys, "forget", store.url, TOPIC, "--key", "not base64!", "--base64")
    assert code == 4 and "--key #1 is not base64" in out
    keys = tmp_path / "keys.txt"
    keys.write_bytes(b"alice\n\xff\n")
    code, out = cli(capsys, "forget", store.url, TOPIC, "--keys-file", str(keys))
    assert code == 4 and "keys.txt" in out
    code, out = cli(capsys, "forget", store.url, "bad topic", "--key", "alice")
    assert code == 4 and "topic name 'bad topic'" in out
    code, out = cli(capsys, "forget", store.url, "payments", "--key", "alice")
    assert code == EXIT_FAILED and "topic 'payments' has no partition" in out
    code, out = cli(capsys, "erasure", store.url, "missing")
    assert code == EXIT_FAILED and "topic 'missing' has no partition" in out
    assert store.manifest(P0).version == 1  # nothing was appended


def test_the_table_view_drops_a_pending_requests_key_at_once_whatever_its_version(tmp_path: Path) -> None:
    store = Store.open(str(tmp_path / "store"))
    seq = [{"key": "seq", "value": (9).to_bytes(8, "big")}]
    store.append(
        P0,
        records(
            [
                {"key": "alice", "value": "old", "headers": seq, "timestamp": T0},
                {"key": "bob", "value": "b", "headers": seq, "timestamp": T0},
            ]
        ),
        now_ms=T0,
    )

    def latest() -> list[tuple[bytes, bytes | None]]:
        table = scan(store, TOPIC, 0, latest=True, strategy="header", strategy_header="seq").to_arrow()
        return [(r["key"], r["value"]) for r in table.select(["key", "value"]).to_pylist()]

    assert latest() == [(b"alice", b"old"), (b"bob", b"b")]
    forget(store, TOPIC, [b"alice"], now_ms=T0 + 1)
    # The tombstone has no version header, so without the request alice's old value would still win.
    assert latest() == [(b"bob", b"b")]
