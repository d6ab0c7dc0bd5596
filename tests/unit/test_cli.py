"""The command line end to end: generate, append, read, status, verify, gc, and the exit codes."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from compaction import errors
from compaction.cli import EXIT_FAILED, EXIT_INVALID, EXIT_OK, main
from compaction.cli.types import parse_duration, parse_time
from compaction.store import Store, TopicPartition
from tests.helpers import ROOT
from tests.helpers.cli import run

NOW = "2026-01-02T00:00:00Z"


def test_generate_status_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s")
    code, out = run(
        capsys,
        "generate",
        store,
        "--records",
        "3000",
        "--keys",
        "100",
        "--partitions",
        "3",
        "--segment-records",
        "400",
        "--now",
        NOW,
        "--seed",
        "1",
    )
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
    source.write_text(
        '{"key": "a", "value": "1"}\n{"key": "a", "value": null, "timestamp": 5}\n'
        '{"key_base64": "AAE=", "value": "x", "headers": [{"key": "v", "value_long": 3}]}\n'
    )
    code, out = run(capsys, "append", store, "t", "0", str(source), "--now", "1000")
    assert code == EXIT_OK and "[0, 3)" in out
    code, out = run(capsys, "read", store, "t", "0", "--from", "1")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(r["offset"], r.get("key"), r["value"], r["timestamp"]) for r in lines] == [
        (1, "a", None, 5),
        (2, None, "x", 1000),
    ]
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
    run(
        capsys,
        "generate",
        store,
        "--records",
        "2000",
        "--keys",
        "100",
        "--partitions",
        "2",
        "--segment-records",
        "400",
        "--now",
        NOW,
        "--end-time",
        NOW,
    )
    code, out = run(capsys, "plan", store, "--conf", "conf/local.toml", "--now", NOW)
    assert code == EXIT_OK
    assert "orders-0   clean" in out and "dirty ratio 1.00 > 0.50" in out and "[0, 800)" in out
    assert main(["plan", store, "--now", NOW, "--json"]) == EXIT_OK
    printed = capsys.readouterr()
    doc = json.loads(printed.out)
    assert "no --conf was given and Kafka's default policy is delete" in printed.err
    assert [p["decision"] for p in doc["partitions"]] == ["skip", "skip"]
    assert doc["partitions"][0]["reason"] == "cleanup.policy=delete: not compacted"
    code, out = run(
        capsys,
        "plan",
        store,
        "--now",
        "2026-01-20T00:00:00Z",
        "--json",
        "--set",
        "log.cleanup.policy=compact",
        "--set",
        "log.cleaner.min.cleanable.ratio=1",
        "--set",
        "log.cleaner.max.compaction.lag.ms=86400000",
    )
    first = json.loads(out)["partitions"][0]
    assert first["decision"] == "clean" and first["reason"].startswith("max.compaction.lag.ms exceeded by")
    assert first["clean_range"] == [0, 1000] and first["active_rolled"] is True


def test_the_dags_exit_codes_are_the_packages() -> None:
    """The DAG runs where the package is not installed, so it states the exit codes again: the same names and values."""
    dag = ast.parse((ROOT / "dags" / "compaction_nightly.py").read_text())
    (stated,) = [
        node for node in dag.body if isinstance(node, ast.Assign) and "EXIT_OK" in ast.unparse(node.targets[0])
    ]
    names = [target.id for target in stated.targets[0].elts]  # type: ignore[attr-defined]
    values = ast.literal_eval(stated.value)
    assert dict(zip(names, values, strict=True)) == {
        name: getattr(errors, name) for name in dir(errors) if name.startswith("EXIT_")
    }
