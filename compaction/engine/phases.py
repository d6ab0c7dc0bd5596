"""Where a task's time goes: the phases executor code marks, summed per task and carried in its result rows.

Executor code marks its phases with :func:`phase` (``read``: fetching and decoding segments; ``decide``:
the facts and the winner search; ``write``: filtering, encoding and writing the new objects). The task runner
(:mod:`compaction.engine.isolation`) takes a task's sums with :func:`task_phases` and returns them in the
task's result row, which the driver adds up for the run report. Task times are summed over tasks (core-seconds),
so they show the balance of the work, while the driver's figures are wall time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class _Counting(threading.local):
    """Per thread (the units of a packed task may run on threads of one worker, and Sail runs its tasks on threads of
    one interpreter: their phases must not mix): the phases of the running unit, name -> seconds, and those open now,
    innermost last."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.open: list[str] = []


_counting = _Counting()


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the time of the block towards the running task's phase ``name``; a phase opened inside it
    counts its own time instead (phases exclude each other)."""
    started = time.perf_counter()
    current, opened = _counting.current, _counting.open
    opened.append(name)
    try:
        yield
    finally:
        opened.pop()
        seconds = time.perf_counter() - started
        current[name] = current.get(name, 0.0) + seconds
        if opened:
            current[opened[-1]] = current.get(opened[-1], 0.0) - seconds


@contextmanager
def task_phases() -> Iterator[dict[str, float]]:
    """The phases a task body marks: the dict yielded holds their seconds once the block is done."""
    current = _counting.current
    current.clear()
    found: dict[str, float] = {}
    try:
        yield found
    finally:
        found.update(current)
        current.clear()


def add(total: dict[str, float], seconds: dict[str, float]) -> None:
    """Add one task's seconds by phase to ``total``."""
    for name, value in seconds.items():
        total[name] = total.get(name, 0.0) + value


def as_ms(seconds: dict[str, float], prefix: str = "") -> dict[str, int]:
    return {f"{prefix}{name}": round(value * 1000) for name, value in sorted(seconds.items())}
