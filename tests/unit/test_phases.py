"""The phase timer the executors' tasks report their time with."""

from __future__ import annotations

import threading
import time

from compaction.engine import phases


def test_a_phase_inside_another_counts_its_own_time_only() -> None:
    with phases.task_phases() as seen:
        _nested()
    assert seen["read"] >= 0.05 and seen["write"] >= 0.02
    assert seen["write"] < 0.05, "the nested read is not counted towards write"


def test_each_task_starts_from_nothing() -> None:
    with phases.phase("decide"):
        pass  # outside a task body: left for the next task to clear
    with phases.task_phases() as seen:
        pass
    assert seen == {}


def _nested() -> None:
    with phases.phase("write"):
        time.sleep(0.02)
        with phases.phase("read"):
            time.sleep(0.05)


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
