"""Unit tests: no Spark, no server. The store contract runs on memory:// and a local folder."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["memory", "local"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param
