"""Nightly log compaction from Airflow 3: submit the cleaner for the run's logical time, then check its report.

The job runs through ``scripts/spark-submit.sh`` in a BashOperator rather than the Spark provider's
SparkSubmitOperator, because the script builds and ships the library and the configuration exactly as a
manual or CI run does, checks the master before submitting, and keeps the job's exit codes apart (0 all
cleaned, 3 some partitions uncleanable while the others committed, 4 invalid configuration), which
SparkSubmitOperator folds into one failure. The Airflow environment needs neither pyspark nor this project.

- ``--now`` is the run's logical time, so a retry or a backfill decides exactly as the first attempt would.
- Retries (with backoff) cover failures of the job itself; a run in which some partitions were uncleanable
  is not retried (the commits happened; the bad partitions need a person) but ends in its own task,
  ``partitions_uncleanable``, which fails the DAG run with the partitions and reasons.
- One run at a time (``max_active_runs=1``), and the job task takes a slot of the pool named by the
  ``COMPACTION_AIRFLOW_POOL`` environment variable (default ``default_pool``).
- The report's path is the ``compact`` task's XCom; ``check_report`` pushes the failures.

Run parameters (``params``, overridable per run): ``store`` (URL), ``config`` (TOML file), ``master``,
``report_dir``, ``submit_options`` (extra options for spark-submit.sh, such as ``--executor-memory 4g``).
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param, task

try:
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # Airflow 3.0 keeps it in airflow.exceptions
    from airflow.exceptions import AirflowFailException

PROJECT = Path(os.environ.get("COMPACTION_AIRFLOW_PROJECT", Path(__file__).resolve().parent.parent))
POOL = os.environ.get("COMPACTION_AIRFLOW_POOL", "default_pool")
EXIT_PARTIAL = 3

SUBMIT = r"""
set -u
report="{{ params.report_dir }}/{{ dag.dag_id }}/{{ run_id | replace(':', '') | replace('+', '_') }}.json"
mkdir -p "$(dirname "$report")"
"{{ params.project }}/scripts/spark-submit.sh" --master "{{ params.master }}" --config "{{ params.config }}" \
    {{ params.submit_options }} -- "{{ params.store }}" \
    --now "{{ (logical_date or dag_run.run_after).isoformat() }}" --run-id "{{ run_id }}" --report "$report" >&2
code=$?
if [ "$code" -eq 0 ] || [ "$code" -eq EXIT_PARTIAL ]; then
  echo "$report"  # the last line of output is the task's XCom
else
  exit "$code"
fi
""".replace("EXIT_PARTIAL", str(EXIT_PARTIAL))

with DAG(
    dag_id="compaction_nightly",
    description="Kafka-style log compaction of a segment store",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5), "retry_exponential_backoff": True},
    params={
        "project": Param(str(PROJECT), type="string", description="checkout holding scripts/spark-submit.sh"),
        "store": Param(str(PROJECT / "demo-store"), type="string", description="store URL"),
        "config": Param(str(PROJECT / "conf" / "local.toml"), type="string", description="TOML configuration"),
        "master": Param("local[*]", type="string", description="Spark master"),
        "report_dir": Param(str(PROJECT / "out" / "reports"), type="string"),
        "submit_options": Param("", type="string", description="extra spark-submit.sh options"),
    },
    tags=["compaction"],
) as dag:
    compact = BashOperator(task_id="compact", bash_command=SUBMIT, pool=POOL,
                           execution_timeout=timedelta(hours=6))

    @task.branch(retries=0)
    def check_report(report_path: str, ti=None) -> str:  # type: ignore[no-untyped-def]
        report = json.loads(Path(report_path).read_text())
        failures = report.get("failures", [])
        ti.xcom_push(key="failures", value=failures)
        totals = report["totals"]
        print(f"{totals['cleaned']} partition(s) cleaned, {totals['failed']} uncleanable, "
              f"{totals['skipped']} skipped; report {report_path}")
        return "partitions_uncleanable" if failures else "all_cleaned"

    @task(task_id="partitions_uncleanable", retries=0)
    def partitions_uncleanable(ti=None) -> None:  # type: ignore[no-untyped-def]
        failures = ti.xcom_pull(task_ids="check_report", key="failures") or []
        details = "; ".join(f"{f['partition']}: {f['error']}" for f in failures)
        raise AirflowFailException(f"{len(failures)} partition(s) could not be cleaned: {details}")

    branch = check_report(compact.output)
    branch >> [EmptyOperator(task_id="all_cleaned"), partitions_uncleanable()]


if __name__ == "__main__":
    dag.test()
