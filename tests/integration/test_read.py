"""Every reader of the clean log returns exactly what ``compaction read`` returns, at any readable version, on S3
and after a clean pass on Spark too (the local store's own reads are in tests/unit/test_read.py).

One store per backend (built once per module, :mod:`tests.helpers.readstore`): several versions, deletion vectors,
log starts moved by retention, keyless records, tombstones and transactions. ``compaction read`` is first
held to an oracle written with plain pyarrow from the manifests; then the CLI, the Python table and stream,
Polars, pandas, DuckDB and Spark are held to it, for the newest version, an older one, and (Spark) after a
clean pass and gc. ``--latest`` is held to a latest-per-key computation of its own over the CLI's output.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from chispa import assert_df_equality

from compaction.clean.cleaner import Cleaner
from compaction.store import Store
from compaction.store.gc import collect_store
from tests.helpers import past_every_write_ms, readstore
from tests.helpers.readstore import (
    HEADER,
    NEWEST,
    OLDER,
    PARTITIONS,
    READERS,
    TOPIC,
    Built,
    backend,
    canonical,
    cli_table,
    latest_by_header,
    latest_in_duckdb,
    segments_folder,
    the_scan,
)
from tests.helpers.s3server import new_bucket, storage_options
from tests.helpers.settings import settings_with

# Stores -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return readstore.built_locally(tmp_path_factory)


@pytest.fixture(scope="module")
def s3(s3_endpoint: str) -> Built:
    url = new_bucket(s3_endpoint)
    options = storage_options(s3_endpoint)
    return Built(
        url,
        options,
        ["--storage-option", f"client_kwargs.endpoint_url={s3_endpoint}"],
        readstore.build(Store.open(url, options)),
    )


@pytest.fixture(scope="module")
def cleaned(spark, local: Built, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A copy of the local store after a clean pass (deletion vectors, rewrites) and gc of all but 2 versions."""
    url = str(tmp_path_factory.mktemp("cleaned") / "store")
    shutil.copytree(local.url, url)
    store = Store.open(url)
    settings = settings_with(
        {"log.cleanup.policy": "compact", "log.roll.ms": 1, "cleaner": {"deletion.vector.max.ratio": 0.5}}
    )
    report = Cleaner(spark, store, settings).run(readstore.NOW)
    assert [r.status for r in report.partitions] == ["cleaned"] * PARTITIONS
    _, failures = collect_store(
        store, store.topic_partitions(), wall_ms=past_every_write_ms(), grace_ms=0, keep_versions=2
    )
    assert not failures
    return Built(url, {}, [], local.aborted)


@pytest.mark.parametrize("name", ["local", pytest.param("s3", marks=pytest.mark.s3)])
@pytest.mark.parametrize("version", [NEWEST, OLDER])
def test_compaction_read_returns_the_live_log_of_the_version(
    request: pytest.FixtureRequest, tmp_path: Path, name: str, version: int
) -> None:
    built = backend(request, name)
    expected = readstore.oracle(built.store(), {p: version for p in range(PARTITIONS)})
    got = cli_table(built, tmp_path, "--version", str(version))
    assert got.schema.names[0] == "partition"
    assert got.equals(expected.cast(got.schema)), "in partition and offset order, every column as stored"
    if version == NEWEST:
        assert got.num_rows < readstore.SPEC.records + 7 * PARTITIONS, "deletion vectors and log starts took effect"


SCENARIOS = [
    pytest.param("local", NEWEST, id="local-newest"),
    pytest.param("local", OLDER, id="local-older"),
    pytest.param("s3", NEWEST, id="s3-newest", marks=pytest.mark.s3),
    pytest.param("cleaned", None, id="after-clean-and-gc", marks=pytest.mark.spark),
]


# On S3 the latest view is read once: the readers differ only in what they do with the same batches.
READER_CASES = [
    pytest.param(
        scenario.values[0],
        scenario.values[1],
        latest,
        reader,
        marks=scenario.marks,
        id=f"{reader}-{'latest' if latest else 'log'}-{scenario.id}",
    )
    for scenario in SCENARIOS
    for latest in (False, True)
    for reader in READERS
    if not (scenario.values[0] == "s3" and latest and reader != "table")
]


@pytest.mark.parametrize(("name", "version", "latest", "reader"), READER_CASES)
def test_every_reader_returns_the_records_of_compaction_read(
    request: pytest.FixtureRequest, tmp_path: Path, name: str, version: int | None, latest: bool, reader: str
) -> None:
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
def test_the_spark_reader_returns_the_records_of_compaction_read(
    any_spark, request: pytest.FixtureRequest, tmp_path: Path, name: str, version: int | None, latest: bool
) -> None:
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
    assert_df_equality(
        frame.select(*expected.schema.names),
        any_spark.createDataFrame(expected),
        ignore_row_order=True,
        ignore_nullable=True,
    )


@pytest.mark.parametrize(("name", "version"), SCENARIOS)
@pytest.mark.parametrize("strategy", ["offset", "timestamp", "header"])
def test_latest_is_each_keys_winner_of_the_log_under_the_topics_strategy(
    request: pytest.FixtureRequest, tmp_path: Path, name: str, version: int | None, strategy: str
) -> None:
    built = backend(request, name)
    pinned = ["--version", str(version)] if version else []
    log = cli_table(built, tmp_path, *pinned)
    chosen = [
        "--set",
        f"{TOPIC}:compaction.strategy={strategy}",
        "--set",
        f"{TOPIC}:compaction.strategy.header={HEADER}",
    ]
    got = cli_table(built, tmp_path, *pinned, "--latest", *chosen)
    if strategy == "header":
        assert list(
            zip(got.column("partition").to_pylist(), got.column("offset").to_pylist(), strict=True)
        ) == latest_by_header(log, built.aborted)
    else:
        assert got.equals(latest_in_duckdb(log, built.aborted, strategy).cast(got.schema))
    assert 0 < got.num_rows < log.num_rows
    keys = list(zip(got.column("partition").to_pylist(), got.column("key").to_pylist(), strict=True))
    assert len(keys) == len(set(keys)), "one record per key"
    assert got.column("value").null_count == 0 and got.column("key").null_count == 0


def test_latest_view_is_the_same_before_and_after_a_clean_pass(local: Built, cleaned: Built, tmp_path: Path) -> None:
    before = cli_table(local, tmp_path, "--latest")
    after = cli_table(cleaned, tmp_path, "--latest")
    assert after.equals(before), "cleaning keeps each key's winner and drops only what the view never shows"
    assert cli_table(cleaned, tmp_path).num_rows < cli_table(local, tmp_path).num_rows


@pytest.mark.spark
def test_spark_reading_a_segment_folder_skips_deletion_vectors(spark, local: Built) -> None:
    inputs = spark.read.parquet(str(segments_folder(local, 1))).inputFiles()
    assert inputs and not [f for f in inputs if Path(f).name.startswith("_")]
