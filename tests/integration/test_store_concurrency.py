"""Concurrent writers: exactly one publishes each version, the others rebase; nothing is lost."""

from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor

import pytest

from compaction.store import Store, TopicPartition, Writer
from compaction.store.verify import verify
from tests.helpers.builders import keyed

TP = TopicPartition("events", 0)
WRITERS = 8
APPENDS = 25


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_concurrent_appenders_lose_nothing(store_factory, backend: str) -> None:
    store: Store = store_factory(backend)

    def appender(writer: int) -> list[int]:
        own = Store.open(store.url, store.storage.storage_options)  # each writer has its own client
        versions = []
        for i in range(APPENDS):
            records = keyed(f"w{writer}-{i}a=x w{writer}-{i}b=y")
            versions.append(own.append(TP, records, now_ms=i, writer=Writer(id=f"w{writer}")).version)
        return versions

    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        published = [v for versions in pool.map(appender, range(WRITERS)) for v in versions]

    assert sorted(published) == list(range(1, WRITERS * APPENDS + 1)), "each version has exactly one writer"
    keys = store.read(TP, columns=["key"]).column("key").to_pylist()
    counts = collections.Counter(keys)
    expected = {f"w{w}-{i}{s}".encode() for w in range(WRITERS) for i in range(APPENDS) for s in "ab"}
    assert set(counts) == expected
    assert set(counts.values()) == {1}, "every appended record is readable exactly once"
    assert store.read(TP, columns=["offset"]).column("offset").to_pylist() == list(range(2 * WRITERS * APPENDS))
    reports = verify(store, [TP])
    assert [p for r in reports for p in r.problems] == []
