"""Spark task failures: a killed Python worker is retried; a partition whose task keeps failing is reported with
a one-line reason while the others commit; retried and speculative attempts never publish twice."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from compaction.clean.cleaner import Cleaner
from compaction.clean.results import RunReport
from compaction.errors import EXIT_FAILED, EXIT_PARTIAL
from compaction.job import JobOptions, run_job
from compaction.store import Store, TopicPartition
from compaction.store.gc import collect_garbage
from compaction.store.segment import records
from compaction.store.verify import verify
from tests.helpers import ROOT, Lines, past_every_write_ms
from tests.helpers.cluster import cluster_env, spark_cluster
from tests.helpers.settings import settings_with
from tests.helpers.task_faults import faulty

NOW = 1_800_000_000_000
PARTITIONS = [TopicPartition("t", i) for i in range(3)]
BAD = PARTITIONS[1]
OVERRIDES = {"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0}
SETTINGS = settings_with(OVERRIDES)
#: The two ways through Spark: a whole partition in one task; or stage 1 (key buckets here, or the Spark SQL
#: plans) then stage 2's apply jobs. Every failed attempt costs a new Python worker (~2 s), so one of each.
PATHS = {"arrow": SETTINGS, "arrow-split": settings_with({**OVERRIDES, "cleaner": {"task.max.records": 3}})}


def seed(store: Store, partitions: list[TopicPartition] = PARTITIONS) -> None:
    """Each partition: ``a b a`` then ``c b`` then an active segment; the survivors are offsets 2, 3, 4, 5."""
    for tp in partitions:
        for rows in ([("a", "1"), ("b", "1"), ("a", "2")], [("c", "1"), ("b", "2")], [("active", "1")]):
            store.append(tp, records([{"key": k, "value": v} for k, v in rows]), now_ms=NOW)


def offsets(store: Store, tp: TopicPartition) -> list[int]:
    return store.read(tp, columns=["offset"]).column("offset").to_pylist()


@pytest.mark.spark
def test_a_worker_killed_once_is_retried_and_every_partition_commits(any_spark, local_store: Store) -> None:
    """On a classic session and on Spark Connect alike."""
    seed(local_store)
    store = faulty(local_store, kill=f"{BAD.prefix}/", first_attempt_only=True)
    report = Cleaner(any_spark, store, SETTINGS).run(NOW)
    assert {r.partition: r.status for r in report.partitions} == {str(tp): "cleaned" for tp in PARTITIONS}
    assert {str(tp): offsets(local_store, tp) for tp in PARTITIONS} == {str(tp): [2, 3, 4, 5] for tp in PARTITIONS}
    assert [p for r in verify(local_store) for p in r.problems] == []


@pytest.mark.spark
@pytest.mark.parametrize("path", list(PATHS))
def test_a_partition_whose_task_keeps_failing_is_uncleanable_and_the_others_commit(
    any_spark, local_store: Store, path: str
) -> None:
    seed(local_store)
    printed = Lines()
    code, report = run_job(
        faulty(local_store, kill=f"{BAD.prefix}/"),
        JobOptions(now_ms=NOW, wall_ms=NOW),
        PATHS[path],
        lambda: any_spark,
        out=printed,
    )
    report = cast(RunReport, report)  # not a dry run

    assert code == EXIT_PARTIAL
    assert any(line.startswith("deciding survivors") for line in printed) == (path == "arrow-split")
    status: dict[str, Any] = {r.partition: r.status for r in report.partitions}
    assert status == {"t-0": "cleaned", "t-1": "failed", "t-2": "cleaned"}
    (failure,) = report.to_dict()["failures"]
    assert failure["partition"] == "t-1"
    assert failure["error"] == "Spark task failed 4 times: Python worker exited unexpectedly (crashed)"
    (line,) = [line for line in printed if "t-1" in line and "failed" in line]
    assert re.fullmatch(
        r"\[[123]/3\] failed t-1: Spark task failed 4 times: Python worker exited unexpectedly "
        r"\(crashed\)",
        line,
    ), line
    assert not any("\tat " in line or "Traceback" in line for line in printed), "no stack trace reaches the user"
    assert local_store.versions(BAD) == [1, 2, 3], "the failed partition is untouched"
    assert offsets(local_store, PARTITIONS[0]) == offsets(local_store, PARTITIONS[2]) == [2, 3, 4, 5]
    assert [p for r in verify(local_store) for p in r.problems] == []


@pytest.mark.spark
def test_a_bug_in_a_task_is_an_internal_error_with_its_traceback_not_a_data_error(
    any_spark, local_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A TypeError in a task body is a bug: the line says internal error and names the partition, the report keeps
    the executor's traceback with credentials masked, -v (debug) prints it, and the exit code is 1 (the DAG does
    not retry it as if it were transient); the other partitions commit."""
    seed(local_store)
    secret = "AKIAIOSFODNN7EXAMPLE"
    printed = Lines()
    with caplog.at_level(logging.DEBUG, logger="compaction.job"):
        code, report = run_job(
            faulty(local_store, bug=f"{BAD.prefix}/", bug_text=f"key {secret}"),
            JobOptions(now_ms=NOW, wall_ms=NOW),
            SETTINGS,
            lambda: any_spark,
            out=printed,
        )
        report = cast(RunReport, report)  # not a dry run
    assert code == EXIT_FAILED
    status: dict[str, Any] = {r.partition: r.status for r in report.partitions}
    assert status == {"t-0": "cleaned", "t-1": "failed", "t-2": "cleaned"}
    (failure,) = report.to_dict()["failures"]
    assert failure["partition"] == "t-1" and failure["internal"] is True
    assert failure["error"].startswith("TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'")
    assert "Traceback (most recent call last)" in failure["trace"] and "task_faults.py" in failure["trace"]
    assert secret not in failure["trace"] and secret not in json.dumps(report.to_dict())
    (line,) = [line for line in printed if "t-1" in line]
    assert re.match(r"\[[123]/3\] failed t-1: internal error \(a bug in compaction, not a problem of the data", line)
    logged = [r.getMessage() for r in caplog.records if r.name == "compaction.job"]
    assert any(m.startswith("internal error in t-1:\nTraceback") and secret not in m for m in logged)
    assert local_store.versions(BAD) == [1, 2, 3], "the failed partition is untouched"


