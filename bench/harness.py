"""The benchmark harness: the job against DuckDB, Polars and the pyarrow I/O floor, on the same files.

    python bench/harness.py [--quick] [--scenarios S1,S5,S2,S3,S4,K1,scaling,read] [--runs 3] [--work DIR] [--out DIR]

Stores come from the project's generator. Every engine runs as its own process, one after the other, on
the same segment files; each figure is the median of ``--runs`` runs (the job cleans a fresh copy each
time). Wall time includes everything the process does; the job's total includes Spark start-up, which is
also measured on its own. Peak RSS is the process tree's. Every job row also has where its time went
(the run report's phases: start-up, plan, the Spark jobs, commit, and the tasks' read, decide and write
time summed over tasks). Results go to ``<out>/latest.json`` and a chart
``<out>/latest.png``; the table is printed.

Scenarios:
  S1  full compaction: 20M records, 4M keys, 100-byte values, 4 partitions
  S5  one hot partition: S1's 20M records and 4M keys in a single partition
  S2  nightly incremental: a compacted store (20M records, unique keys) plus 2M new records updating
      them, against compacting the 2M new records alone
  S3  skew: 20M records, 80% in one partition, one key with 1M versions
  S4  memory: 50M records on a standalone cluster (driver 1 GB, executors 2 GB), with the driver's peak
      RSS at 12.5M, 25M and 50M records
  K1  Kafka's format: S1's records as .log segments of zstd record batches, cleaned at batch level, against
      DuckDB on the Parquet copy of the same records (S1's store)
  scaling  S1's job at 5M, 10M, 20M and 50M records (time per record and peak RSS)
  read     a streaming read of S1's store through the read API (every column, as Arrow batches) against
           DuckDB reading the same files with a plain glob; peak RSS at 5M, 10M and 20M records
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compaction.clean.cleaner import Cleaner, plan_store  # noqa: E402
from compaction.clean.layout import SegmentOutcome, plan_jobs  # noqa: E402
from compaction.clean.tasks.decide import decide_facts  # noqa: E402
from compaction.clean.tasks.key_ranges import sample_bounds  # noqa: E402
from compaction.config import Settings  # noqa: E402
from compaction.store import Store  # noqa: E402
from compaction.synthetic import GenerateSpec, generate  # noqa: E402

NOW = 1_800_000_000_000
WRITTEN = NOW - 3_600_000
CONFIG = """# The benchmark's configuration: compact everything; an hour-old last segment counts as rolled; a
# partition whose log is 5% dirty is cleaned (S2's nightly increment is a tenth of its clean section).
"log.cleanup.policy" = "compact"
"log.roll.ms" = 60000
"log.cleaner.min.cleanable.ratio" = 0.05
"""
PYTHON = sys.executable


@dataclass
class Measure:
    seconds: float
    peak_rss: int
    extra: dict[str, Any] = field(default_factory=dict)


def run_measured(command: list[str], env: dict[str, str] | None = None, rss_of: Callable[[psutil.Process],
                 list[psutil.Process]] | None = None) -> Measure:
    """Run a command; wall time and the peak RSS of its process tree (sampled every 50 ms)."""
    peak = 0
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
                               text=True)
    done = threading.Event()

    def sample() -> None:
        # The tree is listed again every half second (a scan of every process): cheap enough not to slow
        # what it measures; memory every 50 ms.
        nonlocal peak
        parent = psutil.Process(process.pid)
        tree: list[psutil.Process] = []
        listed = 0.0
        while not done.is_set():
            try:
                if time.perf_counter() - listed > 0.5:
                    tree = rss_of(parent) if rss_of else [parent, *parent.children(recursive=True)]
                    listed = time.perf_counter()
                total = 0
                for p in tree:
                    with contextlib.suppress(psutil.Error):  # a process that has just ended
                        total += p.memory_info().rss
                peak = max(peak, total)
            except psutil.Error:
                pass
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate()
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{out[-2000:]}\n{err[-4000:]}")
    return Measure(seconds, peak, {"stdout": out})


def env() -> dict[str, str]:
    result = dict(os.environ)
    result.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=PYTHON, PYSPARK_DRIVER_PYTHON=PYTHON)
    return result


def store_bytes(url: str) -> tuple[int, int]:
    """Records and bytes of the store's live segments."""
    store = Store.open(url)
    manifests = [store.manifest(tp) for tp in store.topic_partitions()]
    return (sum(s.live_records for m in manifests for s in m.segments),
            sum(s.size_bytes for m in manifests for s in m.segments))


