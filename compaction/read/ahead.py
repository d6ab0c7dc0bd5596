"""Read-ahead: decode the next units of a stream (live files, or partitions) on worker threads, in order.

A stream read on one thread decodes one segment at a time; engines such as DuckDB decode several at once.
Here up to ``depth`` units are read at the same time, each into a queue of a few batches, and the batches
come out in the units' order: memory holds ``depth x (queue + 1)`` batches at most. A consumer that stops
early (``read | head``, a row limit) stops the workers; a worker's error is raised where its unit's batches
would have come.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator

import pyarrow as pa

QUEUE_BATCHES = 2
_DONE = object()


class _Unit:
    def __init__(self, produce: Callable[[], Iterator[pa.RecordBatch]], stop: threading.Event) -> None:
        self.queue: queue.Queue[object] = queue.Queue(maxsize=QUEUE_BATCHES)
        self.thread = threading.Thread(
            target=self._run, args=(produce, stop), daemon=True, name="compaction-read-ahead"
        )
        self.thread.start()

    def _put(self, item: object, stop: threading.Event) -> bool:
        while not stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, produce: Callable[[], Iterator[pa.RecordBatch]], stop: threading.Event) -> None:
        batches = produce()
        try:
            for batch in batches:
                if not self._put(batch, stop):
                    return
            self._put(_DONE, stop)
        except BaseException as err:  # handed to the consumer, raised there in the stream's order
            self._put(err, stop)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def batches(self) -> Iterator[pa.RecordBatch]:
        while True:
            item = self.queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


def in_order(
    units: Iterable[Callable[[], Iterator[pa.RecordBatch]]], depth: int = 2
) -> Generator[pa.RecordBatch, None, None]:
    """The batches of ``units`` (each a function starting its stream) in order, ``depth`` units at a time."""
    if depth <= 1:
        for start in units:
            yield from start()
        return
    stop = threading.Event()
    pending = iter(units)
    running: list[_Unit] = []
    try:
        for produce in pending:
            running.append(_Unit(produce, stop))
            if len(running) >= depth:
                break
        while running:
            yield from running[0].batches()
            running.pop(0).thread.join()
            for produce in pending:  # keep ``depth`` units in flight
                running.append(_Unit(produce, stop))
                break
    finally:
        stop.set()
        for left in running:
            left.thread.join()
