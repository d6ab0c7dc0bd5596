"""The reference model the differential tests hold the job to, held to hand-made cases itself (Kafka's own where
there is one): a model that planned, kept or laid out nothing would agree with a job that does nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.helpers.model import Batch, Bounds, Choice, Config, Model, Rec, duration, order, plan_json


def sized(model: Model, *sizes: int) -> Model:
    """The model with its objects' sizes in bytes, as the store would say them."""
    for segment, size in zip(model.layout, sizes, strict=True):
        segment.size, segment.path = size, f"segments/{segment.base:020d}.parquet"
    return model


def three_appends() -> Model:
    """``a b | a | c``: the last append is the active segment; sizes in bytes 100, 50, 50."""
    model = Model("offset")
    model.append([Rec(0, "a", "1", timestamp=0), Rec(1, "b", "2", timestamp=0)], 0)
    model.append([Rec(2, "a", "3", timestamp=900)], 900)
    model.append([Rec(3, "c", "4", timestamp=1000)], 1000)
    return sized(model, 100, 50, 50)


def objects(model: Model, config: Config | None = None) -> list[dict[str, Any]]:
    """The manifest's entries of the layout the model's pass leads to, as a job that writes it would commit them (the
    tests of adopt change them)."""
    after = model.settled(config or Config())
    return [
        {
            "base_offset": s.base,
            "next_offset": s.next,
            "created_ms": s.created,
            "record_count": len(s.written),
            "size_bytes": s.size or 10,
            "path": s.path or f"segments/{s.base:020d}-new.parquet",
            "deletes": None
            if s.vector_created is None
            else {"created_ms": s.vector_created, "count": len(s.written - {r.offset for r in after.log})},
        }
        for s in after.layout
    ]


def test_the_range_ends_at_the_active_segment_or_before_a_segment_within_the_min_lag() -> None:
    model = three_appends()
    free = model.plan(1000, Config())
    assert (free.clean, free.first_dirty, free.first_uncleanable, free.ratio, free.work) == (True, 0, 3, 1.0, 150)
    lagging = model.plan(1000, Config(min_compaction_lag_ms=500))
    assert (lagging.clean, lagging.first_uncleanable, lagging.work) == (True, 2, 100)


def test_an_old_active_segment_counts_as_rolled_and_a_transaction_bounds_the_range() -> None:
    model = three_appends()
    assert model.plan(3500, Config(segment_ms=2000)).first_uncleanable == 4
    model.append([Rec(4, "d", "5", timestamp=1000, producer=1, transactional=True)], 1000)
    model.append([Rec(5, "e", "6", timestamp=1000)], 1000)
    sized(model, 100, 50, 50, 50, 50)
    planned = model.plan(1000, Config())
    assert (planned.first_uncleanable, planned.reason) == (4, "dirty ratio 1.00 > 0.00")


def test_a_pass_keeps_each_keys_latest_record_and_moves_the_checkpoint() -> None:
    model = three_appends()
    model.clean(model.plan(1000, Config()), 1000, Config())
    model.adopt(objects(model), Config())
    assert ([r.offset for r in model.log], model.checkpoint, model.last_clean, model.version) == ([1, 2, 3], 3, 1000, 4)


def test_the_dirty_ratio_must_be_strictly_above_the_minimum_and_the_reason_says_so() -> None:
    model = three_appends()
    model.clean(model.plan(1000, Config()), 1000, Config())
    model.adopt(objects(model), Config())
    model.append([Rec(4, "d", "5", timestamp=1000)], 1000)
    # clean: [1, 3) of 80 bytes; cleanable: [3, 4) of 80 bytes; ratio 0.5
    sized(model, 80, 80, 50)
    at_half = model.plan(1001, Config(min_cleanable_dirty_ratio=0.5))
    assert (at_half.clean, at_half.reason, at_half.clean_bytes, at_half.cleanable_bytes) == (
        False,
        "dirty ratio 0.50 <= 0.50",
        80,
        80,
    )
    assert model.plan(1001, Config(min_cleanable_dirty_ratio=0.49)).clean is True


def test_max_lag_selects_a_partition_below_the_ratio_and_puts_it_first() -> None:
    model = three_appends()
    choice = model.plan(3000, Config(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=2000))
    # the first segment's first timestamp, 0, counts as none (Kafka's); the next one's, 900, was due at 2900
    assert (choice.clean, choice.why, choice.delay, choice.overdue, choice.reason) == (
        True,
        "max lag",
        100,
        100,
        "max.compaction.lag.ms exceeded by 100ms",
    )


