"""Transaction facts: aborted records and markers still guarding records (Kafka reference §3.9)."""

from __future__ import annotations

from compaction.segment import records
from compaction.transactions import transaction_facts


def T(producer: int, offset: int) -> dict:
    return {"offset": offset, "key": str(offset), "producer_id": producer, "is_transactional": True}


def marker(producer: int, offset: int, kind: str) -> dict:
    return {"offset": offset, "producer_id": producer, "is_control": True, "control_type": kind}


def facts(*rows: dict) -> tuple[list[int], list[int]]:
    table = records(rows)
    found = transaction_facts(table)
    offsets = table.column("offset").to_pylist()
    return ([o for o, a in zip(offsets, found.aborted, strict=True) if a],
            [o for o, p in zip(offsets, found.marker_pending, strict=True) if p])


def test_t16_aborted_records_and_pending_markers() -> None:
    # T(1)[1,2]@0-1, T(2)[2,3]@2-3, T(1)[3,4]@4-5, A(1)@6, C(2)@7, T(1)[2]@8, C(1)@9
    aborted, pending = facts(T(1, 0), T(1, 1), T(2, 2), T(2, 3), T(1, 4), T(1, 5), marker(1, 6, "abort"),
                             marker(2, 7, "commit"), T(1, 8), marker(1, 9, "commit"))
    assert aborted == [0, 1, 4, 5]
    assert pending == [6, 7, 9]


def test_a_marker_whose_records_are_gone_is_not_pending_and_an_open_transaction_is_not_aborted() -> None:
    # C(1)@3 with its records already removed by earlier passes; producer 2's transaction has no marker yet.
    aborted, pending = facts(marker(1, 3, "commit"), T(2, 4), T(1, 5), marker(1, 6, "abort"))
    assert aborted == [5]
    assert pending == [6]


def test_non_transactional_records_are_never_aborted() -> None:
    aborted, pending = facts({"offset": 0, "key": "a", "producer_id": 1}, marker(1, 1, "abort"))
    assert (aborted, pending) == ([], [])


def test_key_ranges_are_balanced_keep_each_key_whole_and_put_keyless_rows_in_bucket_0() -> None:
    import numpy as np
    import pyarrow as pa

    from compaction.tasks import in_key_range

    def key_ranges(keys: pa.Array, buckets: int) -> np.ndarray:
        masks = np.stack([in_key_range(keys, buckets, b) for b in range(buckets)])
        assert (masks.sum(axis=0) == 1).all(), "every row is in exactly one range"
        return masks.argmax(axis=0)

    fixed = [f"key-{(i * 7919) % 4000:06d}".encode() for i in range(8000)]  # every key twice, shuffled
    mixed = [b"x" * (i % 13) + str(i % 4000).encode() for i in range(8000)]
    hot = [b"hot" if i % 3 == 0 else f"k{i}".encode() for i in range(8000)]
    for keys in (fixed, mixed, hot):
        array = pa.array([*keys, None], pa.binary())
        buckets = key_ranges(array, 4)
        assert buckets[-1] == 0
        assert np.array_equal(buckets, key_ranges(pa.array([*keys, None], pa.binary()), 4)), "deterministic"
        bucket_of: dict[bytes, int] = {}
        for key, bucket in zip(keys, buckets[:-1], strict=True):
            assert bucket_of.setdefault(key, int(bucket)) == bucket, f"{key!r} split across buckets"
        counts = np.bincount(buckets[:-1], minlength=4)
        largest_key = max(keys.count(k) for k in set(keys[:50]))
        assert counts.max() <= 2000 + largest_key + 100, counts
    assert not key_ranges(pa.array([None, None], pa.binary()), 4).any()
    assert not key_ranges(pa.array([b"a", b"b"], pa.binary()), 1).any()


def test_a_clean_section_with_unique_keys_is_decided_from_the_dirty_keys_alone() -> None:
    import numpy as np
    import pyarrow as pa

    from compaction import arrow_dedupe

    rng = np.random.default_rng(7)
    for _ in range(20):
        clean = rng.permutation(200)[:rng.integers(1, 150)]  # a compacted section: each key once
        dirty = rng.integers(0, 300, rng.integers(0, 100))
        ids = np.concatenate([clean, dirty])
        n = len(ids)
        keys = [None if rng.random() < 0.05 else f"k{i}".encode() for i in ids]
        facts = pa.table({"offset": pa.array(np.arange(n)), "key": pa.array(keys, pa.binary()),
                          "delete_horizon_ms": pa.nulls(n, pa.int64()),
                          "is_control": pa.array(np.zeros(n, dtype=bool)), "aborted": pa.array(rng.random(n) < 0.05),
                          "marker_pending": pa.array(np.zeros(n, dtype=bool))})
        common = dict(strategy="offset", header="", now_ms=0, keyless_drop=False, range_last_offset=n - 1)
        full = arrow_dedupe.decide(facts, **common)
        trusted = arrow_dedupe.decide(facts, **common, unique_before=len(clean))
        assert np.array_equal(full.code, trusted.code)
    # What it trusts: two clean records of one key that no dirty record names both stay.
    facts = pa.table({"offset": pa.array([0, 1, 2], pa.int64()), "key": pa.array([b"a", b"a", b"b"]),
                      "delete_horizon_ms": pa.nulls(3, pa.int64()), "is_control": pa.array([False] * 3),
                      "aborted": pa.array([False] * 3), "marker_pending": pa.array([False] * 3)})
    common = dict(strategy="offset", header="", now_ms=0, keyless_drop=False, range_last_offset=2)
    assert arrow_dedupe.decide(facts, **common, unique_before=2).code.tolist() == [0, 0, 0]
    assert arrow_dedupe.decide(facts, **common).code.tolist() == [1, 0, 0]
