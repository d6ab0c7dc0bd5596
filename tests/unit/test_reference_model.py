"""The reference model the differential tests hold the job to, held to hand-made cases itself: a model that planned
or kept nothing would agree with a job that does nothing."""

from __future__ import annotations

from dataclasses import replace

from tests.helpers.model import Choice, Config, Model, Rec, Segment, order


def three_appends() -> tuple[Model, list[Segment]]:
    """``a b | a | c``: the last append is the active segment; sizes in bytes 100, 50, 50."""
    model = Model("offset")
    model.append([Rec(0, "a", "1", timestamp=0), Rec(1, "b", "2", timestamp=0)])
    model.append([Rec(2, "a", "3", timestamp=900)])
    model.append([Rec(3, "c", "4", timestamp=1000)])
    return model, [Segment(0, 2, 100, 2, 0), Segment(2, 3, 50, 1, 900), Segment(3, 4, 50, 1, 1000)]


def test_the_range_ends_at_the_active_segment_or_before_a_segment_within_the_min_lag() -> None:
    model, layout = three_appends()
    free = model.plan(1000, layout, Config())
    assert (free.clean, free.first_dirty, free.first_uncleanable, free.ratio, free.work) == (True, 0, 3, 1.0, 150)
    lagging = model.plan(1000, layout, Config(min_compaction_lag_ms=500))
    assert (lagging.clean, lagging.first_uncleanable, lagging.work) == (True, 2, 100)


def test_an_old_active_segment_counts_as_rolled_and_a_transaction_bounds_the_range() -> None:
    model, layout = three_appends()
    assert model.plan(3500, layout, Config(segment_ms=2000)).first_uncleanable == 4
    model.append([Rec(4, "d", "5", timestamp=1000, producer=1, transactional=True)])
    model.append([Rec(5, "e", "6", timestamp=1000)])
    layout += [Segment(4, 5, 50, 1, 1000), Segment(5, 6, 50, 1, 1000)]
    assert model.plan(1000, layout, Config()).first_uncleanable == 4


def test_a_pass_keeps_each_keys_latest_record_and_moves_the_checkpoint() -> None:
    model, layout = three_appends()
    model.clean(model.plan(1000, layout, Config()), 1000, Config())
    assert ([r.offset for r in model.log], model.checkpoint, model.last_clean) == ([1, 2, 3], 3, 1000)


def test_the_dirty_ratio_must_be_strictly_above_the_minimum() -> None:
    model, layout = three_appends()
    model.clean(model.plan(1000, layout, Config()), 1000, Config())
    model.append([Rec(4, "d", "5", timestamp=1000)])
    # clean: [1, 3) of 80 bytes; cleanable: [3, 4) of 80 bytes; ratio 0.5
    layout = [Segment(1, 3, 80, 2, 900), Segment(3, 4, 80, 1, 1000), Segment(4, 5, 50, 1, 1000)]
    assert model.plan(1001, layout, Config(min_cleanable_dirty_ratio=0.5)).clean is False
    assert model.plan(1001, layout, Config(min_cleanable_dirty_ratio=0.49)).clean is True


def test_max_lag_selects_a_partition_below_the_ratio_and_puts_it_first() -> None:
    model, layout = three_appends()
    choice = model.plan(3000, layout, Config(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=2000))
    # the first segment's first timestamp, 0, counts as none (Kafka's); the next one's, 900, was due at 2900
    assert (choice.clean, choice.why, choice.delay, choice.overdue) == (True, "max lag", 100, 100)


def test_a_tombstone_gets_its_horizon_then_goes_once_it_passed() -> None:
    model = Model("offset")
    model.append([Rec(0, "a", "1"), Rec(1, "a", None)])
    model.append([Rec(2, "b", "2")])
    layout = [Segment(0, 2, 100, 2, 0), Segment(2, 3, 50, 1, 0)]
    model.clean(model.plan(10, layout, Config()), 10, Config(delete_retention_ms=100))
    assert [(r.offset, r.horizon) for r in model.log] == [(1, 110), (2, None)] and model.next_horizon == 110
    layout = [Segment(1, 2, 50, 1, 0), Segment(2, 3, 50, 1, 0)]
    assert model.plan(109, layout, Config()).clean is False
    due = model.plan(110, layout, Config())
    assert (due.clean, due.why) == (True, "tombstones")
    model.clean(due, 110, Config())
    assert [r.offset for r in model.log] == [2]


def test_retention_drops_leading_segments_by_time_and_by_bytes() -> None:
    model, layout = three_appends()
    by_time = model.plan(1000, layout, Config(delete=True, retention_ms=500))
    assert (by_time.clean, by_time.log_start) == (True, 2)
    # 200 bytes, 100 over: the first segment goes; at 120 the 80 over would not take a whole segment
    by_bytes = model.plan(1000, layout, Config(delete=True, retention_bytes=100))
    assert (by_bytes.clean, by_bytes.log_start) == (True, 2)
    assert model.plan(1000, layout, Config(delete=True, retention_bytes=120)).log_start == 0
    model.clean(by_time, 1000, Config())
    assert [r.offset for r in model.log] == [2, 3] and model.log_start == 2


def test_overdue_partitions_go_first_then_the_dirtiest_and_the_budget_defers_the_rest() -> None:
    clean = Choice(True, "dirty ratio", 0, 0, 3, work=150)
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
