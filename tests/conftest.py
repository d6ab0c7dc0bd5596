"""What every test may use: stores on a backend (the part below decides which), nothing reaching a real cloud, and
random examples that a printed seed draws again.

``tests/unit/`` runs the store contract on memory:// and a local folder; ``tests/integration/`` adds a moto S3
server on loopback and Spark (its own conftest.py).

Hypothesis draws new examples on every run, CI's too: its ``ci`` profile (loaded when ``CI`` is set) would draw the
same ones every time, so it is registered again without ``derandomize``. Every run takes one seed for all its
property tests, prints it, and ``pytest --hypothesis-seed=SEED`` draws the same examples again (README, Development).
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from compaction.store import Store
from tests.helpers.s3server import new_bucket, set_credentials_env, storage_options

set_credentials_env()  # fake credentials: no test can reach a real AWS account
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # Spark talks to itself on loopback only

hypothesis_settings.register_profile("ci", hypothesis_settings.get_profile("ci"), derandomize=False)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Take this run's seed before Hypothesis's plugin reads it: the one given, or a new one."""
    if config.getoption("hypothesis_seed") is None:
        config.option.hypothesis_seed = str(secrets.randbelow(2**32))


def _seed_line(config: pytest.Config) -> str:
    seed = config.getoption("hypothesis_seed")
    return f"hypothesis seed: {seed} (pytest --hypothesis-seed={seed} draws this run's examples again)"


def pytest_report_header(config: pytest.Config) -> str:
    return _seed_line(config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    terminalreporter.write_line(_seed_line(config))


@pytest.fixture
def local_store(tmp_path: Path) -> Store:
    return Store.open(str(tmp_path / "store"))


@pytest.fixture
def memory_store() -> Store:
    return Store.open(f"memory://store-{uuid.uuid4().hex}")


@pytest.fixture
def store(request: pytest.FixtureRequest, backend: str) -> Store:
    """The same store contract on each backend (``backend``: memory and local in unit tests, s3 in integration)."""
    return request.getfixturevalue(f"{backend}_store")


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
