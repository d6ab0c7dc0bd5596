"""S3 faults at every call of a commit: a lost response, a 503 or a reset never duplicates, loses or
misreports a commit; an unreachable endpoint gives up within the retry budget."""

from __future__ import annotations

import http.client
import itertools
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from compaction.errors import StoreError
from compaction.store import Store, TopicPartition, Writer
from compaction.store import commit as protocol
from compaction.store.manifest import Manifest
from compaction.store.verify import verify
from tests.helpers.builders import keyed
from tests.helpers.faultproxy import Fault, FaultProxy, connections_accepted, fault_proxy
from tests.helpers.s3server import new_bucket, storage_options
from tests.helpers.stores import PauseClock, cleaning_change, seed_three_versions

pytestmark = pytest.mark.s3

BUDGET_MS = 10_000  # botocore makes 3 attempts within it
Operation = Callable[["Bench", TopicPartition], Callable[[], Manifest]]  # the commit to fault


@pytest.fixture(scope="module")
def proxy(s3_endpoint: str) -> Iterator[FaultProxy]:
    with fault_proxy(s3_endpoint) as running:
        yield running


@pytest.fixture(scope="module")
def bench(s3_endpoint: str, proxy: FaultProxy) -> Bench:
    return Bench(s3_endpoint, proxy)


class Bench:
    """A bucket opened directly (to set up and check) and through the proxy (to fault); one partition per case."""

    def __init__(self, s3_endpoint: str, proxy: FaultProxy) -> None:
        self.url = new_bucket(s3_endpoint)
        self.proxy = proxy
        self.direct = Store.open(self.url, storage_options(s3_endpoint))
        self.via = self.through_proxy(BUDGET_MS)
        self._partitions = itertools.count()
        self._lock = threading.Lock()

    def through_proxy(self, budget_ms: int) -> Store:
        return Store.open(self.url, {**storage_options(self.proxy.endpoint), "retry_budget_ms": budget_ms})

    def seeded(self) -> TopicPartition:
        """A new partition at version 3."""
        with self._lock:
            tp = TopicPartition("orders", next(self._partitions))
        seed_three_versions(self.direct, tp)
        return tp

    @staticmethod
    def requests_of(tp: TopicPartition) -> str:
        """A regex for the requests that touch ``tp`` (paths, and listings' URL-encoded prefixes)."""
        return f"/{tp.topic}(/|%2F){tp.partition}(/|%2F)"

    def seen(self, tp: TopicPartition, log: list[str]) -> list[str]:
        return [entry for entry in log if re.search(self.requests_of(tp), entry)]

    def content(self, tp: TopicPartition) -> list[tuple[int, bytes]]:
        return [(r["offset"], r["key"]) for r in self.direct.read(tp, columns=["offset", "key"]).to_pylist()]

    def assert_committed_once(
        self, tp: TopicPartition, result: Manifest, expected: list[tuple[int, bytes]], what: str
    ) -> None:
        assert self.direct.versions(tp) == [1, 2, 3, 4], f"{what}: exactly one new version"
        assert result.version == 4 and result.writer.commit_id == self.direct.manifest(tp).writer.commit_id, what
        assert [p for r in verify(self.direct, [tp]) for p in r.problems] == [], what
        assert self.content(tp) == expected, what


def _append(bench: Bench, tp: TopicPartition, via: Store | None = None) -> Callable[[], Manifest]:
    return lambda: (via or bench.via).append(tp, keyed("c=3 a=4"), now_ms=50)


def _clean(bench: Bench, tp: TopicPartition, via: Store | None = None) -> Callable[[], Manifest]:
    """A cleaner's commit: its new objects are written beforehand, only the commit goes through the proxy."""
    change = cleaning_change(bench.direct, tp)
    return lambda: (via or bench.via).replace(tp, change, writer=Writer(), now_ms=50)


@pytest.mark.parametrize("action", ["drop", "slowdown", "reset"])
@pytest.mark.parametrize("operation", [_append, _clean], ids=["append", "clean"])
def test_a_fault_at_any_call_of_a_commit_commits_exactly_once(
    bench: Bench, proxy: FaultProxy, operation: Operation, action: str
) -> None:
    probe = bench.seeded()
    commit = operation(bench, probe)
    proxy.clear()
    commit()
    calls, expected = bench.seen(probe, proxy.requests), bench.content(probe)
    assert any(c.startswith("PUT") and "_manifests/" in c for c in calls), calls

    def case(at: int) -> None:  # each case has its own partition, so the cases run side by side
        tp = bench.seeded()
        commit = operation(bench, tp)
        proxy.inject(Fault(action, at=at, path=bench.requests_of(tp)))  # type: ignore[arg-type]
        what = f"{action} at {calls[at]}"
        result = commit()
        assert bench.seen(tp, proxy.hits), f"{what}: the fault was never applied"
        bench.assert_committed_once(tp, result, expected, what)

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        list(pool.map(case, range(len(calls))))


@pytest.mark.parametrize("operation", [_append, _clean], ids=["append", "clean"])
def test_a_commit_whose_every_answer_is_lost_is_resolved_by_reading_it_back(
    bench: Bench, proxy: FaultProxy, operation: Operation
) -> None:
    tp = bench.seeded()
    commit = operation(bench, tp)
    proxy.clear()
    proxy.inject(Fault("drop", method="PUT", path="/_manifests/", times=3))  # every attempt botocore makes
    result = commit()
    assert len(proxy.hits) == 3, proxy.hits
    assert bench.direct.versions(tp) == [1, 2, 3, 4] and result.version == 4
    assert result.writer.commit_id == bench.direct.manifest(tp).writer.commit_id


