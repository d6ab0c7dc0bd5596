"""Getting the clean log out: stdout streams, CSV, ``files --json`` for other engines, ``history`` and snapshots."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from compaction.cli import EXIT_INVALID, EXIT_OK, main
from compaction.read.history import history
from compaction.store import Store
from tests.helpers import ROOT, readstore
from tests.helpers.cli import invoke
from tests.helpers.readstore import NEWEST, OLDER, PARTITIONS, TOPIC


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("export") / "store")
    readstore.build(Store.open(path))
    return path


def read(url: str, tmp_path: Path, *args: str) -> pa.Table:
    target = tmp_path / "read.parquet"
    assert main(["read", url, TOPIC, *args, "-o", str(target)]) == EXIT_OK
    return pq.read_table(target)


def test_stdout_stops_quietly_when_the_pipe_closes(url: str) -> None:
    reader = subprocess.Popen(
        [sys.executable, "-m", "compaction.cli", "read", url, TOPIC],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    first = json.loads(reader.stdout.readline())
    reader.stdout.close()  # what `head -1` does once it has its line
    assert reader.wait(timeout=60) == EXIT_OK
    assert reader.stderr.read() == b"", "no traceback, no BrokenPipeError message"
    assert (first["partition"], first["offset"]) == (0, readstore.LOG_STARTS[0])


def test_parquet_to_stdout_and_csv(url: str, tmp_path: Path) -> None:
    expected = read(url, tmp_path)
    piped = subprocess.run(
        [sys.executable, "-m", "compaction.cli", "read", url, TOPIC, "--format", "parquet"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    assert pq.read_table(pa.BufferReader(piped.stdout)).equals(expected)

    target = tmp_path / "log.csv"
    assert main(["read", url, TOPIC, "-o", str(target)]) == EXIT_OK  # the suffix chooses CSV
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert len(rows) == expected.num_rows and list(rows[0]) == expected.schema.names
    first = expected.slice(0, 1).to_pylist()[0]
    assert rows[0]["key"] == first["key"].decode() and rows[0]["value"] == first["value"].decode()
    assert json.loads(rows[0]["headers"]) == [
        {"key": "seq", "value": first["headers"][0]["value"].decode("utf-8", "replace")}
    ]
    tombstone = next(i for i, r in enumerate(expected.to_pylist()) if r["key"] and r["value"] is None)
    assert rows[tombstone]["value"] == ""


def test_files_json_is_enough_to_wire_up_another_engine(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = invoke(capsys, "files", url, TOPIC, "--json")
    doc = json.loads(out)
    assert code == EXIT_OK and [p["version"] for p in doc["partitions"]] == [NEWEST] * PARTITIONS
    assert any(f["deletes"] for p in doc["partitions"] for f in p["files"]), "deletion vectors are named"
    parts = []
    for p in doc["partitions"]:  # DuckDB, told only what files --json printed
        for f in p["files"]:
            where = f'"offset" >= {p["log_start_offset"]} AND "offset" < {p["log_end_offset"]}'
            if f["deletes"]:
                where += f""" AND "offset" NOT IN (SELECT "offset" FROM read_parquet('{f["deletes"]["url"]}'))"""
            parts.append(f"""SELECT {p["partition"]}::INTEGER AS partition, * FROM read_parquet('{f["url"]}')
                             WHERE {where}""")
    con = duckdb.connect()
    wired = con.sql(" UNION ALL ".join(parts) + ' ORDER BY partition, "offset"').to_arrow_table()
    con.close()
    expected = read(url, tmp_path)
    assert wired.cast(expected.schema).equals(expected)

    code, out, _ = invoke(capsys, "files", url, TOPIC, "0", "--version", str(OLDER))
    assert code == EXIT_OK and "globbing the folders reads superseded segments" in out
    assert out.count("orders-0") == 5  # version 2: the generated segments and the append


def test_history_lists_each_version_with_its_operation_and_figures(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = history(url, TOPIC, 0)
    assert [(e.version, e.operation) for e in entries] == [
        (1, "generate"),
        (2, "append"),
        (3, "clean"),
        (4, "clean+retention"),
    ]
    generated, appended, vector, retention = entries
    assert (generated.records_in, generated.records_out) == (0, 1200)
    assert (appended.records_in, appended.records_out, appended.live_records) == (0, 7, 1207)
    assert (vector.records_in, vector.records_out) == (300, 200), "a deletion vector re-masks one segment"
    assert (retention.records_in, retention.records_out, retention.log_start_offset) == (0, 0, 170)
    assert [e.operation for e in history(url, TOPIC, 1)][-1] == "clean", "no log start moved in partition 1"

    code, out, _ = invoke(capsys, "history", url, TOPIC)
    assert code == EXIT_OK and out.count("compaction-generate") == PARTITIONS
    assert "clean+retention" in out and "2026-01-01T00:00:00Z" in out
    code, out, _ = invoke(capsys, "history", url, TOPIC, "2", "--json")
    assert [e["version"] for e in json.loads(out)] == [1, 2, 3, 4]


@pytest.mark.parametrize("flags", [[], ["--latest"], ["--version", str(OLDER)]], ids=["log", "latest", "older"])
def test_a_snapshot_is_read_correctly_with_a_plain_glob(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    dest = tmp_path / "snap"
    code, out, _ = invoke(capsys, "snapshot", url, TOPIC, str(dest), *flags)
    expected = read(url, tmp_path, *flags)
    assert code == EXIT_OK and f"wrote {expected.num_rows:,} record(s)" in out
    assert sorted(p.name for p in dest.iterdir()) == ["_snapshot.json", "partition=0", "partition=1", "partition=2"]

    con = duckdb.connect()
    globbed = con.sql(f"""SELECT * FROM read_parquet('{dest}/*/*.parquet', hive_partitioning = true)
                          ORDER BY partition, "offset" """).to_arrow_table()
    con.close()
    assert globbed.select(expected.schema.names).cast(expected.schema).equals(expected)
    dataset = ds.dataset(dest, partitioning="hive").to_table()  # pyarrow skips _snapshot.json as it skips _ files
    assert dataset.num_rows == expected.num_rows

    marker = json.loads((dest / "_snapshot.json").read_text())
    version = OLDER if "--version" in flags else NEWEST
    assert {p: v["version"] for p, v in marker["partitions"].items()} == {str(p): version for p in range(PARTITIONS)}
    assert marker["latest"] == ("--latest" in flags) and marker["written_ms"] > 0

    code, _, err = invoke(capsys, "snapshot", url, TOPIC, str(dest), *flags)
    assert code == EXIT_INVALID and "is not empty" in err
