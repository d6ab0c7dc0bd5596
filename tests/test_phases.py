"""The phase timer the executors' tasks report their time with."""

from __future__ import annotations

import time

from compaction.clean import phases


def test_a_phase_inside_another_counts_its_own_time_only() -> None:
    seen = _Sink()
    phases.timed(lambda _: _nested(), seen)(None)  # type: ignore[arg-type]
    assert seen.added["read"] >= 0.05 and seen.added["write"] >= 0.02
    assert seen.added["write"] < 0.05, "the nested read is not counted towards write"


def test_each_task_starts_from_nothing() -> None:
    seen = _Sink()
    with phases.phase("decide"):
        pass  # outside a task body: left for the next task to clear
    phases.timed(lambda _: None, seen)(None)  # type: ignore[arg-type]
    assert seen.added == {}


def _nested() -> None:
    with phases.phase("write"):
        time.sleep(0.02)
        with phases.phase("read"):
            time.sleep(0.05)


class _Sink:
    """Stands in for the Spark accumulator."""

    def __init__(self) -> None:
        self.added: dict[str, float] = {}

    def add(self, value: dict[str, float]) -> None:
        phases.PhaseSeconds().addInPlace(self.added, value)
