"""Publishing the clean log as an Iceberg table: every engine reads exactly what ``compaction read`` reads.

The read tests' store (:mod:`tests.helpers.readstore`: several versions, deletion vectors, log starts inside and past
segments, keyless records, tombstones, transactions) is published with ``compaction publish`` to a SQL catalog on
sqlite, its warehouse on local disk and on the moto S3 server, first at an older version and then at the newest.
pyiceberg's ``scan().to_arrow()``, Polars' ``scan_iceberg`` and DuckDB over pyiceberg's Arrow output, each at the
snapshot of a version, are held to ``compaction read --version`` of that version. Then: a clean pass under each of
the three strategies published by the run itself (``after.run``); a snapshot gc must not break until it expires;
publishing twice; two publishers racing; a ``.log`` topic.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from compaction.clean.results import RunReport
from compaction.cli import EXIT_INVALID, EXIT_OK, common, main
from compaction.errors import CatalogError
from compaction.job import JobOptions, publish_target, run_job
from compaction.publish import publish_topic, redacted
from compaction.publish.snapshot import VERSIONS_PROPERTY, snapshot_versions
from compaction.publish.table import open_catalog
from compaction.publish.topic import publish
from compaction.store import SegmentFormat, Store, TopicPartition
from compaction.store.gc import collect_store
from compaction.store.verify import verify
from compaction.synthetic import GenerateSpec, generate
from tests.helpers import Lines, past_every_write_ms, readstore
from tests.helpers.readstore import HEADER, NEWEST, OLDER, PARTITIONS, TOPIC
from tests.helpers.s3server import CREDENTIALS, new_bucket, storage_options
from tests.helpers.settings import settings_with

# Polars plans Iceberg scans with pyiceberg here (its own planner is a separate package): say so, quietly.
os.environ.setdefault("POLARS_ICEBERG_PLANNER", "pyiceberg")

ORDER = [("partition", "ascending"), ("offset", "ascending")]
IDENT = ("default", TOPIC)
DAY = 86_400_000


class Published:
    """A built store and the catalog it is published to: how to reach both from the CLI and the API."""

    def __init__(self, url: str, options: dict[str, Any], flags: list[str], catalog: dict[str, str], conf: Path):
        self.url, self.options, self.flags, self.catalog, self.conf = url, options, flags, catalog, conf

    def store(self) -> Store:
        return Store.open(self.url, self.options)

    def table(self) -> Table:
        return open_catalog("test", self.catalog).load_table(IDENT)

    def cli(self, *args: str) -> int:
        return main([*args[:1], self.url, *args[1:], *self.flags, "--conf", str(self.conf)])


def write_conf(path: Path, catalog: dict[str, str], extra: str = "") -> Path:
    lines = ["[publish]", 'catalog = "test"', *[f'"{k}" = "{v}"' for k, v in catalog.items()], extra]
    path.write_text("\n".join(lines) + "\n")
    return path


def local_catalog(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    return {"type": "sql", "uri": f"sqlite:///{folder}/catalog.db", "warehouse": f"file://{folder}/warehouse"}


def publish_both_versions(pub: Published) -> Published:
    assert pub.cli("publish", TOPIC, "--version", str(OLDER)) == EXIT_OK
    assert pub.cli("publish", TOPIC) == EXIT_OK
    return pub


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Published:
    root = tmp_path_factory.mktemp("publish")
    url = str(root / "store")
    readstore.build(Store.open(url))
    catalog = local_catalog(root / "lake")
    return publish_both_versions(Published(url, {}, [], catalog, write_conf(root / "c.toml", catalog)))


@pytest.fixture(scope="module")
def s3(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Published:
    root = tmp_path_factory.mktemp("publish-s3")
    url, options = new_bucket(s3_endpoint), storage_options(s3_endpoint)
    readstore.build(Store.open(url, options))
    catalog = {
        "type": "sql",
        "uri": f"sqlite:///{root}/catalog.db",
        "warehouse": f"{new_bucket(s3_endpoint)}/lake",
        "s3.endpoint": s3_endpoint,
        "s3.region": CREDENTIALS["AWS_DEFAULT_REGION"],
        "s3.access-key-id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "s3.secret-access-key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }
    flags = ["--storage-option", f"client_kwargs.endpoint_url={s3_endpoint}"]
    return publish_both_versions(Published(url, options, flags, catalog, write_conf(root / "c.toml", catalog)))


def copy_store(pub: Published, dest: Path) -> None:
    """A copy of a local store without its pins: they hold versions for the original's catalog, not the copy's."""
    shutil.copytree(Path(pub.url), dest, ignore=shutil.ignore_patterns("_pins"))


def backend(request: pytest.FixtureRequest, name: str) -> Published:
    return request.getfixturevalue(name)


# The reference, and the engines ------------------------------------------------------------------------------


def compaction_read(pub: Published, tmp_path: Path, version: int | None = None) -> pa.Table:
    target = tmp_path / f"read-{time.perf_counter_ns()}.parquet"
    pinned = ["--version", str(version)] if version is not None else []
    assert main(["read", pub.url, TOPIC, *pinned, "--format", "parquet", "-o", str(target), *pub.flags]) == EXIT_OK
    return pq.read_table(target)


def snapshot_of(table: Table, versions: dict[int, int]) -> int:
    """The table's snapshot whose summary names these versions (time travel meets ``read --version``)."""
    found = [s.snapshot_id for s in table.snapshots() if snapshot_versions(s) == versions]
    assert len(found) == 1, f"one snapshot of versions {versions}, found {found}"
    return found[0]


