"""Erasure requests in the store: the manifest's record of them, what objects hold, and gc's part (no Spark)."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, cast

import pyarrow as pa
import pytest

from compaction.clean.cleaner import Cleaner
from compaction.config import Settings
from compaction.erasure import overdue_requests, request_erasure
from compaction.errors import CorruptManifestError
from compaction.store import Replacement, Store, TopicPartition, Writer
from compaction.store.commit import Erased
from compaction.store.erasure import COMPLETED_KEPT_MS, KeyMatch, erased_rows, scan
from compaction.store.gc import collect_garbage
from compaction.store.manifest import MANIFEST_DIR, SEGMENT_DIR, manifest_name, parse_manifest
from tests.helpers.builders import keyed
from tests.helpers.inline import InlineStages
from tests.helpers.settings import settings_with

TP = TopicPartition("orders", 0)
HOUR = 3_600_000
DAY = 24 * HOUR
T0 = int(time.time() * 1000)  # objects' modification times come from the real clock
ALICE = hashlib.sha256(b"alice").hexdigest()
SETTINGS = Settings.load(overrides={"log.cleanup.policy": "compact"}, environ={})


def _run(store: Store, now_ms: int) -> None:
    report = Cleaner(InlineStages(), store, SETTINGS).run(now_ms)
    assert not report.failed, [r.error for r in report.failed]


def _written(store: Store, version: int) -> int:
    return next(
        cast(int, e.mtime_ms)
        for e in store.storage.list_dir(f"{TP.prefix}/{MANIFEST_DIR}")
        if e.name == manifest_name(version)
    )


def _objects(store: Store) -> set[str]:
    return {f"{SEGMENT_DIR}/{e.name}" for e in store.storage.list_dir(f"{TP.prefix}/{SEGMENT_DIR}")}


def _holding(store: Store, key: bytes = b"alice", below: int = 7) -> set[str]:
    """The objects under the partition that hold a record of ``key`` below ``below`` (the tombstone's offset in
    :func:`_erased_store`), read by the store's scanner."""
    return {
        f.path for f in scan(store.storage, TP, KeyMatch.of_keys([key])) if any(r.offset < below for r in f.records)
    }


# The manifest's record ------------------------------------------------------------------------------------


def test_a_request_records_the_keys_digest_and_its_tombstone_never_the_key(local_store: Store) -> None:
    local_store.append(TP, keyed("alice=1 bob=2"), now_ms=T0)
    assert request_erasure(local_store, TP, [b"alice"], now_ms=T0 + 5, deadline_ms=T0 + DAY) == [2]
    manifest = local_store.manifest(TP)
    (request,) = manifest.erasures
    assert (request.key_sha256, request.tombstone_offset, request.requested_ms, request.deadline_ms, request.state) == (
        ALICE,
        2,
        T0 + 5,
        T0 + DAY,
        "pending",
    )
    assert manifest.writer.operation == "forget"
    text = local_store.storage.read_bytes(f"{TP.prefix}/{MANIFEST_DIR}/{manifest_name(2)}")
    assert b"alice" not in text and ALICE.encode() in text
    # The tombstone is an ordinary delete in the log, in the same commit as the request.
    assert local_store.read(TP, columns=["offset", "key", "value"]).to_pylist()[-1] == {
        "offset": 2,
        "key": b"alice",
        "value": None,
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"key_sha256": "ALICE"}, "is not 64 lowercase hex digits"),
        ({"deadline_ms": 1}, "deadline_ms 1 is before requested_ms 5"),
        ({"completed_ms": 9}, "is completed but was never rewritten"),
        ({"tombstone_offset": 3}, "at or past the log end 3"),
        ({"rewritten_ms": 7}, "rewritten_ms and rewritten_version go together"),
    ],
)
def test_a_manifest_with_a_malformed_request_is_refused_naming_the_field(
    change: dict[str, object], message: str
) -> None:
    request = {"key_sha256": ALICE, "tombstone_offset": 2, "requested_ms": 5, "deadline_ms": 10, **change}
    document = {
        "topic": "orders",
        "partition": 0,
        "version": 1,
        "log_start_offset": 0,
        "log_end_offset": 3,
        "last_stable_offset": 3,
        "first_dirty_offset": 0,
        "erasures": [request],
        "writer": {"id": "w", "run_id": "r", "operation": "forget", "time_ms": 5, "commit_id": "c"},
    }
    with pytest.raises(CorruptManifestError, match=message) as err:
        parse_manifest(json.dumps(document).encode(), "orders/0/_manifests/1.json")
    assert "erasure" in str(err.value)  # the field or the request is named