def test_a_tombstone_gets_its_horizon_then_goes_once_it_passed() -> None:
    model = Model("offset")
    model.append([Rec(0, "a", "1"), Rec(1, "a", None)], 0)
    model.append([Rec(2, "b", "2")], 0)
    sized(model, 100, 50)
    model.clean(model.plan(10, Config()), 10, Config(delete_retention_ms=100))
    model.adopt(objects(model), Config())
    assert [(r.offset, r.horizon) for r in model.log] == [(1, 110), (2, None)] and model.next_horizon == 110
    assert model.plan(109, Config()).clean is False
    due = model.plan(110, Config())
    assert (due.clean, due.why, due.reason, due.purge) == (
        True,
        "tombstones",
        "tombstones expired: delete horizon passed",
        True,
    )
    model.clean(due, 110, Config())
    model.adopt(objects(model), Config())
    assert [r.offset for r in model.log] == [2] and [(s.base, s.next) for s in model.layout] == [(2, 3)]


def test_retention_drops_leading_segments_by_time_and_by_bytes() -> None:
    model = three_appends()
    by_time = model.plan(1000, Config(delete=True, retention_ms=500))
    assert (by_time.clean, by_time.log_start, by_time.reason, by_time.expired) == (
        True,
        2,
        "dirty ratio 1.00 > 0.00; retention: 1 segment(s) expired",
        ("segments/00000000000000000000.parquet",),
    )
    # 200 bytes, 100 over: the first segment goes; at 120 the 80 over would not take a whole segment
    by_bytes = model.plan(1000, Config(delete=True, retention_bytes=100))
    assert (by_bytes.clean, by_bytes.log_start) == (True, 2)
    assert model.plan(1000, Config(delete=True, retention_bytes=120)).log_start == 0
    model.clean(by_time, 1000, Config())
    assert [r.offset for r in model.log] == [2, 3] and model.log_start == 2


def test_overdue_partitions_go_first_then_the_dirtiest_and_the_budget_defers_the_rest() -> None:
    clean = Choice(True, "dirty ratio", 0, 0, 3, work=150, reason="dirty ratio 1.00 > 0.00")
    choices = {
        "x": replace(clean, ratio=0.5),
        "y": replace(clean, overdue=5, ratio=0.1),
        "z": replace(clean, overdue=7, ratio=0.2),
        "w": replace(clean, ratio=0.9),
        "skipped": Choice(False, "skip", 0),
    }
    assert order(choices) == (["z", "y", "w", "x"], [])
    assert order(choices, budget=200) == (["z"], ["y", "w", "x"])
    assert order(choices, budget=300) == (["z", "y"], ["w", "x"])
    listed = plan_json(0, choices, 200)["partitions"]
    assert [(p["partition"], p["decision"], p["reason"]) for p in listed] == [
        ("z", "clean", "dirty ratio 1.00 > 0.00; overdue, so first in the per-run byte budget"),
        ("skipped", "skip", ""),
        *((k, "skip", "deferred: per-run byte budget 200 exhausted (dirty ratio 1.00 > 0.00)") for k in "ywx"),
    ]


def test_durations_read_as_the_plans_reasons_write_them() -> None:
    assert [duration(ms) for ms in (1, 999, 1000, 3_599_999, 90_061_000)] == ["1ms", "999ms", "1s", "59m59s", "1d1h"]


def test_an_erasure_on_a_log_with_no_segment_left_is_carried_out_at_once_and_overdue_past_its_deadline() -> None:
    model = Model("offset")
    model.append([Rec(0, "a", "1", timestamp=0)], 0)
    model.forget("a", 0, deadline=500)
    sized(model, 10, 10)
    gone = model.plan(10_000, Config(delete=True, retention_ms=100, segment_ms=100))
    assert (gone.clean, gone.why, gone.overdue, gone.reason) == (
        True,
        "nothing left",
        9500,
        "retention: 2 segment(s) expired",
    )


# Layout: which objects a pass writes -----------------------------------------------------------------------------


