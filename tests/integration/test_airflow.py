"""The Airflow DAG, in its own virtualenv with a real Airflow 3 and its OpenLineage provider, on a worker as production
has it: the DAG files alone in a DAGS folder, the job the ``compaction`` command of the project's wheel in a
virtualenv of its own (tests/helpers/jobenv.py), no checkout on any path, OpenLineage sent to an endpoint on
127.0.0.1. dag.test() runs it; the downstream DAG, scheduled on a cleaned topic's asset, is then due."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compaction.store import Store, TopicPartition
from compaction.synthetic import GenerateSpec, generate
from tests.helpers import ROOT
from tests.helpers.jobenv import build_wheel, job_environment
from tests.helpers.lineage import Receiver, problems

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

AIRFLOW_PYTHON = Path(os.environ.get("COMPACTION_AIRFLOW_PYTHON", ROOT / ".venv-airflow" / "bin" / "python"))


@pytest.fixture(scope="module")
def lineage() -> Iterator[Receiver]:
    with Receiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory, lineage: Receiver) -> dict[str, str]:
    """The environment of an Airflow worker: its DAGS folder, the job's virtualenv named by a Variable, a
    configuration file named by another, new DAGs active (the downstream one), and OpenLineage configured, for
    Airflow's provider and for the job alike."""
    if not AIRFLOW_PYTHON.exists():
        pytest.fail(f"no Airflow virtualenv at {AIRFLOW_PYTHON.parent.parent}: run `make airflow-setup`")
    home = tmp_path_factory.mktemp("worker")
    dags = home / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "dags" / "compaction_nightly.py", dags)
    job = job_environment(home / "compaction-venv", build_wheel(home / "dist"))
    config = home / "compaction.toml"
    config.write_text('"log.cleanup.policy" = "compact"\n')
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "PYSPARK", "VIRTUAL_ENV", "PYTHONPATH", "COMPACTION", "OPENLINEAGE"))
    }
    env.update(
        AIRFLOW_HOME=str(home / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        SPARK_LOCAL_IP="127.0.0.1",
        AIRFLOW_VAR_COMPACTION_EXECUTABLE=str(job),
        AIRFLOW_VAR_COMPACTION_CONFIG=str(config),
        AIRFLOW_VAR_COMPACTION_MASTER="local[2]",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        OPENLINEAGE_URL=lineage.url,
        PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT))),
    )
    subprocess.run(
        [str(AIRFLOW_PYTHON.parent / "airflow"), "db", "migrate"],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
        cwd=home,
    )
    return env


