"""Concurrency end to end on S3: two cleaners on one partition, ``forget`` and ``gc`` landing between a pass's plan
and its commit, and appends in between, all on moto's threaded server, whose conditional PUT (``If-None-Match: *``)
is the only thing that makes a commit atomic (nothing else is serialised).

A pass is held at its commit (its objects written, its change built on the version it planned on) while the other
party acts; then it commits. Each case ends with ``verify`` clean, every key's newest record as it was last written
(nothing lost, nothing come back), and, once gc has collected what no version needs, no object holding a value an
erasure request erased (``attest``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from compaction import __version__
from compaction.clean import cleaner, commit
from compaction.clean.cleaner import Cleaner
from compaction.clean.results import RunReport
from compaction.erasure import attest, request_erasure
from compaction.store import Store, TopicPartition
from compaction.store.gc import collect_store
from compaction.store.verify import verify
from tests.helpers.builders import keyed
from tests.helpers.inline import InlineSession
from tests.helpers.s3server import age_objects, new_bucket, s3_server_here, storage_options
from tests.helpers.settings import settings_with

pytestmark = [pytest.mark.s3, pytest.mark.slow]

TP = TopicPartition("orders", 0)
NOW = 1_767_225_600_000  # the passes' --now (2026-01-01); gc's grace is on the real wall clock
HOUR = 3_600_000
DAY = 24 * HOUR
SETTINGS = settings_with(
    {
        "log.cleanup.policy": "compact",
        "log.cleaner.min.cleanable.ratio": 0.0,
        "log.cleaner.delete.retention.ms": DAY,
        "cleaner": {"deletion.vector.max.ratio": 0},
    }
)
#: Appends, one segment each: key=value, ``-`` a tombstone (``builders.keyed``).
HISTORY = ["alice=1 bob=1 carol=1", "alice=2 dave=1", "bob=- carol=2", "erin=1 alice=3", "dave=2 frank=1"]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """moto's threaded server in this process (so that a test can age what it holds)."""
    with s3_server_here() as url:
        yield url


@pytest.fixture
def bucket(endpoint: str) -> str:
    return new_bucket(endpoint)


class Written:
    """The partition's history as written: each key's last record (None: a tombstone), and the keys forgotten."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.last: dict[str, str | None] = {}
        self.forgotten: list[str] = []

    def append(self, pairs: str, now: int = NOW) -> None:
        self.store.append(TP, keyed(pairs), now_ms=now)
        for item in pairs.split():
            key, _, value = item.partition("=")
            self.last[key] = None if value == "-" else value

    def forget(self, key: str, now: int = NOW) -> None:
        request_erasure(self.store, TP, [key.encode()], now_ms=now, deadline_ms=now + DAY)
        self.last[key] = None
        self.forgotten.append(key)

    def check(self, endpoint: str, bucket: str) -> None:
        """verify clean, each key's newest live record as last written; then, gc having collected all it may (its
        grace passed, as it would be the next day), verify clean still and no object holding an erased value."""
        assert [p for r in verify(self.store) for p in r.problems] == []
        assert self.newest() == self.last, "every key's newest record is the one last written"
        _, failures = collect_store(
            self.store,
            [TP],
            wall_ms=int(time.time() * 1000) + DAY,
            grace_ms=HOUR,
            erasure_grace_ms=HOUR,
            keep_versions=1,
        )
        assert not failures
        assert [p for r in verify(self.store) for p in r.problems] == []
        assert self.newest() == self.last
        for key in self.forgotten:
            proof = attest(
                self.store, TP.topic, key.encode(), wall_ms=int(time.time() * 1000), program_version=__version__
            )
            assert proof.passed, proof.problems

    def newest(self) -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        for r in self.store.read(TP).to_pylist():
            if r["key"] is not None and not r["is_control"]:
                found[r["key"].decode()] = None if r["value"] is None else r["value"].decode()
        return found


def history(store: Store, forget: str | None = "alice") -> Written:
    written = Written(store)
    for pairs in HISTORY:
        written.append(pairs)
    if forget is not None:
        written.forget(forget)
    written.append("grace=1")  # the active segment
    return written


def client(bucket: str, endpoint: str) -> Store:
    """A store client of its own, as another process would open it."""
    return Store.open(bucket, storage_options(endpoint))


class Held:
    """Every pass's commit waits until ``passes`` passes have reached theirs and the test, having done what it
    does in between, lets them go (bounded waits: a pass that never gets there fails the test, not hangs it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, passes: int) -> None:
        self.reached = threading.Barrier(passes + 1)
        self.go = threading.Event()
        done_cleaning = commit.done_cleaning  # what the cleaner calls, by its name there

        def held(*args: Any, **kwargs: Any) -> Any:
            self.reached.wait(120)
            assert self.go.wait(120), "the test never let the commit go"
            return done_cleaning(*args, **kwargs)

        monkeypatch.setattr(cleaner, "done_cleaning", held)

    def meanwhile(self, act: Callable[[], None]) -> None:
        """Once every pass waits at its commit: ``act``, then let them commit."""
        self.reached.wait(120)
        try:
            act()
        finally:
            self.go.set()


