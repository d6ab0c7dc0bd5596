"""Read-ahead keeps the stream's order, bounds what it holds, stops its workers early, and raises in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest

from compaction.read.ahead import QUEUE_BATCHES, in_order


def batch(unit: int, i: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array([unit * 100 + i])], names=["n"])


def units(count: int, per_unit: int, made: list[int], fail_at: int | None = None
          ) -> list[Callable[[], Iterator[pa.RecordBatch]]]:
    def unit(u: int) -> Callable[[], Iterator[pa.RecordBatch]]:
        def produce() -> Iterator[pa.RecordBatch]:
            for i in range(per_unit):
                if u == fail_at and i == 1:
                    raise OSError(f"unit {u} failed")
                made.append(u)
                yield batch(u, i)
        return produce
    return [unit(u) for u in range(count)]


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_batches_come_in_the_units_order(depth: int) -> None:
    got = [b.column(0)[0].as_py() for b in in_order(units(5, 3, []), depth)]
    assert got == [u * 100 + i for u in range(5) for i in range(3)]


def test_a_consumer_that_stops_early_stops_the_workers_and_holds_little() -> None:
    made: list[int] = []
    before = threading.active_count()
    stream = in_order(units(10, 50, made), depth=2)
    assert next(stream).column(0)[0].as_py() == 0
    time.sleep(0.3)
    assert len(made) <= 2 * (QUEUE_BATCHES + 2), "each worker stops at its queue's bound"
    stream.close()
    assert threading.active_count() == before, "no worker is left running"


def test_an_error_is_raised_where_its_units_batches_would_come() -> None:
    got = []
    with pytest.raises(OSError, match="unit 2 failed"):
        for b in in_order(units(5, 3, [], fail_at=2), depth=3):
            got.append(b.column(0)[0].as_py())
    assert got == [0, 1, 2, 100, 101, 102, 200]
