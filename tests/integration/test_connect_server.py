"""A run through a Spark Connect server of its own (a process on 127.0.0.1, as a remote cluster's would be).

The server's Python workers cannot import this checkout's package (they run without site-packages' path files,
where the editable install lives), so the run works only because the job ships its package as a Spark Connect
artifact; without it, the run stops before any work and says why. The log it commits equals a classic run's on a copy
of the same store.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from chispa import assert_df_equality

from compaction.clean.cleaner import Cleaner
from compaction.read.scan import scan
from compaction.store import Store
from tests.helpers import SPARK_NOISE, ahead_of_the_wall_clock_ms
from tests.helpers.cluster import free_port
from tests.helpers.settings import settings_with

NOW = ahead_of_the_wall_clock_ms()  # so that both runs stamp horizons from it
DAY = 86_400_000
CONF = """"log.cleanup.policy" = "compact"
"log.roll.ms" = 60000
[cleaner]
"task.max.records" = 2500
"""
#: Seconds a Spark Connect server may take to listen (a JVM start; more on a loaded machine).
START_S = 180


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server process (local[2], task retries) whose Python workers lack this package."""
    import pyspark

    folder = tmp_path_factory.mktemp("connect-server")
    worker = folder / "python-without-compaction"
    worker.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # -S: no .pth files, no editable install
    worker.chmod(0o755)
    port = free_port()
    env = {
        **os.environ,
        "PYSPARK_PYTHON": str(worker),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": sysconfig.get_paths()["purelib"],
    }
    env.pop("SPARK_REMOTE", None)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    server = subprocess.Popen(
        [
            str(submit),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master",
            "local[2,4]",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            f"spark.connect.grpc.binding.port={port}",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.driver.bindAddress=127.0.0.1",
        ],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(folder / "server.log").open("wb"),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_S
        while True:
            assert server.poll() is None, (folder / "server.log").read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"no Spark Connect server on port {port} after {START_S} s"
                time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _run(store: Path, conf: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "SPARK_REMOTE"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "compaction.cli",
            "run",
            str(store),
            "--conf",
            str(conf),
            "--now",
            str(NOW),
            "--allow-future-now",
            *flags,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _generate(path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "compaction.cli",
            "generate",
            str(path),
            "--topics",
            "orders,payments",
            "--partitions",
            "2",
            "--records",
            "12000",
            "--keys",
            "700",
            "--segment-records",
            "1500",
            "--tombstone-ratio",
            "0.05",
            "--keyless-ratio",
            "0.01",
            "--transactional-ratio",
            "0.2",
            "--abort-ratio",
            "0.3",
            "--end-time",
            str(NOW - DAY),
            "--now",
            str(NOW - DAY),
            "--allow-future-now",
            "--seed",
            "5",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )


@pytest.mark.spark
@pytest.mark.slow
def test_a_run_on_a_spark_connect_server_commits_what_a_classic_run_commits(
    spark, connect_server: str, tmp_path: Path
) -> None:
    remote, classic = tmp_path / "remote", tmp_path / "classic"
    _generate(remote)
    shutil.copytree(remote, classic)
    conf = tmp_path / "run.toml"
    conf.write_text(CONF)

    done = _run(remote, conf, "--remote", connect_server, "--report", str(tmp_path / "report.json"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "4 partition(s) cleaned, 0 failed" in done.stdout
    assert not SPARK_NOISE.search(done.stderr), f"a successful run printed on stderr:\n{done.stderr[-4000:]}"
    report = Cleaner(spark, Store.open(str(classic)), settings_with(conf=str(conf))).run(NOW)
    assert not report.failed

    remote_store, classic_store = Store.open(str(remote)), Store.open(str(classic))
    partitions = remote_store.topic_partitions()
    assert partitions == classic_store.topic_partitions() and len(partitions) == 4
    for tp in partitions:
        ours, theirs = remote_store.manifest(tp), classic_store.manifest(tp)
        assert (ours.version, ours.first_dirty_offset, ours.log_start_offset) == (
            theirs.version,
            theirs.first_dirty_offset,
            theirs.log_start_offset,
        ), tp
        assert [(s.base_offset, s.next_offset, s.live_records) for s in ours.segments] == [
            (s.base_offset, s.next_offset, s.live_records) for s in theirs.segments
        ], tp
    for topic in ("orders", "payments"):
        assert_df_equality(
            scan(remote_store, topic).to_spark(spark), scan(classic_store, topic).to_spark(spark), ignore_row_order=True
        )


@pytest.mark.spark
@pytest.mark.slow
def test_without_its_package_the_run_stops_before_any_work_and_says_why(connect_server: str, tmp_path: Path) -> None:
    """--no-ship-package says the server's Python has the package: a small job checks that before the pass."""
    store = tmp_path / "store"
    _generate(store)
    conf = tmp_path / "run.toml"
    conf.write_text(CONF)
    before = {tp: Store.open(str(store)).manifest(tp).version for tp in Store.open(str(store)).topic_partitions()}
    done = _run(store, conf, "--remote", connect_server, "--no-ship-package")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        f"error: the Spark Connect server {connect_server} was sent no package (--no-ship-package), and its Python has "
        "no compaction package: install compaction 0.1.0 in the Python the server runs (the wheel of `make dist`), or "
        "let the job send it (without --no-ship-package)"
    ]
    assert {tp: Store.open(str(store)).manifest(tp).version for tp in before} == before, "nothing committed"
