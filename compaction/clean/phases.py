"""Where a run's time goes: the driver's phases (wall time) and the executors' work (task time).

Executor code marks its phases with :func:`phase` (``read``: fetching and decoding segments; ``decide``:
the facts and the winner search; ``write``: filtering, encoding and writing the new objects). A task body
wrapped by :func:`timed` adds its phases to a Spark accumulator, which the driver reads once the job is
done. Task times are summed over tasks (core-seconds, and a retried attempt counts too), so they show the
balance of the work, while the driver's figures are wall time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

import pyarrow as pa
from pyspark import Accumulator, AccumulatorParam

T = TypeVar("T")
R = TypeVar("R")

#: The phases of the running task in this Python worker (one task at a time): name -> seconds.
_current: dict[str, float] = {}
#: The phases open now, innermost last.
_open: list[str] = []


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the time of the block towards the running task's phase ``name``; a phase opened inside it
    counts its own time instead (phases exclude each other)."""
    started = time.perf_counter()
    _open.append(name)
    try:
        yield
    finally:
        _open.pop()
        seconds = time.perf_counter() - started
        _current[name] = _current.get(name, 0.0) + seconds
        if _open:
            _current[_open[-1]] = _current.get(_open[-1], 0.0) - seconds


class PhaseSeconds(AccumulatorParam[dict[str, float]]):
    """Sums of seconds by phase name."""

    def zero(self, value: dict[str, float]) -> dict[str, float]:
        return {}

    def addInPlace(self, value1: dict[str, float], value2: dict[str, float]) -> dict[str, float]:
        for name, seconds in value2.items():
            value1[name] = value1.get(name, 0.0) + seconds
        return value1


def timed(fn: Callable[[T], R], seconds: Accumulator[dict[str, float]]) -> Callable[[T], R]:
    """``fn`` as a task body that adds the phases it marks to ``seconds``.

    When it returns, Arrow's allocator hands the memory the task freed back to the system: an idle Python
    worker would otherwise keep its last task's peak (hundreds of MB) while its neighbours work.
    """
    return _Timed(fn, seconds)


class _Timed(Generic[T, R]):
    # A class of this module, not a closure: Spark's pickler copies a closure's globals into the executor,
    # and the copy of ``_current`` would not be the one :func:`phase` fills there.
    def __init__(self, fn: Callable[[T], R], seconds: Accumulator[dict[str, float]]) -> None:
        self.fn = fn
        self.seconds = seconds

    def __call__(self, value: T) -> R:
        _current.clear()
        try:
            return self.fn(value)
        finally:
            self.seconds.add(dict(_current))
            _current.clear()
            pa.default_memory_pool().release_unused()


def as_ms(seconds: dict[str, float], prefix: str = "") -> dict[str, int]:
    return {f"{prefix}{name}": round(value * 1000) for name, value in sorted(seconds.items())}
