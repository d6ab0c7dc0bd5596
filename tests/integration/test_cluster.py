"""spark-submit to a real standalone cluster (master + 2 workers on 127.0.0.1) cleaning a store on S3 (moto): the
cleaned log, record by record, is each key's latest record of the range, as local mode cleans it too."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from compaction.store import Store, TopicPartition
from compaction.store.verify import verify
from compaction.synthetic import GenerateSpec, generate
from tests.helpers import ROOT
from tests.helpers.cluster import cluster_env, spark_cluster
from tests.helpers.s3server import new_bucket, storage_options

pytestmark = [pytest.mark.cluster, pytest.mark.s3, pytest.mark.slow]

NOW = 1_800_000_000_000
DAY = 86_400_000  # delete.retention.ms, Kafka's default
SPEC = GenerateSpec(
    records=200_000, keys=20_000, partitions=4, segment_records=10_000, end_time_ms=NOW - 60_000, seed=5
)


def _store(endpoint: str) -> tuple[str, Store]:
    url = new_bucket(endpoint)
    store = Store.open(url, storage_options(endpoint))
    generate(store, SPEC, now_ms=NOW - 60_000)
    return url, store


def latest_per_key(store: Store) -> dict[TopicPartition, tuple[int, list[dict[str, Any]]]]:
    """Each partition's log as a pass of this configuration leaves it, from its records as generated: the range is
    every segment but the last (no lag is configured, and the last segment's records are recent), in which each
    key keeps its record of the highest offset; keyless records and the last segment stay as they are. Per
    partition: where the range ends, and the records."""
    expected = {}
    for tp in store.topic_partitions():
        end = store.manifest(tp).segments[-1].base_offset
        rows = store.read(tp).to_pylist()
        latest = {r["key"]: r["offset"] for r in rows if r["offset"] < end and r["key"] is not None}
        expected[tp] = (
            end,
            [r for r in rows if r["offset"] >= end or r["key"] is None or latest[r["key"]] == r["offset"]],
        )
    return expected


def assert_cleaned_as(
    store: Store, expected: dict[TopicPartition, tuple[int, list[dict[str, Any]]]], wall_ms: tuple[int, int], what: str
) -> None:
    """Every record as ``expected``; a tombstone of the range gets its first horizon, delete.retention.ms past the
    run's now or its wall clock (read by the job somewhere within ``wall_ms``), whichever is later."""
    earliest, latest = (max(NOW, wall) + DAY for wall in wall_ms)
    for tp, (end, rows) in expected.items():
        actual = store.read(tp).to_pylist()
        assert [{**r, "delete_horizon_ms": None} for r in actual] == rows, f"{what}: {tp}'s records"
        for r in actual:
            if r["value"] is None and r["offset"] < end:
                assert earliest <= r["delete_horizon_ms"] <= latest, f"{what}: {tp}@{r['offset']}'s horizon"
            else:
                assert r["delete_horizon_ms"] is None, f"{what}: {tp}@{r['offset']}'s horizon"


def _submit(url: str, config: Path, report: Path, *options: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    process = subprocess.run(
        [
            str(ROOT / "scripts" / "spark-submit.sh"),
            *options,
            "--config",
            str(config),
            "--",
            url,
            "--now",
            str(NOW),
            "--allow-future-now",
            "--report",
            str(report),
        ],
        env=cluster_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    return process, time.perf_counter() - started


def test_spark_submit_to_a_standalone_cluster_cleans_an_s3_store(s3_endpoint: str, tmp_path: Path) -> None:
    config = tmp_path / "cluster.toml"
    config.write_text(
        '"log.cleanup.policy" = "compact"\n"log.segment.bytes" = 8388608\n'
        f'[store]\noptions = {{ client_kwargs = {{ endpoint_url = "{s3_endpoint}" }} }}\n'
    )
    url, store = _store(s3_endpoint)
    expected = latest_per_key(store)
    assert sum(len(rows) for _, rows in expected.values()) < SPEC.records, "the history has keys to clean"
    work = tmp_path / "cluster"
    with spark_cluster(work, workers=2) as cluster:
        before = int(time.time() * 1000)
        process, cluster_seconds = _submit(
            url,
            config,
            tmp_path / "cluster-report.json",
            "--master",
            cluster.url,
            "--total-executor-cores",
            "2",
            "--executor-memory",
            "1g",
            "--driver-memory",
            "1g",
        )
        after = int(time.time() * 1000)
        assert process.returncode == 0, process.stderr[-3000:]
        apps = cluster.status()["completedapps"] + cluster.status()["activeapps"]
        assert [app["name"] for app in apps] == ["compaction"]
        logs = cluster.executor_logs()
        assert {log.parts[-4] for log in logs} == {"worker-0", "worker-1"}, "executors ran in both worker JVMs"
        pids = [p.pid for p in cluster.processes]
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(work) in " ".join(p.info["cmdline"] or [])]
    assert leftovers == [] and not any(psutil.pid_exists(pid) for pid in pids), "every started process is stopped"

    report = json.loads((tmp_path / "cluster-report.json").read_text())
    assert [p["status"] for p in report["partitions"]] == ["cleaned"] * 4
    assert report["failures"] == []
    assert [p for r in verify(store) for p in r.problems] == []
    assert_cleaned_as(store, expected, (before, after), "the cluster")

    local_url, local_store = _store(s3_endpoint)  # the same store again, for the same job in local mode
    before = int(time.time() * 1000)
    process, local_seconds = _submit(
        local_url, config, tmp_path / "local-report.json", "--master", "local[2]", "--driver-memory", "1g"
    )
    after = int(time.time() * 1000)
    assert process.returncode == 0, process.stderr[-3000:]
    assert_cleaned_as(local_store, expected, (before, after), "local mode")
    local = json.loads((tmp_path / "local-report.json").read_text())
    assert local["totals"] == report["totals"], "local mode and the cluster report the same figures"
    figures = {
        "records": SPEC.records,
        "cluster_seconds": round(cluster_seconds, 1),
        "local_seconds": round(local_seconds, 1),
    }
    (ROOT / "out").mkdir(exist_ok=True)
    (ROOT / "out" / "cluster-vs-local.json").write_text(json.dumps(figures, indent=1))
    print(f"spark-submit wall time: standalone cluster {cluster_seconds:.1f} s, local[2] {local_seconds:.1f} s")


READ_DRIVER = """
import json, sys
from pyspark.sql import SparkSession
url, store, endpoint, library = sys.argv[1:5]
spark = (SparkSession.builder.master(url).appName("compaction-read").config("spark.cores.max", "2")
         .config("spark.executor.memory", "1g").config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.addPyFile(library)  # executors import this checkout's package, as spark-submit.sh ships it
from compaction.read.scan import scan
frame = scan(store, "orders", storage_options={"client_kwargs": {"endpoint_url": endpoint}}).to_spark(spark)
rows = frame.groupBy("partition").count().orderBy("partition").collect()
print(json.dumps({"counts": [[r["partition"], r["count"]] for r in rows], "tasks": frame.rdd.getNumPartitions()}))
spark.stop()
"""


def test_the_spark_reader_reads_an_s3_store_on_a_standalone_cluster(s3_endpoint: str, tmp_path: Path) -> None:
    import shutil

    from compaction.read.scan import scan

    url, store = _store(s3_endpoint)
    expected = scan(store, "orders").to_arrow().group_by("partition").aggregate([("offset", "count")])
    library = shutil.make_archive(str(tmp_path / "compaction"), "zip", ROOT, "compaction")
    with spark_cluster(tmp_path / "cluster", workers=2) as cluster:
        process = subprocess.run(
            [sys.executable, "-c", READ_DRIVER, cluster.url, url, s3_endpoint, library],
            env=cluster_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert process.returncode == 0, process.stderr[-3000:]
        logs = cluster.executor_logs()
    result = json.loads(process.stdout.strip().splitlines()[-1])
    assert result["counts"] == sorted(
        map(
            list,
            zip(expected.column("partition").to_pylist(), expected.column("offset_count").to_pylist(), strict=True),
        )
    )
    assert result["tasks"] == sum(len(p.files) for p in scan(store, "orders").files()), "a task per live file"
    assert {log.parts[-4] for log in logs} == {"worker-0", "worker-1"}, "executors in both worker JVMs read"
