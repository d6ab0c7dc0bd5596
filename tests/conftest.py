"""What every test may use: stores on a backend (the part below decides which), nothing reaching a real cloud.

``tests/unit/`` runs the store contract on memory:// and a local folder; ``tests/integration/`` adds a moto S3
server on loopback and Spark (its own conftest.py).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from compaction.store import Store
from tests.helpers.s3server import new_bucket, set_credentials_env, storage_options

set_credentials_env()  # fake credentials: no test can reach a real AWS account
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # Spark talks to itself on loopback only


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
