"""The example Dagster definitions (dagster-defs/compaction_assets.py), in their own virtualenv with a real Dagster:
materialize() launches ``compaction run`` through Dagster Pipes (PipesSubprocessClient) and records one
materialization per topic with the run report's figures, and a failed, blocking check for the topic whose partition
could not be cleaned."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from compaction.store import Store, TopicPartition
from tests.helpers import ROOT
from tests.helpers.cli import run

pytestmark = [pytest.mark.dagster, pytest.mark.slow]

DAGSTER_PYTHON = Path(os.environ.get("COMPACTION_DAGSTER_PYTHON", ROOT / ".venv-dagster" / "bin" / "python"))
NOW = "2026-01-02T00:00:00Z"


def materialize(env: dict[str, str]) -> dict[str, Any]:
    """The example's assets materialized by Dagster, configured by ``env`` (tests/helpers/dagster_runner.py)."""
    if not DAGSTER_PYTHON.exists():
        pytest.fail(f"no Dagster virtualenv at {DAGSTER_PYTHON.parent.parent}: run `make dagster-setup`")
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH", "COMPACTION", "DAGSTER", "OPENLINEAGE"))
    }
    done = subprocess.run(
        [
            str(DAGSTER_PYTHON),
            str(ROOT / "tests" / "helpers" / "dagster_runner.py"),
            str(ROOT / "dagster-defs" / "compaction_assets.py"),
        ],
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=env["DAGSTER_HOME"],
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, done.stdout[-3000:] + done.stderr[-5000:]
    return {**json.loads(lines[0].removeprefix("RESULT ")), "log": done.stdout + done.stderr}


def test_a_run_launched_through_pipes_reports_each_topic_and_fails_the_check_of_a_corrupt_partition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    for topic, partitions in (("orders", "2"), ("payments", "1")):
        assert (
            run(
                capsys,
                "generate",
                str(store),
                "--topics",
                topic,
                "--records",
                "2000",
                "--keys",
                "50",
                "--partitions",
                partitions,
                "--segment-records",
                "250",
                "--now",
                NOW,
                "--end-time",
                NOW,
            )[0]
            == 0
        )
    corrupt = Store.open(str(store)).manifest(TopicPartition("payments", 0)).segments[1]
    (store / "payments" / "0" / corrupt.path).write_bytes(b"not a parquet file")
    (tmp_path / "c.toml").write_text('"log.cleanup.policy" = "compact"\n')
    (tmp_path / "dagster-home").mkdir()
    report = tmp_path / "report.json"
    result = materialize(
        {
            "DAGSTER_HOME": str(tmp_path / "dagster-home"),
            "COMPACTION_TOPICS": "orders,payments",
            "COMPACTION_STORE": str(store),
            "COMPACTION_CONFIG": str(tmp_path / "c.toml"),
            "COMPACTION_EXECUTABLE": str(ROOT / ".venv" / "bin" / "compaction"),
            "COMPACTION_RUN_OPTIONS": f"--now {NOW} --master local[2] --report {report}",
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
    )

    doc = json.loads(report.read_text())
    assert {p["partition"]: p["status"] for p in doc["partitions"]} == {
        "orders-0": "cleaned",
        "orders-1": "cleaned",
        "payments-0": "failed",
    }
    assert doc["run_id"].startswith("dagster-"), "the Dagster run's id, recorded in the manifests"
    assert Store.open(str(store)).manifest(TopicPartition("orders", 0)).writer.run_id == doc["run_id"]
    assert [m["asset"] for m in result["materializations"]] == ["kafka/orders", "kafka/payments"], result["log"][-3000:]
    for materialization in result["materializations"]:
        topic = materialization["asset"].removeprefix("kafka/")
        assert materialization["metadata"] == doc["topics"][topic] | {"store": str(store), "run_id": doc["run_id"]}
    assert result["materializations"][0]["metadata"]["versions"] == {"0": 2, "1": 2}
    checks = {c["asset"]: c for c in result["checks"]}
    assert checks.keys() == {"kafka/orders", "kafka/payments"}
    assert checks["kafka/orders"]["passed"] and checks["kafka/orders"]["check"] == "partitions_cleanable"
    assert not checks["kafka/payments"]["passed"]
    [failure] = checks["kafka/payments"]["metadata"]["failures"]
    assert failure.startswith("payments-0: ") and "parquet" in failure.lower()
    assert result["success"] is False, "the failed check is blocking: the step fails once Dagster recorded the rest"


def test_the_spark_submit_form_reports_through_the_driver_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """scripts/spark-submit.sh in client mode: the driver it starts inherits the Pipes context and reports."""
    store = tmp_path / "store"
    assert (
        run(
            capsys,
            "generate",
            str(store),
            "--topics",
            "orders",
            "--records",
            "1000",
            "--keys",
            "50",
            "--partitions",
            "1",
            "--segment-records",
            "250",
            "--now",
            NOW,
            "--end-time",
            NOW,
        )[0]
        == 0
    )
    (tmp_path / "c.toml").write_text('"log.cleanup.policy" = "compact"\n')
    (tmp_path / "dagster-home").mkdir()
    result = materialize(
        {
            "DAGSTER_HOME": str(tmp_path / "dagster-home"),
            "COMPACTION_TOPICS": "orders",
            "COMPACTION_STORE": str(store),
            "COMPACTION_CONFIG": str(tmp_path / "c.toml"),
            "COMPACTION_SPARK_SUBMIT": str(ROOT / "scripts" / "spark-submit.sh"),
            "COMPACTION_SPARK_OPTIONS": "--master local[2]",
            "COMPACTION_RUN_OPTIONS": f"--now {NOW}",
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
    )
    assert result["success"] is True, result["log"][-3000:]
    [materialization] = result["materializations"]
    assert materialization["asset"] == "kafka/orders"
    assert materialization["metadata"]["partitions_cleaned"] == 1
    assert materialization["metadata"]["versions"] == {"0": 2}
    assert [(c["asset"], c["passed"]) for c in result["checks"]] == [("kafka/orders", True)]
    assert Store.open(str(store)).manifest(TopicPartition("orders", 0)).version == 2