#: The driver of a pass under speculation, in a process of its own: the tests' session is local, and Spark runs
#: a speculative copy of a task only on another host than the original attempt, so this needs a cluster of
#: two hosts. Partitions 0 and 2 pause after each object their first attempt writes, until Spark kills them (as it
#: kills a losing attempt once a copy wins; the pause's bound, HANG_S, only ends a run that went wrong); the other
#: tasks finish at once, so Spark takes the paused ones for slow and runs a copy on the other host, which wins
#: however loaded the machine, since the first attempt never finishes; a copy's first write there waits until the
#: first attempt has written one (a marker file), so that the loser always leaves an object, even when Spark started
#: the copy before the first attempt reached its write: no elapsed time decides. The job starts
#: once both executors are there. A small ``task.max.records`` keeps each partition in a task of its own (small
#: partitions would otherwise share one), so that the paused ones are the slow tasks.
DRIVER = """
import sys
from compaction.clean.cleaner import Cleaner
from compaction.config import Settings
from compaction.engine.session import spark_session
from compaction.report import write_report
from compaction.store import Store
from tests.helpers.task_faults import faulty

master, url, out, now, marks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[6]
spark = spark_session(master, conf={
    "spark.speculation": "true", "spark.speculation.multiplier": "1", "spark.speculation.quantile": "0.01",
    "spark.speculation.minTaskRuntime": "100ms", "spark.speculation.interval": "100ms",
    "spark.scheduler.minRegisteredResourcesRatio": "1", "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
    "spark.cores.max": "4", "spark.executor.memory": "1g", "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false"})
settings = Settings.load(overrides={"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0,
                                    "cleaner": {"task.max.records": 20}}, environ={})
report = Cleaner(spark, faulty(Store.open(url), slow=("t/0/", "t/2/"), slow_s=float(sys.argv[5]),
                               marks=marks), settings).run(now)
spark.stop()
write_report(report, out)
"""

#: How long a paused attempt waits to be killed: only a pass that went wrong (no copy ever launched) waits it out.
HANG_S = 300


def _speculative_pass(master: str, store: Store, partitions: list[TopicPartition], report_path: Path) -> set[str]:
    """One pass under speculation, checked; returns the objects no manifest references (the losers')."""
    marks = report_path.parent / "first-attempt-marks"
    marks.mkdir()
    process = subprocess.run(
        [sys.executable, "-c", DRIVER, master, store.url, str(report_path), str(NOW), str(HANG_S), str(marks)],
        env=cluster_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=2 * HANG_S,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert [r["status"] for r in report["partitions"]] == ["cleaned"] * 4

    # Exactly what a pass without speculation leaves: each key's latest record.
    assert {str(tp): offsets(store, tp) for tp in partitions} == {str(tp): [2, 3, 4, 5] for tp in partitions}
    assert [p for r in verify(store) for p in r.problems] == []
    orphans = set()
    for tp in partitions:
        manifests = [store.manifest(tp, v) for v in store.versions(tp)]
        for manifest in manifests:
            paths = [s.path for s in manifest.segments]
            assert len(set(paths)) == len(paths), "every committed manifest names one object per segment"
        added = {s.path for s in manifests[-1].segments} - {s.path for s in manifests[-2].segments}
        found = {re.fullmatch(r"segments/\d{20}-([0-9a-f]{32})-\d+\.parquet", path) for path in added}
        assert None not in found and len({m.group(1) for m in found if m}) == 1, "named by the pass id and attempt"
        referenced = {s.path for m in manifests for s in m.segments}
        written = {f"segments/{e.name}" for e in store.storage.list_dir(f"{tp.prefix}/segments")}
        orphans |= {f"{tp.prefix}/{path}" for path in written - referenced}
    return orphans


@pytest.mark.cluster
@pytest.mark.slow
def test_speculative_attempts_never_publish_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # executors import tests.helpers.task_faults
    partitions = [TopicPartition("t", i) for i in range(4)]
    with spark_cluster(tmp_path / "cluster", workers=2, cores=2, hosts=("127.0.0.1", "127.0.0.2")) as cluster:
        store = Store.open(str(tmp_path / "store"))
        seed(store, partitions)
        orphans = _speculative_pass(cluster.url, store, partitions, tmp_path / "report.json")
    assert {path.split("/")[1] for path in orphans} >= {"0", "2"}, "the copies of both paused tasks won"
    # Other tasks may have losing copies too: on a loaded machine Spark speculates any task that runs long. What
    # matters is checked above: no manifest names two objects for a segment, or a loser's object.

    # They are garbage: gc removes exactly them, and the log reads the same.
    deleted = {
        f"{tp.prefix}/{path}"
        for tp in partitions
        for path in collect_garbage(store, tp, wall_ms=past_every_write_ms(), grace_ms=0).deleted_objects
    }
    assert deleted == orphans
    assert {str(tp): offsets(store, tp) for tp in partitions} == {str(tp): [2, 3, 4, 5] for tp in partitions}
    assert [p for r in verify(store) for p in r.problems] == []
