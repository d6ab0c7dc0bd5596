"""Log compaction from Dagster: the installed job, launched through Dagster Pipes, reports each topic it cleans as a
materialization of the topic's asset and a check of it.

``compaction run`` (or ``scripts/spark-submit.sh``, whose driver runs the same command line) finds the Pipes
context Dagster puts in its environment and reports, for each topic whose asset the step targets (the asset key's
last component is the topic's name: ``kafka/orders``), one materialization with the run report's figures of the topic
as metadata (partitions cleaned, failed and skipped, records and bytes before and after, the manifest version each
cleaned partition committed), and the asset check ``partitions_cleanable``, failed when a partition of the topic
failed or stayed uncleanable. The checks are blocking: a topic that kept a partition dirty fails the step, once
Dagster has recorded every topic's materialization, and holds back what is downstream of it.

Dagster's environment needs neither pyspark nor this project (``pip install -r dagster-defs/requirements.txt``):
the job is the ``compaction`` command of the project's wheel in a virtualenv of its own, as on an Airflow worker
(docs/first-week.md). ``dagster dev -f dagster-defs/compaction_assets.py`` loads these definitions; settings come
from the environment:

- ``COMPACTION_TOPICS`` (required): the topics, comma-separated, each an asset ``kafka/<topic>``;
- ``COMPACTION_STORE`` and ``COMPACTION_CONFIG`` (required): the store URL and the configuration file;
- ``COMPACTION_EXECUTABLE``: the job's command (default ``compaction`` on the PATH);
- ``COMPACTION_SPARK_SUBMIT``: run through this ``scripts/spark-submit.sh`` (client mode: the driver, on this
  machine, inherits the Pipes context) instead of the command, with ``COMPACTION_SPARK_OPTIONS`` its options
  (``--master spark://HOST:7077 --executor-memory 4g``);
- ``COMPACTION_RUN_OPTIONS``: more ``compaction run`` flags (``--report s3://bucket/reports/run.json``).

A scheduled run passes its scheduled time as ``--now``, so that a retry decides as the first attempt did; its run id
is the run's ``--run-id``, recorded in each manifest it commits.
"""

import os
import shlex
from collections.abc import Sequence

import dagster as dg

#: The job's exit code when some partitions failed and the others committed: each failed partition is reported as
#: its topic's failed check, so Dagster is to record what the job reported rather than fail the step first.
EXIT_PARTIAL = 3
CHECK = "partitions_cleanable"
#: The run tag the nightly schedule sets to its scheduled time, the job's ``--now``.
NOW_TAG = "compaction/now"


def job_command(
    store: str,
    config: str,
    topics: Sequence[str],
    *,
    executable: str = "compaction",
    spark_submit: str | None = None,
    spark_options: Sequence[str] = (),
    run_options: Sequence[str] = (),
) -> list[str]:
    """The job's command line: ``compaction run`` or, with ``spark_submit``, that script with ``spark_options``."""
    job = [store, "--topics", ",".join(topics), *run_options]
    if spark_submit:
        return [spark_submit, *spark_options, "--config", config, "--", *job]
    return [executable, "run", "--conf", config, *job]


def partial_is_reported(command: Sequence[str]) -> list[str]:
    """``command`` for PipesSubprocessClient, which fails the step on any non-zero exit code before it records what
    the process reported: exit code 3 becomes 0 (the failed checks say what failed, and fail the step); every other
    code stays."""
    return ["sh", "-c", f'"$@"; code=$?; [ "$code" -eq {EXIT_PARTIAL} ] && exit 0; exit "$code"', "sh", *command]


def compaction_assets(
    topics: Sequence[str], command: Sequence[str], prefix: Sequence[str] = ("kafka",)
) -> dg.AssetsDefinition:
    """One asset per topic (``prefix/topic``) with its blocking check, materialized together by one run of
    ``command``."""

    @dg.multi_asset(
        name="compaction",
        specs=[
            dg.AssetSpec([*prefix, topic], description=f"topic {topic}, compacted", kinds={"spark"}) for topic in topics
        ],
        check_specs=[
            dg.AssetCheckSpec(
                CHECK,
                asset=[*prefix, topic],
                blocking=True,
                description="no partition of the topic failed or stayed uncleanable",
            )
            for topic in topics
        ],
    )
    def compaction(context: dg.AssetExecutionContext, pipes: dg.PipesSubprocessClient):  # type: ignore[no-untyped-def]
        when = context.run.tags.get(NOW_TAG)
        flags = ["--run-id", f"dagster-{context.run_id}", *(["--now", when] if when else [])]
        return pipes.run(context=context, command=partial_is_reported([*command, *flags])).get_results()

    return compaction


def _from_environment() -> dg.Definitions:
    topics = [t.strip() for t in os.environ.get("COMPACTION_TOPICS", "").split(",") if t.strip()]
    if not topics:
        return dg.Definitions()
    command = job_command(
        os.environ["COMPACTION_STORE"],
        os.environ["COMPACTION_CONFIG"],
        topics,
        executable=os.environ.get("COMPACTION_EXECUTABLE", "compaction"),
        spark_submit=os.environ.get("COMPACTION_SPARK_SUBMIT"),
        spark_options=shlex.split(os.environ.get("COMPACTION_SPARK_OPTIONS", "")),
        run_options=shlex.split(os.environ.get("COMPACTION_RUN_OPTIONS", "")),
    )
    assets = compaction_assets(topics, command)
    job = dg.define_asset_job("compaction_nightly", selection=[assets])

    @dg.schedule(job=job, cron_schedule="0 2 * * *", execution_timezone="UTC")
    def nightly(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        return dg.RunRequest(tags={NOW_TAG: context.scheduled_execution_time.isoformat()})

    return dg.Definitions(
        assets=[assets], jobs=[job], schedules=[nightly], resources={"pipes": dg.PipesSubprocessClient()}
    )


defs = _from_environment()
