"""How a failed task is told: the data's errors apart from bugs, and the reason in one line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from compaction.engine.isolation import Failure
from compaction.engine.stages import spark_failure
from compaction.errors import CorruptSegmentError


def test_only_the_products_own_errors_and_io_errors_are_the_datas() -> None:
    assert not Failure.of(CorruptSegmentError("segment x is not a readable Parquet file")).internal
    assert not Failure.of(FileNotFoundError("t/0/segments/x.parquet")).internal
    for bug in (TypeError("x"), KeyError("x"), AttributeError("x"), ValueError("x"), RuntimeError("x")):
        failure = Failure.of(bug)
        assert failure.internal and failure.trace is not None and failure.error.startswith(type(bug).__name__)


def test_the_reason_is_the_last_failure_in_one_line() -> None:
    aborted = (
        "Job aborted due to stage failure: Task 1 in stage 3.0 failed 4 times, most recent failure: Lost task "
        "1.3 in stage 3.0 (TID 17) (10.0.0.7 executor 2): ExecutorLostFailure (executor 2 exited caused by "
        "one of the running tasks) Reason: Container killed on request. Exit code is 137\n\tat org.apache.x"
    )
    assert spark_failure(Exception(aborted)) == (
        "Spark task failed 4 times: ExecutorLostFailure (executor 2 exited "
        "caused by one of the running tasks) Reason: Container killed on "
        "request. Exit code is 137"
    )
    python = (
        'An exception was thrown from the Python worker:\nTraceback (most recent call last):\n  File "x.py",'
        " line 1, in f\n    raise SystemExit(3)\nSystemExit: 3\n SQLSTATE: 38000)"
    )
    assert spark_failure(Exception(python)) == "Spark job failed: SystemExit: 3"
    stopped = "org.apache.spark.SparkException: Job 7 cancelled because SparkContext was shut down\n\tat org.x"
    assert spark_failure(Exception(stopped)) == "Spark job failed: Job 7 cancelled because SparkContext was shut down"


def test_running_out_of_memory_is_one_line_naming_the_setting_that_governs_it() -> None:
    task = Failure.of(MemoryError())
    assert not task.internal and task.trace is None
    assert task.error.startswith("MemoryError: a task ran out of memory: lower task.max.records")
    driver = (
        "An error occurred while calling o161.getResult.\n: java.lang.OutOfMemoryError: Java heap space\n"
        "\tat java.base/java.util.Arrays.copyOf(Arrays.java:3537)"
    )
    assert spark_failure(Exception(driver)) == (
        "the Spark driver ran out of memory (java.lang.OutOfMemoryError: Java heap space): raise spark.driver.memory"
    )
    executor = (
        "Job aborted due to stage failure: Task 3 in stage 4.0 failed 4 times, most recent failure: Lost task "
        "3.3 in stage 4.0 (TID 40) (10.0.0.7 executor 1): java.lang.OutOfMemoryError: Java heap space\n\tat x"
    )
    assert spark_failure(Exception(executor)).startswith(
        "a Spark task ran out of memory (java.lang.OutOfMemoryError: Java heap space): give executors more memory "
        "(spark.executor.memory; in local mode spark.driver.memory) or lower task.max.records"
    )


def test_a_task_whose_units_cannot_be_read_fails_each_of_them_with_the_reason(memory_store) -> None:
    """A bin another build of this library packed (its payload refused as it unpickles) names no unit: every unit
    of it that returned nothing fails with that reason, not as a result that went missing."""
    from compaction.clean.paths import Runner
    from compaction.clean.work import PartitionWork
    from compaction.engine.isolation import Failed, Ok
    from compaction.engine.stages import LocalStages

    owners = {"t-0": PartitionWork(None, None), "t-1": PartitionWork(None, None)}  # type: ignore[arg-type]
    taken: list[object] = []
    refused = Failure("PayloadVersionError: CleanTask payload of version 3 cannot be read by this library")
    Runner(LocalStages(), 1_000).gather(
        [Ok("t-0", "done"), Failed("task 1", refused)], owners, lambda item, value: taken.append(value)
    )
    assert taken == ["done"] and owners["t-0"].failure is None
    assert owners["t-1"].failure == refused


def test_a_stray_failure_fails_only_the_units_that_returned_nothing_whatever_the_order_of_the_outcomes() -> None:
    """Outcomes come in no particular order: the unreadable bin's failure before a good unit's value leaves that
    value taken, and the units with no outcome fail with the bin's reason."""
    from compaction.clean.paths import Runner
    from compaction.clean.work import PartitionWork
    from compaction.engine.isolation import Failed, Ok
    from compaction.engine.stages import LocalStages

    owners = {name: PartitionWork(None, None) for name in ("t-0", "t-1", "t-2")}  # type: ignore[arg-type]
    taken: list[object] = []
    refused = Failure("PayloadVersionError: CleanTask payload of version 3 cannot be read by this library")
    Runner(LocalStages(), 1_000).gather(
        [Failed("task 0", refused), Ok("t-1", "done"), Ok("t-2", "done too")],
        owners,
        lambda item, value: taken.append(value),
    )
    assert taken == ["done", "done too"]
    assert [owners[name].failure for name in ("t-0", "t-1", "t-2")] == [refused, None, None]


