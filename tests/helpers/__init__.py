"""What the tests share: builders of records, batches and settings, the one CLI runner, the servers they start on
127.0.0.1, and the clean pass's stages run in this process."""

import re
import threading
from pathlib import Path

#: The checkout: conf/, scripts/, dags/ and the package the tests run.
ROOT = Path(__file__).resolve().parents[2]
#: What a user must not see on stderr after a successful run (SPEC §5): a Spark or JVM ERROR/WARN line, a Java or
#: Python stack trace, a JVM log line.
SPARK_NOISE = re.compile(
    r"\b(?:ERROR|WARN|WARNING|FATAL)\b|^\s+at [\w$.]+\(|Exception|Traceback|\[warning\]", re.MULTILINE
)


def ahead_of_the_wall_clock_ms(days: int = 30) -> int:
    """A ``--now`` that many days ahead of the wall clock (at midnight UTC), for a test whose runs must stamp delete
    horizons from ``--now`` rather than from the wall clock: read when the test runs, so the clock never overtakes
    it as it would a fixed date."""
    import time

    day = 86_400_000
    return (int(time.time() * 1000) // day + days) * day


def past_every_write_ms() -> int:
    """A wall clock a minute ahead of the real one: past every object written so far, whatever the filesystem's
    timestamp resolution, so that a gc with no grace removes what it may without waiting for the clock."""
    import time

    return int(time.time() * 1000) + 60_000


class Lines(list[str]):
    """The lines a call shows people, collected (a :class:`compaction.display.Progress`): a counted line numbered
    ``[n/of]`` in the order collected, as the command line numbers it."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()  # a pass's commits report from many threads at once
        self._counted = 0

    def __call__(self, line: str, /, *, of: int | None = None) -> None:
        with self._lock:
            if of is not None:
                self._counted += 1
                line = f"[{self._counted}/{of}] {line}"
            self.append(line)
