"""Reading the clean log of a local store: one partition, filters pushed down, Polars' pushdown, bad arguments,
readers of a version gc removes, and the folders' hygiene (every reader held to ``compaction read`` at every
version, on S3 and on Spark, is in tests/integration/test_read.py).

The store is built once per module (:mod:`tests.helpers.readstore`): several versions, deletion vectors, log starts
moved by retention, keyless records, tombstones and transactions.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from compaction.cli import EXIT_FAILED, EXIT_INVALID
from compaction.errors import VersionNotFoundError
from compaction.read.history import history
from compaction.read.scan import Scan, scan
from compaction.store import Replacement, Store, TopicPartition, Writer
from compaction.store.gc import collect_store
from compaction.store.jsonl import to_lines
from tests.helpers import past_every_write_ms, readstore
from tests.helpers.readstore import PARTITIONS, TOPIC, Built, cli, cli_table, the_scan

# Stores -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return readstore.built_locally(tmp_path_factory)


# compaction read itself ----------------------------------------------------------------------------------


def test_reading_one_partition_keeps_the_old_output_without_a_partition_column(
    local: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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


# Filters ---------------------------------------------------------------------------------------------------


def test_filters_are_pushed_down_and_select_exactly_their_records(local: Built, tmp_path: Path) -> None:
    log = cli_table(local, tmp_path)
    since, until = readstore.NOW - 50_000_000, readstore.NOW - 20_000_000
    con = duckdb.connect()
    con.register("log", log)
    expected = (
        con.sql(f"""SELECT * FROM log WHERE key IN ('key-0000000003', 'key-0000000004', 'key-0000000005')
                           AND "offset" >= 200 AND "offset" < 1100 AND timestamp >= {since} AND timestamp < {until}
                           ORDER BY "partition", "offset" """)
        .to_arrow_table()
        .cast(log.schema)
    )
    con.close()
    keys: list[bytes | str] = ["key-0000000003", b"key-0000000004", "key-0000000005"]
    got = scan(local.url, TOPIC, keys=keys, offsets=(200, 1100), timestamps=(since, until)).to_arrow()
    assert got.num_rows > 0 and got.equals(expected)
    flags = ["--from", "200", "--to", "1100", "--since", str(since), "--until", str(until)]
    assert cli_table(
        local, tmp_path, *flags, *[f for k in ("3", "4", "5") for f in ("--key", f"key-000000000{k}")]
    ).equals(expected)
    narrow = scan(local.url, TOPIC, columns=["value"], keys=keys, offsets=(200, 1100), timestamps=(since, until))
    assert narrow.to_arrow().equals(expected.select(["partition", "value"])), "filters read their own columns"
    columns = scan(local.url, TOPIC, columns=["key", "offset"], offsets=(200, 1100)).to_arrow()
    assert columns.schema.names == ["partition", "key", "offset"]
    assert columns.num_rows == log.filter((pc.field("offset") >= 200) & (pc.field("offset") < 1100)).num_rows


def test_polars_pushes_projections_and_predicates_into_the_stream_and_stops_early(local: Built, tmp_path: Path) -> None:
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
    assert got.equals(readstore.latest_in_duckdb(log, local.aborted, "offset").cast(got.schema))


# Versions --------------------------------------------------------------------------------------------------


def _drop_last_segment(store: Store, tp: TopicPartition) -> str:
    """Commit a version without the partition's last segment; returns that segment's object name."""
    m = store.manifest(tp)
    last = m.segments[-1]
    store.replace(
        tp,
        Replacement((last,), (), m.first_dirty_offset, m.first_dirty_offset, m.log_start_offset, m.log_start_offset),
        writer=Writer(),
        now_ms=readstore.NOW,
    )
    return last.path


def _copy(built: Built, tmp_path: Path) -> Built:
    url = str(tmp_path / "copy")
    shutil.copytree(built.url, url)
    return Built(url, {}, [], built.aborted)


def _partly_read(s: Scan) -> tuple[Iterator[pa.RecordBatch], list[pa.RecordBatch]]:
    batches = s.batches()
    return batches, [next(batches)]


def test_a_reader_finishes_its_version_when_a_newer_one_commits_and_gc_runs_within_its_grace(
    local: Built, tmp_path: Path
) -> None:
    built = _copy(local, tmp_path)
    store = built.store()
    expected = the_scan(built, None).to_arrow()
    s = the_scan(built, None)
    batches, first = _partly_read(s)
    for p in range(PARTITIONS):
        _drop_last_segment(store, TopicPartition(TOPIC, p))
    results, _ = collect_store(
        store, store.topic_partitions(), wall_ms=int(time.time() * 1000), grace_ms=3_600_000, keep_versions=1
    )
    assert not [r for r in results if r.deleted_objects or r.pruned_versions], "all within the grace period"
    assert pa.Table.from_batches([*first, *batches]).equals(expected)


def test_a_version_gc_removed_is_refused_naming_the_oldest_readable_one(
    local: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built = _copy(local, tmp_path)
    store = built.store()
    s = the_scan(built, None)
    batches, _ = _partly_read(s)
    for p in range(PARTITIONS):
        _drop_last_segment(store, TopicPartition(TOPIC, p))
    results, _ = collect_store(
        store, store.topic_partitions(), wall_ms=past_every_write_ms(), grace_ms=0, keep_versions=1
    )
    assert all(r.pruned_versions == [1, 2, 3, 4] and len(r.deleted_objects) >= 1 for r in results)
    with pytest.raises(
        VersionNotFoundError,
        match=r"version 4 of partition orders-.* was removed by gc while it was "
        r"being read .*: the oldest readable version is 5",
    ):
        list(batches)
    with pytest.raises(
        VersionNotFoundError,
        match=r"version 2 of partition orders-0 .* was removed by gc: the oldest "
        r"readable version is 5 \(the newest 5\)",
    ):
        scan(built.url, TOPIC, version=2)
    code, out = cli(built, "read", TOPIC, "--version", "0=3", capsys=capsys)
    assert (
        code == EXIT_FAILED
        and "error: version 3 of partition orders-0" in out
        and "oldest readable version is 5" in out
    )
    code, out = cli(built, "read", TOPIC, "1", "--version", "9", capsys=capsys)
    assert code == EXIT_FAILED and "version 9 of partition orders-1" in out and "was never committed" in out
    kept = history(built.url, TOPIC, 0)
    assert [(e.version, e.records_in, e.records_out) for e in kept] == [(5, None, None)], (
        "the first version kept has nothing left to compare with"
    )


# Folder hygiene -------------------------------------------------------------------------------------------


def test_deletion_vectors_are_named_so_that_readers_skipping_underscore_files_skip_them(local: Built) -> None:
    vectors = [
        s.deletes.path
        for p in range(PARTITIONS)
        for s in local.store().manifest(TopicPartition(TOPIC, p)).segments
        if s.deletes
    ]
    assert len(vectors) == 3 and all(v.startswith("segments/_") and v.endswith(".deletes.parquet") for v in vectors)
    folder = readstore.segments_folder(local, 0)
    listed = {p.name for p in folder.iterdir()}
    dataset = {Path(f).name for f in ds.dataset(folder).files}  # pyarrow: ignore_prefixes [".", "_"]
    assert dataset == {name for name in listed if not name.startswith("_")} and len(dataset) < len(listed)


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
    store.replace(
        tp,
        Replacement(
            (segment,), (renamed,), m.first_dirty_offset, m.first_dirty_offset, m.log_start_offset, m.log_start_offset
        ),
        writer=Writer(),
        now_ms=readstore.NOW,
    )
    assert store.manifest(tp).segments[0].deletes.path == old  # type: ignore[union-attr]
    assert the_scan(built, None).to_arrow().equals(expected)
