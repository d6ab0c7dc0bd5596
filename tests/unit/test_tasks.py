"""Executor-side reading: key ranges of split partitions, and the facts a decision reads (never values)."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.clean.cleaner import Cleaner
from compaction.clean.tasks.decide import _decide, decide_facts
from compaction.clean.tasks.facts import read_facts, read_task_facts, reads_clean_sparsely
from compaction.clean.tasks.key_ranges import in_key_ranges, key_range_of
from compaction.engine.stages import LocalStages
from compaction.kafka.partitioner import default_partitions
from compaction.store import Store, TopicPartition
from compaction.store.segment import records
from tests.helpers.builders import clean_task
from tests.helpers.settings import settings_with

TP = TopicPartition("t", 0)


def test_key_ranges_are_balanced_keep_each_key_whole_and_put_keyless_rows_in_range_0() -> None:
    def ranges_of(keys: pa.Array, key_ranges: int) -> np.ndarray:
        found = key_range_of(keys, key_ranges)
        assert ((found >= 0) & (found < key_ranges)).all()
        return found

    fixed = [f"key-{(i * 7919) % 4000:06d}".encode() for i in range(8000)]  # every key twice, shuffled
    mixed = [b"x" * (i % 13) + str(i % 4000).encode() for i in range(8000)]
    hot = [b"hot" if i % 3 == 0 else f"k{i}".encode() for i in range(8000)]
    for keys in (fixed, mixed, hot):
        array = pa.array([*keys, None], pa.binary())
        found = ranges_of(array, 4)
        assert found[-1] == 0
        assert np.array_equal(found, ranges_of(pa.array([*keys, None], pa.binary()), 4)), "deterministic"
        range_of: dict[bytes, int] = {}
        for key, key_range in zip(keys, found[:-1], strict=True):
            assert range_of.setdefault(key, int(key_range)) == key_range, f"{key!r} split across key ranges"
        counts = np.bincount(found[:-1], minlength=4)
        largest_key = max(keys.count(k) for k in set(keys[:50]))
        assert counts.max() <= 2000 + largest_key + 150, counts
    assert not ranges_of(pa.array([None, None], pa.binary()), 4).any()
    assert not ranges_of(pa.array([b"a", b"b"], pa.binary()), 1).any()


def test_the_keys_of_one_kafka_partition_spread_over_every_key_range() -> None:
    """A partition's keys all share their Kafka partitioner's hash modulo the topic's partitions: the key ranges'
    hash is another, or a split partition of a topic of 4 partitions would put every key in one of its 4 ranges."""
    keys = pa.array([f"order-{i}".encode() for i in range(40_000)], pa.binary())
    mine = keys.filter(pa.array(default_partitions(keys, 4) == 1))
    for key_ranges in (2, 4, 8):
        counts = np.bincount(key_range_of(mine, key_ranges), minlength=key_ranges)
        assert counts.min() > 0.9 * len(mine) / key_ranges, counts


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.binary(min_size=0, max_size=40) | st.none(), max_size=60),
    width=st.integers(1, 40),
    same_width=st.booleans(),
    large=st.booleans(),
    cut=st.integers(0, 3),
    key_ranges=st.integers(2, 9),
)
def test_a_key_s_range_is_a_function_of_its_bytes_however_the_array_holds_it(
    keys: list[bytes | None], width: int, same_width: bool, large: bool, cut: int, key_ranges: int
) -> None:
    """Each key gets the range it gets alone in an array, whatever its neighbours: of one width (the matrix of
    words) or not (the words gathered at their offsets), zero bytes, sliced and chunked arrays included."""
    if same_width:  # keys of one width, zero bytes and all (no keyless row, or the path is not taken)
        keys = [(k or b"").ljust(width, b"\0")[:width] for k in keys]
    kind = pa.large_binary() if large else pa.binary()
    array = pa.array([b"pad"] * cut + keys, kind).slice(cut)
    chunked = pa.chunked_array([array[: len(keys) // 2], array[len(keys) // 2 :]], kind)
    alone = [
        0 if k is None else int(key_range_of(pa.array([k, k + b"!"], pa.binary())[:1], key_ranges)[0]) for k in keys
    ]
    assert key_range_of(array, key_ranges).tolist() == alone
    assert key_range_of(chunked, key_ranges).tolist() == alone


def test_a_long_key_costs_its_bytes_not_a_pass_over_every_key_for_each_of_its_words() -> None:
    """Kafka takes keys up to the message size (1 MB by default): one such key among 200k short ones took a pass
    over all of them for each of its 125k words (tens of seconds a segment); now every word is weighed at once
    (tens of milliseconds). The bound leaves a loaded machine a hundredfold room."""
    long_key = b"x" * 1_000_000
    keys = pa.array([b"k%07d" % i for i in range(200_000)] + [long_key], pa.binary())
    started = time.perf_counter()
    found = key_range_of(keys, 4)
    assert time.perf_counter() - started < 5.0
    assert found[-1] == key_range_of(pa.array([long_key, b"!"], pa.binary())[:1], 4)[0]
    assert (np.bincount(found, minlength=4) > 45_000).all()


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.binary(min_size=2, max_size=3) | st.none(), min_size=1, max_size=40),
    same_width=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_rows_ordered_by_key_range_are_the_rows_taken_in_that_order(
    keys: list[bytes | None], same_width: bool, seed: int
) -> None:
    """Keys of one width are gathered as fixed-size binary and handed on as binary again: the same table as
    Arrow's take gives, with the same schema."""
    if same_width:
        keys = [(k or b"").ljust(3, b"\0")[:3] for k in keys]
    half = len(keys) // 2
    rows = pa.table(
        {
            "offset": pa.chunked_array(
                [pa.array(range(half), pa.int64()), pa.array(range(half, len(keys)), pa.int64())]
            ),
            "key": pa.chunked_array([pa.array(keys[:half], pa.binary()), pa.array(keys[half:], pa.binary())]),
        }
    )
    order = np.random.default_rng(seed).permutation(len(keys))
    taken = in_key_ranges(rows, order)
    assert taken.schema == rows.schema
    assert taken.to_pylist() == rows.take(pa.array(order)).to_pylist()