def test_a_pass_marks_only_the_requests_it_carried_out(local_store: Store) -> None:
    local_store.append(TP, keyed("alice=1 bob=1"), now_ms=T0)
    request_erasure(local_store, TP, [b"alice"], now_ms=T0, deadline_ms=T0 + DAY)
    planned = local_store.manifest(TP)
    # Another request lands while the pass runs: the pass never heard of it, so it stays pending.
    request_erasure(local_store, TP, [b"bob"], now_ms=T0, deadline_ms=T0 + DAY)
    change = Replacement(
        (),
        (),
        planned.first_dirty_offset,
        planned.first_dirty_offset,
        0,
        0,
        erased=(Erased(ALICE, 2, ("segments/x.parquet",)),),
        time_ms=T0 + 9,
    )
    committed = local_store.replace(TP, change, writer=Writer(), now_ms=T0 + 9)
    alice, bob = committed.erasures
    assert (alice.state, alice.rewritten_ms, alice.rewritten_version) == ("rewritten", T0 + 9, committed.version)
    assert [h.path for h in alice.held] == ["segments/x.parquet"]
    assert bob.state == "pending" and bob.tombstone_offset == 3


def test_erased_rows_are_the_keys_records_below_its_tombstone() -> None:
    keys = pa.array([b"alice", b"bob", None, b"alice", b"alice", b"carol"])
    offsets = pa.array([0, 1, 2, 3, 4, 5]).to_numpy()
    erased = erased_rows(offsets, keys, {ALICE: 4, hashlib.sha256(b"carol").hexdigest(): 5})
    assert erased.tolist() == [True, False, False, True, False, False]


# What objects hold ----------------------------------------------------------------------------------------


def test_the_scanner_reads_objects_by_what_they_hold_and_names_what_it_cannot_read(local_store: Store) -> None:
    local_store.append(TP, keyed("alice=1 bob=2"), now_ms=T0)
    orphan = local_store.objects.write_segment(TP, keyed("alice=old", start=0), 0, 1, created_ms=T0)
    storage = local_store.storage
    storage.write_bytes(f"{TP.prefix}/{SEGMENT_DIR}/.tmp-torn", b"PAR1 torn")
    storage.write_bytes(f"{TP.prefix}/notes/readme.txt", b"not a segment")
    found = {f.path: f for f in scan(storage, TP, KeyMatch.of_keys([b"alice"]), whole=True)}
    assert [(r.offset, r.tombstone) for r in found[orphan.path].records] == [(0, False)]
    assert found[f"{MANIFEST_DIR}/{manifest_name(1)}"].kind == "manifest"
    assert found[f"{MANIFEST_DIR}/{manifest_name(1)}"].records == ()
    assert found[f"{SEGMENT_DIR}/.tmp-torn"].kind == "temporary" and found[f"{SEGMENT_DIR}/.tmp-torn"].problem
    stranger = found["notes/readme.txt"]
    assert stranger.kind == "unknown" and "cannot be read as Parquet or Kafka" in (stranger.problem or "")
    whole = storage.read_bytes(f"{TP.prefix}/{orphan.path}")
    assert found[orphan.path].sha256 == hashlib.sha256(whole).hexdigest()


