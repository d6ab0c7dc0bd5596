"""A run's progress lines, however many partitions commit at once: each whole on its own line, and numbered in the
order they are printed (a terminal once showed ``[2/4] cleaned ...[3/4] cleaned ...`` on one line, then an empty
line, and ``[3/4]`` before ``[2/4]``)."""

from __future__ import annotations

import contextlib
import io
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from compaction.clean.cleaner import Cleaner
from compaction.clean.commit import done_cleaning
from compaction.cli.output import Output
from compaction.store import Store
from compaction.synthetic import GenerateSpec, generate
from tests.helpers.inline import InlineSession
from tests.helpers.settings import settings_with

NOW = 1_767_225_600_000
DAY = 86_400_000
PARTITIONS = 24


class SlowTerminal(io.StringIO):
    """A stream that yields to other threads inside every write, as a busy terminal or pipe does: whatever a line is
    written in more than one write comes apart."""

    def write(self, text: str) -> int:
        time.sleep(0.0005)
        return super().write(text)


def test_many_partitions_committing_at_once_print_whole_lines_numbered_in_print_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(str(tmp_path / "store"))
    generate(
        store,
        GenerateSpec(
            topics=("orders", "payments"),
            partitions=PARTITIONS // 2,
            records=PARTITIONS * 200,
            keys=40,
            segment_records=50,
            seed=5,
            end_time_ms=NOW - DAY,
        ),
        now_ms=NOW - DAY,
    )
    terminal = SlowTerminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    committing = threading.Barrier(8, timeout=5)  # groups of commits finish together

    def at_once(*args: Any, **kwargs: Any) -> Any:
        result = done_cleaning(*args, **kwargs)
        with contextlib.suppress(threading.BrokenBarrierError):  # the last few, fewer than a group
            committing.wait()
        return result

    monkeypatch.setattr("compaction.clean.cleaner.done_cleaning", at_once)
    settings = settings_with({"log.cleanup.policy": "compact", "log.roll.ms": 60_000})
    report = Cleaner(InlineSession(), store, settings, progress=Output().line).run(NOW)
    monkeypatch.undo()

    assert report.totals["cleaned"] == PARTITIONS, report.failed
    lines = terminal.getvalue().split("\n")
    assert lines[-1] == ""  # the output ends with a line's end
    numbered = [line for line in lines if line.startswith("[")]
    assert all(
        re.fullmatch(rf"\[\d+/{PARTITIONS}\] cleaned (orders|payments)-\d+ \[\d+, \d+\): [^\[]*", line)
        for line in numbered
    ), numbered
    assert [int(line[1 : line.index("/")]) for line in numbered] == list(range(1, PARTITIONS + 1))
    assert "" not in lines[:-1]  # no empty line left where two lines ran together
