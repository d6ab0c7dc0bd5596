"""The commit protocol (store/commit.py) where the store contract's tests do not reach it: a change's rebase rule and
what it carries over, a lost race, the version space's end, and a create whose outcome is not a plain answer."""

from __future__ import annotations

import hashlib
import random
import uuid
from typing import Any

import pytest

from compaction.errors import CommitConflictError, CorruptManifestError, StoreError
from compaction.store import Replacement, Store, TopicPartition, Writer
from compaction.store import commit as protocol
from compaction.store.commit import Erased, unchanged
from compaction.store.manifest import MAX_VERSION, ErasureRequest, HeldObject, Manifest
from compaction.store.segment import records
from tests.helpers.builders import keyed, rec
from tests.helpers.stores import PauseClock as Clock

TP = TopicPartition("t", 0)
WRITER = Writer(id="test", run_id="r")


@pytest.fixture
def store() -> Store:
    store = Store.open(f"memory://protocol-{uuid.uuid4().hex}")
    store.append(TP, keyed("a=1 b=2"), now_ms=1)
    store.append(TP, keyed("a=3"), now_ms=2)
    return store


def as_it_is(latest: Manifest | None) -> dict[str, Any]:
    """A change that changes nothing of the log (as an erasure request's progress is committed)."""
    assert latest is not None
    return unchanged(latest)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_a_replacement_moves_what_it_says_and_carries_over_the_rest(store: Store) -> None:
    latest = store.manifest(TP)
    first, second = latest.segments
    built = Replacement((first,), (), 0, 2, 0, 2).apply(latest, "t-0")
    assert built == {
        "log_start_offset": 2,
        "log_end_offset": 3,
        "last_stable_offset": 3,
        "first_dirty_offset": 2,
        "clean_keys_unique": False,
        "last_clean_ms": None,
        "next_horizon_ms": None,
        "open_transactions": {},
        "producers": (),
        "segments": (second,),
        "erasures": (),
    }
    cleaned = Replacement((), (), 0, 3, 0, 0, clean_keys_unique=True, last_clean_ms=5, next_horizon_ms=9)
    assert {
        k: v
        for k, v in cleaned.apply(latest, "t-0").items()
        if k in ("clean_keys_unique", "last_clean_ms", "next_horizon_ms")
    } == {"clean_keys_unique": True, "last_clean_ms": 5, "next_horizon_ms": 9}
    store.replace(TP, cleaned, writer=WRITER, now_ms=5)
    later = Replacement((), (), 3, 3, 0, 0).apply(store.manifest(TP), "t-0")  # says nothing of them: kept
    assert (later["clean_keys_unique"], later["last_clean_ms"], later["next_horizon_ms"]) == (True, 5, 9)