def with_duckdb(table: Table, snapshot_id: int) -> pa.Table:
    con = table.scan(snapshot_id=snapshot_id).to_duckdb("orders")
    try:
        return con.sql("SELECT * FROM orders").to_arrow_table()
    finally:
        con.close()


READERS: dict[str, Callable[[Table, int], pa.Table]] = {
    "pyiceberg": lambda table, snapshot_id: table.scan(snapshot_id=snapshot_id).to_arrow(),
    # Polars reads the files itself: it takes the catalog's storage properties (the S3 endpoint) as options.
    "polars": lambda table, snapshot_id: (
        pl.scan_iceberg(table, snapshot_id=snapshot_id, storage_options=dict(table.io.properties)).collect().to_arrow()
    ),
    "duckdb": with_duckdb,
}


def as_pyiceberg_reads(expected: pa.Table) -> pa.Table:
    """pyiceberg 0.12 rebuilds every list<struct> column and reads a null one as an empty list
    (apache/iceberg-python#3833, open; the files hold the null, and Polars reads it). Only that is forgiven."""
    headers = expected.column("headers").to_pylist()
    assert None in headers, "the store has records without headers, so the difference is exercised"
    fixed = pa.array([[] if h is None else h for h in headers], expected.schema.field("headers").type)
    return expected.set_column(expected.schema.get_field_index("headers"), "headers", fixed)


def assert_reads(reader: str, got: pa.Table, expected: pa.Table) -> None:
    assert got.schema.names == expected.schema.names, "the record columns, the Kafka partition first"
    assert got.num_rows == expected.num_rows
    if reader != "polars":
        expected = as_pyiceberg_reads(expected)
    assert got.cast(expected.schema).sort_by(ORDER).equals(expected.sort_by(ORDER))


