"""The Airflow DAG, in its own virtualenv with a real Airflow 3: it loads cleanly and dag.test() runs the job."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from compaction.store import Store, TopicPartition
from compaction.synthetic import GenerateSpec, generate

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
AIRFLOW_PYTHON = Path(os.environ.get("COMPACTION_AIRFLOW_PYTHON", ROOT / ".venv-airflow" / "bin" / "python"))
LOGICAL_DATE = "2026-01-02T02:00:00+00:00"  # in the past: the job refuses a future --now


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if not AIRFLOW_PYTHON.exists():
        pytest.fail(f"no Airflow virtualenv at {AIRFLOW_PYTHON.parent.parent}: run `make airflow-setup`")
    home = tmp_path_factory.mktemp("airflow-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYSPARK", "VIRTUAL_ENV"))}
    env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"), SPARK_LOCAL_IP="127.0.0.1")
    subprocess.run([str(AIRFLOW_PYTHON.parent / "airflow"), "db", "migrate"], env=env, check=True,
                   capture_output=True, timeout=300)
    return env


def run_dag(env: dict[str, str], store: str, report_dir: Path) -> dict:
    conf = {"store": store, "report_dir": str(report_dir), "master": "local[2]"}
    process = subprocess.run([str(AIRFLOW_PYTHON), str(ROOT / "tests" / "airflow_runner.py"), str(ROOT / "dags"),
                              LOGICAL_DATE, json.dumps(conf)], env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, process.stdout[-3000:] + process.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def make_store(path: Path) -> Store:
    store = Store.open(str(path))
    generate(store, GenerateSpec(records=8000, keys=400, partitions=2, segment_records=2000,
                                 end_time_ms=1_767_225_600_000), now_ms=1_767_225_600_000)
    return store


def test_dag_loads_and_a_test_run_cleans_the_store_at_the_logical_time(airflow_env: dict[str, str],
                                                                        tmp_path: Path) -> None:
    store = make_store(tmp_path / "store")
    result = run_dag(airflow_env, store.url, tmp_path / "reports")
    assert result["import_errors"] == {} and result["dags"] == ["compaction_nightly"]
    assert result["state"] == "success"
    assert result["tasks"] == {"compact": "success", "check_report": "success", "all_cleaned": "success",
                               "partitions_uncleanable": "skipped"}
    report = json.loads(Path(result["report_path"]).read_text())
    assert report["now_ms"] == 1_767_319_200_000, "--now is the run's logical date"
    assert [p["status"] for p in report["partitions"]] == ["cleaned", "cleaned"]
    assert store.manifest(TopicPartition("orders", 0)).writer.run_id.startswith("manual__")


def test_uncleanable_partitions_end_the_run_in_their_own_failed_task(airflow_env: dict[str, str],
                                                                     tmp_path: Path) -> None:
    store = make_store(tmp_path / "store")
    bad = store.manifest(TopicPartition("orders", 1)).segments[0]
    (tmp_path / "store" / "orders" / "1" / bad.path).unlink()
    result = run_dag(airflow_env, store.url, tmp_path / "reports")
    assert result["state"] == "failed"
    assert result["tasks"] == {"compact": "success", "check_report": "success", "all_cleaned": "skipped",
                               "partitions_uncleanable": "failed"}
    report = json.loads(Path(result["report_path"]).read_text())
    assert [p["status"] for p in report["partitions"]] == ["cleaned", "failed"]
    assert store.manifest(TopicPartition("orders", 0)).version == 2, "the healthy partition was committed"