def test_a_commit_that_never_reached_the_store_is_sent_again(bench: Bench, proxy: FaultProxy) -> None:
    tp = bench.seeded()
    commit = _append(bench, tp)
    proxy.clear()
    proxy.inject(Fault("reset", method="PUT", path="/_manifests/", times=3))  # botocore gives up
    result = commit()
    assert len(proxy.hits) == 3 and bench.direct.versions(tp) == [1, 2, 3, 4] and result.version == 4


def test_a_stalled_commit_that_lands_late_is_still_one_version(bench: Bench, proxy: FaultProxy) -> None:
    tp = bench.seeded()
    commit = _append(bench, tp, bench.through_proxy(6_000))  # two attempts, each with a read timeout of 1.7 s
    expected = [*bench.content(tp), (5, b"c"), (6, b"a")]
    proxy.clear()
    proxy.inject(Fault("stall", method="PUT", path="/_manifests/", stall_s=2.0))
    result = commit()
    assert proxy.wait_for_stalled(1), "the stalled PUT reaches the store in the end"
    assert len([r for r in proxy.requests if r.startswith("PUT") and "/_manifests/" in r]) >= 2, proxy.requests
    bench.assert_committed_once(tp, result, expected, "stalled manifest PUT")


def test_an_unknown_outcome_that_stays_unknown_fails_clearly_within_the_budget(
    bench: Bench, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit is sent again and read back until its pauses have spent the retry budget, and no longer (the
    protocol's clock moves by its pauses alone: no elapsed time decides)."""
    tp = bench.seeded()
    commit = _clean(bench, tp, bench.through_proxy(2_000))
    before = bench.content(tp)
    proxy.clear()
    proxy.inject(Fault("reset", path=r"/_manifests/0{19}4\.json", times=10**6))  # the PUT and every read-back
    clock = PauseClock()
    monkeypatch.setattr(protocol, "time", clock)
    with pytest.raises(StoreError, match=r"outcome of the commit of .*00000000000000000004\.json is unknown"):
        commit()
    assert sum(clock.pauses) == pytest.approx(2.0), clock.pauses
    assert len([r for r in proxy.requests if r.startswith("PUT") and "/_manifests/" in r]) >= len(clock.pauses) + 1 >= 2
    assert bench.direct.versions(tp) == [1, 2, 3] and bench.content(tp) == before


@pytest.fixture(params=["refused", "silent"])
def unreachable_endpoint(request: pytest.FixtureRequest) -> Iterator[tuple[str, socket.socket]]:
    """An endpoint that refuses connections, or one that accepts them and never answers (a lost server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        if request.param == "silent":
            sock.listen(64)  # the kernel completes handshakes; nobody ever reads
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", sock


@pytest.mark.parametrize("budget_ms", [1_500, 5_000])
def test_an_unreachable_endpoint_gives_up_within_the_retry_budget(
    unreachable_endpoint: tuple[str, socket.socket], budget_ms: int
) -> None:
    """botocore is held to the budget: its attempts, each within its connect and read timeouts, and the longest
    pauses between them add up to the budget at most; it makes exactly those attempts, then the store says in one
    line what happened (no elapsed time decides)."""
    endpoint, sock = unreachable_endpoint
    store = Store.open("s3://nightly-store", {**storage_options(endpoint), "retry_budget_ms": budget_ms})
    store.storage.fs.connect()  # the client is built first: loading botocore's models is not a network call
    config = store.storage.fs.s3.meta.config
    attempts = config.retries["total_max_attempts"]
    longest_pauses_s = 2 ** (attempts - 1) - 1  # botocore's jittered pauses: up to 1 s, then up to 2 s
    assert attempts * (config.connect_timeout + config.read_timeout) + longest_pauses_s <= budget_ms / 1000
    with pytest.raises(
        StoreError,
        match=f"cannot list s3://nightly-store: the endpoint {endpoint} "
        f"(cannot be reached|did not answer) .*; gave up within the retry budget",
    ):
        store.require_exists()
    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        assert connections_accepted(sock) == attempts


def test_a_delaying_proxy_adds_its_delay_to_every_request_and_serves_them_together(s3_endpoint: str) -> None:
    """Each request waits the delay (at least), and concurrent ones wait at the same time: held after their delay,
    every one of them is seen waiting at once, which requests served in turn never would be."""
    delay_s, in_flight = 0.4, 16

    def list_buckets(endpoint: str) -> float:
        host, port = endpoint.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        started = time.monotonic()
        try:
            connection.request("GET", "/")
            assert connection.getresponse().status == 200
        finally:
            connection.close()
        return time.monotonic() - started

    with fault_proxy(s3_endpoint, delay_s=delay_s) as slow:
        alone = list_buckets(slow.endpoint)
        slow.hold()
        with ThreadPoolExecutor(max_workers=in_flight) as pool:
            each = [pool.submit(list_buckets, slow.endpoint) for _ in range(in_flight)]
            together = slow.wait_for_waiting(in_flight)
            slow.release()
            assert together, f"{in_flight} requests in flight never waited at once: they were served in turn"
            assert min(f.result() for f in each) >= delay_s
        seen = len(slow.requests)
    assert alone >= delay_s
    assert seen == in_flight + 1