def generated(work: Path, name: str, *specs: GenerateSpec, clean_between: bool = False) -> str:
    """A store made of the specs in order (cached); with ``clean_between`` the job cleans it after the first."""
    path = work / "stores" / name
    if not (path / ".complete").exists():
        shutil.rmtree(path, ignore_errors=True)
        store = Store.open(str(path))
        for index, spec in enumerate(specs):
            generate(store, spec, now_ms=WRITTEN, threads=2)
            if clean_between and index == 0:
                job(work, str(path), copy=False)
        (path / ".complete").touch()
    return str(path)


def copy_store(source: str, target: str) -> None:
    """A copy of the store for the job to change, flushed to disk first: the copy's writeback must not
    compete with the job it precedes (the engines compared read the source, which is long on disk)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".complete"))
    os.sync()


def job(work: Path, source: str, copy: bool = True, extra: list[str] | None = None) -> Measure:
    """`compaction run` on (a copy of) the store; adds the report's figures."""
    target = source
    if copy:
        target = str(work / "run-copy")
        shutil.rmtree(target, ignore_errors=True)
        copy_store(source, target)
    conf = work / "bench.toml"
    conf.write_text(CONFIG)
    report = work / "report.json"
    measure = run_measured([PYTHON, "-m", "compaction.cli", "run", target, "--conf", str(conf), "--now", str(NOW),
                            "--allow-future-now", "--report", str(report), "--spark-conf", "spark.ui.enabled=false",
                            "--spark-conf", "spark.ui.showConsoleProgress=false", *(extra or [])], env=env())
    doc = json.loads(report.read_text())
    measure.extra = {"records_read": doc["totals"]["messages_read"], "bytes_written": doc["totals"]["bytes_written"],
                     "run_seconds": doc["elapsed_ms"] / 1000, "failed": doc["totals"]["failed"],
                     "phases_ms": doc.get("phases_ms", {})}
    if doc["totals"]["failed"]:
        raise RuntimeError(f"the job failed partitions: {doc['failures']}")
    if copy:
        shutil.rmtree(target)
    return measure


def engine(work: Path, name: str, source: str) -> Measure:
    output = work / f"out-{name}"
    shutil.rmtree(output, ignore_errors=True)
    measure = run_measured([PYTHON, str(ROOT / "bench" / "engines.py"), name, source, str(output)])
    measure.extra["bytes_written"] = sum(p.stat().st_size for p in output.glob("*.parquet"))
    shutil.rmtree(output)
    return measure


def spark_startup() -> Measure:
    code = ("import time; from compaction.clean.session import spark_session; t = time.perf_counter(); "
            "s = spark_session('local[*]', conf={'spark.ui.enabled': 'false'}); "
            "print(time.perf_counter() - t); s.stop()")
    measure = run_measured([PYTHON, "-c", code], env=env())
    measure.extra["session_seconds"] = float(measure.extra["stdout"].strip().splitlines()[-1])
    return measure


def phases(row: dict[str, Any]) -> str:
    """A job row's phases in seconds: the driver's wall time, then the tasks' time summed over tasks."""
    ms = row.get("phases_ms") or {}
    driver = [f"{name} {ms[name] / 1000:.1f}" for name in ("startup", "plan", "clean", "commit") if name in ms]
    tasks = [f"{name[5:]} {ms[name] / 1000:.1f}" for name in ("task_read", "task_decide", "task_write") if name in ms]
    return ", ".join(driver) + (f" [task-s: {', '.join(tasks)}]" if tasks else "")


def spread(row: dict[str, Any]) -> float:
    """(slowest - fastest) / median of a row's runs."""
    return (max(row["runs"]) - min(row["runs"])) / row["seconds"]