def run_dags(env: dict[str, str], runs: list[dict]) -> list[dict]:
    """dag.test() each of ``runs`` in one Airflow process (tests/helpers/airflow_runner.py); its output is each's
    "log"."""
    runner = Path(env["AIRFLOW_HOME"]).parent / "airflow_runner.py"
    shutil.copy(ROOT / "tests" / "helpers" / "airflow_runner.py", runner)
    process = subprocess.run(
        [str(AIRFLOW_PYTHON), str(runner), env["AIRFLOW__CORE__DAGS_FOLDER"], json.dumps(runs)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=runner.parent,
    )
    results: list[dict[str, Any]] = []
    log: list[str] = []
    for line in process.stdout.splitlines():
        if line.startswith("RESULT "):
            _, _, doc = line.removeprefix("RESULT ").partition(" ")
            # Airflow's OpenLineage listener logs from a thread of its own: a line of it may land between the
            # document and its newline. It belongs to the next run's log.
            found, end = json.JSONDecoder().raw_decode(doc)
            results.append({**found, "log": "\n".join(log)})
            log = [doc[end:]] if doc[end:].strip() else []
        else:
            log.append(line)
    assert len(results) == len(runs), process.stdout[-3000:] + process.stderr[-3000:]
    return results


def make_store(path: Path) -> Store:
    store = Store.open(str(path))
    generate(
        store,
        GenerateSpec(records=8000, keys=400, partitions=2, segment_records=2000, end_time_ms=1_767_225_600_000),
        now_ms=1_767_225_600_000,
    )
    return store


#: One DAG run per scenario, each at its own logical date (in the past: the job refuses a future --now).
SCENARIOS = {
    "cleaned": ("2026-01-02T02:00:00+00:00", None),
    "uncleanable": ("2026-01-03T02:00:00+00:00", 1),
    "invalid configuration": ("2026-01-04T02:00:00+00:00", 1),
    "missing store": ("2026-01-05T02:00:00+00:00", 1),
    "internal error": ("2026-01-06T02:00:00+00:00", 1),
}
#: A job that stops as the real one does on a bug in a task: a report naming the internal error, exit code 1.
BUGGY_JOB = """#!/bin/sh
while [ "$1" != "--report" ]; do shift; done
mkdir -p "$(dirname "$2")"
printf '%s' '{"totals": {"cleaned": 1, "failed": 1, "skipped": 0}, "failures": [{"partition": "orders-1",
 "error": "TypeError: boom", "internal": true, "trace": "Traceback ..."}]}' > "$2"
echo "[2/2] failed orders-1: internal error (a bug in compaction, not a problem of the data): TypeError: boom"
exit 1
"""


@pytest.fixture(scope="module")
def dag_runs(worker: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, Store]]:
    """Each scenario's store, prepared, and the DAG run over it (all in one Airflow process: its start-up is slow)."""
    runs, stores = [], {}
    downstream = (ROOT / "dags" / "compaction_downstream.py").read_text()
    for name, (logical_date, retries) in SCENARIOS.items():
        folder = tmp_path_factory.mktemp(name.replace(" ", "-"))
        store = stores[name] = make_store(folder / "store")
        conf = {"store": store.url, "report_dir": str(folder / "reports")}
        if name == "cleaned":  # the downstream DAG reads this run's orders
            assert "s3://my-bucket/topics/orders" in downstream
            Path(worker["AIRFLOW__CORE__DAGS_FOLDER"], "compaction_downstream.py").write_text(
                downstream.replace("s3://my-bucket/topics/orders", (folder / "store" / "orders").as_uri())
            )
        if name == "uncleanable":
            (folder / "store" / "orders" / "1" / "_manifests" / f"{1:020d}.json").write_text("{not json")
        elif name == "invalid configuration":
            (folder / "bad.toml").write_text('"log.cleaner.min.cleanable.ratio" = 1.5\n')
            conf["config"] = str(folder / "bad.toml")
        elif name == "missing store":
            conf["store"] = str(folder / "no-such-store")
        elif name == "internal error":
            job = folder / "buggy-job"
            job.write_text(BUGGY_JOB)
            job.chmod(0o755)
            conf["executable"] = str(job)
        runs.append({"logical_date": logical_date, "conf": conf, "retries": retries})
    return {name: (result, stores[name]) for name, result in zip(SCENARIOS, run_dags(worker, runs), strict=True)}


def test_the_installed_job_cleans_the_store_at_the_logical_time(
    worker: dict[str, str], dag_runs: dict[str, tuple[dict, Store]]
) -> None:
    result, store = dag_runs["cleaned"]
    assert result["import_errors"] == {} and result["dags"] == ["compaction_downstream", "compaction_nightly"]
    assert result["state"] == "success", result["log"][-3000:]
    assert result["tasks"] == {
        "compact": "success",
        "check_report": "success",
        "all_cleaned": "success",
        "partitions_uncleanable": "skipped",
    }
    report = json.loads(Path(result["report_path"]).read_text())
    assert report["now_ms"] == 1_767_319_200_000, "--now is the run's logical date"
    assert [p["status"] for p in report["partitions"]] == ["cleaned", "cleaned"]
    assert store.manifest(TopicPartition("orders", 0)).writer.run_id.startswith("manual__")
    assert f"running {worker['AIRFLOW_VAR_COMPACTION_EXECUTABLE']} run {store.url}" in result["log"], (
        "the installed job, named by the Airflow Variable"
    )


