"""Run inside the Airflow virtualenv: load the DAG folder, dag.test() each run asked for, print what happened.

    python airflow_runner.py DAGS_FOLDER RUNS_JSON
    python airflow_runner.py --assets

RUNS_JSON is a list of ``{"logical_date": ISO-8601, "conf": {...}, "retries": N or null}``, one dag.test() each
in this one process (Airflow's start-up is paid once); each prints a line ``RESULT <index> <json>``. RETRIES
replaces the ``compact`` task's retries; the pause between attempts is always cut to the least Airflow allows
(about a second), so that a test sees the retries without waiting minutes for them. Each result names the asset
events the run recorded and the DAGs they made due, as the scheduler finds them (``DagModel.dags_needing_dagruns``),
whose queue is then emptied for the next run.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import pendulum
from airflow.dag_processing.dagbag import DagBag
from airflow.models.asset import AssetDagRunQueue, AssetEvent
from airflow.models.dag import DagModel
from airflow.utils.session import create_session
from sqlalchemy import delete, select


def assets_of(run_id: str | None = None) -> dict:
    """The asset events the DAG run ``run_id`` recorded (every run's without one), and the DAGs those made due, as
    the scheduler finds them; their queue is emptied afterwards."""
    with create_session() as session:
        query = select(AssetEvent) if run_id is None else select(AssetEvent).where(AssetEvent.source_run_id == run_id)
        events = [{"uri": e.asset.uri, "extra": e.extra} for e in session.scalars(query)]
        needing, triggered = DagModel.dags_needing_dagruns(session)
        due = sorted(d.dag_id for d in needing.all() if d.dag_id in triggered)
        session.execute(delete(AssetDagRunQueue))
    return {"asset_events": events, "due": due}


def main() -> None:
    if sys.argv[1:] == ["--assets"]:  # what the runs of an Airflow home (``airflow dags test``) left for the scheduler
        print("ASSETS " + json.dumps(assets_of()), flush=True)
        return
    folder, runs = sys.argv[1], json.loads(sys.argv[2])
    sys.stderr.flush()
    os.dup2(sys.stdout.fileno(), sys.stderr.fileno())  # one stream, in order: each run's log ends at its RESULT
    for index, asked in enumerate(runs):
        bag = DagBag(folder)  # afresh for each run: dag.test() leaves a run's params in the DAG object
        loaded = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dags)}
        dag = bag.dags["compaction_nightly"]
        compact = dag.get_task("compact")
        compact.retry_delay = timedelta(0)
        if asked.get("retries") is not None:
            compact.retries = asked["retries"]
        run = dag.test(logical_date=pendulum.parse(asked["logical_date"]), run_conf=asked["conf"])
        instances = run.get_task_instances()
        compact_ti = next(ti for ti in instances if ti.task_id == "compact")
        result = {
            **loaded,
            "state": str(run.state),
            "tasks": {ti.task_id: str(ti.state) for ti in instances},
            "compact_tries": compact_ti.try_number,
            "report_path": compact_ti.xcom_pull(task_ids="compact"),
            **assets_of(run.run_id),
        }
        sys.stdout.write(
            f"RESULT {index} {json.dumps(result)}\n"
        )  # one write: no other line between it and its newline
        sys.stdout.flush()


if __name__ == "__main__":
    main()
