"""The installed wheel as a new user meets it: a virtualenv of its own, no checkout in sight, none of Spark's variables
set (no SPARK_LOCAL_IP, no PYSPARK_PYTHON). A successful run prints the job's lines and nothing of Spark's or the
JVM's, with and without the class archive `compaction warm-up` builds; `-v` shows Spark's own lines."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import SPARK_NOISE
from tests.helpers.jobenv import build_wheel, job_environment

pytestmark = [pytest.mark.slow]

CONF = '"log.cleanup.policy" = "compact"\n'


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The wheel's `compaction`, in a fresh virtualenv; no class archive until a test builds one."""
    folder = tmp_path_factory.mktemp("installed")
    yield job_environment(folder / "venv", build_wheel(folder / "dist"))


def user_env() -> dict[str, str]:
    """A user's shell: none of the variables `make` exports, no virtualenv of the checkout on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK", "SPARK_", "VIRTUAL_ENV", "PYTHONPATH", "COMPACTION"))
    }
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    return env


def compaction(wheel: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(wheel), *argv], env=user_env(), cwd=wheel.parent, capture_output=True, text=True, timeout=600
    )


def store(wheel: Path, path: Path) -> str:
    done = compaction(
        wheel,
        "generate",
        str(path),
        "--topics",
        "orders",
        "--partitions",
        "2",
        "--records",
        "6000",
        "--keys",
        "600",
        "--segment-records",
        "1000",
        "--seed",
        "3",
    )
    assert done.returncode == 0, done.stderr
    return str(path)


def quiet_run(wheel: Path, tmp_path: Path, name: str) -> None:
    conf = tmp_path / "run.toml"
    conf.write_text(CONF)
    done = compaction(wheel, "run", store(wheel, tmp_path / name), "--conf", str(conf))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "2 partition(s) cleaned, 0 failed" in done.stdout
    assert not SPARK_NOISE.search(done.stderr), f"a successful run printed on stderr:\n{done.stderr[-4000:]}"


def test_a_run_of_the_installed_wheel_prints_nothing_of_spark_before_and_after_the_warm_up(
    wheel: Path, tmp_path: Path
) -> None:
    quiet_run(wheel, tmp_path, "before")

    warmed = compaction(wheel, "warm-up")
    assert warmed.returncode == 0, warmed.stdout + warmed.stderr
    assert re.fullmatch(r"class archive \S+\.jsa \(\d+\.\d MB\): built in \d+\.\d s\n", warmed.stdout), warmed.stdout
    assert compaction(wheel, "warm-up").stdout.endswith("already built (--force builds it again)\n")
    quiet_run(wheel, tmp_path, "after")

    conf = tmp_path / "run.toml"
    verbose = compaction(wheel, "-v", "run", store(wheel, tmp_path / "verbose"), "--conf", str(conf))
    assert verbose.returncode == 0, verbose.stderr[-4000:]
    assert "the driver's JVM maps the class archive" in verbose.stderr, "the archive the warm-up built is used"
    assert re.search(r" INFO org\.apache\.spark\.SparkContext: ", verbose.stderr), "-v shows Spark's own lines"


DISCOVERY = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
print(spark.read.format("compaction").load(sys.argv[1]).count())
spark.stop()
"""


def test_spark_finds_the_data_source_the_wheel_installs(wheel: Path, tmp_path: Path) -> None:
    """No registration: Spark lists the installed top-level pyspark_* modules and takes their DefaultSource."""
    script = tmp_path / "discover.py"
    script.write_text(DISCOVERY)
    python = wheel.parent / "python"
    env = {**user_env(), "PYSPARK_PYTHON": str(python), "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [str(python), str(script), store(wheel, tmp_path / "found")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split()[-1] == "6000"
