"""The store contract on every backend: append, read, commit, rebase, conflicts."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest

from compaction.errors import (
    CommitConflictError,
    InvalidArgumentError,
    InvalidManifestError,
    InvalidRecordsError,
    OffsetOverlapError,
    StoreNotFoundError,
)
from compaction.store import Replacement, Store, TopicPartition, Writer
from tests.helpers.builders import keyed, rec, table
from tests.helpers.stores import RecordingStorage

TP = TopicPartition("orders", 0)


def offsets(t: pa.Table) -> list[int]:
    return t.column("offset").to_pylist()


def test_append_assigns_offsets_from_the_log_end(store: Store) -> None:
    store.append(TP, keyed("a=1 b=2"), now_ms=10)
    manifest = store.append(TP, keyed("a=3"), now_ms=20)
    assert [(s.base_offset, s.next_offset) for s in manifest.segments] == [(0, 2), (2, 3)]
    assert manifest.version == 2
    assert (manifest.log_start_offset, manifest.log_end_offset, manifest.first_dirty_offset) == (0, 3, 0)
    assert store.read(TP).select(["offset", "key", "value"]).to_pylist() == [
        {"offset": 0, "key": b"a", "value": b"1"},
        {"offset": 1, "key": b"b", "value": b"2"},
        {"offset": 2, "key": b"a", "value": b"3"},
    ]


def test_append_keeps_explicit_offsets_and_gaps(store: Store) -> None:
    store.append(TP, keyed("a=1 b=2", start=100), now_ms=1)
    manifest = store.append(TP, table(rec("c", offset=110), rec("d", offset=115)), now_ms=2)
    assert [(s.base_offset, s.next_offset) for s in manifest.segments] == [(100, 102), (102, 116)]
    assert manifest.log_start_offset == 100
    assert offsets(store.read(TP)) == [100, 101, 110, 115]


def test_explicit_offsets_overlapping_the_log_are_rejected_and_nothing_changes(store: Store) -> None:
    store.append(TP, keyed("a=1 b=2 c=3"), now_ms=1)
    with pytest.raises(OffsetOverlapError, match=r"offsets start at 2.*up to 3"):
        store.append(TP, table(rec("x", offset=2)), now_ms=2)
    assert store.versions(TP) == [1]


def test_append_rejects_unordered_offsets(store: Store) -> None:
    with pytest.raises(InvalidRecordsError, match="strictly increasing"):
        store.append(TP, table(rec("a", offset=5), rec("b", offset=5)), now_ms=1)
    with pytest.raises(InvalidRecordsError, match="nothing to append"):
        store.append(TP, keyed("a=1").slice(0, 0), now_ms=1)


def test_read_returns_an_offset_range_from_the_overlapping_segments_only(store: Store) -> None:
    for start in (0, 3, 6):
        store.append(TP, keyed("a=1 b=2 c=3"), now_ms=start)
    assert offsets(store.read(TP, start=4, end=7)) == [4, 5, 6]
    assert store.read(TP, start=4, end=7, columns=["key"]).column_names == ["key"]
    assert store.read(TP, start=9).num_rows == 0


def test_missing_partition_is_a_typed_error(store: Store) -> None:
    with pytest.raises(StoreNotFoundError, match="orders/0"):
        store.manifest(TP)
    assert store.latest(TP) is None


def test_listing_topics_and_partitions(store: Store) -> None:
    store.append(TopicPartition("b-topic", 1), keyed("a=1"), now_ms=1)
    store.append(TopicPartition("a.topic", 0), keyed("a=1"), now_ms=1)
    store.append(TopicPartition("a.topic", 2), keyed("a=1"), now_ms=1)
    assert store.topics() == ["a.topic", "b-topic"]
    assert store.partitions("a.topic") == [0, 2]
    assert store.topic_partitions("a*") == [TopicPartition("a.topic", 0), TopicPartition("a.topic", 2)]


def test_open_transactions_bound_the_last_stable_offset(store: Store) -> None:
    txn: dict[str, Any] = {"producer_id": 7, "is_transactional": True}
    manifest = store.append(TP, table(rec("a", **txn), rec("b"), rec("c", **txn)), now_ms=1)
    assert manifest.last_stable_offset == 0
    assert manifest.open_transactions == {7: 0}
    marker = rec(None, None, producer_id=7, is_control=True, control_type="commit")
    manifest = store.append(TP, table(marker), now_ms=2)
    assert manifest.open_transactions == {}
    assert manifest.last_stable_offset == manifest.log_end_offset == 4


def _replacement(store: Store, manifest, removed, added, first_dirty):
    return Replacement(
        removed=tuple(removed),
        added=tuple(added),
        expected_first_dirty_offset=manifest.first_dirty_offset,
        first_dirty_offset=first_dirty,
        expected_log_start_offset=manifest.log_start_offset,
        log_start_offset=manifest.log_start_offset,
    )


def test_replace_swaps_segments_and_moves_the_checkpoint(store: Store) -> None:
    store.append(TP, keyed("a=1 b=2"), now_ms=1)
    base = store.append(TP, keyed("a=3"), now_ms=2)
    new = store.objects.write_segment(TP, table(rec("b", "2", 1), rec("a", "3", 2)), 0, 3, created_ms=3)
    manifest = store.replace(TP, _replacement(store, base, base.segments, [new], 3), writer=Writer(), now_ms=3)
    assert [s.path for s in manifest.segments] == [new.path]
    assert manifest.first_dirty_offset == 3
    assert manifest.writer.operation == "clean"
    assert offsets(store.read(TP)) == [1, 2]


def test_replace_rebases_over_a_concurrent_append(store: Store) -> None:
    base = store.append(TP, keyed("a=1 a=2"), now_ms=1)
    new = store.objects.write_segment(TP, table(rec("a", "2", 1)), 0, 2, created_ms=2)
    store.append(TP, keyed("b=9"), now_ms=2)  # lands between the cleaner's read and its commit
    manifest = store.replace(TP, _replacement(store, base, base.segments, [new], 2), writer=Writer(), now_ms=3)
    assert manifest.version == 3
    assert offsets(store.read(TP)) == [1, 2]
    assert manifest.first_dirty_offset == 2


def test_a_replace_planned_on_the_newest_version_commits_in_one_call(store: Store) -> None:
    """A pass's plan read every partition's newest manifest: its commit builds on that version without listing and
    reading the versions again, so on an object store it costs one request."""
    base = store.append(TP, keyed("a=1 a=2"), now_ms=1)
    new = store.objects.write_segment(TP, table(rec("a", "2", 1)), 0, 2, created_ms=2)
    recorder = RecordingStorage(store)
    manifest = store.replace(
        TP, _replacement(store, base, base.segments, [new], 2), writer=Writer(), now_ms=2, expected=base
    )
    assert manifest.version == 2
    assert [op for op, _ in recorder.calls if op in ("list", "read", "open")] == [], "nothing listed or read back"


def test_a_replace_planned_on_an_older_version_rebases_on_the_newest(store: Store) -> None:
    base = store.append(TP, keyed("a=1 a=2"), now_ms=1)
    new = store.objects.write_segment(TP, table(rec("a", "2", 1)), 0, 2, created_ms=2)
    store.append(TP, keyed("b=9"), now_ms=2)  # lands between the plan and the commit
    store.append(TP, keyed("c=9"), now_ms=2)
    manifest = store.replace(
        TP, _replacement(store, base, base.segments, [new], 2), writer=Writer(), now_ms=3, expected=base
    )
    assert manifest.version == 4 and offsets(store.read(TP)) == [1, 2, 3]
    assert store.manifest(TP, 2).writer.operation == "append", "the version the plan expected was not overwritten"


def test_replace_of_a_segment_someone_else_replaced_is_a_conflict(store: Store) -> None:
    base = store.append(TP, keyed("a=1 a=2"), now_ms=1)
    first = store.objects.write_segment(TP, table(rec("a", "2", 1)), 0, 2, created_ms=2)
    store.replace(TP, _replacement(store, base, base.segments, [first], 2), writer=Writer(), now_ms=2)
    second = store.objects.write_segment(TP, table(rec("a", "2", 1)), 0, 2, created_ms=3)
    with pytest.raises(CommitConflictError, match="no longer live and unchanged"):
        store.replace(TP, _replacement(store, base, base.segments, [second], 2), writer=Writer(), now_ms=3)
    assert store.versions(TP) == [1, 2]


def _kept(latest):
    return latest.model_dump(
        include={
            "log_start_offset",
            "log_end_offset",
            "last_stable_offset",
            "first_dirty_offset",
            "open_transactions",
            "segments",
        }
    )


@pytest.mark.parametrize(
    ("bug", "problem"),
    [
        ({"log_start_offset": 5}, "log_start_offset 5 is past the log end 2"),
        ({"log_end": 2}, "log_end: Extra inputs are not permitted"),
    ],
)
def test_a_change_that_breaks_the_manifest_rules_is_a_bug_not_a_conflict(store: Store, bug, problem) -> None:
    store.append(TP, keyed("a=1 b=2"), now_ms=1)
    with pytest.raises(InvalidManifestError, match=f"orders/0 version 2 .*{problem}") as raised:
        store.commit(TP, lambda latest: {**_kept(latest), **bug}, writer=Writer(), operation="clean", now_ms=2)
    assert not isinstance(raised.value, CommitConflictError)
    assert store.versions(TP) == [1]


def test_an_error_a_change_raises_passes_through_as_itself(store: Store) -> None:
    store.append(TP, keyed("a=1"), now_ms=1)

    def broken(latest):
        return {**_kept(latest), "segments": latest.segments[1]}  # IndexError: a bug in the change

    with pytest.raises(IndexError):
        store.commit(TP, broken, writer=Writer(), operation="clean", now_ms=2)
    assert store.versions(TP) == [1]


def test_deletion_vector_hides_offsets_from_readers(store: Store) -> None:
    manifest = store.append(TP, keyed("a=1 b=2 a=3"), now_ms=1)
    segment = manifest.segments[0]
    vector = store.objects.write_deletes(TP, segment, pa.array([0]), created_ms=2, live_min_delete_horizon_ms=None)
    updated = segment.model_copy(update={"deletes": vector})
    result = store.replace(TP, _replacement(store, manifest, [segment], [updated], 0), writer=Writer(), now_ms=2)
    assert result.segments[0].live_records == 2
    assert offsets(store.read(TP)) == [1, 2]
    assert store.read(TP, columns=["key"]).column("key").to_pylist() == [b"b", b"a"]


def test_append_and_read_touch_only_the_partitions_manifests_and_asked_objects(store: Store) -> None:
    for i in range(3):
        store.append(TopicPartition("noise", i), keyed("z=1"), now_ms=1)
    for _ in range(4):
        store.append(TP, keyed("a=1 b=2"), now_ms=1)
    recorder = RecordingStorage(store)
    store.append(TP, keyed("c=3"), now_ms=2)
    store.read(TP, start=2, end=4)
    assert all(rel.startswith("orders/0/") for _, rel in recorder.calls), recorder.calls
    assert {rel for op, rel in recorder.calls if op == "list"} == {"orders/0/_manifests"}
    segments = store.manifest(TP).segments
    opened = [rel for op, rel in recorder.calls if op in ("open", "read") and "/segments/" in rel]
    assert opened == [f"orders/0/{segments[1].path}"], "a range read opens only the overlapping segment"


def test_an_objects_bytes_are_read_by_python_threads_only(memory_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrow's own threads never call into Python to read an object store's file: such a call still under way
    as the interpreter exits aborts it ("terminate called without an active exception", exit code -6)."""
    from fsspec.implementations.memory import MemoryFile

    from compaction.read.scan import read_batches, read_table

    readers: list[threading.Thread] = []
    read = MemoryFile.read

    def recording(self: MemoryFile, *args: Any) -> bytes:
        readers.append(threading.current_thread())  # a thread Python did not start is a _DummyThread
        return read(self, *args)

    monkeypatch.setattr(MemoryFile, "read", recording)
    memory_store.append(TP, keyed("a=1 b=2 a=3"), now_ms=10)
    memory_store.append(TP, keyed("c=4"), now_ms=20)
    assert offsets(read_table(memory_store, "orders", columns=["offset", "key"])) == [0, 1, 2, 3]
    assert sum(b.num_rows for b in read_batches(memory_store, "orders", columns=["offset", "key"])) == 4
    assert readers, "the reads went through the object store's file objects"
    assert not [t for t in readers if isinstance(t, threading._DummyThread)]