def test_a_passs_hand_over_objects_left_behind_are_read_for_what_they_hold_and_collected(local_store: Store) -> None:
    """A pass that crashed between its stages leaves its hand-over objects: pieces hold keys (and offsets, never
    values), so a scan counts them as holding an erased key; verdicts hold positions only. Both are the store's own
    objects, which gc removes after its grace period."""
    local_store.append(TP, keyed("alice=1 bob=2"), now_ms=T0)
    rows = pa.table(
        {
            "offset": pa.array([0, 1], pa.int64()),
            "key": [b"alice", b"bob"],
            "delete_horizon_ms": pa.nulls(2, pa.int64()),
            "position": pa.array([0, 1], pa.int32()),
        }
    )
    pieces, batches = local_store.objects.write_pieces(TP, 0, [rows.slice(0, 1), rows.slice(1, 1)], "crashed")
    assert batches == (0, 1)
    verdicts, _ = local_store.objects.write_verdicts(
        TP, 0, [pa.table({"position": pa.array([1], pa.int32()), "listed": [True], "stamp": [False]})], "crashed"
    )
    assert local_store.objects.read_piece(TP, pieces, 1).column("key").to_pylist() == [b"bob"]
    found = {f.path: f for f in scan(local_store.storage, TP, KeyMatch.of_keys([b"alice"]), whole=True)}
    assert (found[pieces].kind, [r.offset for r in found[pieces].records], found[pieces].problem) == (
        "pieces",
        [0],
        None,
    )
    assert (found[verdicts].kind, found[verdicts].records, found[verdicts].problem) == ("verdicts", (), None)
    assert {pieces, verdicts} <= set(
        collect_garbage(local_store, TP, wall_ms=int(time.time() * 1000) + DAY, grace_ms=0).deleted_objects
    )


# gc's part -----------------------------------------------------------------------------------------------


def _erased_store(store: Store) -> tuple[set[str], int]:
    """alice's values in superseded objects and live segments, forgotten (tombstone at offset 7) and carried out;
    returns the objects holding alice before the erasure pass, and the version it committed."""
    store.append(TP, keyed("alice=1 bob=1"), now_ms=T0)
    store.append(TP, keyed("alice=2 bob=2"), now_ms=T0)
    store.append(TP, keyed("dave=1"), now_ms=T0)
    _run(store, T0 + 1)  # the first two segments merge into one holding alice=2; they stay as superseded objects
    store.append(TP, keyed("alice=3 carol=1"), now_ms=T0 + 2)
    holding = _holding(store)
    request_erasure(store, TP, [b"alice"], now_ms=T0 + 3, deadline_ms=T0 + DAY)
    _run(store, T0 + 4)
    (request,) = store.manifest(TP).erasures
    assert request.state == "rewritten"
    return holding, store.manifest(TP).version


def test_gc_removes_what_holds_an_erased_key_after_the_erasure_grace_whatever_versions_are_kept(
    local_store: Store,
) -> None:
    holding, rewritten = _erased_store(local_store)
    assert len(holding) == 4  # the first two appends, the first pass's output, the last append
    at = _written(local_store, rewritten)

    within = collect_garbage(
        local_store, TP, wall_ms=at + HOUR - 1, grace_ms=DAY, keep_versions=10, erasure_grace_ms=HOUR
    )
    assert within.deleted_objects == [] and within.pruned_versions == []
    assert any("kept until superseded for erasure.grace.ms" in w for w in within.erasure_waits)
    assert _holding(local_store) == holding  # a reader of an old version still has its objects
    assert local_store.manifest(TP).erasures[0].state == "rewritten"

    after = collect_garbage(
        local_store, TP, wall_ms=at + HOUR + 1, grace_ms=DAY, keep_versions=10, erasure_grace_ms=HOUR
    )
    assert sorted(after.erased_objects) == sorted(holding)
    assert after.pruned_versions == list(range(1, rewritten))  # keep_versions=10 does not keep them
    assert _holding(local_store) == set()
    (request,) = local_store.manifest(TP).erasures
    assert request.state == "gone" and request.completed_ms == at + HOUR + 1
    assert sorted(h.path for h in request.held) == sorted(holding)
    assert {h.removed_ms for h in request.held} == {at + HOUR + 1}
    assert local_store.manifest(TP).writer.operation == "erasure"
    # The objects that never held alice keep gc's own grace.
    assert _objects(local_store) - holding


