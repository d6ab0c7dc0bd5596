"""Read-ahead keeps the stream's order, bounds what it holds, stops its workers early, and raises in order."""

from __future__ import annotations

import queue
import threading
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from compaction.read import ahead
from compaction.read.ahead import QUEUE_BATCHES, in_order


def batch(unit: int, i: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array([unit * 100 + i])], names=["n"])


def units(
    count: int, per_unit: int, made: list[int], fail_at: int | None = None
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


class WatchedQueue(queue.Queue):
    """A read-ahead queue that says when its worker waits on it, full (``waiting``, set as a put finds it full and
    cleared as a put lands), and wakes the test then."""

    changed = threading.Condition()
    made: ClassVar[list[WatchedQueue]] = []

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize)
        self.waiting = False
        WatchedQueue.made.append(self)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if self.full():
            self.waiting = True
            with self.changed:
                self.changed.notify_all()
        super().put(item, block, timeout)
        with self.changed:
            self.changed.notify_all()

    def _put(self, item: Any) -> None:  # under the queue's lock, with the item: no longer waiting
        self.waiting = False
        super()._put(item)

    def blocked(self) -> bool:
        with self.mutex:
            return self.waiting and self._qsize() >= self.maxsize


def test_a_consumer_that_stops_early_stops_the_workers_and_holds_little(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ahead, "queue", types.SimpleNamespace(Queue=WatchedQueue, Full=queue.Full))
    monkeypatch.setattr(WatchedQueue, "made", [])
    made: list[int] = []
    before = threading.active_count()
    stream = in_order(units(10, 50, made), depth=2)
    assert next(stream).column(0)[0].as_py() == 0
    with WatchedQueue.changed:  # (the timeout only ends a run in which the workers never wait)
        waiting = WatchedQueue.changed.wait_for(
            lambda: len(WatchedQueue.made) == 2 and all(q.blocked() for q in WatchedQueue.made), timeout=60
        )
    assert waiting, "both workers wait on a full queue"
    # The first unit: the batch taken, a full queue and the one in hand; the second: a full queue and one in hand.
    assert Counter(made) == {0: QUEUE_BATCHES + 2, 1: QUEUE_BATCHES + 1}, "each worker stops at its queue's bound"
    stream.close()
    assert threading.active_count() == before, "no worker is left running"


def test_an_error_is_raised_where_its_units_batches_would_come() -> None:
    got = []
    with pytest.raises(OSError, match="unit 2 failed"):
        for b in in_order(units(5, 3, [], fail_at=2), depth=3):
            got.append(b.column(0)[0].as_py())
    assert got == [0, 1, 2, 100, 101, 102, 200]