def test_a_cleaned_topic_is_an_updated_asset_that_makes_the_downstream_dag_due(
    dag_runs: dict[str, tuple[dict, Store]],
) -> None:
    result, store = dag_runs["cleaned"]
    report = json.loads(Path(result["report_path"]).read_text())
    [event] = result["asset_events"]
    assert event["uri"] == f"file://{store.url}/orders", "the topic's folder under the store's URL"
    assert event["extra"] == report["topics"]["orders"] and event["extra"]["versions"] == {"0": 2, "1": 2}
    assert result["due"] == ["compaction_downstream"], "scheduled on the orders asset: the scheduler starts it"


def test_the_jobs_lineage_nests_under_the_airflow_task_that_ran_it(
    dag_runs: dict[str, tuple[dict, Store]], lineage: Receiver
) -> None:
    """Airflow's OpenLineage provider tells the task's run; the job, handed that run, tells its own under it."""
    tasks = {e["run"]["runId"] for e in lineage.events if e["job"]["name"] == "compaction_nightly.compact"}
    ours = [e for e in lineage.events if e["job"]["name"] == "compaction.run"]
    cleaned = [
        e
        for e in ours
        if e["run"]["facets"].get("nominalTime", {}).get("nominalStartTime", "").startswith("2026-01-02T02:00")
    ]
    assert [e["eventType"] for e in cleaned] == ["START", "COMPLETE"]
    for event in cleaned:
        assert problems(event) == []
        parent = event["run"]["facets"]["parent"]
        assert parent["run"]["runId"] in tasks and parent["job"]["name"] == "compaction_nightly.compact"
        assert parent["root"]["job"]["name"] == "compaction_nightly"
    assert [d["name"].rsplit("/", 1)[1] for d in cleaned[1]["outputs"]] == ["orders"]


def test_uncleanable_partitions_are_retried_then_end_the_run_in_their_own_failed_task(
    dag_runs: dict[str, tuple[dict, Store]],
) -> None:
    result, store = dag_runs["uncleanable"]
    assert result["state"] == "failed"
    assert result["compact_tries"] == 2, "exit code 3 is retried: a partition's failure can pass"
    assert result["tasks"] == {
        "compact": "success",
        "check_report": "success",
        "all_cleaned": "skipped",
        "partitions_uncleanable": "failed",
    }
    report = json.loads(Path(result["report_path"]).read_text())
    assert {p["partition"]: p["status"] for p in report["partitions"]} == {
        "orders-0": "skipped",
        "orders-1": "uncleanable",
    }, "the last attempt's report: orders-0 was cleaned by the first"
    assert store.manifest(TopicPartition("orders", 0)).version == 2, "the healthy partition was committed once"
    assert result["asset_events"] == [] and result["due"] == [], "a topic with a failed partition is not updated"


def test_a_bad_configuration_fails_the_task_without_retries(dag_runs: dict[str, tuple[dict, Store]]) -> None:
    result, _ = dag_runs["invalid configuration"]
    assert result["state"] == "failed"
    assert result["tasks"]["compact"] == "failed" and result["compact_tries"] == 1
    assert "Invalid value 1.5 for configuration" in result["log"] and "retrying would not help" in result["log"]


def test_a_failed_run_is_retried(dag_runs: dict[str, tuple[dict, Store]]) -> None:
    result, _ = dag_runs["missing store"]
    assert result["state"] == "failed"
    assert result["tasks"]["compact"] == "failed" and result["compact_tries"] == 2
    assert "does not exist" in result["log"]


def test_an_internal_error_fails_the_task_without_retries(dag_runs: dict[str, tuple[dict, Store]]) -> None:
    """Exit code 1 with a report naming an internal error: a bug fails every attempt the same way."""
    result, _ = dag_runs["internal error"]
    assert result["state"] == "failed"
    assert result["tasks"]["compact"] == "failed" and result["compact_tries"] == 1
    assert "an internal error (a bug in the job, not a problem of the data) stopped orders-1" in result["log"]