def test_many_partitions_on_an_object_store_have_their_versions_listed_by_topic(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From FLAT_LISTING_PARTITIONS partitions of a topic, their newest versions come from ten listings of the topic
    (by the partition number's first digit), not one listing of each partition's _manifests folder: the newest
    manifest of every partition, and nothing else, as the partitions' own listings give them."""
    from compaction.store import log

    partitions = [TopicPartition("orders", p) for p in range(23)] + [TopicPartition("pay", 0)]
    for tp in partitions:
        for _ in range(1 + tp.partition % 3):  # versions 1 to 3
            store.append(tp, keyed("a=1"), now_ms=1)
    expected = {tp: store.manifest(tp).version for tp in partitions}
    monkeypatch.setattr(log, "FLAT_LISTING_PARTITIONS", 20)
    monkeypatch.setattr(store.storage, "calls_fail_whole", False)  # as on an object store
    recorder = RecordingStorage(store)
    found = log.read_manifests(store, [*partitions, TopicPartition("orders", 99)])
    assert {tp: m.version for tp, m in found.items() if not isinstance(m, Exception)} == expected
    assert isinstance(found[TopicPartition("orders", 99)], StoreNotFoundError)
    listings = [rel for op, rel in recorder.calls if op == "list"]
    assert sorted(listings) == sorted(["orders"] * 10 + ["pay/0/_manifests", "orders/99/_manifests"]), listings


def test_a_topic_is_created_with_empty_partitions_once(store: Store) -> None:
    manifests = store.create_topic("orders", 3, now_ms=5)
    assert [(m.partition, m.version, m.segments, m.log_end_offset, m.writer.operation) for m in manifests] == [
        (p, 1, (), 0, "create") for p in range(3)
    ]
    assert store.partitions("orders") == [0, 1, 2]
    appended = store.append(TopicPartition("orders", 1), keyed("a=1 b=2"), now_ms=6)
    assert (appended.version, appended.log_end_offset) == (2, 2)
    with pytest.raises(InvalidArgumentError, match=r"topic orders already exists in store .* with 3 partition"):
        store.create_topic("orders", 3, now_ms=7)
    with pytest.raises(InvalidArgumentError, match="a topic has 1 to"):
        store.create_topic("refunds", 0, now_ms=7)
