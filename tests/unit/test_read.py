"""Every reader of the clean log returns exactly what ``compaction read`` returns, at any readable version.

One store per backend (built once per module, :mod:`tests.helpers.readstore`): several versions, deletion vectors,
log starts moved by retention, keyless records, tombstones and transactions. ``compaction read`` is first
held to an oracle written with plain pyarrow from the manifests; then the CLI, the Python table and stream,
Polars, pandas, DuckDB and Spark are held to it, for the newest version, an older one, and (Spark) after a
clean pass and gc. ``--latest`` is held to a latest-per-key computation of its own over the CLI's output.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality

from compaction.clean.cleaner import Cleaner
from compaction.cli import EXIT_FAILED, EXIT_INVALID, main
from compaction.config import Settings
from compaction.errors import VersionNotFoundError
from compaction.read.history import history
from compaction.read.scan import Scan, read_batches, scan
from compaction.store import Replacement, Store, TopicPartition, Writer
from compaction.store.gc import collect_store
from compaction.store.jsonl import to_lines
from tests.helpers import readstore
from tests.helpers.readstore import HEADER, NEWEST, OLDER, PARTITIONS, TOPIC
from tests.helpers.s3server import new_bucket, storage_options

ORDER = [("partition", "ascending"), ("offset", "ascending")]


# Stores -------------------------------------------------------------------------------------------------


class Built:
    """A built store: how to open it, the CLI flags that reach it, and its aborted offsets."""

    def __init__(self, url: str, options: dict[str, Any], flags: list[str], aborted: dict[int, list[int]]):
        self.url, self.options, self.flags, self.aborted = url, options, flags, aborted

    def store(self) -> Store:
        return Store.open(self.url, self.options)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Built:
    url = str(tmp_path_factory.mktemp("read") / "store")
    return Built(url, {}, [], readstore.build(Store.open(url)))


@pytest.fixture(scope="module")
def s3(s3_endpoint: str) -> Built:
    url = new_bucket(s3_endpoint)
    options = storage_options(s3_endpoint)
    return Built(url, options, ["--storage-option", f"client_kwargs.endpoint_url={s3_endpoint}"],
                 readstore.build(Store.open(url, options)))


@pytest.fixture(scope="module")
def cleaned(spark, local: Built, tmp_path_factory: pytest.TempPathFactory) -> Built:  # type: ignore[no-untyped-def]
    """A copy of the local store after a clean pass (deletion vectors, rewrites) and gc of all but 2 versions."""
    url = str(tmp_path_factory.mktemp("cleaned") / "store")
    shutil.copytree(local.url, url)
    store = Store.open(url)
    settings = Settings.load(overrides={"log.cleanup.policy": "compact", "log.roll.ms": 1,
                                        "cleaner": {"deletion.vector.max.ratio": 0.5}}, environ={})
    report = Cleaner(spark, store, settings).run(readstore.NOW)
    assert [r.status for r in report.partitions] == ["cleaned"] * PARTITIONS
    time.sleep(0.01)
    _, failures = collect_store(store, store.topic_partitions(), wall_ms=int(time.time() * 1000) + 1, grace_ms=0,
                                keep_versions=2)
    assert not failures
    return Built(url, {}, [], local.aborted)


def backend(request: pytest.FixtureRequest, name: str) -> Built:
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


# The reference: compaction read ---------------------------------------------------------------------------


def cli(built: Built, *args: str, capsys: pytest.CaptureFixture[str] | None = None) -> tuple[int, str]:
    code = main([*args[:1], built.url, *args[1:], *built.flags])
    out = capsys.readouterr() if capsys else None
    return code, (out.out + out.err) if out else ""


_READS: dict[tuple[str, ...], pa.Table] = {}


def cli_table(built: Built, tmp_path: Path, *args: str) -> pa.Table:
    """``compaction read STORE orders ARGS --format parquet -o FILE``, as a table (each read once per store:
    the module's stores never change; tests that change one work on a copy)."""
    if (built.url, *args) not in _READS:
        target = tmp_path / f"read-{time.perf_counter_ns()}.parquet"
        assert cli(built, "read", TOPIC, *args, "--format", "parquet", "-o", str(target))[0] == 0
        _READS[built.url, *args] = pq.read_table(target)
    return _READS[built.url, *args]


def canonical(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return table.select(schema.names).cast(schema).sort_by(ORDER)


# Readers: each returns the records of ``the_scan`` its own way --------------------------------------------


def stream(the_scan: Scan) -> pa.Table:
    batches = list(read_batches(the_scan.store, the_scan.topic, None, version=the_scan.versions,
                                latest=the_scan.latest, strategy=the_scan.strategy, strategy_header=HEADER,
                                batch_rows=100))
    assert all(b.num_rows <= 100 for b in batches), "a stream's batches are bounded"
    return pa.Table.from_batches(batches, schema=the_scan.schema)


def with_duckdb(the_scan: Scan) -> pa.Table:
    con = duckdb.connect()
    try:
        view = the_scan.to_duckdb(con, "orders")
        first = view.to_arrow_table()
        assert con.sql("select count(*) from orders").fetchall() == [(first.num_rows,)], "the view can be scanned again"
        return first
    finally:
        con.close()


READERS: dict[str, Callable[[Scan], pa.Table]] = {
    "table": lambda s: s.to_arrow(),
    "stream": stream,
    "polars": lambda s: s.to_polars().collect().to_arrow(),
    "pandas": lambda s: pa.Table.from_pandas(s.to_pandas(), schema=s.schema, preserve_index=False),
    "duckdb": with_duckdb,
}


def the_scan(built: Built, version: int | None, latest: bool = False) -> Scan:
    return scan(built.url, TOPIC, version=version, latest=latest, strategy_header=HEADER,
                storage_options=built.options)


# compaction read itself ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["local", pytest.param("s3", marks=pytest.mark.s3)])
@pytest.mark.parametrize("version", [NEWEST, OLDER])
def test_compaction_read_returns_the_live_log_of_the_version(request: pytest.FixtureRequest, tmp_path: Path,
                                                             name: str, version: int) -> None:
    built = backend(request, name)
    expected = readstore.oracle(built.store(), {p: version for p in range(PARTITIONS)})
    got = cli_table(built, tmp_path, "--version", str(version))
    assert got.schema.names[0] == "partition"
    assert got.equals(expected.cast(got.schema)), "in partition and offset order, every column as stored"
    if version == NEWEST:
        assert got.num_rows < readstore.SPEC.records + 7 * PARTITIONS, "deletion vectors and log starts took effect"


def test_reading_one_partition_keeps_the_old_output_without_a_partition_column(
        local: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = local.store()
    old = store.read(TopicPartition(TOPIC, 0))
    code, out = cli(local, "read", TOPIC, "0", "--from", "200", "--to", "400", capsys=capsys)
    lines = out.splitlines()
    assert code == 0 and lines == list(to_lines(store.read(TopicPartition(TOPIC, 0), start=200, end=400)))
    assert "partition" not in json.loads(lines[0])
    target = tmp_path / "p0.parquet"
    code, out = cli(local, "read", TOPIC, "0", "-o", str(target), capsys=capsys)
    assert code == 0 and f"wrote {old.num_rows} record(s)" in out
    assert pq.read_table(target).equals(old)


# Every reader returns what compaction read returns ------------------------------------------------------


SCENARIOS = [
    pytest.param("local", NEWEST, id="local-newest"),
    pytest.param("local", OLDER, id="local-older"),
    pytest.param("s3", NEWEST, id="s3-newest", marks=pytest.mark.s3),
    pytest.param("cleaned", None, id="after-clean-and-gc", marks=pytest.mark.spark),
]


# On S3 the latest view is read once: the readers differ only in what they do with the same batches.
READER_CASES = [pytest.param(scenario.values[0], scenario.values[1], latest, reader, marks=scenario.marks,
                             id=f"{reader}-{'latest' if latest else 'log'}-{scenario.id}")
                for scenario in SCENARIOS for latest in (False, True) for reader in READERS
                if not (scenario.values[0] == "s3" and latest and reader != "table")]


@pytest.mark.parametrize(("name", "version", "latest", "reader"), READER_CASES)
def test_every_reader_returns_the_records_of_compaction_read(request: pytest.FixtureRequest, tmp_path: Path,
                                                             name: str, version: int | None, latest: bool,
                                                             reader: str) -> None:
    built = backend(request, name)
    flags = [*(["--version", str(version)] if version else []), *(["--latest"] if latest else [])]
    expected = cli_table(built, tmp_path, *flags)
    s = the_scan(built, version, latest)
    got = READERS[reader](s)
    assert got.num_rows == expected.num_rows
    assert canonical(got, expected.schema).equals(expected)


@pytest.mark.spark
@pytest.mark.parametrize(("name", "version"), [s for s in SCENARIOS if s.id != "local-older"])
@pytest.mark.parametrize("latest", [False, True], ids=["log", "latest"])
def test_the_spark_reader_returns_the_records_of_compaction_read(  # type: ignore[no-untyped-def]
        any_spark, request: pytest.FixtureRequest, tmp_path: Path, name: str, version: int | None,
        latest: bool) -> None:
    """On a classic session and on Spark Connect alike."""
    built = backend(request, name)
    flags = [*(["--version", str(version)] if version else []), *(["--latest"] if latest else [])]
    expected = cli_table(built, tmp_path, *flags)
    s = the_scan(built, version, latest)
    frame = s.to_spark(any_spark)
    tasks = PARTITIONS if latest else sum(len(part.files) for part in s.files())
    assert len(s.tasks(split=True)) == tasks, "a task per live file, or per partition for the latest view"
    if not type(any_spark).__module__.startswith("pyspark.sql.connect"):  # only classic sessions show their RDDs
        assert frame.rdd.getNumPartitions() == tasks
    assert canonical(frame.toArrow(), expected.schema).equals(expected)
    assert_df_equality(frame.select(*expected.schema.names), any_spark.createDataFrame(expected),
                       ignore_row_order=True, ignore_nullable=True)


# --latest: the table view ------------------------------------------------------------------------------


def latest_in_duckdb(log: pa.Table, aborted: dict[int, list[int]], strategy: str) -> pa.Table:
    """Per partition and key, the greatest competing record of the log; tombstones then dropped."""
    order = {
        "offset": '"offset" DESC',
        "timestamp": 'coalesce(timestamp >= 0, false) DESC, CASE WHEN timestamp >= 0 THEN timestamp ELSE -1 END DESC, '
                     '"offset" DESC',
    }[strategy]
    gone = pa.table({"partition": pa.array([p for p, offsets in aborted.items() for _ in offsets], pa.int32()),
                     "offset": pa.array([o for offsets in aborted.values() for o in offsets], pa.int64())})
    con = duckdb.connect()
    try:
        con.register("log", log)
        con.register("aborted", gone)
        return con.sql(f"""
            SELECT * FROM (
                SELECT * FROM log
                WHERE key IS NOT NULL AND NOT is_control
                  AND ("partition", "offset") NOT IN (SELECT ("partition", "offset") FROM aborted)
                QUALIFY row_number() OVER (PARTITION BY "partition", key ORDER BY {order}) = 1)
            WHERE value IS NOT NULL ORDER BY "partition", "offset" """).to_arrow_table()
    finally:
        con.close()


def latest_by_header(log: pa.Table, aborted: dict[int, list[int]]) -> list[tuple[int, int]]:
    """The header strategy in plain Python: the last ``seq`` header as an 8-byte big-endian long wins."""
    best: dict[tuple[int, bytes], tuple[tuple[int, int, int], dict[str, Any]]] = {}
    for row in log.to_pylist():
        if row["key"] is None or row["is_control"] or row["offset"] in aborted[row["partition"]]:
            continue
        values = [h["value"] for h in row["headers"] or [] if h["key"] == HEADER]
        valid = bool(values) and len(values[-1]) == 8
        rank = (int(valid), int.from_bytes(values[-1], "big", signed=True) if valid else -1, row["offset"])
        if (row["partition"], row["key"]) not in best or rank > best[row["partition"], row["key"]][0]:
            best[row["partition"], row["key"]] = (rank, row)
    return sorted((r["partition"], r["offset"]) for _, r in best.values() if r["value"] is not None)


@pytest.mark.parametrize(("name", "version"), SCENARIOS)
@pytest.mark.parametrize("strategy", ["offset", "timestamp", "header"])
def test_latest_is_each_keys_winner_of_the_log_under_the_topics_strategy(
        request: pytest.FixtureRequest, tmp_path: Path, name: str, version: int | None, strategy: str) -> None:
    built = backend(request, name)
    pinned = ["--version", str(version)] if version else []
    log = cli_table(built, tmp_path, *pinned)
    chosen = ["--set", f"{TOPIC}:compaction.strategy={strategy}", "--set",
              f"{TOPIC}:compaction.strategy.header={HEADER}"]
    got = cli_table(built, tmp_path, *pinned, "--latest", *chosen)
    if strategy == "header":
        assert list(zip(got.column("partition").to_pylist(), got.column("offset").to_pylist(), strict=True)) == \
            latest_by_header(log, built.aborted)
    else:
        assert got.equals(latest_in_duckdb(log, built.aborted, strategy).cast(got.schema))
    assert 0 < got.num_rows < log.num_rows
    keys = list(zip(got.column("partition").to_pylist(), got.column("key").to_pylist(), strict=True))
    assert len(keys) == len(set(keys)), "one record per key"
    assert got.column("value").null_count == 0 and got.column("key").null_count == 0


def test_latest_view_is_the_same_before_and_after_a_clean_pass(local: Built, cleaned: Built,
                                                               tmp_path: Path) -> None:
    before = cli_table(local, tmp_path, "--latest")
    after = cli_table(cleaned, tmp_path, "--latest")
    assert after.equals(before), "cleaning keeps each key's winner and drops only what the view never shows"
    assert cli_table(cleaned, tmp_path).num_rows < cli_table(local, tmp_path).num_rows


# Filters ---------------------------------------------------------------------------------------------------


def test_filters_are_pushed_down_and_select_exactly_their_records(local: Built, tmp_path: Path) -> None:
    log = cli_table(local, tmp_path)
    since, until = readstore.NOW - 50_000_000, readstore.NOW - 20_000_000
    con = duckdb.connect()
    con.register("log", log)
    expected = con.sql(f"""SELECT * FROM log WHERE key IN ('key-0000000003', 'key-0000000004', 'key-0000000005')
                           AND "offset" >= 200 AND "offset" < 1100 AND timestamp >= {since} AND timestamp < {until}
                           ORDER BY "partition", "offset" """).to_arrow_table().cast(log.schema)
    con.close()
    keys: list[bytes | str] = ["key-0000000003", b"key-0000000004", "key-0000000005"]
    got = scan(local.url, TOPIC, keys=keys, offsets=(200, 1100), timestamps=(since, until)).to_arrow()
    assert got.num_rows > 0 and got.equals(expected)
    flags = ["--from", "200", "--to", "1100", "--since", str(since), "--until", str(until)]
    assert cli_table(local, tmp_path, *flags, *[f for k in ("3", "4", "5") for f in ("--key", f"key-000000000{k}")]
                     ).equals(expected)
    narrow = scan(local.url, TOPIC, columns=["value"], keys=keys, offsets=(200, 1100), timestamps=(since, until))
    assert narrow.to_arrow().equals(expected.select(["partition", "value"])), "filters read their own columns"
    columns = scan(local.url, TOPIC, columns=["key", "offset"], offsets=(200, 1100)).to_arrow()
    assert columns.schema.names == ["partition", "key", "offset"]
    assert columns.num_rows == log.filter((pc.field("offset") >= 200) & (pc.field("offset") < 1100)).num_rows


def test_polars_pushes_projections_and_predicates_into_the_stream_and_stops_early(local: Built,
                                                                                 tmp_path: Path) -> None:
    import polars as pl

    log = cli_table(local, tmp_path)
    lazy = the_scan(local, None).to_polars()
    got = lazy.filter(pl.col("key") == b"key-0000000003").select(["offset", "partition"]).collect()
    rows = [(r["partition"], r["offset"]) for r in log.to_pylist() if r["key"] == b"key-0000000003"]
    assert got.columns == ["offset", "partition"] and sorted(zip(got["partition"], got["offset"], strict=True)) == rows
    assert lazy.select("offset").head(5).collect()["offset"].to_list() == log.column("offset").to_pylist()[:5]
    assert lazy.select(pl.len()).collect().item() == log.num_rows


def test_bad_read_arguments_are_refused_before_reading(local: Built, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = cli(local, "read", TOPIC, "--columns", "offset,nope", capsys=capsys)
    assert code == EXIT_INVALID and "unknown column(s) ['nope']" in out
    code, out = cli(local, "read", TOPIC, "--version", "2", "--version", "0=3", capsys=capsys)
    assert code == EXIT_INVALID and "give one --version V for every partition" in out
    code, out = cli(local, "read", "nothing", capsys=capsys)
    assert code == EXIT_FAILED and "topic nothing has no partitions" in out


def test_latest_until_a_time_is_the_table_as_of_that_time(local: Built, tmp_path: Path) -> None:
    until = readstore.NOW - 40_000_000
    log = cli_table(local, tmp_path, "--until", str(until))
    got = cli_table(local, tmp_path, "--latest", "--until", str(until))
    assert got.equals(latest_in_duckdb(log, local.aborted, "offset").cast(got.schema))


# Versions --------------------------------------------------------------------------------------------------


def _drop_last_segment(store: Store, tp: TopicPartition) -> str:
    """Commit a version without the partition's last segment; returns that segment's object name."""
    m = store.manifest(tp)
    last = m.segments[-1]
    store.replace(tp, Replacement((last,), (), m.first_dirty_offset, m.first_dirty_offset, m.log_start_offset,
                                  m.log_start_offset), writer=Writer(), now_ms=readstore.NOW)
    return last.path


def _copy(built: Built, tmp_path: Path) -> Built:
    url = str(tmp_path / "copy")
    shutil.copytree(built.url, url)
    return Built(url, {}, [], built.aborted)


def _partly_read(s: Scan) -> tuple[Iterator[pa.RecordBatch], list[pa.RecordBatch]]:
    batches = s.batches()
    return batches, [next(batches)]


def test_a_reader_finishes_its_version_when_a_newer_one_commits_and_gc_runs_within_its_grace(
        local: Built, tmp_path: Path) -> None:
    built = _copy(local, tmp_path)
    store = built.store()
    expected = the_scan(built, None).to_arrow()
    s = the_scan(built, None)
    batches, first = _partly_read(s)
    for p in range(PARTITIONS):
        _drop_last_segment(store, TopicPartition(TOPIC, p))
    results, _ = collect_store(store, store.topic_partitions(), wall_ms=int(time.time() * 1000), grace_ms=3_600_000,
                               keep_versions=1)
    assert not [r for r in results if r.deleted_objects or r.pruned_versions], "all within the grace period"
    assert pa.Table.from_batches([*first, *batches]).equals(expected)


def test_a_version_gc_removed_is_refused_naming_the_oldest_readable_one(
        local: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    built = _copy(local, tmp_path)
    store = built.store()
    s = the_scan(built, None)
    batches, _ = _partly_read(s)
    for p in range(PARTITIONS):
        _drop_last_segment(store, TopicPartition(TOPIC, p))
    time.sleep(0.01)
    results, _ = collect_store(store, store.topic_partitions(), wall_ms=int(time.time() * 1000) + 1, grace_ms=0,
                               keep_versions=1)
    assert all(r.pruned_versions == [1, 2, 3, 4] and len(r.deleted_objects) >= 1 for r in results)
    with pytest.raises(VersionNotFoundError, match=r"version 4 of partition orders-.* was removed by gc while it was "
                                                   r"being read .*: the oldest readable version is 5"):
        list(batches)
    with pytest.raises(VersionNotFoundError, match=r"version 2 of partition orders-0 .* was removed by gc: the oldest "
                                                   r"readable version is 5 \(the newest 5\)"):
        scan(built.url, TOPIC, version=2)
    code, out = cli(built, "read", TOPIC, "--version", "0=3", capsys=capsys)
    assert code == EXIT_FAILED and "error: version 3 of partition orders-0" in out and "oldest readable version is 5" \
        in out
    code, out = cli(built, "read", TOPIC, "1", "--version", "9", capsys=capsys)
    assert code == EXIT_FAILED and "version 9 of partition orders-1" in out and "was never committed" in out
    kept = history(built.url, TOPIC, 0)
    assert [(e.version, e.records_in, e.records_out) for e in kept] == [(5, None, None)], \
        "the first version kept has nothing left to compare with"


# Folder hygiene -------------------------------------------------------------------------------------------


def _segments_folder(built: Built, partition: int) -> Path:
    return Path(built.url) / TOPIC / str(partition) / "segments"


def test_deletion_vectors_are_named_so_that_readers_skipping_underscore_files_skip_them(local: Built) -> None:
    vectors = [s.deletes.path for p in range(PARTITIONS) for s in local.store().manifest(TopicPartition(TOPIC, p))
               .segments if s.deletes]
    assert len(vectors) == 3 and all(v.startswith("segments/_") and v.endswith(".deletes.parquet") for v in vectors)
    folder = _segments_folder(local, 0)
    listed = {p.name for p in folder.iterdir()}
    dataset = {Path(f).name for f in ds.dataset(folder).files}  # pyarrow: ignore_prefixes [".", "_"]
    assert dataset == {name for name in listed if not name.startswith("_")} and len(dataset) < len(listed)


@pytest.mark.spark
def test_spark_reading_a_segment_folder_skips_deletion_vectors(spark, local: Built) -> None:  # type: ignore[no-untyped-def]
    inputs = spark.read.parquet(str(_segments_folder(local, 1))).inputFiles()
    assert inputs and not [f for f in inputs if Path(f).name.startswith("_")]


def test_deletion_vectors_under_their_old_names_are_still_read(local: Built, tmp_path: Path) -> None:
    built = _copy(local, tmp_path)
    store = built.store()
    tp = TopicPartition(TOPIC, 1)
    expected = the_scan(built, None).to_arrow()
    m = store.manifest(tp)
    segment = next(s for s in m.segments if s.deletes)
    assert segment.deletes is not None
    old = segment.deletes.path.replace("segments/_", "segments/")
    partition = Path(built.url) / TOPIC / "1"
    (partition / old).write_bytes((partition / segment.deletes.path).read_bytes())
    renamed = segment.model_copy(update={"deletes": segment.deletes.model_copy(update={"path": old})})
    store.replace(tp, Replacement((segment,), (renamed,), m.first_dirty_offset, m.first_dirty_offset,
                                  m.log_start_offset, m.log_start_offset), writer=Writer(), now_ms=readstore.NOW)
    assert store.manifest(tp).segments[0].deletes.path == old  # type: ignore[union-attr]
    assert the_scan(built, None).to_arrow().equals(expected)