def test_a_clean_segment_that_loses_a_few_records_takes_a_deletion_vector_and_its_age_counts_from_the_first() -> None:
    model = Model("offset")
    model.append([Rec(i, k, str(i), timestamp=0) for i, k in enumerate("abcdefghij")], 0)
    model.append([Rec(10, "k", "x", timestamp=0)], 0)
    sized(model, 10_000, 10)  # large: it need not merge with its neighbours
    model.clean(model.plan(10, Config()), 10, Config())
    model.adopt(objects(model), Config())
    model.append([Rec(11, "a", "new", timestamp=20)], 20)
    model.append([Rec(12, "l", "x", timestamp=20)], 20)
    sized(model, 10_000, 10, 10, 10)
    model.clean(model.plan(30, Config()), 30, Config())
    assert [(g.action, g.segments[0].base) for g in model.pending.groups] == [  # type: ignore[union-attr]
        ("vector", 0),
        ("rewrite", 10),
    ]  # two small neighbours merge
    vectored = objects(model)
    assert vectored[0]["deletes"] == {"created_ms": 30, "count": 1}
    with pytest.raises(AssertionError, match="the deletion vector at 0"):
        model.adopt([{**vectored[0], "deletes": {"created_ms": 31, "count": 1}}, *vectored[1:]], Config())
    model.adopt(vectored, Config())
    assert (model.layout[0].vector_created, model.layout[0].created) == (30, 0)
    # past deletion.vector.max.age.ms the vector is due, and its rewrite selects the partition
    aged = model.plan(30 + 5000, Config(), Bounds(vector_max_age=5000))
    assert (aged.clean, aged.why, aged.overdue, aged.reason) == (
        True,
        "deletion vectors",
        0,
        "deletion vectors at least deletion.vector.max.age.ms old (due now): rewrite to remove records physically",
    )


def test_rewritten_segments_merge_with_small_neighbours_and_keep_the_last_sources_time() -> None:
    model = Model("offset")
    model.append([Rec(0, "a", "1", timestamp=0)], 100)
    model.append([Rec(1, "a", "2", timestamp=0)], 200)
    model.append([Rec(2, "b", "3", timestamp=0)], 300)
    model.append([Rec(3, "c", "4", timestamp=0)], 400)
    sized(model, 10, 10, 10, 10)
    model.clean(model.plan(500, Config()), 500, Config())
    assert [(g.action, [s.base for s in g.segments]) for g in model.pending.groups] == [  # type: ignore[union-attr]
        ("rewrite", [0, 1, 2])
    ]
    assert [(s.base, s.next, s.created, sorted(s.written)) for s in model.settled(Config()).layout] == [
        (0, 3, 300, [1, 2]),
        (3, 4, 400, [3]),
    ]


@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        ({"created_ms": 500}, "when it was written and how many records it holds"),
        ({"record_count": 3}, "when it was written and how many records it holds"),
        ({"next_offset": 1}, "the objects of the log"),
    ],
)
def test_the_job_must_write_what_the_model_lays_out(wrong: dict[str, int], says: str) -> None:
    model = Model("offset")
    model.append([Rec(0, "a", "1", timestamp=0)], 100)
    model.append([Rec(1, "b", "2", timestamp=0)], 200)
    model.append([Rec(2, "c", "3", timestamp=0)], 300)
    sized(model, 10, 10, 10)
    model.clean(model.plan(500, Config()), 500, Config())
    first, *rest = objects(model)
    with pytest.raises(AssertionError, match=says):
        model.adopt([{**first, **wrong}, *rest], Config())


# .log batches: Kafka's filterTo and producer state (reference §3.7, §3.10-§3.12, §8.2) ----------------------------


def idempotent(base: int, keys: str, producer: int, sequence: int, at: int) -> tuple[list[Rec], Batch]:
    recs = [
        Rec(base + i, k, f"{k}{base + i}", timestamp=at, producer=producer, epoch=0, batch=base)
        for i, k in enumerate(keys)
    ]
    return recs, Batch(
        base, base + len(keys) - 1, len(keys), producer, 0, sequence, base_timestamp=at, max_timestamp=at
    )


def plain(base: int, key: str, at: int, value: str | None = "v") -> tuple[list[Rec], Batch]:
    return [Rec(base, key, value, timestamp=at, batch=base)], Batch(base, base, 1, base_timestamp=at, max_timestamp=at)


def log_model(*appends: tuple[list[Rec], Batch]) -> Model:
    model = Model("offset")
    for recs, batch in appends:
        model.append(recs, 0, [batch])
    return sized(model, *(10 for _ in appends))


