"""Offset claims: the ranges one write's tasks take in a partition follow one another from the log end the write read,
never overlapping, however the tasks race; a claim left behind is the store's own object (gc removes it, erasure
knows it holds no key)."""

from __future__ import annotations

import itertools
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from compaction.store import Store, TopicPartition
from compaction.store.claims import claim_name
from compaction.store.erasure import KeyMatch, scan
from compaction.store.gc import collect_garbage
from compaction.store.manifest import SEGMENT_DIR
from tests.helpers.builders import keyed

TP = TopicPartition("orders", 0)


def test_claims_of_one_write_follow_one_another_from_the_first_offset(store: Store) -> None:
    assert store.objects.claims.take(TP, "w1", 100, 5) == 100
    assert store.objects.claims.take(TP, "w1", 100, 3) == 105
    assert store.objects.claims.take(TP, "w1", 999, 1) == 108, "only the first claim starts at the given offset"
    assert store.objects.claims.take(TP, "w2", 100, 2) == 100, "another write has a sequence of its own"
    body = json.loads(store.storage.read_bytes(f"{TP.prefix}/{claim_name('w1', 105)}"))
    assert body == {"next_offset": 108}
    store.objects.claims.delete(TP, "w1")
    names = {e.name for e in store.storage.list_dir(f"{TP.prefix}/{SEGMENT_DIR}")}
    assert names == {claim_name("w2", 100).rpartition("/")[2]}


def test_racing_tasks_take_ranges_without_overlap_or_gap(store: Store) -> None:
    counts = [3, 1, 7, 2, 5, 4, 6, 1] * 3
    with ThreadPoolExecutor(max_workers=8) as pool:
        bases = list(pool.map(lambda n: store.objects.claims.take(TP, "race", 50, n), counts))
    ranges = sorted(zip(bases, counts, strict=True))
    assert ranges[0][0] == 50
    for (base, count), (after, _) in itertools.pairwise(ranges):
        assert after == base + count, ranges


def test_a_bad_write_id_or_count_is_refused(memory_store: Store) -> None:
    with pytest.raises(ValueError, match="write id"):
        memory_store.objects.claims.take(TP, "a-b", 0, 1)
    with pytest.raises(ValueError, match="at least one offset"):
        memory_store.objects.claims.take(TP, "w", 0, 0)


def test_a_claim_left_behind_goes_with_gc_and_holds_no_key(local_store: Store) -> None:
    local_store.append(TP, keyed("k=v"), now_ms=1)
    local_store.objects.claims.take(TP, "crashed", 1, 10)
    name = claim_name("crashed", 1)
    findings = {f.path: f for f in scan(local_store.storage, TP, KeyMatch.of_keys([b"k"]))}
    assert findings[name].kind == "claim" and findings[name].problem is None and not findings[name].records
    kept = collect_garbage(local_store, TP, wall_ms=int(time.time() * 1000), grace_ms=3_600_000)
    assert kept.waiting_objects == 1 and not kept.unknown_objects
    gone = collect_garbage(local_store, TP, wall_ms=int(time.time() * 1000) + 7_200_000, grace_ms=3_600_000)
    assert gone.deleted_objects == [name]
