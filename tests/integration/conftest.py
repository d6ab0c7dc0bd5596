"""Integration tests: a moto S3 server on loopback, the shared SparkSession (classic, and Spark Connect on the same
JVM), a standalone cluster, Airflow. The store contract of the unit tests runs here on S3 (test_s3_backend.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from compaction.store import Store
from tests.helpers.s3server import new_bucket, s3_server, storage_options


@pytest.fixture(params=[pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3_store(s3_endpoint: str) -> Store:
    return Store.open(new_bucket(s3_endpoint), storage_options(s3_endpoint))


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
def spark(spark_connect_port: int) -> Iterator[Any]:
    """One local SparkSession for the whole run (start-up costs ~10 s): 2 cores, no UI, few partitions.

    Its JVM also serves Spark Connect on a loopback port (as ``SparkSession.builder.remote("local[2]")`` does), so
    the ``connect`` fixture's session runs on the same executors."""
    from compaction.engine.session import spark_session

    session = spark_session(
        "local[2]",
        "compaction-tests",
        conf={
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "4",
            "spark.driver.memory": "2g",
            "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(spark_connect_port),
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_session(spark: Any, spark_connect_port: int) -> Iterator[Any]:
    """A Spark Connect session of the shared session's server: no SparkContext, no RDDs, as on Databricks."""
    from compaction.engine.session import spark_session

    session = spark_session(remote=f"sc://127.0.0.1:{spark_connect_port}", ship=False)
    assert is_connect(session)
    yield session
    session.stop()


@pytest.fixture
def connect(connect_session: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The Spark Connect session, with pyspark's functions building Spark Connect columns (as they do in a
    process that runs Spark Connect only; this one also runs the classic session)."""
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    return connect_session


@pytest.fixture(params=["classic", "connect"])
def any_spark(request: pytest.FixtureRequest) -> Any:
    """The shared session, classic and then Spark Connect: what runs on one runs on the other."""
    return request.getfixturevalue("spark" if request.param == "classic" else "connect")
