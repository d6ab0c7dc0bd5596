"""The command line end to end: generate, append, read, status, verify, gc, and the exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction.cli import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_PARTIAL, main
from compaction.cli.types import parse_duration, parse_time
from compaction.store import Store, TopicPartition

NOW = "2026-01-02T00:00:00Z"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_generate_status_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s")
    code, out = run(capsys, "generate", store, "--records", "3000", "--keys", "100", "--partitions", "3",
                    "--segment-records", "400", "--now", NOW, "--seed", "1")
    assert code == EXIT_OK and "3 partition(s), 3,000 records" in out
    code, out = run(capsys, "status", store, "--json")
    doc = json.loads(out)
    assert code == EXIT_OK
    assert [p["partition"] for p in doc["partitions"]] == ["orders-0", "orders-1", "orders-2"]
    assert doc["partitions"][0]["segments"] == 3 and doc["partitions"][0]["records"] == 1000
    code, out = run(capsys, "verify", store)
    assert code == EXIT_OK and out.count(": ok") == 3


def test_append_jsonl_then_read_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s")
    source = tmp_path / "in.jsonl"
    source.write_text('{"key": "a", "value": "1"}\n{"key": "a", "value": null, "timestamp": 5}\n'
                      '{"key_base64": "AAE=", "value": "x", "headers": [{"key": "v", "value_long": 3}]}\n')
    code, out = run(capsys, "append", store, "t", "0", str(source), "--now", "1000")
    assert code == EXIT_OK and "[0, 3)" in out
    code, out = run(capsys, "read", store, "t", "0", "--from", "1")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(r["offset"], r.get("key"), r["value"], r["timestamp"]) for r in lines] == [
        (1, "a", None, 5), (2, None, "x", 1000)]
    assert lines[1]["key_base64"] == "AAE="
    assert lines[1]["headers"] == [{"key": "v", "value_base64": "AAAAAAAAAAM="}]
    out_file = tmp_path / "dump.parquet"
    assert run(capsys, "read", store, "t", "0", "-o", str(out_file))[0] == EXIT_OK
    assert out_file.stat().st_size > 0


def test_bad_input_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "a"}\n{"key": \n')
    code, out = run(capsys, "append", store, "t", "0", str(bad))
    assert code == EXIT_INVALID and "bad.jsonl line 2 is not valid JSON" in out
    good = tmp_path / "good.jsonl"
    good.write_text('{"key": "a", "offset": 10}\n')
    assert run(capsys, "append", store, "t", "0", str(good))[0] == EXIT_OK
    code, out = run(capsys, "append", store, "t", "0", str(good))
    assert code == EXIT_INVALID and "offsets start at 10" in out
    code, out = run(capsys, "read", store, "t", "9")
    assert code == EXIT_FAILED and "no committed manifest" in out


def test_verify_fails_on_a_missing_object_and_gc_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "s")
    run(capsys, "generate", url, "--records", "100", "--partitions", "1", "--segment-records", "50", "--now", NOW)
    store = Store.open(url)
    segment = store.manifest(TopicPartition("orders", 0)).segments[1]
    (tmp_path / "s" / "orders" / "0" / segment.path).unlink()
    code, out = run(capsys, "verify", url)
    assert code == EXIT_FAILED and "PROBLEM orders-0" in out and "missing" in out
    code, out = run(capsys, "gc", url, "--grace", "0", "--dry-run")
    assert code == EXIT_OK and "would delete 0 object(s)" in out


def test_time_and_duration_parsing() -> None:
    assert parse_time("1767225600000") == parse_time("2026-01-01T00:00:00Z") == parse_time("2026-01-01T00:00:00")
    assert parse_duration("36h") == 36 * 3_600_000
    assert parse_duration("90s") == 90_000 and parse_duration("250ms") == 250


def test_plan_prints_decisions_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s")
    run(capsys, "generate", store, "--records", "2000", "--keys", "100", "--partitions", "2",
        "--segment-records", "400", "--now", NOW, "--end-time", NOW)
    code, out = run(capsys, "plan", store, "--conf", "conf/local.toml", "--now", NOW)
    assert code == EXIT_OK
    assert "orders-0   clean" in out and "dirty ratio 1.00 > 0.50" in out and "[0, 800)" in out
    assert main(["plan", store, "--now", NOW, "--json"]) == EXIT_OK
    printed = capsys.readouterr()
    doc = json.loads(printed.out)
    assert "no --conf was given and Kafka's default policy is delete" in printed.err
    assert [p["decision"] for p in doc["partitions"]] == ["skip", "skip"]
    assert doc["partitions"][0]["reason"] == "cleanup.policy=delete: not compacted"
    code, out = run(capsys, "plan", store, "--now", "2026-01-20T00:00:00Z", "--json", "--set",
                    "log.cleanup.policy=compact", "--set", "log.cleaner.min.cleanable.ratio=1",
                    "--set", "log.cleaner.max.compaction.lag.ms=86400000")
    first = json.loads(out)["partitions"][0]
    assert first["decision"] == "clean" and first["reason"].startswith("max.compaction.lag.ms exceeded by")
    assert first["clean_range"] == [0, 1000] and first["active_rolled"] is True


@pytest.mark.spark
def test_run_cleans_writes_the_report_and_metrics_and_reports_partial_failures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], spark) -> None:  # type: ignore[no-untyped-def]
    store = str(tmp_path / "s")
    run(capsys, "generate", store, "--records", "3000", "--keys", "100", "--partitions", "2",
        "--segment-records", "500", "--now", NOW, "--end-time", NOW)
    conf = tmp_path / "c.toml"
    conf.write_text(f'"log.cleanup.policy" = "compact"\n[cleaner]\n"metrics.textfile" = "{tmp_path}/m.prom"\n')
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
        tmp_path: Path, capsys: pytest.CaptureFixture[str], spark) -> None:  # type: ignore[no-untyped-def]
    store = str(tmp_path / "s")
    run(capsys, "generate", store, "--records", "2000", "--keys", "100", "--partitions", "2",
        "--segment-records", "500", "--now", NOW, "--end-time", NOW)
    source = tmp_path / "in.jsonl"
    source.write_text('{"key": "a", "value": "1"}\n')
    assert run(capsys, "append", store, "orders", "1", str(source), "--now", NOW)[0] == EXIT_OK
    broken = tmp_path / "s" / "orders" / "1" / "_manifests" / f"{1:020d}.json"
    broken.write_bytes(b"{")  # an old version gc must read (it keeps 10), unreadable: gc skips orders-1
    conf = tmp_path / "c.toml"
    conf.write_text(f'"log.cleanup.policy" = "compact"\n[cleaner]\n"metrics.textfile" = "{tmp_path}/m.prom"\n')
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
        ("orders-1", f"gc skipped it, nothing deleted: {reason}")]
    assert doc["gc"]["skipped"].keys() == {"orders-1"}
    assert "kafka_log_cleaner_last_success_time_seconds" not in (tmp_path / "m.prom").read_text()
