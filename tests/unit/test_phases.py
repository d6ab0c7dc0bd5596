"""The phase timer the executors' tasks report their time with."""

from __future__ import annotations

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
