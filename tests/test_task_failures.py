"""Spark task failures: a killed Python worker is retried; a partition whose task keeps failing is reported with
a one-line reason while the others commit."""

from __future__ import annotations

from typing import Any

import pytest

from compaction.cleaner import Cleaner, spark_failure
from compaction.config import Settings
from compaction.job import EXIT_PARTIAL, JobOptions, run_job
from compaction.segment import records
from compaction.store import Store, TopicPartition
from compaction.verify import verify
from tests.task_faults import faulty

pytestmark = pytest.mark.spark

NOW = 1_800_000_000_000
PARTITIONS = [TopicPartition("t", i) for i in range(3)]
BAD = PARTITIONS[1]
OVERRIDES = {"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0}
SETTINGS = Settings.load(overrides=OVERRIDES, environ={})
#: The two ways through Spark: a whole partition in one task; or stage 1 (key buckets here, or the Spark SQL
#: plans) then stage 2's apply jobs. Every failed attempt costs a new Python worker (~2 s), so one of each.
PATHS = {"arrow": SETTINGS,
         "arrow-split": Settings.load(overrides={**OVERRIDES, "cleaner": {"task.max.records": 3}}, environ={})}


def seed(store: Store) -> None:
    """Each partition: ``a b a`` then ``c b`` then an active segment; the survivors are offsets 2, 3, 4, 5."""
    for tp in PARTITIONS:
        for rows in ([("a", "1"), ("b", "1"), ("a", "2")], [("c", "1"), ("b", "2")], [("active", "1")]):
            store.append(tp, records([{"key": k, "value": v} for k, v in rows]), now_ms=NOW)


def offsets(store: Store, tp: TopicPartition) -> list[int]:
    return store.read(tp, columns=["offset"]).column("offset").to_pylist()


def test_a_worker_killed_once_is_retried_and_every_partition_commits(spark, local_store: Store) -> None:  # type: ignore[no-untyped-def]
    seed(local_store)
    store = faulty(local_store, kill=f"{BAD.prefix}/", first_attempt_only=True)
    report = Cleaner(spark, store, SETTINGS).run(NOW)
    assert {r.partition: r.status for r in report.partitions} == {str(tp): "cleaned" for tp in PARTITIONS}
    assert {str(tp): offsets(local_store, tp) for tp in PARTITIONS} == {str(tp): [2, 3, 4, 5] for tp in PARTITIONS}
    assert [p for r in verify(local_store) for p in r.problems] == []


@pytest.mark.parametrize("path", list(PATHS))
def test_a_partition_whose_task_keeps_failing_is_uncleanable_and_the_others_commit(  # type: ignore[no-untyped-def]
        spark, local_store: Store, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    seed(local_store)
    opened = Store.open
    monkeypatch.setattr(Store, "open", lambda url, options=None: faulty(opened(url, options), kill=f"{BAD.prefix}/"))
    printed: list[str] = []
    code, report = run_job(JobOptions(store=local_store.url, now_ms=NOW), PATHS[path], lambda: spark,
                           out=printed.append)

    assert code == EXIT_PARTIAL
    assert any(line.startswith("deciding survivors") for line in printed) == (path == "arrow-split")
    status: dict[str, Any] = {r.partition: r.status for r in report.partitions}  # type: ignore[union-attr]
    assert status == {"t-0": "cleaned", "t-1": "failed", "t-2": "cleaned"}
    (failure,) = report.to_dict()["failures"]  # type: ignore[union-attr]
    assert failure["partition"] == "t-1"
    assert failure["error"] == "Spark task failed 4 times: Python worker exited unexpectedly (crashed)"
    assert [line for line in printed if "t-1" in line and "failed" in line] == [
        "[2/3] failed t-1: Spark task failed 4 times: Python worker exited unexpectedly (crashed)"]
    assert not any("\tat " in line or "Traceback" in line for line in printed), "no stack trace reaches the user"
    assert local_store.versions(BAD) == [1, 2, 3], "the failed partition is untouched"
    assert offsets(local_store, PARTITIONS[0]) == offsets(local_store, PARTITIONS[2]) == [2, 3, 4, 5]
    assert [p for r in verify(local_store) for p in r.problems] == []


def test_the_reason_is_the_last_failure_in_one_line() -> None:
    aborted = ("Job aborted due to stage failure: Task 1 in stage 3.0 failed 4 times, most recent failure: Lost task "
               "1.3 in stage 3.0 (TID 17) (10.0.0.7 executor 2): ExecutorLostFailure (executor 2 exited caused by "
               "one of the running tasks) Reason: Container killed on request. Exit code is 137\n\tat org.apache.x")
    assert spark_failure(Exception(aborted)) == ("Spark task failed 4 times: ExecutorLostFailure (executor 2 exited "
                                                 "caused by one of the running tasks) Reason: Container killed on "
                                                 "request. Exit code is 137")
    python = ("An exception was thrown from the Python worker:\nTraceback (most recent call last):\n  File \"x.py\","
              " line 1, in f\n    raise SystemExit(3)\nSystemExit: 3\n SQLSTATE: 38000)")
    assert spark_failure(Exception(python)) == "Spark job failed: SystemExit: 3"
    stopped = "org.apache.spark.SparkException: Job 7 cancelled because SparkContext was shut down\n\tat org.x"
    assert spark_failure(Exception(stopped)) == "Spark job failed: Job 7 cancelled because SparkContext was shut down"