# Every engine reads what compaction read reads ------------------------------------------------------------------


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("version", [NEWEST, OLDER])
@pytest.mark.parametrize("name", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_each_snapshot_reads_the_log_of_its_versions_in_every_engine(
    request: pytest.FixtureRequest, tmp_path: Path, name: str, version: int, reader: str
) -> None:
    pub = backend(request, name)
    table = pub.table()
    expected = compaction_read(pub, tmp_path, version)
    got = READERS[reader](table, snapshot_of(table, dict.fromkeys(range(PARTITIONS), version)))
    assert_reads(reader, got, expected)
    if version == NEWEST:
        assert got.num_rows < readstore.SPEC.records + 7 * PARTITIONS, "deletion vectors and log starts took effect"


def test_the_table_is_the_segments_themselves_with_position_deletes(local: Published) -> None:
    table = local.table()
    store = local.store()
    tasks = list(table.scan().plan_files())
    live = {
        f"file://{store.storage.describe(f'{TOPIC}/{p}/{s.path}')}"
        for p in range(PARTITIONS)
        for s in store.manifest(TopicPartition(TOPIC, p)).segments
        if s.next_offset > store.manifest(TopicPartition(TOPIC, p)).log_start_offset
    }
    assert {t.file.file_path for t in tasks} == live, "zero-copy: the live segments are the data files"
    with_deletes = {t.file.file_path: t.delete_files for t in tasks if t.delete_files}
    # Deletion vectors on three segments, and log starts inside partition 0's first segment (partition 2's
    # first segment lies wholly below its log start and is not a data file).
    assert len(with_deletes) == 4 and all(len(d) == 1 for d in with_deletes.values())
    assert {t.file.partition[0] for t in tasks} == set(range(PARTITIONS))
    assert table.spec().fields[0].name == "partition" and str(table.spec().fields[0].transform) == "identity"
    assert "schema.name-mapping.default" in table.properties, "segments have no field ids"
    assert all(not p.startswith(table.location()) for p in live)


# Versions and snapshots ----------------------------------------------------------------------------------------


def test_publishing_the_same_versions_again_adds_no_snapshot(
    local: Published, capsys: pytest.CaptureFixture[str]
) -> None:
    before = [s.snapshot_id for s in local.table().snapshots()]
    assert len(before) == 2, "one per publish of new versions: the older, then the newest"
    capsys.readouterr()
    assert local.cli("publish", TOPIC) == EXIT_OK
    assert "already holds orders at versions 0=4 1=4 2=4: no new snapshot" in capsys.readouterr().out
    assert [s.snapshot_id for s in local.table().snapshots()] == before
    current = local.table().current_snapshot()
    assert current is not None and json.loads(current.summary[VERSIONS_PROPERTY]) == {  # type: ignore[index,arg-type]
        "0": 4,
        "1": 4,
        "2": 4,
    }


def test_a_publish_racing_another_resolves_through_the_catalogs_commit_check(
    local: Published, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_store(local, tmp_path / "store")
    copy = Published(str(tmp_path / "store"), {}, [], local_catalog(tmp_path / "lake"), local.conf)
    store = copy.store()
    wall = int(time.time() * 1000)
    commit = SqlCatalog.commit_table
    raced: list[Any] = []

    def commit_after_another(self: SqlCatalog, *args: Any, **kwargs: Any) -> Any:
        if not raced:  # the other publisher commits between this one's build and its commit
            raced.append(None)  # before it publishes: its own commit passes straight through
            raced[0] = publish(store, TOPIC, "test", copy.catalog, version=OLDER, wall_ms=wall, grace_ms=DAY)
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_after_another)
    mine = publish(store, TOPIC, "test", copy.catalog, wall_ms=wall, grace_ms=DAY)
    monkeypatch.undo()
    assert raced[0].committed and raced[0].attempts == 1
    assert mine.committed and mine.attempts == 2, "it lost the race, then built again from the new state"
    table = copy.table()
    current = table.current_snapshot()
    assert current is not None and current.snapshot_id == mine.snapshot_id
    assert current.parent_snapshot_id == raced[0].snapshot_id, "built on the winner's snapshot"
    assert_reads("polars", READERS["polars"](table, mine.snapshot_id), compaction_read(copy, tmp_path))
    assert_reads("polars", READERS["polars"](table, raced[0].snapshot_id), compaction_read(copy, tmp_path, OLDER))
    pinned = {p.holder.rsplit("-", 1)[1] for p in store.objects.pins(TopicPartition(TOPIC, 0))}
    assert pinned == {str(mine.snapshot_id), str(raced[0].snapshot_id)}, "the loser's first attempt left no pin"

    # Four publishers of the same versions at once: one snapshot, whoever wins; the others find it there.
    results: list[Any] = []

    def one() -> None:
        results.append(publish(store, TOPIC, "test", copy.catalog, version=2, wall_ms=wall, grace_ms=DAY))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == 4 and sum(r.committed for r in results) == 1
    assert len(copy.table().snapshots()) == 3


def test_a_topic_of_kafka_log_segments_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path / "store")
    generate(
        Store.open(url),
        GenerateSpec(
            topics=("clicks",),
            partitions=2,
            records=400,
            keys=50,
            segment_records=100,
            segment_format=SegmentFormat.KAFKA,
        ),
        now_ms=readstore.NOW,
    )
    catalog = local_catalog(tmp_path / "lake")
    code = main(["publish", url, "clicks", "--conf", str(write_conf(tmp_path / "c.toml", catalog))])
    err = capsys.readouterr().err
    assert code == EXIT_INVALID and len(err.strip().splitlines()) == 1
    assert err.startswith("error: partition clicks-0 holds Kafka .log segments (segments/")
    assert "'compaction snapshot'" in err and 'segment.format = "parquet"' in err
    with pytest.raises(NoSuchTableError):
        open_catalog("test", catalog).load_table(("default", "clicks"))


