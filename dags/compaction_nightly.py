"""Nightly log compaction from Airflow 3: run the installed job for the run's logical time, then check its report.

The worker needs no checkout of this project: the job is the ``compaction`` command of the project's wheel,
installed in a virtualenv of its own on the workers (never into Airflow's environment, whose pins would change
the job's dependencies), and this file is the only thing copied to the DAGs folder. Airflow's environment
needs neither pyspark nor this project. Install it as docs/first-week.md does, ending with ``compaction warm-up``
(once per environment: it builds Spark's class archive, so that the first night's run starts as quickly as the
next; in an image, a ``RUN compaction warm-up`` after the install).

- ``compact`` runs ``compaction run STORE --conf CONFIG --now <logical time> --run-id <run id> --report ...``, so
  a retry or a backfill decides exactly as the first attempt would. Its exit code decides what happens next:
  4 (invalid configuration or input) and 2 (bad arguments) fail the task at once, without retries, since
  another attempt would fail the same way; so does 1 when the report names an internal error (a bug in the job:
  another attempt fails the same way); any other 1 (a failed run: an unreachable store, a crash) is retried with
  backoff; 3 (some partitions uncleanable, the others committed) is retried too, since a partition's failure
  can be passing (its task killed, the store throttling) and the partitions committed are not cleaned again,
  and after the last attempt the report goes on to ``check_report``.
- Each topic the run cleaned is an Airflow asset, its URI the topic's folder under the store's
  (``s3://bucket/topics/orders``; ``file:///data/topics/orders`` for a path), updated by ``compact`` through the
  asset alias ``compaction_topics`` (the topics are known once the job has run) with the report's figures of it as
  the event's extra: a compacted topic none of whose partitions failed. A topic with a failed or uncleanable
  partition is not marked updated, nor is a topic that is not compacted. A DAG scheduled on such an asset runs once
  the topic is clean (``compaction_downstream.py`` beside this file is one).
- With Airflow's OpenLineage provider installed, ``compact`` hands the job its task's run (``OPENLINEAGE_PARENT_ID``,
  ``OPENLINEAGE_ROOT_PARENT_ID``), so that the job's own lineage events, when OpenLineage is configured on the worker
  (``OPENLINEAGE_URL``...), nest under the task's.
- ``check_report`` branches to ``all_cleaned``, or to ``partitions_uncleanable``, which fails the DAG run with the
  partitions and reasons.
- One run at a time (``max_active_runs=1``); ``compact`` takes a slot of the pool named by the
  ``COMPACTION_AIRFLOW_POOL`` environment variable (default ``default_pool``).

Settings, each a run parameter (``params``) or else an Airflow Variable of the same name prefixed with
``compaction_`` (``airflow variables set compaction_config /etc/compaction/server.properties``):

- ``executable``: the job's command (default ``compaction`` on the worker's PATH), e.g.
  ``/opt/compaction/bin/compaction``;
- ``store`` (required): the store URL;
- ``config`` (required): the configuration file on the worker, TOML or Kafka's ``server.properties``;
- ``master``: the Spark master (default ``local[*]``); a cluster's executors need the wheel too;
- ``remote``: a Spark Connect server (``sc://HOST:15002``) to run on instead of a master, or ``sail`` (a Sail server
  in the job's process: the worker's virtualenv then has ``compaction[sail]``, with its pyspark 4.0-4.2);
- ``report_dir``: where reports go, a path or a URL like the store's (default ``$AIRFLOW_HOME/compaction-reports``;
  ``check_report`` reads it with fsspec, so an ``s3://`` folder needs s3fs in Airflow's environment);
- ``run_options``: more flags for ``compaction run``, e.g. ``--topics orders,payments --spark-conf
  spark.driver.memory=4g``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import fsspec
import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetAlias, Param, Variable, get_current_context, task

try:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:  # Airflow 3.0 keeps them in airflow.exceptions
    from airflow.exceptions import AirflowException, AirflowFailException

POOL = os.environ.get("COMPACTION_AIRFLOW_POOL", "default_pool")
#: The assets of the topics a run cleaned, known once it has: each event names its topic's asset.
TOPICS = AssetAlias("compaction_topics")
#: The job's exit codes (``compaction --help``): ``compaction.errors``'s, which Airflow's environment does not install
#: (tests/unit/test_cli.py holds the two alike).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PARTIAL, EXIT_INVALID = 0, 1, 2, 3, 4
#: Settings that have a default when neither the run's params nor a Variable give them.
DEFAULTS = {
    "executable": "compaction",
    "master": "local[*]",
    "remote": "",
    "report_dir": os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "compaction-reports"),
    "run_options": "",
}


def setting(params: dict[str, Any], name: str) -> str:
    """A setting from the run's params, else the Airflow Variable ``compaction_<name>``, else its default."""
    value = params.get(name) or Variable.get(f"compaction_{name}", default=None) or DEFAULTS.get(name)
    if value is None or (not value and name not in DEFAULTS):
        raise AirflowFailException(f"no {name}: set the DAG param {name!r} or the Airflow Variable 'compaction_{name}'")
    return str(value)


def topic_asset(store: str, topic: str) -> Asset:
    """A topic's asset: its folder's URI under the store's (a path becomes a ``file://`` URI)."""
    base = store.rstrip("/") if "://" in store else Path(os.path.abspath(store)).as_uri()
    return Asset(f"{base}/{topic}")


def cleaned_topics(report_path: str) -> dict[str, dict[str, Any]]:
    """The topics a run's report says are clean: compacted, and no partition failed or stayed uncleanable; each with
    the report's figures of it."""
    with fsspec.open(report_path, "rt") as stream:
        topics = json.load(stream).get("topics", {})
    return {
        topic: figures for topic, figures in topics.items() if figures["compacted"] and not figures["partitions_failed"]
    }