def test_the_decision_reads_only_the_columns_it_needs_and_never_values(local_store: Store) -> None:
    local_store.append(
        TP,
        records([{"key": "a", "value": "x" * 1000}, {"key": "b", "value": "y" * 1000}, {"key": "a", "value": None}]),
        now_ms=0,
    )
    segment = local_store.manifest(TP).segments[0]
    asked: list[list[str] | None] = []
    original = local_store.objects.read_segment

    def spy(tp, seg, columns=None, start=None, **kw):
        asked.append(None if columns is None else list(columns))
        return original(tp, seg, columns, start, **kw)

    local_store.objects.read_segment = spy  # type: ignore[method-assign,assignment]
    facts = read_facts(clean_task(TP, local_store, (segment,)), 0)
    assert facts.num_rows == 3
    assert asked == [["offset", "key", "delete_horizon_ms"]], "never values, even with tombstones"
    assert pa.types.is_binary(facts.schema.field("key").type)


def test_records_below_the_log_start_are_not_read(local_store: Store) -> None:
    local_store.append(TP, records([{"key": k} for k in "abcde"]), now_ms=0)
    segment = local_store.manifest(TP).segments[0]
    facts = read_facts(clean_task(TP, local_store, (segment,), log_start_offset=3), 0)
    assert facts.column("offset").to_pylist() == [3, 4]
    assert facts.column("position").to_pylist() == [0, 1], "positions count the live rows only"


def test_a_unique_clean_section_keeps_only_the_rows_in_doubt_and_counts_the_others_kept(local_store: Store) -> None:
    # The clean section after a pass: a..d and f once each, e's tombstone with its horizon and a keyless record; the
    # dirty section updates b and d. Only b, d (contested), e (a horizon) and the keyless record need the search.
    local_store.append(
        TP,
        records(
            [{"key": k, "value": "v"} for k in "abcd"]
            + [{"key": "e", "value": None}, {"key": None, "value": "v"}, {"key": "f", "value": "v"}]
        ),
        now_ms=0,
    )
    report = Cleaner(
        LocalStages(), local_store, settings_with({"log.cleanup.policy": "compact", "log.roll.ms": 1})
    ).run(10)
    assert not report.failed
    local_store.append(TP, records([{"key": k, "value": "w"} for k in "dbd"]), now_ms=20)
    manifest = local_store.manifest(TP)
    task = clean_task(
        TP,
        local_store,
        manifest.segments,
        first_dirty_offset=manifest.first_dirty_offset,
        clean_keys_unique=manifest.clean_keys_unique,
        now_ms=30,
    )
    assert manifest.first_dirty_offset == 7 and reads_clean_sparsely(task)
    sparse, full = decide_facts(task), _decide(task, read_task_facts(task))
    assert sparse.facts.table.column("offset").to_pylist() == [1, 3, 4, 5, 7, 8, 9]
    assert sparse.facts.assumed_kept is not None and sparse.facts.assumed_kept.tolist() == [3, 0]
    segments = manifest.segments
    assert [o for *_, o in sparse.segment_counts(segments)] == [o for *_, o in full.segment_counts(segments)]
    assert [o.kept for *_, o in sparse.segment_counts(segments)] == [5, 2]
    # Not with a key's records possibly sharing the clean section, transactions or erasure requests.
    for changed in (
        replace(task, cleaned=replace(task.cleaned, clean_keys_unique=False)),
        replace(task, erasures=(("digest", 8),)),
        replace(task, cleaned=replace(task.cleaned, first_dirty_offset=0)),
    ):
        assert not reads_clean_sparsely(changed)


def test_held_keys_marks_the_keys_the_dirty_section_holds_as_arrow_s_is_in_does() -> None:
    """The clean run's membership step (a hash semi join) against ``pc.is_in``: duplicates on both sides, null keys
    (never held), chunks, and either side empty."""
    import pyarrow.compute as pc

    from compaction.winners import held_keys

    rng = np.random.default_rng(7)
    keys = [None if k % 11 == 0 else f"k{k}".encode() for k in rng.integers(0, 400, 3000).tolist()]
    chunked = pa.chunked_array([keys[:1000], keys[1000:1001], [], keys[1001:]], pa.binary())
    held = pa.array([f"k{k}".encode() for k in rng.integers(0, 800, 300).tolist()], pa.binary())
    expected = pc.is_in(chunked, value_set=held).to_numpy(zero_copy_only=False)
    assert expected.any() and not expected.all()
    assert held_keys(chunked, held).tolist() == expected.tolist()
    assert not held_keys(chunked, pa.array([], pa.binary())).any()
    assert held_keys(pa.chunked_array([], pa.binary()), held).tolist() == []
    # Keys of one width (joined as fixed-size binary), held keys of that width or of another.
    same = pa.chunked_array([[f"k{k:04d}".encode() for k in rng.integers(0, 400, n).tolist()] for n in (900, 0, 700)])
    for held_keys_of in (
        pa.array([f"k{k:04d}".encode() for k in rng.integers(0, 800, 300).tolist()]),
        pa.array([b"k0001", b"k001"]),
    ):
        expected = pc.is_in(same, value_set=held_keys_of).to_numpy(zero_copy_only=False)
        assert expected.any() and not expected.all()
        assert held_keys(same, held_keys_of).tolist() == expected.tolist()
