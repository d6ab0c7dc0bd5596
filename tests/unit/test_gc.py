"""gc deletes only unreferenced objects of the partition, only after the grace period."""

from __future__ import annotations

import time
from typing import cast

from compaction.store import Replacement, Store, TopicPartition, Writer
from compaction.store.gc import collect_garbage
from compaction.store.manifest import MANIFEST_DIR, SEGMENT_DIR
from tests.helpers.builders import keyed, rec, table

TP = TopicPartition("orders", 0)
HOUR = 3_600_000
T0 = int(time.time() * 1000)  # objects' mtimes come from the real clock, so test times start from it


def _names(store: Store, tp: TopicPartition = TP, folder: str = SEGMENT_DIR) -> set[str]:
    return {e.name for e in store.storage.list_dir(f"{tp.prefix}/{folder}")}


def _clean_once(store: Store, now_ms: int) -> tuple[str, str]:
    base = store.manifest(TP)
    new = store.objects.write_segment(TP, table(rec("a", "2", 1)), 0, 2, created_ms=now_ms)
    store.replace(
        TP,
        Replacement(base.segments, (new,), base.first_dirty_offset, 2, base.log_start_offset, base.log_start_offset),
        writer=Writer(),
        now_ms=now_ms,
    )
    return base.segments[0].path.split("/")[-1], new.path.split("/")[-1]


def _written(store: Store, version: int) -> int:
    """When a manifest version was written, by the store's clock (its object's modification time)."""
    return next(
        e.mtime_ms for e in store.storage.list_dir(f"{TP.prefix}/{MANIFEST_DIR}") if e.name == f"{version:020d}.json"
    )  # type: ignore[return-value]


def test_replaced_segment_survives_until_its_version_is_pruned_after_the_grace(local_store: Store) -> None:
    local_store.append(TP, keyed("a=1 a=2"), now_ms=T0)
    old, new = _clean_once(local_store, now_ms=T0 + HOUR)
    superseded = _written(local_store, 2)

    result = collect_garbage(local_store, TP, wall_ms=superseded + HOUR - 1, grace_ms=HOUR, keep_versions=1)
    assert result.deleted_objects == [] and result.pruned_versions == []
    assert _names(local_store) == {old, new}

    result = collect_garbage(local_store, TP, wall_ms=superseded + HOUR + 1, grace_ms=HOUR, keep_versions=1)
    assert result.pruned_versions == [1]
    assert result.deleted_objects == [f"{SEGMENT_DIR}/{old}"]
    assert _names(local_store) == {new}
    assert local_store.versions(TP) == [2]


def test_keep_versions_protects_recent_versions_and_their_objects(local_store: Store) -> None:
    local_store.append(TP, keyed("a=1 a=2"), now_ms=T0)
    old, _ = _clean_once(local_store, now_ms=T0 + HOUR)
    result = collect_garbage(local_store, TP, wall_ms=T0 + 100 * HOUR, grace_ms=HOUR, keep_versions=2)
    assert result.deleted_objects == [] and result.pruned_versions == []
    assert old in _names(local_store)


def test_orphans_wait_for_the_grace_period_and_unknown_files_are_left_alone(local_store: Store) -> None:
    local_store.append(TP, keyed("a=1"), now_ms=0)
    orphan = local_store.objects.write_segment(TP, keyed("b=1", start=1), 1, 2, created_ms=0)  # a crashed writer
    local_store.storage.write_bytes(f"{TP.prefix}/{SEGMENT_DIR}/notes.txt", b"mine")
    entries = local_store.storage.list_dir(f"{TP.prefix}/{SEGMENT_DIR}")
    mtime = cast(int, next(e.mtime_ms for e in entries if orphan.path.endswith(e.name)))

    result = collect_garbage(local_store, TP, wall_ms=mtime + HOUR - 1, grace_ms=HOUR)
    assert result.deleted_objects == [] and result.waiting_objects == 1
    result = collect_garbage(local_store, TP, wall_ms=mtime + HOUR + 1, grace_ms=HOUR)
    assert result.deleted_objects == [orphan.path]
    assert result.unknown_objects == [f"{SEGMENT_DIR}/notes.txt"]
    assert "notes.txt" in _names(local_store)


def test_gc_stays_inside_the_partition_prefix(local_store: Store) -> None:
    other = TopicPartition("orders", 1)
    local_store.append(TP, keyed("a=1"), now_ms=0)
    local_store.objects.write_segment(other, keyed("b=1"), 0, 1, created_ms=0)  # orphan of another partition
    local_store.storage.write_bytes("orders/stray.parquet", b"x")
    before = _names(local_store, other)
    collect_garbage(local_store, TP, wall_ms=10**13, grace_ms=0)
    assert _names(local_store, other) == before
    assert local_store.storage.exists("orders/stray.parquet")


def test_dry_run_deletes_nothing(local_store: Store) -> None:
    local_store.append(TP, keyed("a=1 a=2"), now_ms=0)
    old, new = _clean_once(local_store, now_ms=HOUR)
    result = collect_garbage(local_store, TP, wall_ms=10**13, grace_ms=0, keep_versions=1, dry_run=True)
    assert result.deleted_objects == [f"{SEGMENT_DIR}/{old}"]
    assert _names(local_store) == {old, new}
    assert local_store.versions(TP) == [1, 2]


def test_a_backdated_now_never_shortens_the_grace(local_store: Store) -> None:
    backfill = T0 - 30 * 24 * HOUR  # a replay a month back: its commits say so, the store's clock does not
    local_store.append(TP, keyed("a=1 a=2"), now_ms=backfill)
    old, new = _clean_once(local_store, now_ms=backfill + 1)
    result = collect_garbage(
        local_store, TP, wall_ms=_written(local_store, 2) + HOUR - 1, grace_ms=HOUR, keep_versions=1
    )
    assert result.deleted_objects == [] and result.pruned_versions == []
    assert _names(local_store) == {old, new}


def test_a_pinned_version_and_its_objects_are_kept_however_old_until_unpinned(local_store: Store) -> None:
    local_store.append(TP, keyed("a=1 a=2"), now_ms=T0)
    old, new = _clean_once(local_store, now_ms=T0 + HOUR)
    pin = local_store.objects.pin(TP, 1, "iceberg-table-1", "Iceberg snapshot 1 of table t")
    late = _written(local_store, 2) + 100 * HOUR
    result = collect_garbage(local_store, TP, wall_ms=late, grace_ms=HOUR, keep_versions=1)
    assert result.pruned_versions == [] and result.deleted_objects == [] and result.pinned_versions == [1]
    assert _names(local_store) == {old, new}
    local_store.objects.unpin(TP, pin)
    result = collect_garbage(local_store, TP, wall_ms=late, grace_ms=HOUR, keep_versions=1)
    assert result.pruned_versions == [1] and result.deleted_objects == [f"{SEGMENT_DIR}/{old}"]