def test_a_unit_that_returned_nothing_fails_its_partition_as_a_bug_unless_outcomes_may_be_missing() -> None:
    """Every unit of an Arrow stage returns an outcome: one that did not is a bug of this library (internal, named);
    the Spark SQL searches give none for a partition without live rows, which is not a failure."""
    from compaction.clean.paths import Runner
    from compaction.clean.work import PartitionWork
    from compaction.engine.isolation import Ok
    from compaction.engine.stages import LocalStages

    owners = {name: PartitionWork(None, None) for name in ("t-0", "t-1")}  # type: ignore[arg-type]
    Runner(LocalStages(), 1_000).gather([Ok("t-0", "done")], owners, lambda item, value: None)
    assert owners["t-0"].failure is None
    assert owners["t-1"].failure == Failure("t-1 produced no result", internal=True)
    quiet = {name: PartitionWork(None, None) for name in ("t-0", "t-1")}  # type: ignore[arg-type]
    Runner(LocalStages(), 1_000).gather([Ok("t-0", "done")], quiet, lambda item, value: None, complete=False)
    assert [w.failure for w in quiet.values()] == [None, None]


def test_a_spark_job_that_fails_for_good_leaves_out_only_the_partition_whose_task_keeps_failing(tmp_path: Path) -> None:
    """A worker killed under one partition's task fails the whole Spark job: the pass runs its partitions again in
    smaller jobs, says so, and only that partition fails, with the job's reason; the others commit."""
    from pyspark.errors import PySparkException

    from compaction.clean.cleaner import Cleaner
    from compaction.store import Store, TopicPartition
    from compaction.synthetic import GenerateSpec, generate
    from tests.helpers import Lines
    from tests.helpers.inline import InlineSession
    from tests.helpers.settings import settings_with

    now, day = 1_767_225_600_000, 86_400_000
    store = Store.open(str(tmp_path))
    spec = GenerateSpec(topics=("orders",), partitions=4, records=800, keys=40, segment_records=50, seed=5)
    generate(store, replace(spec, end_time_ms=now - day), now_ms=now - day)
    lost = TopicPartition("orders", 2)
    aborted = (
        "Job aborted due to stage failure: Task 0 in stage 1.0 failed 4 times, most recent failure: Lost task 0.3 in "
        "stage 1.0 (TID 7) (127.0.0.1 executor 1): ExecutorLostFailure (executor 1 exited caused by one of the "
        "running tasks) Reason: Remote RPC client disassociated."
    )

    class KilledWorker(InlineSession):
        def map_tasks(self, body: Any, bins: Any, threads: int = 1) -> Any:
            if any(unit.tp == lost for units in bins for unit in units):
                raise PySparkException(message=aborted)
            return super().map_tasks(body, bins, threads)

    lines = Lines()
    settings = settings_with({"log.cleanup.policy": "compact", "log.roll.ms": 60_000})
    report = Cleaner(KilledWorker(), store, settings, progress=lines).run(now)
    reason = (
        "Spark task failed 4 times: ExecutorLostFailure (executor 1 exited caused by one of the running tasks) "
        "Reason: Remote RPC client disassociated."
    )
    assert [(r.partition, r.error) for r in report.failed] == [(str(lost), reason)]
    assert report.totals["cleaned"] == 3
    assert store.manifest(lost).version == 1 and all(
        store.manifest(TopicPartition("orders", p)).version == 2 for p in (0, 1, 3)
    )
    assert (
        f"a Spark job failed ({reason}); running its 4 partition(s) again in smaller jobs, so that only the one that "
        "keeps failing is left out"
    ) in lines
