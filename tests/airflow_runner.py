"""Run inside the Airflow virtualenv: load the DAG folder, dag.test() one run, print what happened as JSON.

    python tests/airflow_runner.py DAGS_FOLDER LOGICAL_DATE RUN_CONF_JSON
"""

from __future__ import annotations

import json
import sys

import pendulum
from airflow.dag_processing.dagbag import DagBag


def main() -> None:
    folder, logical_date, conf = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    bag = DagBag(folder)
    result: dict = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dags)}
    dag = bag.dags["compaction_nightly"]
    run = dag.test(logical_date=pendulum.parse(logical_date), run_conf=conf)
    instances = run.get_task_instances()
    result["state"] = str(run.state)
    result["tasks"] = {ti.task_id: str(ti.state) for ti in instances}
    compact = next(ti for ti in instances if ti.task_id == "compact")
    result["report_path"] = compact.xcom_pull(task_ids="compact")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
