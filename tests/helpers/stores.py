"""A store seen and changed from outside: every object it holds, byte for byte (to show that a refused change
changed nothing), bytes changed behind its back, and the small log and clean-pass change that the crash and fault
tests commit, and a clock for the commit protocol that moves by its pauses alone."""

from __future__ import annotations

import pyarrow as pa

from compaction.store import Replacement, Store, TopicPartition
from tests.helpers.builders import keyed, rec, table


def snapshot(store: Store) -> dict[str, bytes]:
    fs = store.storage.fs
    return {path: fs.cat_file(path) for path in fs.find(store.storage.root)}


def tamper(store: Store, rel: str) -> None:
    """Change an object's bytes without changing its size or making it undecodable (the footer's writer name)."""
    data = store.storage.fs.cat_file(store.storage.path(rel))
    assert b"parquet-cpp-arrow" in data
    store.storage.fs.pipe_file(store.storage.path(rel), data.replace(b"parquet-cpp-arrow", b"parquet-cpp-arroW"))


def seed_three_versions(store: Store, tp: TopicPartition) -> None:
    """Three appends to ``tp`` (versions 1 to 3): ``a=1 b=2``, ``a=3`` and ``x=9 y=8``, offsets 0 to 4."""
    store.append(tp, keyed("a=1 b=2"), now_ms=1)
    store.append(tp, keyed("a=3"), now_ms=2)
    store.append(tp, keyed("x=9 y=8"), now_ms=3)


def cleaning_change(store: Store, tp: TopicPartition) -> Replacement:
    """What a clean pass of :func:`seed_three_versions`' log commits: its first two segments merged into one (``b=2``
    and ``a=3`` left), offset 3 deleted from the third by a deletion vector, the checkpoint moved to 5. Its objects
    are written here; the change is not committed."""
    base = store.manifest(tp)
    merged = store.objects.write_segment(tp, table(rec("b", "2", 1), rec("a", "3", 2)), 0, 3, created_ms=50)
    kept = base.segments[2]
    vector = store.objects.write_deletes(tp, kept, pa.array([3]), created_ms=50, live_min_delete_horizon_ms=None)
    return Replacement(
        removed=(*base.segments[:2], kept),
        added=(merged, kept.model_copy(update={"deletes": vector})),
        expected_first_dirty_offset=base.first_dirty_offset,
        first_dirty_offset=5,
        expected_log_start_offset=base.log_start_offset,
        log_start_offset=base.log_start_offset,
    )


class RecordingStorage:
    """Wraps a store's storage and records every filesystem call as (operation, relative path)."""

    def __init__(self, store: Store) -> None:
        self.calls: list[tuple[str, str]] = []
        storage = store.storage
        original = storage._call

        def record(op, rel, fn):
            self.calls.append((op, rel))
            return original(op, rel, fn)

        storage._call = record  # type: ignore[method-assign]


class PauseClock:
    """time.monotonic and time.sleep for the commit protocol (``compaction.store.commit.time``): the clock moves
    only by the pauses it takes, which it records (and a run of pauses that does not end is a failure, not a
    hang)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.pauses: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert len(self.pauses) < 50, f"no end to the pauses: {self.pauses[:10]}..."
        self.pauses.append(seconds)
        self.now += seconds