def passes(stores: list[Store], now: int = NOW) -> Callable[[], list[RunReport]]:
    """Start one pass per store client, each in a thread of its own; returns what waits for their reports."""
    pool = ThreadPoolExecutor(max_workers=len(stores))
    running = [pool.submit(Cleaner(InlineSession(), store, SETTINGS).run, now) for store in stores]
    pool.shutdown(wait=False)
    return lambda: [future.result(timeout=300) for future in running]


def test_two_cleaners_on_one_partition_commit_once_and_the_other_gives_up_cleanly(
    bucket: str, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both plan the same version and write their objects; an append lands; both then commit at once. The
    conditional PUT lets one version through: one pass commits (rebased over the append), the other finds its
    segments replaced and gives up, its objects garbage."""
    written = history(client(bucket, endpoint))
    held = Held(monkeypatch, passes=2)
    reports = passes([client(bucket, endpoint), client(bucket, endpoint)])
    held.meanwhile(lambda: written.append("bob=3 henry=1"))
    outcomes = sorted((r.status, r.error or "") for report in reports() for r in report.partitions)
    assert [status for status, _ in outcomes] == ["cleaned", "failed"], outcomes
    assert "another writer replaced it" in outcomes[1][1] or "another cleaner ran" in outcomes[1][1], outcomes
    manifest = written.store.manifest(TP)
    assert manifest.writer.operation == "clean" and manifest.first_dirty_offset > 0
    assert [r.state for r in manifest.erasures] == ["rewritten"]
    written.check(endpoint, bucket)


def test_a_forget_between_a_pass_plan_and_its_commit_waits_for_the_next_pass(
    bucket: str, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass planned before the request existed: it commits rebased over the request's tombstone, which it did
    not cover, and leaves the request pending; the next pass carries it out."""
    written = history(client(bucket, endpoint), forget=None)
    held = Held(monkeypatch, passes=1)
    reports = passes([client(bucket, endpoint)])
    held.meanwhile(lambda: written.forget("alice", now=NOW + 1))
    assert [r.status for report in reports() for r in report.partitions] == ["cleaned"]
    assert [r.state for r in written.store.manifest(TP).erasures] == ["pending"]
    assert written.newest()["alice"] is None, "the tombstone is the key's newest record"
    monkeypatch.undo()
    report = Cleaner(InlineSession(), client(bucket, endpoint), SETTINGS).run(NOW + 2)
    assert [r.status for r in report.partitions] == ["cleaned"]
    assert [r.state for r in written.store.manifest(TP).erasures] == ["rewritten"]
    written.check(endpoint, bucket)


def test_gc_during_a_pass_collects_what_is_past_its_grace_and_never_the_pass_objects(
    bucket: str, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier pass left superseded objects; everything written so far is made two hours old. gc, with an hour's
    grace, runs while the next pass holds its new objects uncommitted: it removes the superseded objects and
    versions, keeps the version the pass planned on and the pass's own objects; the pass then commits."""
    store = client(bucket, endpoint)
    written = history(store)
    first = Cleaner(InlineSession(), store, SETTINGS).run(NOW)
    assert [r.status for r in first.partitions] == ["cleaned"]
    written.append("carol=3 ivan=1")
    written.append("judy=1")
    before = {s.path for v in store.versions(TP) for s in store.manifest(TP, v).segments}
    planned = store.manifest(TP)
    assert age_objects(bucket, 2 * 3600) > 0
    held = Held(monkeypatch, passes=1)
    reports = passes([client(bucket, endpoint)], now=NOW + 1)
    collected: list[str] = []

    def gc() -> None:
        results, failures = collect_store(
            client(bucket, endpoint), [TP], wall_ms=int(time.time() * 1000), grace_ms=HOUR, keep_versions=1
        )
        assert not failures
        collected.extend(path for r in results for path in r.deleted_objects)

    held.meanwhile(gc)
    assert [r.status for report in reports() for r in report.partitions] == ["cleaned"]
    live = {s.path for s in planned.segments}
    assert {path for path in collected if path.startswith("segments/")} == before - live != set(), (
        "gc removed exactly the objects only older versions named"
    )
    assert store.versions(TP)[0] == planned.version, "the version the pass planned on stays"
    written.check(endpoint, bucket)