def cleaned(model: Model, now: int, config: Config) -> list[tuple[int, int, int]]:
    """One pass, laid out as the model says: (base, last, record count) of every batch."""
    model.clean(model.plan(now, config), now, config)
    model.adopt(objects(model, config), config)
    return [(b.base, b.last, b.count) for b in model.batches]


def test_t14_a_live_producers_last_batch_stays_empty_and_its_earlier_ones_go() -> None:
    """``rec(0,0)@0, I(1)[k0]@1, I(2)[k0]@2, I(3)[k0]@3, I(2)[k1]@4 | active@5``."""
    model = log_model(
        plain(0, "0", 0),
        idempotent(1, "0", 1, 0, 0),
        idempotent(2, "0", 2, 0, 0),
        idempotent(3, "0", 3, 0, 0),
        idempotent(4, "1", 2, 1, 0),
        plain(5, "9", 0),
    )
    assert cleaned(model, 10, Config()) == [(1, 1, 0), (3, 3, 1), (4, 4, 1), (5, 5, 1)]
    assert model.events["emptied: an active producer's last batch"] == 1


def test_an_expired_producers_empty_batch_goes_at_the_next_pass() -> None:
    model = log_model(idempotent(0, "k", 1, 0, 0), plain(1, "k", 0), plain(2, "z", 0))
    config = Config(producer_id_expiration_ms=1000)
    assert cleaned(model, 10, config) == [(0, 0, 0), (1, 1, 1), (2, 2, 1)]
    recs, batch = plain(3, "y", 20)
    model.append(recs, 20, [batch])
    sized(model, 10, 10, 10)
    # producer 1's last batch is 1000 ms old: it has expired, and its empty batch is stale
    assert cleaned(model, 1000, config) == [(1, 1, 1), (2, 2, 1), (3, 3, 1)]
    assert model.events["dropped, empty"] == 1


def test_a_producers_last_timestamp_is_its_last_batchs_even_where_an_earlier_one_is_later() -> None:
    """Producer 1 wrote ``b`` at 5000, then ``a`` at 1000 (its clock behind): it expires 3000 ms after 1000, though
    its earlier batch, which survives the first pass, is later; so that batch goes at once once its record does."""
    model = log_model(
        idempotent(0, "b", 1, 0, 5000), idempotent(1, "a", 1, 1, 1000), plain(2, "a", 1000), plain(3, "z", 1000)
    )
    config = Config(producer_id_expiration_ms=3000)
    assert model.active(1, 4000, config) is None
    assert cleaned(model, 4000, config) == [(0, 0, 1), (2, 2, 1), (3, 3, 1)]
    for recs, batch in (plain(4, "b", 6000), plain(5, "y", 6000)):
        model.append(recs, 6000, [batch])
    sized(model, 10, 10, 10, 10)
    assert cleaned(model, 6000, config) == [(2, 2, 1), (3, 3, 1), (4, 4, 1), (5, 5, 1)]


def test_the_last_batch_before_the_first_uncleanable_offset_stays_empty() -> None:
    """T12 (KAFKA-17076): the tombstone gets its horizon, then goes; its batch, the range's last, stays empty."""
    model = log_model(plain(0, "a", 0), plain(1, "a", 0, value=None), plain(2, "z", 0))
    config = Config(delete_retention_ms=0)
    assert cleaned(model, 10, config) == [(1, 1, 1), (2, 2, 1)]
    assert [b.horizon for b in model.batches] == [10, None]
    assert cleaned(model, 20, config) == [(1, 1, 0), (2, 2, 1)]
    assert model.events["emptied: the last batch before the first uncleanable offset"] == 1


def test_a_log_append_time_batch_rebuilt_keeps_its_append_time_as_max_timestamp() -> None:
    recs = [Rec(0, "a", "1", timestamp=700, batch=0), Rec(1, "b", "2", timestamp=700, batch=0)]
    stamped = Batch(0, 1, 2, base_timestamp=100, max_timestamp=700, log_append_time=True, codec=1)
    model = log_model((recs, stamped), plain(2, "a", 800), plain(3, "z", 800))
    cleaned(model, 900, Config())
    assert [b.header() for b in model.batches if b.base == 0] == [
        {
            "base": 0,
            "last": 1,
            "count": 1,
            "producer": -1,
            "epoch": -1,
            "sequence": -1,
            "codec": 1,
            "log_append_time": True,
            "transactional": False,
            "control": False,
            "base_timestamp": 700,
            "max_timestamp": 700,
            "horizon": None,
        }
    ]