def job_environment(ti: Any) -> dict[str, str]:
    """The job's environment: the worker's, and the task's run as the parent of the job's lineage events when
    Airflow's OpenLineage provider is installed (its ``lineage_parent_id`` and ``lineage_root_parent_id``)."""
    env = dict(os.environ)
    try:
        from airflow.providers.openlineage.plugins.macros import lineage_parent_id, lineage_root_parent_id
    except ImportError:
        return env
    env.update(OPENLINEAGE_PARENT_ID=lineage_parent_id(ti), OPENLINEAGE_ROOT_PARENT_ID=lineage_root_parent_id(ti))
    return env


def internal_errors(report_path: str) -> list[str]:
    """The partitions a run's report says an internal error stopped (none when the run wrote no report)."""
    try:
        with fsspec.open(report_path, "rt") as stream:
            report = json.load(stream)
    except (OSError, ValueError):  # no report: the run stopped before it (an unreachable store, say)
        return []
    return [f["partition"] for f in report.get("failures", []) if f.get("internal")]


with DAG(
    dag_id="compaction_nightly",
    description="Kafka-style log compaction of a segment store",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5), "retry_exponential_backoff": True},
    params={
        name: Param(None, type=["null", "string"], description=description)
        for name, description in {
            "executable": "the job's command on the worker (Variable compaction_executable; default: compaction)",
            "store": "store URL (Variable compaction_store)",
            "config": "configuration file on the worker, TOML or server.properties (Variable compaction_config)",
            "master": "Spark master (Variable compaction_master; default local[*])",
            "remote": "Spark Connect server sc://HOST:PORT, or sail, instead of a master (Variable compaction_remote)",
            "report_dir": "folder or URL for the run reports (Variable compaction_report_dir)",
            "run_options": "more `compaction run` flags (Variable compaction_run_options)",
        }.items()
    },
    tags=["compaction"],
) as dag:

    @task(task_id="compact", pool=POOL, execution_timeout=timedelta(hours=6), outlets=[TOPICS])
    def compact() -> str:
        """Run the job and mark each topic it cleaned updated; returns the report's path (the XCom ``check_report``
        reads)."""
        context = get_current_context()
        params, ti = context["params"], context["ti"]
        run_id = context["run_id"]
        logical = context.get("logical_date") or context["dag_run"].run_after
        report = (
            f"{setting(params, 'report_dir').rstrip('/')}/{context['dag'].dag_id}/"
            f"{run_id.replace(':', '').replace('+', '_')}.json"
        )
        remote, store = setting(params, "remote"), setting(params, "store")
        session = ["--remote", remote] if remote else ["--master", setting(params, "master")]
        command = [
            setting(params, "executable"),
            "run",
            store,
            "--conf",
            setting(params, "config"),
            *session,
            "--now",
            logical.isoformat(),
            "--run-id",
            run_id,
            "--report",
            report,
            *shlex.split(setting(params, "run_options")),
        ]
        print("running " + shlex.join(command), flush=True)
        try:
            code = subprocess.run(command, check=False, env=job_environment(ti)).returncode
        except OSError as err:  # the executable is missing or not executable: no retry makes it appear
            raise AirflowFailException(
                f"cannot run the job {command[0]!r}: {err}; install the project's wheel on "
                "the worker and set the Variable compaction_executable"
            ) from err
        if code in (EXIT_USAGE, EXIT_INVALID):
            raise AirflowFailException(
                f"the job refused its configuration or arguments (exit code {code}; the "
                "reason is in the log above): retrying would not help"
            )
        bugs = internal_errors(report) if code == EXIT_FAILED else []
        if bugs:
            raise AirflowFailException(
                f"an internal error (a bug in the job, not a problem of the data) stopped "
                f"{', '.join(bugs)}; the report {report} has its traceback: retrying would "
                "not help"
            )
        if code == EXIT_PARTIAL and ti.try_number <= ti.max_tries:
            raise AirflowException(
                f"some partitions could not be cleaned (exit code {code}); the others were "
                f"committed; attempt {ti.try_number} of {ti.max_tries + 1}, retrying"
            )
        if code not in (EXIT_OK, EXIT_PARTIAL):
            raise AirflowException(f"the job failed with exit code {code}")
        for topic, figures in cleaned_topics(report).items():
            context["outlet_events"][TOPICS].add(topic_asset(store, topic), extra=figures)
        return report

    @task.branch(retries=0)
    def check_report(report_path: str, ti=None) -> str:  # type: ignore[no-untyped-def]
        with fsspec.open(report_path, "rt") as stream:
            report = json.load(stream)
        failures = report.get("failures", [])
        ti.xcom_push(key="failures", value=failures)
        totals = report["totals"]
        print(
            f"{totals['cleaned']} partition(s) cleaned, {totals['failed']} uncleanable, "
            f"{totals['skipped']} skipped; report {report_path}"
        )
        return "partitions_uncleanable" if failures else "all_cleaned"

    @task(task_id="partitions_uncleanable", retries=0)
    def partitions_uncleanable(ti=None) -> None:  # type: ignore[no-untyped-def]
        failures = ti.xcom_pull(task_ids="check_report", key="failures") or []
        details = "; ".join(f"{f['partition']}: {f['error']}" for f in failures)
        raise AirflowFailException(f"{len(failures)} partition(s) could not be cleaned: {details}")

    branch = check_report(compact())
    branch >> [EmptyOperator(task_id="all_cleaned"), partitions_uncleanable()]


if __name__ == "__main__":
    dag.test()
