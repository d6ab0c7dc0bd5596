"""The Python workers' warm-up: a worker on every core, with the given modules imported, while the driver plans."""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterator, Sequence
from functools import partial

import pyarrow as pa
from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Rows of the warm-up job: spread over the session's default parallelism (a task on every core).
WARM_ROWS = 1 << 16
#: Seconds a run waits at its end for a warm-up job still running: it has nothing left to wait for but its tasks.
FINISH_TIMEOUT_S = 120


def _import_modules(modules: Sequence[str], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for name in modules:
        importlib.import_module(name)
    for _ in batches:  # read to the end: a worker that leaves input unread is not reused for the next task
        pass
    yield from ()


class WarmWorkers:
    """The warm-up job, run from a thread of its own; :meth:`finish` waits for it.

    A fresh worker forks and imports for one to two seconds before its first task runs. This job pays that while
    the driver reads manifests and plans, so the first stage's tasks start at once. Its failure is not the run's: a
    real task would fail the same way, and is handled. A pass that builds its first stage before this job is built
    (the driver's planning done first) says so (:meth:`stand_down`), and the job is not submitted: queued
    behind the pass's stage, it would warm nothing and delay the next stage. A run waits for a job it did submit
    before the driver exits, or the JVM, finishing its tasks as the Python driver goes, reports their accumulators to
    a driver that is no longer there (Spark's ``Failed to update accumulator ... Connection reset`` at the end).
    """

    def __init__(self, session: SparkSession, modules: Sequence[str]) -> None:
        self._lock = threading.Lock()
        self._stood_down = False
        self.submitted = False
        self._thread = threading.Thread(
            target=self._run, args=(session, tuple(modules)), name="warm-workers", daemon=True
        )
        self._thread.start()

    def _run(self, session: SparkSession, modules: tuple[str, ...]) -> None:
        try:
            job = session.range(0, WARM_ROWS).mapInArrow(partial(_import_modules, modules), "id long")
            with self._lock:
                if self._stood_down:
                    return
                self.submitted = True
            job.collect()
        except Exception as err:  # only a warm-up
            log.debug("warming the Python workers failed: %s", err)

    def stand_down(self) -> None:
        """The pass is about to submit a stage: a warm-up job not submitted yet never will be."""
        with self._lock:
            self._stood_down = True

    def finish(self, timeout: float = FINISH_TIMEOUT_S) -> None:
        self.stand_down()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.debug("the Python workers' warm-up is still running after %s s", timeout)
