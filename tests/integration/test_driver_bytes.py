"""What reaches the driver grows with partitions, segments and key ranges, never with records (SPEC §5): a split
partition's decisions go from the deciding stage to the applying one through the store, so ten times the records
bring the same bytes to a driver of Spark's default memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compaction.store import Store, TopicPartition
from compaction.synthetic import GenerateSpec, generate
from tests.helpers import ROOT

NOW = 1_800_000_000_000
WRITTEN = NOW - 3_600_000
SEGMENTS = 10
#: Key ranges each pass splits its one partition into: enough that the ranges take their rows through a shuffle.
RANGES = 6


def driver_bytes(tmp_path: Path, records: int) -> tuple[int, dict[str, Any]]:
    """The bytes a pass over one partition of ``records`` records (``SEGMENTS`` segments, ``RANGES`` key ranges)
    sends to executors and collects from them, with a 1 GB driver; and its report."""
    path = tmp_path / f"store-{records}"
    store = Store.open(str(path))
    generate(
        store,
        GenerateSpec(
            records=records,
            keys=records // 5,
            partitions=1,
            segment_records=records // SEGMENTS,
            end_time_ms=WRITTEN,
            seed=11,
        ),
        now_ms=WRITTEN,
        threads=2,
    )
    conf = tmp_path / "bytes.toml"
    conf.write_text('"log.cleanup.policy" = "compact"\n"log.roll.ms" = 60000\n')
    report = tmp_path / f"report-{records}.json"
    command = [
        sys.executable,
        "-m",
        "compaction.cli",
        "run",
        str(path),
        "--conf",
        str(conf),
        "--now",
        str(NOW),
        "--allow-future-now",
        "--report",
        str(report),
        "--set",
        f"cleaner.task.max.records={records // RANGES + 1}",
        "--spark-conf",
        "spark.driver.memory=1g",
        "--spark-conf",
        "spark.ui.enabled=false",
    ]
    ran = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    doc = json.loads(report.read_text())
    (partition,) = doc["partitions"]
    assert partition["status"] == "cleaned", partition
    assert f"{RANGES} key range(s)" in ran.stdout + ran.stderr, "the partition is split as the test means it to be"
    assert (
        Store.open(str(path)).read(TopicPartition("orders", 0), columns=["offset"]).num_rows
        == partition["stats"]["records_after"]
    )
    return doc["driver_bytes"], doc


@pytest.mark.spark
@pytest.mark.slow
def test_the_bytes_a_pass_brings_to_the_driver_do_not_grow_with_its_records(tmp_path: Path) -> None:
    small, _ = driver_bytes(tmp_path, 500_000)
    large, report = driver_bytes(tmp_path, 5_000_000)
    assert report["totals"]["messages_read"] == 5_000_000
    assert small > 0 and abs(large / small - 1) <= 0.10, f"{small:,} bytes at 500,000 records, {large:,} at 5,000,000"
    assert large < 1 << 20, "metadata only: well under a megabyte"
