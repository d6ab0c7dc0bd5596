"""A real Spark standalone cluster on 127.0.0.1: one master and N workers started with pyspark's spark-class.

Every process is started in its own session and stopped by process group (so executors and their Python
workers go too), also when the code using the cluster fails.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
STARTUP_SECONDS = 90


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(condition, what: str, seconds: float = STARTUP_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise TimeoutError(f"{what} did not happen within {seconds} s")


@dataclass
class Cluster:
    url: str
    ui_port: int
    work: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as response:
            return json.loads(response.read())

    def alive_workers(self) -> int:
        """Workers the master lists as alive; 0 while its UI is still coming up (refused, or 404 before
        its handlers are attached)."""
        try:
            return len([w for w in self.status().get("workers", []) if w.get("state") == "ALIVE"])
        except (OSError, ValueError):  # URLError and HTTPError are OSErrors
            return 0

    def executor_logs(self) -> list[Path]:
        """stderr files of executors the workers ran (work/<worker>/<app>/<executor>/stderr)."""
        return sorted(self.work.glob("worker-*/app-*/*/stderr"))


def cluster_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, SPARK_NO_DAEMONIZE="1"
    )
    return env


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)
    except ProcessLookupError:
        pass


@contextmanager
def spark_cluster(
    work: Path, workers: int = 2, cores: int = 1, memory: str = "2g", hosts: tuple[str, ...] = ("127.0.0.1",)
) -> Iterator[Cluster]:
    """Start a master on 127.0.0.1 and ``workers`` workers, each on the next of ``hosts`` (loopback addresses:
    Spark runs a speculative copy of a task only on another host); yield the cluster; stop them all by pid."""
    work.mkdir(parents=True, exist_ok=True)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui_port = free_port(), free_port()
    cluster = Cluster(f"spark://127.0.0.1:{port}", ui_port, work)
    env = cluster_env()

    def start(name: str, *args: str, host: str = "127.0.0.1") -> None:
        log = open(work / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        cluster.processes.append(
            subprocess.Popen(
                [spark_class, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**env, "SPARK_LOCAL_IP": host},
                cwd=work,
                start_new_session=True,
            )
        )

    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui_port),
        )
        _wait(lambda: _listening(port) and _listening(ui_port), "the Spark master listening")
        for i in range(workers):
            host = hosts[i % len(hosts)]
            start(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                cluster.url,
                "--host",
                host,
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(work / f"worker-{i}"),
                host=host,
            )
        _wait(lambda: cluster.alive_workers() == workers, f"{workers} workers registering")
        yield cluster
    finally:
        for process in reversed(cluster.processes):
            _stop(process)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0
