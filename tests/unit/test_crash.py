"""A crash at any filesystem call of a commit leaves the old or the new version; gc removes the debris."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from compaction.store import Store, TopicPartition, Writer
from compaction.store.gc import collect_garbage
from compaction.store.manifest import MANIFEST_DIR, SEGMENT_DIR
from compaction.store.storage import Storage
from compaction.store.verify import verify
from tests.helpers.builders import keyed
from tests.helpers.stores import cleaning_change, seed_three_versions

TP = TopicPartition("orders", 0)


class Crash(BaseException):
    """The simulated death of the writing process (a BaseException, so no handler can swallow it)."""


class CrashingStorage(Storage):
    """Performs filesystem calls until call number ``at``; dies before or after it; every later call fails."""

    def __init__(self, inner: Storage, at: int, after: bool) -> None:
        super().__init__(inner.fs, inner.root, inner.url, inner.storage_options)
        self.at, self.after, self.dead = at, after, False
        self.calls: list[str] = []

    def _call(self, op: str, rel: str, fn: Callable[[], Any]) -> Any:
        if self.dead:
            raise Crash(f"already dead at {op} {rel}")
        index = len(self.calls)
        self.calls.append(f"{op} {rel}")
        if index == self.at and not self.after:
            self.dead = True
            raise Crash(f"before {op} {rel}")
        result = fn()
        if index == self.at:
            self.dead = True
            raise Crash(f"after {op} {rel}")
        return result


def _append(store: Store) -> None:
    store.append(TP, keyed("c=3 a=4"), now_ms=50)


def _clean(store: Store) -> None:
    store.replace(TP, cleaning_change(store, TP), writer=Writer(), now_ms=50)


def _content(store: Store) -> list[tuple[int, bytes]]:
    return [(r["offset"], r["key"]) for r in store.read(TP, columns=["offset", "key"]).to_pylist()]


@pytest.mark.parametrize("operation", [_append, _clean], ids=["append", "clean"])
def test_crash_at_every_step_leaves_old_or_new_version(store_factory, backend: str, operation) -> None:
    reference = store_factory(backend)
    seed_three_versions(reference, TP)
    before = _content(reference)
    probe = CrashingStorage(reference.storage, at=10**9, after=False)
    operation(Store(probe))
    after = _content(reference)
    steps = len(probe.calls)
    assert steps >= 4, probe.calls

    for at in range(steps):
        for crash_after in (False, True):
            store = store_factory(backend)
            seed_three_versions(store, TP)
            with pytest.raises(Crash):
                operation(Store(CrashingStorage(store.storage, at, crash_after)))
            state = _content(store)
            assert state in (before, after), f"crash {'after' if crash_after else 'before'} {probe.calls[at]}"
            assert store.manifest(TP).version in (3, 4)
            problems = [p for r in verify(store, [TP]) for p in r.problems]
            assert problems == [], problems

            collect_garbage(store, TP, wall_ms=10**13, grace_ms=0, keep_versions=1)
            manifest = store.manifest(TP)
            live = {s.path.split("/")[-1] for s in manifest.segments}
            live |= {s.deletes.path.split("/")[-1] for s in manifest.segments if s.deletes}
            assert {e.name for e in store.storage.list_dir(f"{TP.prefix}/{SEGMENT_DIR}")} == live
            assert [e.name for e in store.storage.list_dir(f"{TP.prefix}/{MANIFEST_DIR}")] == [
                f"{manifest.version:020d}.json"
            ]
            assert _content(store) == state
