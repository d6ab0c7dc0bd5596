"""How a failed task is told: the data's errors apart from bugs, and the reason in one line."""

from __future__ import annotations

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
