"""scripts/spark-submit.sh as its users run it: an explicit configuration, checked before submitting; the
job's own options win; Spark properties and masters written as spark-submit takes them.

spark-submit itself is a stand-in here (a SPARK_HOME whose bin/spark-submit records its arguments), so each
case shows what would have been submitted, or that nothing was; a real submission is in test_cluster.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "spark-submit.sh"
VALID = '"log.cleanup.policy" = "compact"\n'


@pytest.fixture
def spark_home(tmp_path: Path) -> Path:
    home = tmp_path / "spark-home"
    (home / "bin").mkdir(parents=True)
    submit = home / "bin" / "spark-submit"
    submit.write_text(
        "#!/usr/bin/env bash\n"
        '"$RECORDER_PYTHON" -c \'import json, sys; print(json.dumps(sys.argv[1:]))\' "$@" >> "$RECORD"\n'
    )
    submit.chmod(0o755)
    return home


def submit(spark_home: Path, *argv: str, env: dict[str, str] | None = None) -> tuple[int, str, list[list[str]]]:
    """Run the script; returns its exit code, its stderr and the spark-submit invocations it made."""
    record = spark_home / "submitted.jsonl"
    record.unlink(missing_ok=True)
    environment = {k: v for k, v in os.environ.items() if k not in ("COMPACTION_CONFIG_FILE", "SPARK_MASTER")}
    environment.update(
        SPARK_HOME=str(spark_home), RECORD=str(record), RECORDER_PYTHON=str(ROOT / ".venv/bin/python"), **(env or {})
    )
    done = subprocess.run([str(SCRIPT), *argv], capture_output=True, text=True, env=environment, timeout=120)
    calls = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return done.returncode, done.stderr, calls


def job_args(call: list[str]) -> list[str]:
    """The arguments the submitted jobs/compact.py gets."""
    return call[call.index(str(ROOT / "jobs" / "compact.py")) + 1 :]


def option_values(call: list[str], option: str) -> list[str]:
    """The values of a spark-submit option (before the application)."""
    head = call[: call.index(str(ROOT / "jobs" / "compact.py"))]
    return [head[i + 1] for i, arg in enumerate(head) if arg == option]


def test_without_a_configuration_nothing_is_submitted(spark_home: Path) -> None:
    code, err, calls = submit(spark_home, "--", "s3://bucket/topics", "--now", "2026-01-02T00:00:00Z")
    assert code == 2 and calls == []
    assert "no configuration: give --config FILE" in err


def test_the_configuration_given_is_shipped_and_read(spark_home: Path, tmp_path: Path) -> None:
    conf = tmp_path / "nightly.toml"
    conf.write_text(VALID)
    code, err, calls = submit(spark_home, "--config", str(conf), "--", "s3://bucket/topics", "--now", "1000")
    assert code == 0, err
    [call] = calls
    assert option_values(call, "--files") == [str(conf)]
    assert job_args(call) == ["s3://bucket/topics", "--now", "1000", "--conf", str(conf)]
    assert any(
        c.startswith("spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=") for c in option_values(call, "--conf")
    ), "the driver is as quiet as compaction run's"


def test_the_jobs_own_options_win_over_the_scripts(spark_home: Path, tmp_path: Path) -> None:
    mine, theirs = tmp_path / "script.toml", tmp_path / "job.toml"
    mine.write_text(VALID)
    theirs.write_text(VALID + '"log.cleaner.min.cleanable.ratio" = 0.2\n')
    code, err, calls = submit(
        spark_home,
        "--config",
        str(mine),
        "--",
        "s3://bucket/topics",
        "--conf",
        str(theirs),
        "--set",
        "log.cleaner.min.cleanable.ratio=0.3",
    )
    assert code == 0, err
    [call] = calls
    assert f"the job's --conf {theirs} wins over {mine}" in err
    assert option_values(call, "--files") == [str(theirs)]
    assert job_args(call) == [
        "s3://bucket/topics",
        "--set",
        "log.cleaner.min.cleanable.ratio=0.3",
        "--conf",
        str(theirs),
    ], "one configuration file: the job's"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('"log.cleaner.min.cleanable.ratio" = 1.5\n', "Invalid value 1.5 for configuration"),
        ('"log.cleaner.min.cleanable.ration" = 0.5\n', "did you mean 'log.cleaner.min.cleanable.ratio'?"),
        ("log.cleaner.min.cleanable.ratio = \n", "nightly.toml"),
    ],
)
def test_an_invalid_configuration_fails_the_script_before_submitting(
    spark_home: Path, tmp_path: Path, content: str, message: str
) -> None:
    conf = tmp_path / "nightly.toml"
    conf.write_text(content)
    code, err, calls = submit(spark_home, "--config", str(conf), "--", "s3://bucket/topics")
    assert code == 4 and calls == [], "exit code 4, as the job gives it, and nothing submitted"
    assert message in err


def test_invalid_job_flags_fail_the_script_before_submitting(spark_home: Path, tmp_path: Path) -> None:
    conf = tmp_path / "nightly.toml"
    conf.write_text(VALID)
    code, err, calls = submit(spark_home, "--config", str(conf), "--", "s3://bucket/topics", "--set", "orders:nope=1")
    assert (code, calls) == (4, []) and "nope" in err
    code, err, calls = submit(spark_home, "--config", str(conf), "--", "s3://bucket/topics", "--now", "1767225600")
    assert (code, calls) == (2, []) and "looks like epoch seconds" in err


def test_spark_properties_are_taken_as_spark_submit_writes_them(spark_home: Path, tmp_path: Path) -> None:
    conf = tmp_path / "nightly.toml"
    conf.write_text(VALID)
    code, err, calls = submit(
        spark_home,
        "--conf",
        "spark.executor.memory=4g",
        "--conf",
        str(conf),
        "--conf=spark.sql.shuffle.partitions=8",
        "--spark-conf",
        "spark.driver.cores=2",
        "--",
        "s3://bucket/topics",
    )
    assert code == 0, err
    [call] = calls
    confs = option_values(call, "--conf")
    assert {"spark.executor.memory=4g", "spark.sql.shuffle.partitions=8", "spark.driver.cores=2"} <= set(confs)
    assert option_values(call, "--files") == [str(conf)], "--conf FILE is the configuration, as in compaction run"


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*,3]", "local-cluster[2,1,1024]"])
def test_every_local_master_is_submitted(spark_home: Path, tmp_path: Path, master: str) -> None:
    conf = tmp_path / "nightly.toml"
    conf.write_text(VALID)
    code, err, calls = submit(spark_home, "--master", master, "--config", str(conf), "--", "store")
    assert code == 0, err
    assert option_values(calls[0], "--master") == [master]


@pytest.mark.parametrize("master", ["local-cluster[2,1]", "local[0]", "localhost"])
def test_a_malformed_local_master_is_refused(spark_home: Path, tmp_path: Path, master: str) -> None:
    conf = tmp_path / "nightly.toml"
    conf.write_text(VALID)
    code, err, calls = submit(spark_home, "--master", master, "--config", str(conf), "--", "store")
    assert (code, calls) == (2, []) and "local-cluster[WORKERS,CORES,MEMORY_MB]" in err
