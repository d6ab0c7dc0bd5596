"""A wrong master, an unreachable S3 endpoint or missing credentials fail fast, clearly, and touch nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compaction.store import Store
from compaction.synthetic import GenerateSpec, generate
from tests.cluster import free_port
from tests.s3server import CREDENTIALS, new_bucket, storage_options

ROOT = Path(__file__).resolve().parent.parent
NOW = "2026-01-01T00:00:00Z"  # in the past: a future --now is refused


def snapshot(store: Store) -> dict[str, bytes]:
    fs = store.storage.fs
    return {path: fs.cat_file(path) for path in fs.find(store.storage.root)}


def compaction(*args: str, env: dict[str, str] | None = None, timeout: int = 120) -> tuple[int, str, float]:
    started = time.perf_counter()
    process = subprocess.run([sys.executable, "-m", "compaction.cli", *args], capture_output=True, text=True,
                             timeout=timeout, env=env if env is not None else dict(os.environ), cwd=ROOT)
    return process.returncode, process.stderr + process.stdout, time.perf_counter() - started


@pytest.fixture
def local_demo(tmp_path: Path) -> Store:
    store = Store.open(str(tmp_path / "store"))
    generate(store, GenerateSpec(records=2000, keys=100, partitions=1, segment_records=500), now_ms=0)
    return store


def test_wrong_master_url_fails_before_spark_and_changes_nothing(local_demo: Store) -> None:
    before = snapshot(local_demo)
    closed = f"spark://127.0.0.1:{free_port()}"
    code, out, seconds = compaction("run", local_demo.url, "--set", "log.cleanup.policy=compact", "--now", NOW,
                                    "--master", closed)
    assert code == 1 and f"no Spark master is listening at {closed}" in out and seconds < 30
    code, out, _ = compaction("run", local_demo.url, "--set", "log.cleanup.policy=compact", "--master", "sparkk://x")
    assert code == 1 and "is not local[*], local[N], spark://HOST:PORT" in out
    script = subprocess.run([str(ROOT / "scripts" / "spark-submit.sh"), "--master", closed, "--config",
                             str(ROOT / "conf" / "local.toml"), "--", local_demo.url],
                            capture_output=True, text=True, timeout=60)
    assert script.returncode == 2 and "no Spark master is listening" in script.stderr
    assert snapshot(local_demo) == before


@pytest.mark.s3
def test_unreachable_s3_endpoint_fails_fast_with_a_clear_message() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    code, out, seconds = compaction("run", "s3://nightly-store", "--now", NOW, "--storage-option",
                                    f"client_kwargs.endpoint_url={endpoint}")
    assert code == 1 and f"cannot list s3://nightly-store: the endpoint {endpoint} cannot be reached" in out
    assert seconds < 60


@pytest.mark.s3
def test_a_silent_s3_endpoint_fails_within_the_configured_retry_budget() -> None:
    with socket.socket() as silent:  # accepts connections (in the kernel), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        # The same command against a folder that is no store: start-up and imports alone, on this machine now.
        _, _, startup = compaction("run", "/nonexistent-store", "--now", NOW)
        code, out, seconds = compaction("run", "s3://nightly-store", "--now", NOW, "--set",
                                        "store.retry.budget.ms=2000", "--storage-option",
                                        f"client_kwargs.endpoint_url={endpoint}")
    assert code == 1 and f"cannot list s3://nightly-store: the endpoint {endpoint} did not answer" in out
    assert "gave up within the retry budget of 2 s" in out
    assert seconds < 2 + 2 * startup + 2, f"{seconds:.1f} s against a 2 s budget and {startup:.1f} s to start"


@pytest.mark.s3
def test_missing_credentials_fail_fast_and_touch_nothing(s3_endpoint: str) -> None:
    url = new_bucket(s3_endpoint)
    store = Store.open(url, storage_options(s3_endpoint))
    generate(store, GenerateSpec(records=1000, keys=50, partitions=1, segment_records=250), now_ms=0)
    before = snapshot(store)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = "/nonexistent"
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    code, out, seconds = compaction("run", url, "--set", "log.cleanup.policy=compact", "--now", NOW,
                                    "--storage-option", f"client_kwargs.endpoint_url={s3_endpoint}", env=env)
    assert code == 1 and "no credentials found" in out and seconds < 60
    assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in out
    assert snapshot(store) == before
