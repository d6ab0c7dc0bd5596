"""The benchmark harness: the job against the fastest formulation of DuckDB and Polars, and the I/O floor.

    python bench/harness.py [--quick] [--scenarios startup,S1,S5,S2,S3,S4,K1,scaling,read] [--runs 5]
                            [--work DIR] [--out DIR]

Stores come from the project's generator. Every engine runs as its own process on the same segment files, and
the engines take turns run by run (the job, then each peer's formulations, then the floor; again), so that a
busy spell of the machine hits all alike; each figure is the median of ``--runs`` runs, with the spread
((slowest - fastest) / median). The peers are DuckDB and Polars, each in several formulations
(bench/engines.py); the fastest formulation of any peer in the run is the bar (``x fastest``). The floor reads
every record and writes the survivors, which no engine can do with less. Every engine's output is checked
against the job's (the same number of records and a digest of their sorted offsets, per partition); a mismatch
fails the bench. The job also runs on Sail (``--remote sail`` from .venv-sail, its server's start included), a
row of its own (``sail``) in every scenario that runs the job here (S4 runs it on a Spark cluster, ``read`` runs
no job). Wall time includes
everything the process does; the job's includes Spark start-up, which is
also measured on its own, and as users start the job (``startup``: from this checkout and from the installed
wheel). Peak RSS is the process tree's. Every job row also has where its time went (the run report's phases:
start-up, plan, the Spark jobs, commit, and the tasks' read, decide and write time summed over tasks). Results
go to ``<out>/latest.json`` and a chart ``<out>/latest.png``; the table is printed.

Scenarios:
  startup  a run of a 10,000-record store from the dev checkout and from the wheel in a fresh virtualenv of its
           own: its first run without `compaction warm-up`, the warm-up, its first run after it, later runs
  S1  full compaction: 20M records, 4M keys, 100-byte values, 4 partitions
  S5  one hot partition: S1's 20M records and 4M keys in a single partition
  S2  nightly incremental: a compacted store (20M records, unique keys) plus 2M new records updating
      them, against compacting the 2M new records alone
  S3  skew: 20M records, 80% in one partition, one key with 1M versions
  S4  memory: 50M records on a standalone cluster (driver 1 GB, executors 2 GB), with the driver's peak
      RSS at 12.5M, 25M and 50M records
  K1  Kafka's format: S1's records as .log segments of zstd record batches, cleaned at batch level, against
      the peers on the Parquet copy of the same records (S1's store)
  scaling  S1's job at 5M, 10M, 20M and 50M records (time per record and peak RSS)
  read     a streaming read of S1's store through the read API (every column, as Arrow batches) against
           DuckDB reading the same files with a plain glob; peak RSS at 5M, 10M and 20M records
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
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

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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
#: Each peer's formulations (bench/engines.py), the fastest of each engine first; the fastest in a run is the bar.
PEERS = ("duckdb", "duckdb-qualify", "duckdb-argmax", "polars", "polars-unique", "polars-window")
#: What this run measures besides the job (``--job-only``: nothing, for a before/after of the job alone).
SELECTED: dict[str, tuple[str, ...]] = {"peers": PEERS}
#: The job on Sail (``--remote sail``, its server started in the job's process): from .venv-sail (``make
#: sail-setup``), a row of its own in every scenario that compares engines, unless ``--no-sail``.
SAIL = ROOT / ".venv-sail" / "bin"


@dataclass
class Measure:
    seconds: float
    peak_rss: int
    extra: dict[str, Any] = field(default_factory=dict)


def run_measured(command: list[str], env: dict[str, str] | None = None, rss_of: Callable[[psutil.Process],
                 list[psutil.Process]] | None = None, cwd: Path = ROOT) -> Measure:
    """Run a command in ``cwd``; wall time and the peak RSS of its process tree (sampled every 50 ms)."""
    peak = 0
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
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


def env(python: str = PYTHON) -> dict[str, str]:
    result = dict(os.environ)
    result.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
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


def job(work: Path, source: str, copy: bool = True, extra: list[str] | None = None,
        command: list[str] | None = None, python: str = PYTHON, environ: dict[str, str] | None = None,
        cwd: Path = ROOT) -> Measure:
    """`compaction run` on (a copy of) the store (``environ``: its environment, else :func:`env`'s), run in
    ``cwd`` (where Spark's Python workers start, with that folder first on their path); adds the report's
    figures and the survivors it left (``extra["survivors"]``: per partition, the live log's offsets)."""
    target = source
    if copy:
        target = str(work / "run-copy")
        shutil.rmtree(target, ignore_errors=True)
        copy_store(source, target)
    conf = work / "bench.toml"
    conf.write_text(CONFIG)
    report = work / "report.json"
    measure = run_measured([*(command or [PYTHON, "-m", "compaction.cli"]), "run", target, "--conf", str(conf),
                            "--now", str(NOW), "--allow-future-now", "--report", str(report), *(extra or [])],
                           env=environ or env(python), cwd=cwd)
    doc = json.loads(report.read_text())
    measure.extra = {"records_read": doc["totals"]["messages_read"], "bytes_written": doc["totals"]["bytes_written"],
                     "run_seconds": doc["elapsed_ms"] / 1000, "failed": doc["totals"]["failed"],
                     "phases_ms": doc.get("phases_ms", {})}
    if doc["totals"]["failed"]:
        raise RuntimeError(f"the job failed partitions: {doc['failures']}")
    store = Store.open(target)
    measure.extra["survivors"] = {str(tp): store.read(tp, columns=["offset"]).column("offset").to_numpy()
                                  for tp in store.topic_partitions()}
    if copy:
        shutil.rmtree(target)
    return measure


def sail_job(work: Path, source: str) -> Measure:
    """The job on Sail, as :func:`job` runs it on local Spark: ``--remote sail``, the server's start included."""
    return job(work, source, command=[str(SAIL / "compaction")], python=str(SAIL / "python"),
               extra=["--remote", "sail"])


def engine(work: Path, name: str, source: str, survivors: Path | None = None) -> Measure:
    """An engine's formulation on the store's segment files; ``extra["survivors"]`` is what it wrote."""
    output = work / f"out-{name}"
    shutil.rmtree(output, ignore_errors=True)
    measure = run_measured([PYTHON, str(ROOT / "bench" / "engines.py"), name, source, str(output),
                            *([str(survivors)] if survivors else [])])
    measure.extra["bytes_written"] = sum(p.stat().st_size for p in output.glob("*.parquet"))
    measure.extra["survivors"] = {p.stem: pq.read_table(p, columns=["offset"]).column("offset").to_numpy()
                                  for p in output.glob("*.parquet")}
    shutil.rmtree(output)
    return measure


def digest(survivors: dict[str, np.ndarray]) -> tuple[int, str]:
    """How many records survived and a digest of their offsets, per partition, sorted."""
    sha = hashlib.sha256()
    for name in sorted(survivors):
        sha.update(name.encode() + b"\0" + np.sort(survivors[name]).astype("<i8").tobytes())
    return sum(len(o) for o in survivors.values()), sha.hexdigest()[:16]


def check_output(name: str, measure: Measure, expected: tuple[int, str]) -> None:
    """Every engine must leave exactly the job's survivors (the same count and offsets), or the bench fails."""
    found = digest(measure.extra.pop("survivors"))
    measure.extra["survivors_checked"] = found
    if found != expected:
        raise RuntimeError(f"{name} kept {found[0]:,} records (offsets digest {found[1]}); the job kept "
                           f"{expected[0]:,} ({expected[1]}): their outputs differ")


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
    result.update({k: v for k, v in pick.extra.items() if k not in ("stdout", "survivors")})
    return result


def compare(work: Path, source: str, runs: int, job_source: str | None = None) -> dict[str, Any]:
    """The job (on ``job_source``, else ``source``) against every peer's formulations and the floor (on
    ``source``), taking turns run by run; every output checked against the job's. The fastest peer's median
    is the bar (``x_fastest``)."""
    records, size = store_bytes(source)
    rows: dict[str, Any] = {"input_records": records, "input_bytes": size}
    peers = SELECTED["peers"]
    others = (*peers, "floor") if peers else ()
    sail = ("sail",) if SELECTED.get("sail") else ()
    measured: dict[str, list[Measure]] = {name: [] for name in ("job", *sail, *others)}
    survivors = work / "survivors.parquet"
    expected: tuple[int, str] | None = None
    for _ in range(runs):  # the engines take turns, so a busy spell of the machine hits all alike
        ran = job(work, job_source or source)
        if expected is None:
            expected = digest(ran.extra["survivors"])
            pq.write_table(pa.table({
                "partition": [name for name, offsets in ran.extra["survivors"].items() for _ in offsets],
                "offset": np.concatenate(list(ran.extra["survivors"].values()))}), survivors)
        check_output("the job", ran, expected)
        measured["job"].append(ran)
        if sail:
            on_sail = sail_job(work, job_source or source)
            check_output("the job on Sail", on_sail, expected)
            measured["sail"].append(on_sail)
        for name in others:
            measure = engine(work, name, source, survivors if name == "floor" else None)
            check_output(name, measure, expected)
            measured[name].append(measure)
    for name, measures in measured.items():
        row = median(measures)
        row["records_per_second"] = int(records / row["seconds"])
        row["mb_per_second"] = round(size / 2**20 / row["seconds"], 1)
        row["spread"] = round(spread(row), 3)
        rows[name] = row
    if not peers:  # --job-only
        return rows
    fastest = min(peers, key=lambda name: rows[name]["seconds"])
    rows["fastest_peer"] = fastest
    for name in ("job", *sail, *peers, "floor"):
        rows[name]["x_fastest"] = round(rows[name]["seconds"] / rows[fastest]["seconds"], 2)
        rows[name]["x_floor"] = round(rows[name]["seconds"] / rows["floor"]["seconds"], 2)
    return rows


def max_task_records(source: str) -> tuple[int, int]:
    """The most records one task of the skewed partition holds (counted by reading each decision task's
    key range, and each rewrite's sources), and that partition's cleaned records."""
    from compaction.clean.cleaner import Cleaner, plan_store
    from compaction.clean.layout import SegmentOutcome, plan_jobs
    from compaction.clean.tasks.decide import decide_facts
    from compaction.clean.tasks.key_ranges import sample_bounds

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
    """S1's records as zstd record batches: the job on the .log store, the peers on the Parquet copy."""
    parquet = generated(work, f"s1-{records}", s1_spec(records))
    kafka = generated(work, f"k1-{records}", replace(s1_spec(records), segment_format="kafka", compression="zstd"))
    result = compare(work, parquet, runs, job_source=kafka)
    result["log_bytes"] = store_bytes(kafka)[1]
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
    if not SELECTED["peers"]:
        return result
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


def startup(work: Path, runs: int) -> dict[str, Any]:
    """A run of a small store as users start the job: from this checkout (``make setup`` ran ``compaction warm-up``)
    and from the wheel installed in a fresh virtualenv of its own as the README installs it (``pip install``, then
    ``compaction warm-up``), taking turns. Rows of their own: the wheel's first run without the warm-up, the
    warm-up itself, and the wheel's first run after it (the first a user of the README meets)."""
    from tests.helpers.jobenv import build_wheel, job_environment

    small = generated(work, "startup", GenerateSpec(records=10_000, keys=2_000, partitions=1, segment_records=2_500,
                                                    end_time_ms=WRITTEN, seed=7))
    installed = work / "wheel-venv"
    shutil.rmtree(installed, ignore_errors=True)  # a fresh environment of the code measured, and no archive
    shutil.rmtree(work / "dist", ignore_errors=True)
    job_environment(installed, build_wheel(work / "dist"))
    wheel = ([str(installed / "bin" / "compaction")], str(installed / "bin" / "python"))
    commands = {"dev checkout": ([PYTHON, "-m", "compaction.cli"], PYTHON), "installed wheel": wheel}
    if SELECTED.get("sail"):
        commands["sail"] = ([str(SAIL / "compaction")], str(SAIL / "python"))
    rows: dict[str, Any] = {"installed wheel, no warm-up": median([job(work, small, command=wheel[0],
                                                                       python=wheel[1])])}
    warm_up = run_measured([*wheel[0], "warm-up"], env=env(wheel[1]))
    rows["installed wheel, first run"] = median([job(work, small, command=wheel[0], python=wheel[1])])
    measured: dict[str, list[Measure]] = {where: [] for where in commands}
    for _ in range(runs):
        for where, (command, python) in commands.items():
            measured[where].append(job(work, small, command=command, python=python,
                                       extra=["--remote", "sail"] if where == "sail" else None))
    rows.update({where: median(measures) for where, measures in measured.items()})
    for row in rows.values():
        row["session_seconds"] = row["phases_ms"].get("startup", 0) / 1000
    rows["installed wheel"]["x_first_run"] = round(rows["installed wheel, first run"]["seconds"]
                                                   / rows["installed wheel"]["seconds"], 2)
    rows["warm-up"] = {"seconds": round(warm_up.seconds, 2), "peak_rss_mb": round(warm_up.peak_rss / 2**20)}
    return rows


def scaling(work: Path, runs: int, sizes: tuple[int, ...]) -> dict[str, Any]:
    result = {}
    for size in sizes:
        spec = GenerateSpec(records=size, keys=size // 5, partitions=4, segment_records=500_000,
                            end_time_ms=WRITTEN, seed=1)
        source = generated(work, f"s1-{size}", spec)
        row = median([job(work, source) for _ in range(runs)])
        row["run_records_per_second"] = int(row["records_read"] / row["run_seconds"])
        if SELECTED.get("sail"):
            on_sail = median([sail_job(work, source) for _ in range(runs)])
            row["sail"] = {**on_sail, "run_records_per_second": int(on_sail["records_read"] / on_sail["run_seconds"])}
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
    machine_ = results["machine"]
    lines = [f"machine: {machine_['cpu']}, {machine_['cores']} cores, {machine_['memory_gb']} GB; pyspark "
             f"{machine_['pyspark']}, duckdb {machine_['duckdb']}, polars {machine_['polars']}, pyarrow "
             f"{machine_['pyarrow']}; medians of {results['runs']} runs, the engines taking turns",
             f"Spark start-up (session only, median): {results['spark_startup_seconds']:.1f} s", ""]
    header = (f"{'scenario':<9} {'engine':<15} {'wall s':>7} {'spread':>7} {'records/s':>11} {'peak RSS MB':>11} "
              f"{'x fastest':>9} {'x floor':>8}")
    compared = [name for name in ("S1", "S5", "S3", "K1", "S2") if name in results["scenarios"]]
    if compared:
        lines += [header, "-" * len(header)]
    for name in compared:
        rows = results["scenarios"][name]
        for engine_name in ("job", "sail", *PEERS, "floor"):
            row = rows.get(engine_name)
            if row:
                label = engine_name + (" *" if engine_name == rows.get("fastest_peer") else "")
                lines.append(f"{name:<9} {label:<15} {row['seconds']:>7.1f} {row['spread']:>7.0%} "
                             f"{row['records_per_second']:>11,} {row['peak_rss_mb']:>11,} "
                             f"{row.get('x_fastest', float('nan')):>9.2f} {row.get('x_floor', float('nan')):>8.2f}")
    if compared:
        lines.append("(* the fastest peer, the bar; every engine's output checked against the job's: the same "
                     "records, the same offsets)")
    for name in compared:
        rows = results["scenarios"][name]
        for engine_name in ("job", "sail"):
            if rows.get(engine_name, {}).get("phases_ms"):
                lines.append(f"{name} {engine_name} phases (s): {phases(rows[engine_name])}")
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
    if s3_rows and "S1" in results["scenarios"] and "max_records_per_task" in s3_rows:
        per_record = (s3_rows["job"]["seconds"] / s3_rows["input_records"]) / (
            results["scenarios"]["S1"]["job"]["seconds"] / results["scenarios"]["S1"]["input_records"])
        lines.append(f"S3: largest task holds {s3_rows['max_records_per_task']:,} of the skewed partition's "
                     f"{s3_rows['largest_partition_records']:,} records ({s3_rows['task_share_of_largest']:.0%}); "
                     f"time per record {per_record:.2f}x S1's")
    k1_rows = results["scenarios"].get("K1")
    if k1_rows:
        lines.append(f"K1: the job on .log segments ({k1_rows['log_bytes'] / 2**20:,.0f} MB of zstd record batches), "
                     f"the peers on the Parquet copy ({k1_rows['input_bytes'] / 2**20:,.0f} MB)")
    s4_rows = results["scenarios"].get("S4")
    if s4_rows:
        lines.append("S4 (standalone cluster, driver 1 GB, executors 2 GB): " + "; ".join(
            f"{int(size):,} records {row['seconds']:.0f} s, driver peak RSS {row['driver_peak_rss_mb']:,} MB"
            for size, row in s4_rows.items()))
    startup = results["scenarios"].get("startup")
    if startup:
        lines.append("start-up (a run of a 10,000-record store; wall, and the Spark session's part): " + "; ".join(
            f"{where} {row['seconds']:.1f} s" + (f" (session {row['session_seconds']:.1f} s)"
                                                 if "session_seconds" in row else "")
            for where, row in startup.items()))
        if "x_first_run" in startup.get("installed wheel", {}):
            lines.append(f"start-up: the wheel's first run after its warm-up takes "
                         f"{startup['installed wheel']['x_first_run']}x a later run's time")
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
        memory = [row["peak_rss_mb"] for row in scale.values()]
        lines.append("scaling (job, run time without start-up): " + "; ".join(
            f"{int(size):,} records {row['run_seconds']:.1f} s ({row['run_records_per_second']:,} records/s, "
            f"peak RSS {row['peak_rss_mb']:,} MB)" for size, row in scale.items())
            + f"; time per record varies {max(rates) / min(rates) - 1:.0%} and peak RSS "
              f"{max(memory) / min(memory) - 1:.0%} across sizes")
        if all("sail" in row for row in scale.values()):
            lines.append("scaling on Sail (run time without start-up): " + "; ".join(
                f"{int(size):,} records {row['sail']['run_seconds']:.1f} s "
                f"({row['sail']['run_records_per_second']:,} records/s, peak RSS {row['sail']['peak_rss_mb']:,} MB)"
                for size, row in scale.items()))
    return "\n".join(lines)


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = [s for s in ("S1", "S5", "S3", "K1", "S2") if s in results["scenarios"]
                 and "fastest_peer" in results["scenarios"][s]]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.25
    for i, name in enumerate(("job", "fastest peer", "floor")):
        values = [results["scenarios"][s][results["scenarios"][s]["fastest_peer"] if name == "fastest peer"
                                          else name]["seconds"] for s in scenarios]
        axes[0].bar([x + i * width for x in range(len(scenarios))], values, width, label=name)
    axes[0].axhline(results["spark_startup_seconds"], color="grey", linestyle=":", label="Spark start-up")
    axes[0].set_xticks([x + width for x in range(len(scenarios))], scenarios)
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
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--job-only", action="store_true", help="time the job alone (no peers, no floor): a "
                                                                  "before/after of a change")
    parser.add_argument("--no-sail", action="store_true", help="leave out the job on Sail (run from .venv-sail, "
                                                                 "made by make sail-setup)")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "compaction-bench"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    if args.job_only:
        SELECTED["peers"] = ()
    if not args.no_sail:
        if not (SAIL / "compaction").exists():
            parser.error(f"no Sail at {SAIL}: run `make sail-setup`, or give --no-sail")
        SELECTED["sail"] = ("sail",)
    scale = 20 if args.quick else 1
    runs = 1 if args.quick else args.runs
    default = ("startup,S1,S5,S2,S3,K1,scaling,read" if args.quick
               else "startup,S1,S5,S2,S3,S4,K1,scaling,read")
    chosen = (args.scenarios or default).split(",")
    results: dict[str, Any] = {"machine": machine(), "quick": args.quick, "runs": runs, "scenarios": {}}
    startups = [spark_startup() for _ in range(runs)]
    results["spark_startup_seconds"] = round(statistics.median(m.extra["session_seconds"] for m in startups), 2)
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "startup": lambda: startup(work, runs),
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