def test_the_producer_state_outlives_the_segments_a_replacement_removes_until_the_pass_finds_it_expired() -> None:
    """Kafka's producer state is the appends', whatever cleaning removed: a replacement carries it over, and drops a
    producer only where the pass found it expired and it has not written again since."""
    store = Store.open(f"memory://producers-{uuid.uuid4().hex}")
    for offset, producer in ((0, 7), (1, 8)):
        store.append(
            TP,
            records(
                [
                    {
                        **rec("k", "v"),
                        "offset": offset,
                        "timestamp": 100 * (offset + 1),
                        "producer_id": producer,
                        "producer_epoch": 0,
                    }
                ]
            ),
            now_ms=1,
        )
    latest = store.manifest(TP)
    assert [(p.producer_id, p.last_offset, p.max_timestamp) for p in latest.producers or ()] == [
        (7, 0, 100),
        (8, 1, 200),
    ]
    assert latest.expired_producers(150, now_ms=250) == ((7, 0),)  # 250 - 100 >= 150; 250 - 200 < 150
    first, _ = latest.segments
    store.replace(TP, Replacement((first,), (), 0, 1, 0, 1, expired_producers=((8, 0),)), writer=WRITER, now_ms=2)
    assert sorted(store.manifest(TP).producer_state) == [7, 8], "the removed segment's producer stays"
    store.append(
        TP, records([{**rec("k", "w"), "offset": 2, "timestamp": 300, "producer_id": 7, "producer_epoch": 0}]), now_ms=3
    )
    store.replace(TP, Replacement((), (), 1, 1, 1, 1, expired_producers=((7, 0), (8, 1))), writer=WRITER, now_ms=4)
    assert {pid: p.last_offset for pid, p in store.manifest(TP).producer_state.items()} == {7: 2}, (
        "producer 7 wrote again since the pass found it expired"
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            Replacement((), (), 1, 2, 0, 0),
            "partition t-0: manifest version 2 moved the checkpoint from 1 to 0: another cleaner ran",
        ),
        (Replacement((), (), 0, 2, 1, 1), "partition t-0: manifest version 2 moved the log start from 1 to 0"),
    ],
)
def test_a_replacement_that_no_longer_applies_is_a_conflict(store: Store, change: Replacement, problem: str) -> None:
    with pytest.raises(CommitConflictError) as raised:
        change.apply(store.manifest(TP), "t-0")
    assert str(raised.value) == problem


def test_a_replacement_needs_a_manifest_and_its_segments_live_and_unchanged(store: Store) -> None:
    latest = store.manifest(TP)
    with pytest.raises(CommitConflictError, match=r"^partition t-0 has no manifest to replace segments in$"):
        Replacement((), (), 0, 0, 0, 0).apply(None, "t-0")
    changed = latest.segments[0].model_copy(update={"size_bytes": 1})
    with pytest.raises(
        CommitConflictError,
        match=f"^segment t-0/{changed.path} is no longer live and unchanged in "
        "manifest version 2: another writer replaced it$",
    ):
        Replacement((changed,), (), 0, 0, 0, 0).apply(latest, "t-0")


def request(key: str, offset: int, **fields: Any) -> ErasureRequest:
    return ErasureRequest(key_sha256=digest(key), tombstone_offset=offset, requested_ms=1, deadline_ms=100, **fields)


def test_the_erasures_a_replacement_carries_out_are_marked_rewritten_in_the_version_it_builds(store: Store) -> None:
    done_before = request("c", 0, rewritten_ms=3, rewritten_version=2)
    latest = store.manifest(TP).model_copy(update={"erasures": (request("a", 2), request("b", 1), done_before)})
    change = Replacement(
        (),
        (),
        0,
        0,
        0,
        0,
        erased=(Erased(digest("a"), 2, ("segments/x.parquet",)), Erased(digest("c"), 0, ("segments/y.parquet",))),
        time_ms=7,
    )
    a, b, c = change.apply(latest, "t-0")["erasures"]
    assert a == request(
        "a", 2, rewritten_ms=7, rewritten_version=3, held=(HeldObject(path="segments/x.parquet", found_ms=7),)
    )
    assert (b, c) == (request("b", 1), done_before), "one it did not carry out, and one already rewritten"
    assert Replacement((), (), 0, 0, 0, 0).apply(latest, "t-0")["erasures"] == latest.erasures
    with pytest.raises(ValueError, match=r"^a replacement that carries out erasure requests needs their time$"):
        Replacement((), (), 0, 0, 0, 0, erased=change.erased).apply(latest, "t-0")


def test_an_unchanged_state_is_the_log_as_it_is(store: Store) -> None:
    latest = store.manifest(TP)
    state = unchanged(latest)
    assert set(state) == {
        "log_start_offset",
        "log_end_offset",
        "last_stable_offset",
        "first_dirty_offset",
        "clean_keys_unique",
        "last_clean_ms",
        "next_horizon_ms",
        "open_transactions",
        "producers",
        "segments",
        "erasures",
        "streams",
    }
    committed = store.commit(TP, as_it_is, writer=WRITER, operation="erasure", now_ms=3)
    assert committed.model_dump(exclude={"version", "writer"}) == latest.model_dump(exclude={"version", "writer"})