def test_a_run_reports_a_topic_it_could_not_publish_and_publishes_the_others(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    generate(
        Store.open(url),
        GenerateSpec(
            topics=("clicks",),
            partitions=1,
            records=100,
            keys=10,
            segment_records=50,
            segment_format=SegmentFormat.KAFKA,
        ),
        now_ms=readstore.NOW,
    )
    generate(
        Store.open(url),
        GenerateSpec(topics=("orders",), partitions=2, records=100, keys=10, segment_records=50),
        now_ms=readstore.NOW,
    )
    catalog = local_catalog(tmp_path / "lake")
    settings = settings_with(conf=write_conf(tmp_path / "c.toml", catalog, '"after.run" = true'))
    lines = Lines()
    code, report = run_job(
        Store.open(url),
        JobOptions(now_ms=readstore.NOW, wall_ms=int(time.time() * 1000)),
        settings,
        lambda: pytest.fail("nothing to clean: no Spark"),
        out=lines,
    )
    report = cast(RunReport, report)  # not a dry run
    assert code == 3, "the run's cleaning committed, but a publish failed"
    clicks, orders = report.published
    assert clicks["topic"] == "clicks" and "holds Kafka .log segments" in clicks["error"]
    assert orders["topic"] == "orders" and orders["committed"] and orders["versions"] == {"0": 1, "1": 1}
    assert any(line.startswith("failed to publish clicks: partition clicks-0 holds Kafka .log") for line in lines)


# A clean pass, gc and expiry ------------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("strategy", ["offset", "timestamp", "header"])
def test_a_run_publishes_the_clean_log_and_gc_keeps_the_previous_snapshot_until_it_expires(
    spark, local: Published, tmp_path: Path, strategy: str
) -> None:
    copy_store(local, tmp_path / "store")
    catalog = local_catalog(tmp_path / "lake")
    pub = Published(
        str(tmp_path / "store"), {}, [], catalog, write_conf(tmp_path / "c.toml", catalog, '"after.run" = true')
    )
    store = pub.store()
    before = compaction_read(pub, tmp_path)
    assert pub.cli("publish", TOPIC) == EXIT_OK
    first = pub.table().current_snapshot()
    assert first is not None

    settings = settings_with(
        conf=pub.conf,
        flags=[
            "log.cleanup.policy=compact",
            "log.roll.ms=1",
            "cleaner.deletion.vector.max.ratio=0.5",
            f"{TOPIC}:compaction.strategy={strategy}",
            f"{TOPIC}:compaction.strategy.header={HEADER}",
        ],
    )
    wall = int(time.time() * 1000)
    lines = Lines()
    code, report = run_job(store, JobOptions(now_ms=readstore.NOW, wall_ms=wall), settings, lambda: spark, out=lines)
    report = cast(RunReport, report)  # not a dry run
    assert code == EXIT_OK and [r.status for r in report.partitions] == ["cleaned"] * PARTITIONS
    newest = {p: store.versions(TopicPartition(TOPIC, p))[-1] for p in range(PARTITIONS)}
    assert report.published[0]["versions"] == {str(p): v for p, v in newest.items()}
    assert any(line.startswith(f"published {TOPIC} at versions") for line in lines)

    table = pub.table()
    after = compaction_read(pub, tmp_path)
    assert after.num_rows < before.num_rows, "the pass removed records"
    second = snapshot_of(table, newest)
    for reader, read in READERS.items():
        assert_reads(reader, read(table, second), after)
    # gc as eager as it gets: the previous snapshot's versions are pinned, so it still reads the previous log.
    results, failures = collect_store(
        store, store.topic_partitions(), wall_ms=past_every_write_ms(), grace_ms=0, keep_versions=1
    )
    assert not failures and all(r.pinned_versions == [NEWEST, newest[int(r.partition[-1])]] for r in results)
    assert_reads("polars", READERS["polars"](table, first.snapshot_id), before)
    assert not [p for r in verify(store, check_data=False) for p in r.problems]

    # Within gc's grace the previous snapshot stays; once the grace has passed, a publish expires it and gc
    # collects what only it read.
    replaced_ms = cast(Snapshot, table.snapshot_by_id(second)).timestamp_ms
    grace = settings.cleaner.gc_grace_ms
    assert publish_topic(store, TOPIC, publish_target(settings), wall_ms=replaced_ms + grace - 1).expired == []
    expired = publish_topic(store, TOPIC, publish_target(settings), wall_ms=replaced_ms + grace)
    assert not expired.committed and expired.expired == [first.snapshot_id]
    assert [s.snapshot_id for s in pub.table().snapshots()] == [second]
    assert all(p.holder.endswith(f"-{second}") for p in store.objects.pins(TopicPartition(TOPIC, 0)))
    results, _ = collect_store(
        store, store.topic_partitions(), wall_ms=past_every_write_ms(), grace_ms=0, keep_versions=1
    )
    assert all(r.pruned_versions == [NEWEST] and r.deleted_objects for r in results)
    assert_reads("polars", READERS["polars"](pub.table(), second), after)
    assert_reads("pyiceberg", READERS["pyiceberg"](pub.table(), second), after)


def test_verify_names_the_snapshot_whose_version_or_object_is_missing(
    local: Published, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(Path(local.url), tmp_path / "store")
    store = Store.open(str(tmp_path / "store"))
    tp = TopicPartition(TOPIC, 1)
    pins = store.objects.pins(tp)
    assert [p.version for p in pins] == [OLDER, NEWEST], "the store learnt what the published snapshots read"
    monkeypatch.setattr(common, "wall_clock_ms", past_every_write_ms)
    assert main(["gc", str(tmp_path / "store"), "--grace", "0", "--keep-versions", "1"]) == EXIT_OK
    assert (
        f"{TOPIC}-1: deleted 0 object(s) (0 B), pruned manifest versions [1], 0 within the grace period, kept "
        f"pinned versions [{OLDER}, {NEWEST}]" in capsys.readouterr().out
    )
    assert not [p for r in verify(store, check_data=False) for p in r.problems], "the versions kept are continuous"
    segment = store.manifest(tp, NEWEST).segments[-1]
    (tmp_path / "store" / TOPIC / "1" / segment.path).unlink()
    (tmp_path / "store" / TOPIC / "1" / "_manifests" / f"{OLDER:020d}.json").unlink()
    assert main(["verify", str(tmp_path / "store"), "--metadata-only"]) == 1
    out = capsys.readouterr().out
    newest_snapshot = pins[1].holder.rsplit("-", 1)[1]
    assert (
        f"missing, but manifest version {NEWEST} references it; Iceberg snapshot {newest_snapshot} of table "
        f"default.orders" in out
    )
    assert f"holds manifest version {OLDER}, which is missing" in out


def test_a_table_of_another_topic_or_store_is_refused_and_secrets_stay_out_of_errors(
    local: Published, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    generate(
        local.store(),
        GenerateSpec(topics=("payments",), partitions=1, records=50, keys=10, segment_records=50),
        now_ms=readstore.NOW,
    )
    assert local.cli("publish", "payments", "--table", "default.orders") == EXIT_INVALID
    assert (
        f"error: Iceberg table default.orders publishes topic orders of store file://{local.url}, not topic "
        "payments" in capsys.readouterr().err
    )
    secret = "sup3r-s3cret-value"
    conf = write_conf(
        tmp_path / "c.toml",
        {"type": "sql", "uri": f"sqlite:///{tmp_path}/missing/c.db", "s3.secret-access-key": secret},
    )
    assert main(["publish", local.url, "payments", "--conf", str(conf)]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("error: Iceberg catalog 'test', table default.payments: OperationalError")
        and len(err.strip().splitlines()) == 1
    )
    settings = settings_with(conf=conf)
    with pytest.raises(CatalogError) as raised, redacted(publish_target(settings)):
        raise CatalogError(f"the catalog said: bad credential {secret}")
    assert str(raised.value) == "the catalog said: bad credential ****", "the catalog's secrets are masked"
    assert local.cli("publish", "payments") == EXIT_OK, "a table of its own, beside the other"


def test_publish_settings_come_from_the_publish_table(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(
        '[publish]\ncatalog = "lake"\nnamespace = "kafka"\n"after.run" = true\ntype = "rest"\n'
        'uri = "http://127.0.0.1:1"\ns3.endpoint = "http://127.0.0.1:2"\n'
    )
    settings = settings_with(conf=conf, flags=["publish.warehouse=s3://w"])
    assert (settings.publish.catalog, settings.publish.namespace, settings.publish.after_run) == ("lake", "kafka", True)
    assert settings.publish.properties == {
        "type": "rest",
        "uri": "http://127.0.0.1:1",
        "s3.endpoint": "http://127.0.0.1:2",
        "warehouse": "s3://w",
    }
    with pytest.raises(
        Exception,
        match=r"Unknown configuration 'after.runs' in \[publish\] \(did you mean "
        r"'after.run'\?\)",
    ):
        settings_with(conf=conf, flags=["publish.after.runs=true"])