def test_a_dry_run_changes_nothing(local_store: Store) -> None:
    holding, rewritten = _erased_store(local_store)
    version = local_store.manifest(TP).version
    result = collect_garbage(
        local_store, TP, wall_ms=_written(local_store, rewritten) + DAY, grace_ms=DAY, erasure_grace_ms=0, dry_run=True
    )
    assert sorted(result.erased_objects) == sorted(holding) and result.erasures_completed == [ALICE]
    assert _holding(local_store) >= holding and local_store.manifest(TP).version == version


def test_a_pinned_version_holding_the_key_is_kept_and_named(local_store: Store) -> None:
    _, rewritten = _erased_store(local_store)
    local_store.objects.pin(TP, 1, "iceberg-t-1", "Iceberg snapshot 1 of table lake.orders")
    result = collect_garbage(
        local_store, TP, wall_ms=_written(local_store, rewritten) + DAY, grace_ms=DAY, erasure_grace_ms=0
    )
    assert result.pruned_versions == [] and 1 in local_store.versions(TP)
    assert any(
        "version 1 holds an erased key and is pinned by Iceberg snapshot 1 of table lake.orders" in w
        for w in result.erasure_waits
    )
    assert local_store.manifest(TP).erasures[0].state == "rewritten"


def test_an_orphan_holding_the_key_goes_after_the_erasure_grace_and_a_foreign_file_blocks_completion(
    local_store: Store,
) -> None:
    _, rewritten = _erased_store(local_store)
    orphan = local_store.objects.write_segment(TP, keyed("alice=crashed", start=0), 0, 1, created_ms=T0)
    local_store.storage.write_bytes(f"{TP.prefix}/{SEGMENT_DIR}/copy-of-a-segment.bin", b"alice=1")
    wall = _written(local_store, rewritten) + DAY
    result = collect_garbage(local_store, TP, wall_ms=wall, grace_ms=10 * DAY, erasure_grace_ms=0)
    assert orphan.path in result.erased_objects
    assert result.unknown_objects == ["segments/copy-of-a-segment.bin"]  # gc never deletes what it did not write
    assert any("copy-of-a-segment.bin" in w for w in result.erasure_waits)
    assert local_store.manifest(TP).erasures[0].state == "rewritten"
    local_store.storage.delete(f"{TP.prefix}/{SEGMENT_DIR}/copy-of-a-segment.bin")
    assert collect_garbage(local_store, TP, wall_ms=wall, grace_ms=10 * DAY, erasure_grace_ms=0).erasures_completed
    assert local_store.manifest(TP).erasures[0].state == "gone"


def test_completion_waits_for_the_rewrite_to_be_an_erasure_grace_period_old(local_store: Store) -> None:
    _, rewritten = _erased_store(local_store)
    for path in _holding(local_store):  # gone already (removed by hand): only a pass still running could write one
        local_store.storage.delete(f"{TP.prefix}/{path}")
    at = _written(local_store, rewritten)
    early = collect_garbage(local_store, TP, wall_ms=at + HOUR - 1, grace_ms=DAY, erasure_grace_ms=HOUR)
    assert early.erasures_completed == []
    assert early.erasure_waits == [f"key {ALICE[:12]}: rewritten less than erasure.grace.ms ago"]
    late = collect_garbage(local_store, TP, wall_ms=at + HOUR, grace_ms=DAY, erasure_grace_ms=HOUR)
    assert late.erasures_completed == [ALICE]


