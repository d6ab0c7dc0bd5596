"""The phase timer the executors' tasks report their time with."""

from __future__ import annotations

import threading
import types

import pytest

from compaction.engine import phases


class Clock:
    """A perf_counter that moves only when the test says so."""

    def __init__(self) -> None:
        self.seconds = 100.0

    def perf_counter(self) -> float:
        return self.seconds

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(phases, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    return fake


def test_a_phase_inside_another_counts_its_own_time_only(clock: Clock) -> None:
    with phases.task_phases() as seen, phases.phase("write"):
        clock.advance(2.0)
        with phases.phase("read"):
            clock.advance(5.0)
        clock.advance(0.5)
    assert seen == {"write": 2.5, "read": 5.0}, "the nested read is not counted towards write"


def test_a_phase_entered_twice_adds_up(clock: Clock) -> None:
    with phases.task_phases() as seen:
        for seconds in (1.0, 3.0):
            with phases.phase("decide"):
                clock.advance(seconds)
    assert seen == {"decide": 4.0}


def test_each_task_starts_from_nothing(clock: Clock) -> None:
    with phases.phase("decide"):
        clock.advance(1.0)  # outside a task body: left for the next task to clear
    with phases.task_phases() as seen:
        pass
    assert seen == {}


def test_tasks_on_threads_of_one_process_keep_their_phases_apart() -> None:
    """Sail runs tasks on threads of one interpreter: one task's phases never reach another's."""
    opened, finished = threading.Event(), threading.Event()
    seen: dict[str, dict[str, float]] = {}

    def first() -> None:
        with phases.task_phases() as found, phases.phase("decide"):
            opened.set()
            finished.wait(10)
        seen["first"] = found

    def second() -> None:
        opened.wait(10)
        with phases.task_phases() as found, phases.phase("read"):
            pass
        seen["second"] = found
        finished.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert set(seen["first"]) == {"decide"} and seen["first"]["decide"] >= 0
    assert set(seen["second"]) == {"read"} and seen["second"]["read"] >= 0
