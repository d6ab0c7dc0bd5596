"""Partitions committed as their work finishes: small partitions' Spark jobs end one after another, and each job's
partitions are committed while the later jobs' tasks run, each partition exactly once."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from compaction.clean.cleaner import Cleaner, Commits
from compaction.clean.commit import done_cleaning
from compaction.clean.results import PartitionResult
from compaction.clean.work import PartitionWork
from compaction.store import Store, TopicPartition
from compaction.synthetic import GenerateSpec, generate
from tests.helpers import Lines
from tests.helpers.inline import InlineSession
from tests.helpers.settings import settings_with

NOW, DAY = 1_767_225_600_000, 86_400_000
#: A Spark job that waits for a commit waits at most this long (the test fails if it had to).
WAIT_S = 10.0


def test_small_partitions_commit_as_their_spark_job_ends_while_the_later_jobs_still_run(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Six partitions of 100 records, a task each (``task.max.records`` 1,000 packs 50 records to a task): the
    stage runs as three Spark jobs at once. The job holding the last partition waits until some partition has
    been committed: one is, because the other jobs' partitions commit as those jobs end."""
    store = Store.open(str(tmp_path))
    spec = GenerateSpec(topics=("orders",), partitions=6, records=600, keys=30, segment_records=25, seed=3)
    generate(store, replace(spec, end_time_ms=NOW - DAY), now_ms=NOW - DAY)
    last = TopicPartition("orders", 5)
    committed = threading.Event()
    jobs: list[list[str]] = []
    waited: list[bool] = []

    def commit(*args: Any) -> PartitionResult:
        result = done_cleaning(*args)
        committed.set()
        return result

    class Jobs(InlineSession):
        def map_tasks(self, body: Any, bins: Any, threads: int = 1) -> Any:
            jobs.append(sorted(str(unit.tp) for units in bins for unit in units))
            if any(unit.tp == last for units in bins for unit in units):
                waited.append(committed.wait(WAIT_S))
            return super().map_tasks(body, bins, threads)

    monkeypatch.setattr("compaction.clean.cleaner.done_cleaning", commit)
    settings = settings_with(
        {"log.cleanup.policy": "compact", "log.roll.ms": 60_000, "cleaner": {"task.max.records": 1_000}}
    )
    lines = Lines()
    report = Cleaner(Jobs(), store, settings, progress=lines).run(NOW)
    assert report.totals["cleaned"] == 6 and not report.failed
    assert sorted(len(job) for job in jobs) == [2, 2, 2]
    assert sorted(p for job in jobs for p in job) == [f"orders-{p}" for p in range(6)]
    assert waited == [True], "a partition was committed while the last partition's job still ran"
    assert all(store.versions(TopicPartition("orders", p)) == [1, 2] for p in range(6)), "each committed once"
    assert sum(1 for line in lines if "] cleaned orders-" in line) == 6


def test_a_partition_finished_twice_commits_once_and_the_rest_commit_when_the_results_are_asked_for() -> None:
    # Equal to each other (no plan, no task), told apart by identity, as the commits tell partitions apart.
    work = [PartitionWork(None, None) for _ in range(4)]  # type: ignore[arg-type]
    calls: list[int] = []

    def commit(item: PartitionWork) -> PartitionResult:
        calls.append([id(w) for w in work].index(id(item)))
        return calls[-1]  # type: ignore[return-value]

    with Commits(commit, len(work)) as commits:
        commits.finished([work[2], work[0]])
        commits.finished([work[2]])
        results = commits.results(work)
    assert results == [0, 1, 2, 3]
    assert sorted(calls) == [0, 1, 2, 3]