def median(measures: list[Measure]) -> dict[str, Any]:
    pick = sorted(measures, key=lambda m: m.seconds)[len(measures) // 2]
    result = {"seconds": round(statistics.median(m.seconds for m in measures), 2),
              "peak_rss_mb": round(max(m.peak_rss for m in measures) / 2**20),
              "runs": [round(m.seconds, 2) for m in measures]}
    result.update({k: v for k, v in pick.extra.items() if k != "stdout"})
    return result


def compare(work: Path, source: str, runs: int, engines: tuple[str, ...] = ("duckdb", "polars", "floor")
            ) -> dict[str, Any]:
    records, size = store_bytes(source)
    rows: dict[str, Any] = {"input_records": records, "input_bytes": size}
    measured = {"job": [job(work, source) for _ in range(runs)]}
    for name in engines:
        measured[name] = [engine(work, name, source) for _ in range(runs)]
    for name, measures in measured.items():
        row = median(measures)
        row["records_per_second"] = int(records / row["seconds"])
        row["mb_per_second"] = round(size / 2**20 / row["seconds"], 1)
        rows[name] = row
    for name in ("job", *engines):
        for base in ("duckdb", "floor"):
            if base in rows and name != base:
                rows[name][f"x_{base}"] = round(rows[name]["seconds"] / rows[base]["seconds"], 2)
    return rows


def max_task_records(source: str) -> tuple[int, int]:
    """The most records one task of the skewed partition holds (counted by reading each decision task's
    key range, and each rewrite's sources), and that partition's cleaned records."""
    store = Store.open(source)
    settings = Settings.load(overrides=tomllib.loads(CONFIG), environ={})
    cleaner = Cleaner(None, store, settings)
    the_plan = plan_store(store, settings, NOW)
    largest = max(the_plan.to_clean, key=lambda p: p.records)
    task = cleaner.task(largest, NOW)
    bounds = sample_bounds(task) if task.buckets > 1 else ()
    decided = [decide_facts(replace(task, bucket=b, bounds=bounds)) for b in range(task.buckets)]
    held = [d.facts.table.num_rows for d in decided]
    outcomes: dict[int, SegmentOutcome] = {}
    for d in decided:
        for segment, _, outcome in d.outcomes(largest.segments):
            before = outcomes.get(segment.base_offset)
            outcomes[segment.base_offset] = before.merge(outcome) if before else outcome
    jobs = plan_jobs(largest.segments, outcomes, largest.first_dirty_offset, task.policy)
    held += [sum(s.live_records for s in sources) for sources, _ in jobs]
    return max(held), largest.records


def s1_spec(records: int) -> GenerateSpec:
    return GenerateSpec(records=records, keys=records // 5, partitions=4, segment_records=500_000,
                        end_time_ms=WRITTEN, seed=1)


def s1(work: Path, runs: int, records: int) -> dict[str, Any]:
    source = generated(work, f"s1-{records}", s1_spec(records))
    return compare(work, source, runs)


def s5(work: Path, runs: int, records: int) -> dict[str, Any]:
    """One hot partition: S1's records and keys in a single partition of 500k-record segments."""
    source = generated(work, f"s5-{records}", replace(s1_spec(records), partitions=1, seed=6))
    return compare(work, source, runs)


def k1(work: Path, runs: int, records: int) -> dict[str, Any]:
    """S1's records as zstd record batches: the job on the .log store, DuckDB on the Parquet copy."""
    parquet = generated(work, f"s1-{records}", s1_spec(records))
    kafka = generated(work, f"k1-{records}", replace(s1_spec(records), segment_format="kafka", compression="zstd"))
    count, size = store_bytes(kafka)
    result: dict[str, Any] = {"input_records": count, "input_bytes": size, "parquet_bytes": store_bytes(parquet)[1]}
    result["job"] = median([job(work, kafka) for _ in range(runs)])
    result["duckdb"] = median([engine(work, "duckdb", parquet) for _ in range(runs)])
    for row in (result["job"], result["duckdb"]):
        row["records_per_second"] = int(count / row["seconds"])
    result["job"]["x_duckdb"] = round(result["job"]["seconds"] / result["duckdb"]["seconds"], 2)
    return result


def s2(work: Path, runs: int, records: int) -> dict[str, Any]:
    base = GenerateSpec(records=records * 10, keys=records * 10, update_ratio=0.0, partitions=4,
                        segment_records=500_000, end_time_ms=WRITTEN, seed=2)
    dirty = GenerateSpec(records=records, keys=records * 10, partitions=4, segment_records=250_000,
                         end_time_ms=WRITTEN, seed=3)
    source = generated(work, f"s2-{records}", base, dirty, clean_between=True)
    alone = generated(work, f"s2-alone-{records}", dirty)
    result = compare(work, source, runs)
    result["dirty_alone"] = median([job(work, alone) for _ in range(runs)])
    whole, single = result["job"], result["dirty_alone"]
    result["x_time_vs_alone"] = round(whole["seconds"] / single["seconds"], 2)
    result["x_run_time_vs_alone"] = round(whole["run_seconds"] / single["run_seconds"], 2)
    result["x_bytes_written_vs_alone"] = round(whole["bytes_written"] / single["bytes_written"], 2)
    return result


def s3(work: Path, runs: int, records: int) -> dict[str, Any]:
    spec = GenerateSpec(records=records, keys=records // 5, partitions=4, segment_records=500_000,
                        partition0_share=0.8, hot_key_records=records // 20, end_time_ms=WRITTEN, seed=4)
    source = generated(work, f"s3-{records}", spec)
    result = compare(work, source, runs)
    per_task, largest = max_task_records(source)
    result["max_records_per_task"] = per_task
    result["largest_partition_records"] = largest
    result["task_share_of_largest"] = round(per_task / largest, 3)
    return result


def s4(work: Path, records: int) -> dict[str, Any]:
    """50M records on a standalone cluster (driver 1 GB, executors 2 GB); the driver's RSS at three sizes."""
    from tests.helpers.cluster import spark_cluster

    result: dict[str, Any] = {}
    conf = work / "bench.toml"
    conf.write_text(CONFIG)
    with spark_cluster(work / "cluster", workers=1, cores=2, memory="3g") as cluster:
        for size in (records // 4, records // 2, records):
            spec = GenerateSpec(records=size, keys=size // 5, partitions=4, segment_records=500_000,
                                end_time_ms=WRITTEN, seed=5)
            source = generated(work, f"s4-{size}", spec)
            target = str(work / "run-copy")
            shutil.rmtree(target, ignore_errors=True)
            copy_store(source, target)
            report = work / "report.json"
            measure = run_measured([str(ROOT / "scripts" / "spark-submit.sh"), "--master", cluster.url,
                                    "--driver-memory", "1g", "--executor-memory", "2g", "--config", str(conf),
                                    "--python", PYTHON, "--", target, "--now", str(NOW), "--allow-future-now",
                                    "--report", str(report)],
                                   env=env())
            doc = json.loads(report.read_text())
            if doc["totals"]["failed"]:
                raise RuntimeError(f"S4 failed partitions: {doc['failures']}")
            result[str(size)] = {"seconds": round(measure.seconds, 1), "driver_peak_rss_mb": measure.peak_rss // 2**20,
                                 "records_read": doc["totals"]["messages_read"],
                                 "records_per_second": int(doc["totals"]["messages_read"] / measure.seconds)}
            shutil.rmtree(target)
    return result


def scaling(work: Path, runs: int, sizes: tuple[int, ...]) -> dict[str, Any]:
    result = {}
    for size in sizes:
        spec = GenerateSpec(records=size, keys=size // 5, partitions=4, segment_records=500_000,
                            end_time_ms=WRITTEN, seed=1)
        source = generated(work, f"s1-{size}", spec)
        row = median([job(work, source) for _ in range(runs)])
        row["run_records_per_second"] = int(row["records_read"] / row["run_seconds"])
        result[str(size)] = row
    return result


def read(work: Path, runs: int, sizes: tuple[int, ...]) -> dict[str, Any]:
    """Stream S1's stores (5M, 10M, 20M records) with the read API and with DuckDB over a plain glob."""
    result: dict[str, Any] = {}
    for size in sizes:
        spec = GenerateSpec(records=size, keys=size // 5, partitions=4, segment_records=500_000,
                            end_time_ms=WRITTEN, seed=1)
        source = generated(work, f"s1-{size}", spec)
        records, size_bytes = store_bytes(source)
        row: dict[str, Any] = {"input_records": records, "input_bytes": size_bytes}
        measured: dict[str, list[Measure]] = {"read": [], "duckdb-read": []}
        for _ in range(runs):  # the engines take turns, so a busy spell of the machine hits both alike
            for name, measures in measured.items():
                measures.append(run_measured([PYTHON, str(ROOT / "bench" / "engines.py"), name, source]))
        for name, measures in measured.items():
            seen = {int(m.extra["stdout"].strip()) for m in measures}
            if seen != {records}:
                raise RuntimeError(f"{name} read {seen} records of {source}, the manifests hold {records}")
            row[name] = median(measures)
            row[name]["records_per_second"] = int(records / row[name]["seconds"])
        row["x_duckdb"] = round(row["read"]["seconds"] / row["duckdb-read"]["seconds"], 2)
        result[str(size)] = row
    return result


def machine() -> dict[str, Any]:
    import duckdb
    import polars
    import pyarrow
    import pyspark

    cpu = platform.processor() or ""
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30),
            "python": platform.python_version(), "pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__,
            "duckdb": duckdb.__version__, "polars": polars.__version__, "date": time.strftime("%Y-%m-%d")}


def table(results: dict[str, Any]) -> str:
    lines = [f"machine: {results['machine']['cpu']}, {results['machine']['cores']} cores, "
             f"{results['machine']['memory_gb']} GB; pyspark {results['machine']['pyspark']}, duckdb "
             f"{results['machine']['duckdb']}, polars {results['machine']['polars']}, pyarrow "
             f"{results['machine']['pyarrow']}",
             f"Spark start-up (session only, median): {results['spark_startup_seconds']:.1f} s", ""]
    header = f"{'scenario':<9} {'engine':<8} {'wall s':>7} {'records/s':>11} {'MB/s':>7} {'peak RSS MB':>11} " \
             f"{'x DuckDB':>8} {'x floor':>8}"
    if any(name in results["scenarios"] for name in ("S1", "S5", "S2", "S3")):
        lines += [header, "-" * len(header)]
    for name in ("S1", "S5", "S2", "S3"):
        rows = results["scenarios"].get(name)
        if not rows:
            continue
        for engine_name in ("job", "duckdb", "polars", "floor"):
            row = rows.get(engine_name)
            if row:
                lines.append(f"{name:<9} {engine_name:<8} {row['seconds']:>7.1f} {row['records_per_second']:>11,} "
                             f"{row['mb_per_second']:>7.1f} {row['peak_rss_mb']:>11,} "
                             f"{row.get('x_duckdb', 1.0):>8.2f} {row.get('x_floor', 1.0):>8.2f}")
    for name in ("S1", "S5", "S2", "S3"):
        rows = results["scenarios"].get(name)
        if rows and rows["job"].get("phases_ms"):
            lines.append(f"{name} job phases (s): {phases(rows['job'])}")
    s2_rows = results["scenarios"].get("S2")
    if s2_rows:
        lines.append(f"\nS2: job {s2_rows['job']['seconds']:.1f} s vs the 2M dirty records alone "
                     f"{s2_rows['dirty_alone']['seconds']:.1f} s = {s2_rows['x_time_vs_alone']}x "
                     f"(run only: {s2_rows['x_run_time_vs_alone']}x); bytes written "
                     f"{s2_rows['job']['bytes_written'] / 2**20:,.1f} MB vs "
                     f"{s2_rows['dirty_alone']['bytes_written'] / 2**20:,.1f} MB = "
                     f"{s2_rows['x_bytes_written_vs_alone']}x; runs {s2_rows['job']['runs']} vs "
                     f"{s2_rows['dirty_alone']['runs']} (spread {spread(s2_rows['job']):.0%})")
    s3_rows = results["scenarios"].get("S3")
    if s3_rows and "S1" in results["scenarios"]:
        per_record = (s3_rows["job"]["seconds"] / s3_rows["input_records"]) / (
            results["scenarios"]["S1"]["job"]["seconds"] / results["scenarios"]["S1"]["input_records"])
        lines.append(f"S3: largest task holds {s3_rows['max_records_per_task']:,} of the skewed partition's "
                     f"{s3_rows['largest_partition_records']:,} records ({s3_rows['task_share_of_largest']:.0%}); "
                     f"time per record {per_record:.2f}x S1's")
    s4_rows = results["scenarios"].get("S4")
    if s4_rows:
        lines.append("S4 (standalone cluster, driver 1 GB, executors 2 GB): " + "; ".join(
            f"{int(size):,} records {row['seconds']:.0f} s, driver peak RSS {row['driver_peak_rss_mb']:,} MB"
            for size, row in s4_rows.items()))
    k1_rows = results["scenarios"].get("K1")
    if k1_rows:
        lines.append(f"K1 (S1's {k1_rows['input_records']:,} records as zstd record batches, "
                     f"{k1_rows['input_bytes'] / 2**20:,.0f} MB; Parquet copy {k1_rows['parquet_bytes'] / 2**20:,.0f} "
                     f"MB): job on .log {k1_rows['job']['seconds']:.1f} s (run {k1_rows['job']['run_seconds']:.1f} s, "
                     f"peak RSS {k1_rows['job']['peak_rss_mb']:,} MB) vs DuckDB on Parquet "
                     f"{k1_rows['duckdb']['seconds']:.1f} s = {k1_rows['job']['x_duckdb']}x")
    reads = results["scenarios"].get("read")
    if reads:
        lines.append("read (stream every column as Arrow batches; read API vs DuckDB over a plain glob): " + "; ".join(
            f"{int(size):,} records {row['read']['seconds']:.1f} s ({row['read']['records_per_second']:,} records/s, "
            f"peak RSS {row['read']['peak_rss_mb']:,} MB) vs DuckDB {row['duckdb-read']['seconds']:.1f} s "
            f"(peak RSS {row['duckdb-read']['peak_rss_mb']:,} MB) = {row['x_duckdb']}x"
            for size, row in reads.items()))
    scale = results["scenarios"].get("scaling")
    if scale:
        rates = [row["run_records_per_second"] for row in scale.values()]
        lines.append("scaling (job, run time without start-up): " + "; ".join(
            f"{int(size):,} records {row['run_seconds']:.1f} s ({row['run_records_per_second']:,} records/s, "
            f"peak RSS {row['peak_rss_mb']:,} MB)" for size, row in scale.items())
            + f"; time per record varies {max(rates) / min(rates) - 1:.0%} across sizes")
    return "\n".join(lines)


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = [s for s in ("S1", "S5", "S2", "S3") if s in results["scenarios"]]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    engines = ("job", "duckdb", "polars", "floor")
    width = 0.2
    for i, name in enumerate(engines):
        values = [results["scenarios"][s][name]["seconds"] for s in scenarios]
        axes[0].bar([x + i * width for x in range(len(scenarios))], values, width, label=name)
    axes[0].axhline(results["spark_startup_seconds"], color="grey", linestyle=":", label="Spark start-up")
    axes[0].set_xticks([x + 1.5 * width for x in range(len(scenarios))], scenarios)
    axes[0].set_ylabel("wall time (s), median")
    axes[0].set_title("compaction job vs single-node engines")
    axes[0].legend()
    scale = results["scenarios"].get("scaling", {})
    if scale:
        sizes = [int(s) / 1e6 for s in scale]
        axes[1].plot(sizes, [row["run_seconds"] for row in scale.values()], marker="o", label="job (run)")
        axes[1].plot(sizes, [row["seconds"] for row in scale.values()], marker="o", label="job (total)")
        axes[1].set_xlabel("records (millions)")
        axes[1].set_ylabel("seconds")
        axes[1].set_title("cost grows linearly with dirty records")
        axes[1].legend()
    figure.suptitle(f"{results['machine']['cores']} cores, {results['machine']['cpu']}", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each (about a minute)")
    parser.add_argument("--scenarios", default=None, help="comma list (default: S1,S5,S2,S3,S4,K1,scaling,read; "
                                                          "with --quick S1,S5,S2,S3,K1,scaling,read)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "compaction-bench"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    scale = 20 if args.quick else 1
    runs = 1 if args.quick else args.runs
    default = "S1,S5,S2,S3,K1,scaling,read" if args.quick else "S1,S5,S2,S3,S4,K1,scaling,read"
    chosen = (args.scenarios or default).split(",")
    results: dict[str, Any] = {"machine": machine(), "quick": args.quick, "runs": runs, "scenarios": {}}
    startups = [spark_startup() for _ in range(runs)]
    results["spark_startup_seconds"] = round(statistics.median(m.extra["session_seconds"] for m in startups), 2)
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "S1": lambda: s1(work, runs, 20_000_000 // scale),
        "S5": lambda: s5(work, runs, 20_000_000 // scale),
        "S2": lambda: s2(work, runs, 2_000_000 // scale),
        "S3": lambda: s3(work, runs, 20_000_000 // scale),
        "S4": lambda: s4(work, 50_000_000 // scale),
        "K1": lambda: k1(work, runs, 20_000_000 // scale),
        "scaling": lambda: scaling(work, runs, tuple(n // scale for n in (5_000_000, 10_000_000, 20_000_000,
                                                                           50_000_000))),
        "read": lambda: read(work, runs, tuple(n // scale for n in (5_000_000, 10_000_000, 20_000_000))),
    }
    for name in chosen:
        started = time.perf_counter()
        print(f"== {name}", flush=True)
        results["scenarios"][name] = steps[name]()
        print(f"   done in {time.perf_counter() - started:.0f} s", flush=True)
    name = "quick" if args.quick else "latest"
    (out / f"{name}.json").write_text(json.dumps(results, indent=1))
    chart(results, out / f"{name}.png")
    report = table(results)
    (out / f"{name}.txt").write_text(report + "\n")
    print(report)


if __name__ == "__main__":
    main()
