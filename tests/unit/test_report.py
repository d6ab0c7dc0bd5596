"""A report or metrics path that names no file fails before any work (the report and metrics written by runs on
Spark are in tests/integration/test_report.py, which builds its stores as these do)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compaction.store import Store, TopicPartition
from compaction.synthetic import GenerateSpec, generate
from tests.helpers.cli import run

NOW = "2026-01-02T00:00:00Z"
NOW_MS = 1_767_312_000_000


def make_store(url: str, options: dict | None = None) -> Store:
    store = Store.open(url, options)
    generate(
        store,
        GenerateSpec(records=600, keys=30, partitions=2, segment_records=100, end_time_ms=NOW_MS - 1),
        now_ms=NOW_MS - 1,
    )
    return store


def test_an_output_path_naming_no_file_fails_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = make_store(str(tmp_path / "store"))
    code, out = run(
        capsys, "run", store.url, "--set", "log.cleanup.policy=compact", "--now", NOW, "--report", "s3://run.json"
    )
    assert code == 4 and "output path 's3://run.json' must name a file in a folder or bucket" in out
    assert store.versions(TopicPartition("orders", 0)) == [1], "nothing was cleaned"
