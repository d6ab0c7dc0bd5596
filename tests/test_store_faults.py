"""S3 faults: an unreachable endpoint gives up within the retry budget."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from compaction.errors import StoreError
from compaction.store import Store
from tests.s3server import storage_options

pytestmark = pytest.mark.s3


@pytest.fixture(params=["refused", "silent"])
def unreachable_endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    """An endpoint that refuses connections, or one that accepts them and never answers (a lost server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        if request.param == "silent":
            sock.listen(64)  # the kernel completes handshakes; nobody ever reads
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("budget_ms", [1_500, 5_000])
def test_an_unreachable_endpoint_gives_up_within_the_retry_budget(unreachable_endpoint: str, budget_ms: int) -> None:
    store = Store.open("s3://nightly-store", {**storage_options(unreachable_endpoint), "retry_budget_ms": budget_ms})
    started = time.monotonic()
    with pytest.raises(StoreError, match=f"cannot list s3://nightly-store: the endpoint {unreachable_endpoint} "
                                         f"(cannot be reached|did not answer) .*; gave up within the retry budget"):
        store.require_exists()
    assert time.monotonic() - started < budget_ms / 1000 + 0.5