def test_a_done_request_leaves_the_manifest_after_thirty_days(local_store: Store) -> None:
    _, rewritten = _erased_store(local_store)
    wall = _written(local_store, rewritten) + 1
    collect_garbage(local_store, TP, wall_ms=wall, grace_ms=DAY, erasure_grace_ms=0)
    assert local_store.manifest(TP).erasures[0].state == "gone"
    request_erasure(local_store, TP, [b"bob"], now_ms=T0 + 10, deadline_ms=T0 + DAY)
    _run(local_store, T0 + 11)
    collect_garbage(local_store, TP, wall_ms=wall + COMPLETED_KEPT_MS + 1, grace_ms=DAY, erasure_grace_ms=0)
    assert [r.key_sha256 for r in local_store.manifest(TP).erasures] == [hashlib.sha256(b"bob").hexdigest()]


def test_the_late_count_reads_each_partitions_newest_manifest_or_else_the_planned_one(local_store: Store) -> None:
    local_store.append(TP, keyed("alice=1 bob=2"), now_ms=T0)
    request_erasure(local_store, TP, [b"alice"], now_ms=T0, deadline_ms=T0 + HOUR)
    planned = local_store.manifest(TP)
    gone = TopicPartition("gone", 0)  # no manifest to reread: counted as planned
    assert overdue_requests(local_store, {TP: planned}, T0 + HOUR, grace_ms=0) == 0
    assert overdue_requests(local_store, {TP: planned, gone: planned}, T0 + HOUR + 1, grace_ms=0) == 2
    _run(local_store, T0 + HOUR + 1)  # carried out: rewritten, late again once the grace period has passed
    assert overdue_requests(local_store, {TP: planned}, T0 + HOUR + 1, grace_ms=DAY) == 0
    assert overdue_requests(local_store, {TP: planned}, T0 + HOUR + DAY + 1, grace_ms=DAY) == 1


def test_a_pass_in_key_ranges_rewrites_what_a_deletion_vector_hides_of_an_erased_key(local_store: Store) -> None:
    """alice's first value is superseded and hidden by a deletion vector (written by the task that decides the clean
    segments against the dirty keys), its bytes still in the segment. Once alice
    is forgotten, a pass split into key ranges (decided in one stage, applied in another) finds the hidden record
    and rewrites that segment though it loses nothing a reader sees: no live object holds alice below her
    tombstone."""
    base: dict[str, Any] = {
        "log.cleanup.policy": "compact",
        "log.cleaner.min.cleanable.ratio": 0.0,
        "log.segment.bytes": 300,
        "cleaner": {"deletion.vector.max.ratio": 0.5},
    }
    vectors = settings_with(base)
    split = settings_with({**base, "cleaner": {**base["cleaner"], "task.max.records": 2}})

    def run(now_ms: int, settings: Settings) -> int:
        report = Cleaner(InlineStages(), local_store, settings).run(now_ms)
        assert not report.failed, [r.error for r in report.failed]
        (partition,) = report.partitions
        return partition.stats.bytes_written

    local_store.append(TP, keyed("alice=1 bob=1 carol=1 dave=1 erin=1 fred=1"), now_ms=T0)
    local_store.append(TP, keyed("x=1"), now_ms=T0)
    run(T0 + 1, vectors)
    local_store.append(TP, keyed("alice=2"), now_ms=T0 + 1)
    local_store.append(TP, keyed("y=1"), now_ms=T0 + 1)
    written = run(T0 + 2, vectors)
    first = local_store.manifest(TP).segments[0]
    assert first.deletes is not None and first.deletes.count == 1 and first.path in _holding(local_store, below=10)
    assert written == first.deletes.size_bytes, "the vector the deciding task wrote is the pass's bytes written"
    local_store.append(TP, keyed("z=1"), now_ms=T0 + 2)
    (tombstone,) = request_erasure(local_store, TP, [b"alice"], now_ms=T0 + 3, deadline_ms=T0 + DAY)
    assert tombstone == 10
    run(T0 + 4, split)
    manifest = local_store.manifest(TP)
    assert [r.state for r in manifest.erasures] == ["rewritten"]
    assert not {s.path for s in manifest.segments} & _holding(local_store, below=10)
    assert manifest.segments[0].deletes is None and manifest.segments[0].path != first.path
