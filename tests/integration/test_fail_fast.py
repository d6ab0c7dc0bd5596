"""A wrong master, an unreachable S3 endpoint or missing credentials fail fast, clearly, and touch nothing."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from compaction.store import Store
from compaction.store.storage import s3_client_config
from compaction.synthetic import GenerateSpec, generate
from tests.helpers import ROOT
from tests.helpers.cluster import free_port
from tests.helpers.faultproxy import connections_accepted
from tests.helpers.s3server import CREDENTIALS, new_bucket, storage_options

NOW = "2026-01-01T00:00:00Z"  # in the past: a future --now is refused


def snapshot(store: Store) -> dict[str, bytes]:
    fs = store.storage.fs
    return {path: fs.cat_file(path) for path in fs.find(store.storage.root)}


def compaction(*args: str, env: dict[str, str] | None = None, timeout: int = 120) -> tuple[int, str]:
    """The command in a process of its own: its exit code and what it printed (``timeout`` only bounds a hang)."""
    process = subprocess.run(
        [sys.executable, "-m", "compaction.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else dict(os.environ),
        cwd=ROOT,
    )
    return process.returncode, process.stderr + process.stdout


@pytest.fixture
def local_demo(tmp_path: Path) -> Store:
    store = Store.open(str(tmp_path / "store"))
    generate(store, GenerateSpec(records=2000, keys=100, partitions=1, segment_records=500), now_ms=0)
    return store


def test_wrong_master_url_fails_before_spark_and_changes_nothing(local_demo: Store) -> None:
    before = snapshot(local_demo)
    closed = f"spark://127.0.0.1:{free_port()}"
    code, out = compaction(
        "run", local_demo.url, "--set", "log.cleanup.policy=compact", "--now", NOW, "--master", closed
    )
    assert code == 1 and f"no Spark master is listening at {closed}" in out
    code, out = compaction("run", local_demo.url, "--set", "log.cleanup.policy=compact", "--master", "sparkk://x")
    assert code == 1 and "is not local[*], local[N], spark://HOST:PORT" in out
    script = subprocess.run(
        [
            str(ROOT / "scripts" / "spark-submit.sh"),
            "--master",
            closed,
            "--config",
            str(ROOT / "conf" / "local.toml"),
            "--",
            local_demo.url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert script.returncode == 2 and "no Spark master is listening" in script.stderr
    assert snapshot(local_demo) == before


def path_without_java(folder: Path) -> str:
    """A PATH holding every command of this one but ``java``: links in ``folder``."""
    folder.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        for command in Path(directory).glob("*") if Path(directory).is_dir() else ():
            link = folder / command.name
            if command.name != "java" and not link.exists() and not link.is_symlink():
                link.symlink_to(command)
    return str(folder)


@pytest.mark.parametrize(
    ("case", "args", "env", "code", "error"),
    [
        (
            "no java",
            [],
            {"PATH": "<no java>", "JAVA_HOME": None},
            1,
            "error: Spark cannot start: there is no java on PATH and JAVA_HOME is not set; install Java 17 or later, "
            "or set "
            "JAVA_HOME to one",
        ),
        (
            "bogus JAVA_HOME",
            [],
            {"JAVA_HOME": "/nonexistent/jdk"},
            1,
            "error: Spark cannot start: JAVA_HOME is /nonexistent/jdk, which has no bin/java; set JAVA_HOME to a Java "
            "17 or "
            "later installation, or unset it to use the java on PATH",
        ),
        (
            "a JVM that exits at once",
            ["--spark-conf", "spark.driver.extraJavaOptions=-Xss1k"],
            {"JAVA_HOME": None},
            1,
            "error: Spark cannot start: the driver's JVM (<java>) exits at once with the options '-Xss1k': The Java "
            "thread "
            "stack size specified is too small. Specify at least 136k; fix spark.driver.extraJavaOptions (or "
            "JAVA_HOME)",
        ),
        (
            "an unreachable master",
            ["--master", "spark://127.0.0.1:1"],
            {},
            1,
            "error: Spark cannot start: no Spark master is listening at spark://127.0.0.1:1 ([Errno 111] Connection "
            "refused); start the master, or give the URL of a running one with --master",
        ),
        (
            "a master and SPARK_REMOTE",
            ["--master", "local[2]"],
            {"SPARK_REMOTE": "sc://127.0.0.1:15002/;token=s3cret"},
            4,
            "error: both a Spark master (local[2]) and a Spark Connect remote (SPARK_REMOTE=sc://127.0.0.1:15002) are "
            "set: "
            "a session is either classic or Spark Connect; drop --master or unset SPARK_REMOTE",
        ),
    ],
)
def test_when_spark_cannot_start_run_says_why_in_one_line_and_writes_nothing(
    local_demo: Store, tmp_path: Path, case: str, args: list[str], env: dict[str, str | None], code: int, error: str
) -> None:
    environ = dict(os.environ)
    for name, value in env.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = path_without_java(tmp_path / "bin") if value == "<no java>" else value
    before = snapshot(local_demo)
    report, metrics = tmp_path / "out" / "report.json", tmp_path / "out" / "metrics.prom"
    actual, out = compaction(
        "run",
        local_demo.url,
        "--set",
        "log.cleanup.policy=compact",
        "--now",
        NOW,
        "--report",
        str(report),
        "--set",
        f"cleaner.metrics.textfile={metrics}",
        *args,
        env=environ,
    )
    assert (actual, out.splitlines()) == (code, [error.replace("<java>", str(shutil.which("java")))]), case
    assert snapshot(local_demo) == before and not report.exists() and not metrics.exists(), "nothing written"


def test_a_driver_setting_the_launcher_refuses_ends_in_one_typed_line(local_demo: Store) -> None:
    before = snapshot(local_demo)
    code, out = compaction(
        "run",
        local_demo.url,
        "--set",
        "log.cleanup.policy=compact",
        "--now",
        NOW,
        "--spark-conf",
        "spark.driver.memory=lots",
    )
    assert code == 1 and "Traceback" not in out, out
    assert out.splitlines()[-1] == (
        "error: Spark cannot start: the driver's JVM exited before it started (its own "
        "message is above); check JAVA_HOME and the spark.driver.* settings"
    )
    assert "Invalid maximum heap size: -Xmxlots" in out, "the JVM's own words stay above"
    assert snapshot(local_demo) == before


@pytest.mark.s3
def test_unreachable_s3_endpoint_fails_fast_with_a_clear_message() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    code, out = compaction(
        "run", "s3://nightly-store", "--now", NOW, "--storage-option", f"client_kwargs.endpoint_url={endpoint}"
    )
    assert code == 1 and f"cannot list s3://nightly-store: the endpoint {endpoint} cannot be reached" in out


@pytest.mark.s3
def test_a_silent_s3_endpoint_fails_within_the_configured_retry_budget() -> None:
    """store.retry.budget.ms reaches botocore: a 2 s budget makes one attempt (the default's 60 s, three), which the
    silent endpoint's kernel accepts on its behalf; no elapsed time decides."""
    with socket.socket() as silent:  # accepts connections (in the kernel), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        code, out = compaction(
            "run",
            "s3://nightly-store",
            "--now",
            NOW,
            "--set",
            "store.retry.budget.ms=2000",
            "--storage-option",
            f"client_kwargs.endpoint_url={endpoint}",
        )
        attempts = connections_accepted(silent)
    assert code == 1 and f"cannot list s3://nightly-store: the endpoint {endpoint} did not answer" in out
    assert "gave up within the retry budget of 2 s" in out
    assert attempts == s3_client_config(2000)["retries"]["total_max_attempts"] == 1


@pytest.mark.s3
def test_missing_credentials_fail_fast_and_touch_nothing(s3_endpoint: str) -> None:
    url = new_bucket(s3_endpoint)
    store = Store.open(url, storage_options(s3_endpoint))
    generate(store, GenerateSpec(records=1000, keys=50, partitions=1, segment_records=250), now_ms=0)
    before = snapshot(store)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = "/nonexistent"
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    code, out = compaction(
        "run",
        url,
        "--set",
        "log.cleanup.policy=compact",
        "--now",
        NOW,
        "--storage-option",
        f"client_kwargs.endpoint_url={s3_endpoint}",
        env=env,
    )
    assert code == 1 and "no credentials found" in out
    assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in out
    assert snapshot(store) == before
