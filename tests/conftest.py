"""Shared fixtures: stores on three backends (memory, local disk, a moto S3 server on loopback)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compaction.store import Store
from tests.helpers.s3server import new_bucket, s3_server, set_credentials_env, storage_options

set_credentials_env()
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # Spark talks to itself on loopback only


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3_store(s3_endpoint: str) -> Store:
    return Store.open(new_bucket(s3_endpoint), storage_options(s3_endpoint))


@pytest.fixture
def local_store(tmp_path: Path) -> Store:
    return Store.open(str(tmp_path / "store"))


@pytest.fixture
def memory_store() -> Store:
    return Store.open(f"memory://store-{uuid.uuid4().hex}")


BACKENDS = ["memory", "local", pytest.param("s3", marks=pytest.mark.s3)]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    """The same store contract on each backend."""
    return request.getfixturevalue(f"{request.param}_store")


@pytest.fixture
def store_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str], Store]:
    """Open a fresh store of the named backend."""

    def make(backend: str) -> Store:
        if backend == "s3":
            endpoint = request.getfixturevalue("s3_endpoint")
            return Store.open(new_bucket(endpoint), storage_options(endpoint))
        if backend == "local":
            return Store.open(str(tmp_path / f"store-{uuid.uuid4().hex[:8]}"))
        return Store.open(f"memory://store-{uuid.uuid4().hex}")

    return make


def is_connect(session: object) -> bool:
    """Whether ``session`` is a Spark Connect session (which has no SparkContext)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


@pytest.fixture(scope="session")
def spark_connect_port() -> int:
    """The loopback port of the Spark Connect server the shared session's JVM runs."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def spark(spark_connect_port: int):  # type: ignore[no-untyped-def]
    """One local SparkSession for the whole run (start-up costs ~10 s): 2 cores, no UI, few partitions.

    Its JVM also serves Spark Connect on a loopback port (as ``SparkSession.builder.remote("local[2]")`` does), so
    the ``connect`` fixture's session runs on the same executors."""
    from compaction.clean.session import spark_session

    session = spark_session("local[2]", "compaction-tests", conf={
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.driver.memory": "2g",
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(spark_connect_port),
    })
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_session(spark, spark_connect_port: int):  # type: ignore[no-untyped-def]
    """A Spark Connect session of the shared session's server: no SparkContext, no RDDs, as on Databricks."""
    from compaction.clean.session import spark_session

    session = spark_session(remote=f"sc://127.0.0.1:{spark_connect_port}", ship=False)
    assert is_connect(session)
    yield session
    session.stop()


@pytest.fixture
def connect(connect_session, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The Spark Connect session, with pyspark's functions building Spark Connect columns (as they do in a
    process that runs Spark Connect only; this one also runs the classic session)."""
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    return connect_session


@pytest.fixture(params=["classic", "connect"])
def any_spark(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """The shared session, classic and then Spark Connect: what runs on one runs on the other."""
    return request.getfixturevalue("spark" if request.param == "classic" else "connect")
