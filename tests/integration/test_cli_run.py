"""``compaction run`` end to end on Spark: the report, the metrics, partial failures, and gc after the commits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction.cli import EXIT_INVALID, EXIT_OK, EXIT_PARTIAL
from compaction.store import Store, TopicPartition
from tests.helpers.cli import run

NOW = "2026-01-02T00:00:00Z"


def generated(capsys: pytest.CaptureFixture[str], tmp_path: Path, records: str) -> str:
    """A store of two partitions of ``orders`` (100 keys, segments of 500 records) generated at NOW."""
    store = str(tmp_path / "s")
    run(
        capsys,
        "generate",
        store,
        "--records",
        records,
        "--keys",
        "100",
        "--partitions",
        "2",
        "--segment-records",
        "500",
        "--now",
        NOW,
        "--end-time",
        NOW,
    )
    return store


def metrics_conf(tmp_path: Path) -> Path:
    """Every topic compacted, and the metrics written to ``m.prom`` beside the store."""
    conf = tmp_path / "c.toml"
    conf.write_text(f'"log.cleanup.policy" = "compact"\n[cleaner]\n"metrics.textfile" = "{tmp_path}/m.prom"\n')
    return conf


@pytest.mark.spark
def test_run_cleans_writes_the_report_and_metrics_and_reports_partial_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spark
) -> None:
    store = generated(capsys, tmp_path, "3000")
    conf = metrics_conf(tmp_path)
    code, out = run(capsys, "run", store, "--conf", str(conf), "--now", NOW, "--dry-run")
    assert code == EXIT_OK and "2 to clean" in out
    assert Store.open(store).versions(TopicPartition("orders", 0)) == [1], "a dry run changes nothing"

    segment = Store.open(store).manifest(TopicPartition("orders", 1)).segments[0]
    (tmp_path / "s" / "orders" / "1" / segment.path).unlink()
    report = tmp_path / "report.json"
    code, out = run(capsys, "run", store, "--conf", str(conf), "--now", NOW, "--report", str(report))
    assert code == EXIT_PARTIAL
    assert "cleaned orders-0 [0, 1000)" in out and "failed orders-1" in out
    doc = json.loads(report.read_text())
    assert [p["status"] for p in doc["partitions"]] == ["cleaned", "failed"]
    assert doc["failures"][0]["partition"] == "orders-1" and "MissingObjectError" in doc["failures"][0]["error"]
    assert "kafka_log_cleaner_uncleanable_partitions_count" in (tmp_path / "m.prom").read_text()

    code, out = run(capsys, "run", store, "--now", NOW, "--set", "log.cleaner.min.cleanable.ratio=7")
    assert code == EXIT_INVALID and "Value must be no more than 1" in out


@pytest.mark.spark
def test_run_gc_names_each_partition_it_skips_and_fails_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spark
) -> None:
    store = generated(capsys, tmp_path, "2000")
    source = tmp_path / "in.jsonl"
    source.write_text('{"key": "a", "value": "1"}\n')
    assert run(capsys, "append", store, "orders", "1", str(source), "--now", NOW)[0] == EXIT_OK
    broken = tmp_path / "s" / "orders" / "1" / "_manifests" / f"{1:020d}.json"
    broken.write_bytes(b"{")  # an old version gc must read (it keeps 10), unreadable: gc skips orders-1
    conf = metrics_conf(tmp_path)
    report = tmp_path / "report.json"
    code, out = run(capsys, "run", store, "--conf", str(conf), "--now", NOW, "--report", str(report), "--gc")
    assert code == EXIT_PARTIAL, out
    assert "cleaned orders-0" in out and "cleaned orders-1" in out
    reason = f"manifest {broken} is not valid JSON: Invalid JSON: EOF while parsing an object at line 1 column 1"
    assert f"gc skipped orders-1, nothing deleted: {reason}" in out, out
    assert "gc deleted 0 object(s); 1 partition(s) skipped" in out
    doc = json.loads(report.read_text())
    assert [p["status"] for p in doc["partitions"]] == ["cleaned", "cleaned"]
    assert [(f["partition"], f["error"]) for f in doc["failures"]] == [
        ("orders-1", f"gc skipped it, nothing deleted: {reason}")
    ]
    assert doc["gc"]["skipped"].keys() == {"orders-1"}
    assert "kafka_log_cleaner_last_success_time_seconds" not in (tmp_path / "m.prom").read_text()