def test_a_writer_that_loses_the_race_rebuilds_on_the_version_that_won(store: Store) -> None:
    seen: list[int] = []

    def build(latest: Any) -> dict[str, Any]:
        seen.append(latest.version)
        if len(seen) == 1:  # another writer commits versions 3 and 4 while this one builds on 2
            store.append(TP, keyed("x=1"), now_ms=3)
            store.append(TP, keyed("y=1"), now_ms=3)
        return unchanged(latest)

    committed = store.commit(TP, build, writer=WRITER, operation="erasure", now_ms=4)
    assert (seen, committed.version, store.versions(TP)) == ([2, 4], 5, [1, 2, 3, 4, 5])
    assert committed.log_end_offset == 5


def test_a_writer_that_lost_reads_the_versions_after_the_winner_not_a_listing_that_lags(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object store's listing may not show a version created a moment ago: the version a writer lost to is
    known, and it probes the ones after it."""
    listed = store.storage.list_dir
    monkeypatch.setattr(
        store.storage,
        "list_dir",
        lambda rel, detail=True: [e for e in listed(rel, detail) if not e.name.endswith("00000000000000000003.json")],
    )
    store.commit(TP, as_it_is, writer=Writer(id="other"), operation="erasure", now_ms=3)  # version 3: not listed
    committed = store.commit(TP, as_it_is, writer=WRITER, operation="erasure", now_ms=4)
    assert (committed.version, committed.writer.id) == (4, "test")
    assert protocol.read_manifest(store.storage, TP, 3).writer.id == "other"


def test_a_writer_gives_up_after_its_attempts_all_lose(store: Store) -> None:
    def build(latest: Any) -> dict[str, Any]:
        store.append(TP, keyed("x=1"), now_ms=3)  # every time, someone else wins
        return unchanged(latest)

    with pytest.raises(
        CommitConflictError,
        match=r"^partition t-0: gave up after 3 commit attempts lost to concurrent "
        r"writers$",
    ):
        protocol.commit(
            store.storage, TP, build, writer=WRITER, operation="erasure", now_ms=3, max_attempts=3, rng=random.Random(0)
        )
    assert store.versions(TP) == [1, 2, 3, 4, 5]


def test_a_partition_at_the_last_version_a_name_holds_takes_no_more_commits(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    at_end = store.manifest(TP).model_copy(update={"version": MAX_VERSION})
    monkeypatch.setattr(protocol, "newest_manifest", lambda storage, tp: at_end)
    built: list[Manifest | None] = []

    def build(latest: Manifest | None) -> dict[str, Any]:
        built.append(latest)
        return as_it_is(latest)

    with pytest.raises(
        StoreError,
        match=rf"^partition {store.storage.describe(TP.prefix)} is at manifest version "
        rf"{MAX_VERSION}, the last a 20-digit manifest name holds",
    ):
        protocol.commit(store.storage, TP, build, writer=WRITER, operation="erasure", now_ms=3)
    assert built == [], "refused before the change is built (it may write objects)"


class Flaky:
    """``create_exclusive`` of a store, wrapped: ``fail`` times it raises, having written the object or not."""

    def __init__(self, store: Store, fail: int, lands: bool, certain: bool) -> None:
        self.storage, self.fail, self.lands = store.storage, fail, lands
        self.create = store.storage.create_exclusive
        self.calls = 0
        store.storage.calls_fail_whole = certain
        store.storage.create_exclusive = self  # type: ignore[method-assign]

    def __call__(self, rel: str, data: bytes) -> bool:
        self.calls += 1
        if self.calls > self.fail:
            return self.create(rel, data)
        if self.lands:
            self.create(rel, data)
        raise OSError("connection reset")


def test_a_create_that_failed_after_landing_is_ours_when_read_back(store: Store) -> None:
    flaky = Flaky(store, fail=1, lands=True, certain=True)
    committed = store.commit(TP, as_it_is, writer=WRITER, operation="erasure", now_ms=3)
    assert (flaky.calls, committed.version, store.versions(TP)) == (1, 3, [1, 2, 3])
    assert store.manifest(TP).writer.commit_id == committed.writer.commit_id


def test_a_create_that_certainly_failed_is_a_plain_failure(store: Store) -> None:
    flaky = Flaky(store, fail=1, lands=False, certain=True)
    with pytest.raises(OSError, match="connection reset"):
        store.commit(TP, as_it_is, writer=WRITER, operation="erasure", now_ms=3)
    assert (flaky.calls, store.versions(TP)) == (1, [1, 2])


def test_a_create_whose_outcome_is_unknown_is_sent_again_until_it_lands(store: Store) -> None:
    flaky = Flaky(store, fail=2, lands=False, certain=False)
    committed = store.commit(TP, as_it_is, writer=WRITER, operation="erasure", now_ms=3)
    assert (flaky.calls, committed.version, store.versions(TP)) == (3, 3, [1, 2, 3])


def test_an_outcome_that_stays_unknown_past_the_retry_budget_says_which_versions_readers_may_see(store: Store) -> None:
    Flaky(store, fail=10**6, lands=False, certain=False)
    store.storage.retry_budget_ms = 0
    with pytest.raises(StoreError) as raised:
        store.commit(TP, as_it_is, writer=WRITER, operation="erasure", now_ms=3)
    message = str(raised.value)
    assert message.startswith("the outcome of the commit of ") and "00000000000000000003.json is unknown" in message
    assert message.endswith("within the retry budget of 0 s (connection reset); readers see version 2 or 3")
    assert store.versions(TP) == [1, 2]


def test_a_version_that_reads_back_corrupt_is_not_taken_for_anyones(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky = Flaky(store, fail=1, lands=False, certain=False)
    next_version = store.manifest(TP).model_copy(update={"version": 3})

    def corrupt(storage: Any, tp: TopicPartition, version: int | None = None) -> Any:
        assert version == 3
        raise CorruptManifestError("manifest t/0/_manifests/00000000000000000003.json is not valid JSON")

    monkeypatch.setattr(protocol, "read_manifest", corrupt)
    with pytest.raises(CorruptManifestError, match="not valid JSON"):
        protocol._publish(store.storage, TP, next_version, random.Random(0))
    assert flaky.calls == 1, "not sent again"


def test_what_a_change_does_not_set_carries_over_from_the_version_before(store: Store) -> None:
    done = request("c", 0, rewritten_ms=3, rewritten_version=2)
    store.commit(
        TP,
        lambda latest: {
            **as_it_is(latest),
            "clean_keys_unique": True,
            "last_clean_ms": 5,
            "next_horizon_ms": 9,
            "erasures": (done,),
            "streams": {"query-1": 7},
        },
        writer=WRITER,
        operation="clean",
        now_ms=5,
    )
    log_only = (
        "log_start_offset",
        "log_end_offset",
        "last_stable_offset",
        "first_dirty_offset",
        "open_transactions",
        "segments",
    )
    committed = store.commit(
        TP,
        lambda latest: {k: v for k, v in as_it_is(latest).items() if k in log_only},
        writer=WRITER,
        operation="append",
        now_ms=6,
    )
    assert (
        committed.clean_keys_unique,
        committed.last_clean_ms,
        committed.next_horizon_ms,
        committed.erasures,
        committed.streams,
    ) == (True, 5, 9, (done,), {"query-1": 7})


class Highest(random.Random):
    """Jitter that always draws the top of its range, and says which ranges it was asked for."""

    def __init__(self) -> None:
        super().__init__(0)
        self.ranges: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.ranges.append((a, b))
        return b


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(protocol, "time", fake)
    return fake


def test_a_writer_that_keeps_losing_backs_off_exponentially_up_to_half_a_second(store: Store, clock: Clock) -> None:
    def build(latest: Manifest | None) -> dict[str, Any]:
        store.append(TP, keyed("x=1"), now_ms=3)
        return as_it_is(latest)

    rng = Highest()
    with pytest.raises(CommitConflictError):
        protocol.commit(store.storage, TP, build, writer=WRITER, operation="erasure", now_ms=3, max_attempts=9, rng=rng)
    assert rng.ranges == [(0, 0.005 * 2**n) for n in range(7)] + [(0, 0.5)] * 2
    assert clock.pauses == [0.005 * 2**n for n in range(7)] + [0.5] * 2


def test_an_unknown_outcome_is_sent_again_after_growing_pauses_until_the_budget_is_spent(
    store: Store, clock: Clock
) -> None:
    Flaky(store, fail=10**6, lands=False, certain=False)
    store.storage.retry_budget_ms = 1000
    rng = Highest()
    with pytest.raises(StoreError, match=r"retry budget of 1 s \(connection reset\)"):
        protocol._publish(store.storage, TP, store.manifest(TP).model_copy(update={"version": 3}), rng)
    # 0.05 s doubling, up to what is left of the second: then the outcome is reported unknown, on the deadline
    assert rng.ranges == [(0, 0.05), (0, 0.1), (0, 0.2), (0, 0.4), (0, 0.8)]
    assert clock.pauses == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.25])
    assert clock.now == pytest.approx(1001.0)


def test_long_pauses_are_capped_at_two_seconds(store: Store, clock: Clock) -> None:
    Flaky(store, fail=10**6, lands=False, certain=False)
    store.storage.retry_budget_ms = 10_000
    rng = Highest()
    with pytest.raises(StoreError, match="retry budget of 10 s"):
        protocol._publish(store.storage, TP, store.manifest(TP).model_copy(update={"version": 3}), rng)
    assert [b for _, b in rng.ranges] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0, 2.0]
    assert sum(clock.pauses) == pytest.approx(10.0)


def test_a_create_refused_for_a_version_that_is_not_there_is_an_unknown_outcome(store: Store, clock: Clock) -> None:
    store.storage.create_exclusive = lambda rel, data: False  # type: ignore[method-assign]
    store.storage.retry_budget_ms = 0
    with pytest.raises(StoreError, match=r"\(refused, yet absent when read back\); readers see version 2 or 3$"):
        protocol._publish(store.storage, TP, store.manifest(TP).model_copy(update={"version": 3}), Highest())


def test_the_last_error_reading_back_is_the_one_reported(
    store: Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    Flaky(store, fail=10**6, lands=False, certain=False)
    store.storage.retry_budget_ms = 0
    next_version = store.manifest(TP).model_copy(update={"version": 3})

    def unreadable(storage: Any, tp: TopicPartition, version: int | None = None) -> Any:
        raise OSError("read timed out")

    monkeypatch.setattr(protocol, "read_manifest", unreadable)
    with pytest.raises(StoreError, match=r"\(read timed out\); readers see version 2 or 3$"):
        protocol._publish(store.storage, TP, next_version, Highest())


def test_a_manifest_that_names_another_version_or_is_not_json_is_corrupt(store: Store) -> None:
    where = store.storage.describe(f"{TP.prefix}/_manifests/00000000000000000009.json")
    store.storage.write_bytes(f"{TP.prefix}/_manifests/00000000000000000009.json", store.manifest(TP, 2).to_json())
    with pytest.raises(
        CorruptManifestError,
        match=rf"^manifest {where} describes t-0 version 2, expected t-0 version "
        r"9$",
    ):
        protocol.read_manifest(store.storage, TP, 9)
    store.storage.write_bytes(f"{TP.prefix}/_manifests/00000000000000000009.json", b"{")
    with pytest.raises(CorruptManifestError, match=rf"^manifest {where} is not valid JSON"):
        protocol.read_manifest(store.storage, TP, 9)
