"""The benchmark harness: the job against the fastest formulation of DuckDB and Polars, the I/O floor and the floor
of each of its phases, on one machine, on thousands of partitions and behind an object store's latency.

    python bench/harness.py [--quick] [--scenarios startup,S1,S5,S6,...] [--runs 5] [--peers duckdb,polars,...]
                            [--job-only] [--no-sail] [--memory-cap-gb 18] [--work DIR] [--out DIR]

Stores come from the project's generator and are kept under ``<work>/stores``. Every engine runs as its own process
on the same segment files, and the engines take turns run by run (the job, then each peer's formulations, then the
floors; again), so that a busy spell of the machine hits all alike; each figure is the median of ``--runs`` runs,
with the spread ((slowest - fastest) / median). The peers are DuckDB and Polars, each in several formulations
(bench/engines.py); the fastest formulation of any peer in the run is the bar (``x fastest``). The floor reads every
record and writes the survivors, which no engine can do with less. Every engine's output is checked against the
job's (the same number of records and a digest of their sorted offsets, per partition); a mismatch fails the bench.
The job also runs on Sail (``--remote sail`` from .venv-sail, its server's start included), a row of its own
(``sail``) in every scenario that compares engines, unless ``--no-sail``. Wall time includes everything the process
does; the job's includes Spark start-up, which is also measured on its own, and as users start the job (``startup``:
from this checkout and from the installed wheel). Peak RSS is the process tree's; so is the CPU time (user + system, as
the system counts a process and the children it waited for), which sets the job's tasks' work per record against
each peer's CPU per record. Every job row also has where its
time went (the run report's phases: start-up, plan, the Spark jobs, commit, and the tasks' read, decide and write
time summed over tasks) and what its pass's Spark stages sent to executors and collected from them (``driver MB``,
the report's ``driver_bytes``). Results go to ``<out>/latest.json`` (written after each scenario) and a chart
``<out>/latest.png``; the table is printed. A scenario that fails (or that this machine cannot hold, which it says
in one line) is recorded with its error, the others still run, and the bench exits 1. A process tree that grows past
the memory cap (``--memory-cap-gb``, three quarters of the machine's memory) is stopped, since the machine has other
work and no swap: a peer or floor stopped so is left out of the bar and its row says why (at S6's size some peers'
formulations may be); the job stopped so fails its scenario.

The floors of the job's phases (S5, S6) run in the same turns, each in one thread against the tasks' seconds of
its phase: read, pyarrow reading every segment's decision columns (offset, key, delete_horizon_ms) once; decide,
DuckDB's group-by of the keys and offsets (each key's max offset), its read included; write, pyarrow writing the
survivors (every column, as the job writes segments). Goals (issue 36): read <= 1.5x, decide <= 1.0x, write <= 1.3x.

Scenarios:
  startup  a run of a 10,000-record store from the dev checkout and from the wheel in a fresh virtualenv of its
           own: its first run without `compaction warm-up`, the warm-up, its first run after it, later runs; and
           Spark's bare start and stop in turns with them (goal: the run within 1.0x of it)
  S1  full compaction: 20M records, 4M keys, 100-byte values, 4 partitions
  S5  one hot partition: S1's 20M records and 4M keys in a single partition, with the floors of the phases and
      PySpark SQL as a data engineer writes it (a semi-join on each key's max offset, and row_number() over a
      window, in a local session of Spark's defaults; the job is to be >= 3x faster)
  S6  a hot partition of 100M records, 20M keys of 14 bytes, 100-byte values, 200 segments of 500k (about 8.5 GB
      on disk, generated once in 20 appends and kept; each run cleans a copy made of hard links, so it needs
      about 12 GB free, which it checks before it starts), the job with Spark's default driver memory: against
      the peers (goal <= 1.3x the fastest) with the job's peak RSS (goal <= 4 GB), and the floors of the phases
  S9  the nightly steady state: S6's store after the job's first run (about 20M live records), then a night of
      1% new records (1M: about 95% updates, 5% new keys, 5% tombstones) cleaned by a second run, against DuckDB and
      Polars merging the increment into their compacted table (and recomputing it whole); goals: the second run
      at least 2x faster than the fastest peer, bytes written at most 2x the increment's, peak RSS at most 2 GB with
      Spark's default driver (it shares S6's store by hard links, and keeps its own first run)
  S2  nightly incremental: a compacted store (20M records, unique keys) plus 2M new records updating
      them, against compacting the 2M new records alone, and against the peers' merges (S9's goals)
  S3  skew: 20M records, 80% in one partition, one key with 1M versions
  S4  memory: 50M records on a standalone cluster (driver 1 GB, executors 2 GB), with the driver's peak
      RSS at 12.5M, 25M and 50M records
  K1  Kafka's format: S1's records as .log segments of zstd record batches, cleaned at batch level, against
      the peers on the Parquet copy of the same records (S1's store)
  S7  many partitions: 1,000 partitions x 2,000 records (4 segments each) against the same 2M records in 4
      partitions (a fifth as many keys as records in each), the job on both in turns (goal <= 1.3x); DuckDB on
      both checks the job's outputs
  S8  an object store's latency: 300 partitions x 1,000 records (4 segments each) on a moto S3 server on
      127.0.0.1, the job reaching it through a proxy that adds 50 ms to every request (tests/helpers/faultproxy.py,
      requests in flight waiting together) and directly, in turns (goal <= 1.5x); each run on a fresh upload of
      the store; DuckDB on the local copy checks the outputs
  plan-commit  the job's plan and commit phases on 10,000 tiny partitions (a segment of 10 records each) on the
      S3 server behind the same 50 ms proxy (goal < 60 s each); one run
  scaling  S1's job at 5M, 10M, 20M and 50M records (time per record and peak RSS)
  read     a streaming read of S1's store through the read API (every column, as Arrow batches) against
           DuckDB reading the same files with a plain glob; peak RSS at 5M, 10M and 20M records

  source   the store as the Spark data source compaction against the plain formulation on the same rows and files
           (bench/spark_source.py, each in a local session of Spark's defaults, cold and warm): a batch read of S1's
           store against spark.read.parquet of its live files (goal <= 1.2x), with the floor of any Python data source
           (pyarrow reading the same files, nothing checked); a write of its 20M rows against df.write.parquet of them
           (goal <= 1.3x); a streaming write of them (ten micro-batches) against the batch write (throughput, goal
           <= 1.5x)

``--quick``: every scenario but S4 at small sizes, one run each (S1-S3, S5, K1, scaling, read at 1/20 of the
records; S6 and S9 at 1/20, 5M records in 200 segments; S7 100 partitions; S8 20; plan-commit 50), into
``<out>/quick.*``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
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
# partition whose log is 1% dirty is cleaned (S9's night is a twentieth of its live log, S2's a tenth).
"log.cleanup.policy" = "compact"
"log.roll.ms" = 60000
"log.cleaner.min.cleanable.ratio" = 0.01
"""
PYTHON = sys.executable
#: Each peer's formulations (bench/engines.py), the fastest of each engine first; the fastest in a run is the bar.
PEERS = ("duckdb", "duckdb-qualify", "duckdb-argmax", "polars", "polars-unique", "polars-window")
#: What a DuckDB or Polars user keeping a compacted table does each night (bench/engines.py): the increment merged
#: into the table (an anti-join on the increment's keys, and its latest records), the table written whole; the
#: peers of the nightly scenarios (S9, S2) beside the full formulations.
MERGES = ("duckdb-merge", "polars-merge")
#: What this run measures besides the job (``--job-only``: nothing, for a before/after of the job alone;
#: ``--peers``: some of the peers).
SELECTED: dict[str, tuple[str, ...]] = {"peers": PEERS}
#: The job on Sail (``--remote sail``, its server started in the job's process): from .venv-sail (``make
#: sail-setup``), a row of its own in every scenario that compares engines, unless ``--no-sail``.
SAIL = ROOT / ".venv-sail" / "bin"
#: The floors of the job's phases (bench/engines.py), each against the tasks' time of its phase, and the goal of
#: the ratio (issue 36).
PHASE_FLOORS = ("floor-read", "floor-decide", "floor-write")
PHASE_GOALS = {"read": 1.5, "decide": 1.0, "write": 1.3}
#: PySpark SQL as a data engineer writes it: the job is to stay at least this many times faster.
SPARK_SQL = ("spark-semijoin", "spark-window")
SPARK_SQL_GOAL = 3.0
#: The ratio goals of the scenarios of many partitions (S7: issue 44's) and of an object store's latency (S8), and
#: the most seconds planning and committing 10,000 partitions may each take at 50 ms a request.
MANY_GOAL = 1.3
LATENCY_GOAL = 1.5
PLAN_COMMIT_GOAL_S = 60
#: The scenarios a run measures unless told (``--scenarios``), at full size and with ``--quick``.
DEFAULT = (
    "startup",
    "S1",
    "S5",
    "S6",
    "S9",
    "S2",
    "S3",
    "S4",
    "K1",
    "S7",
    "S8",
    "plan-commit",
    "scaling",
    "read",
    "source",
)
QUICK = tuple(name for name in DEFAULT if name != "S4")
#: The latency the proxy adds to every request to the S3 server (real S3 answers in 20-100 ms).
LATENCY_S = 0.05


@dataclass
class Measure:
    seconds: float
    peak_rss: int
    extra: dict[str, Any] = field(default_factory=dict)
    cpu_seconds: float = 0.0  # user + system CPU of the process tree (its children once they were waited for)


class OverMemoryCap(RuntimeError):
    """Raised when a measured process tree grew past the memory cap and was stopped."""


#: The most memory a measured process tree may hold (``--memory-cap-gb``; default three quarters of the
#: machine's): past it, the tree is stopped and its row says so, rather than the machine running out (no swap).
MEMORY_CAP = {"bytes": int(psutil.virtual_memory().total * 0.75)}


def run_measured(
    command: list[str],
    env: dict[str, str] | None = None,
    rss_of: Callable[[psutil.Process], list[psutil.Process]] | None = None,
    cwd: Path = ROOT,
) -> Measure:
    """Run a command in ``cwd``; wall time and the peak RSS of its process tree (sampled every 50 ms). A tree
    that grows past :data:`MEMORY_CAP` is killed, process by process, and :class:`OverMemoryCap` raised."""
    peak = 0
    capped = threading.Event()
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd, text=True)
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
                if total > MEMORY_CAP["bytes"] and not capped.is_set():
                    capped.set()
                    for p in [parent, *parent.children(recursive=True)][::-1]:  # children first
                        with contextlib.suppress(psutil.Error):
                            p.kill()
            except psutil.Error:
                pass
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out, err = process.communicate()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    done.set()
    sampler.join()
    if capped.is_set():
        raise OverMemoryCap(
            f"stopped after {seconds:.0f} s holding {peak / 2**30:.1f} GB, past the memory cap of "
            f"{MEMORY_CAP['bytes'] / 2**30:.1f} GB (--memory-cap-gb)"
        )
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{out[-2000:]}\n{err[-4000:]}")
    return Measure(seconds, peak, {"stdout": out}, cpu)


def env(python: str = PYTHON) -> dict[str, str]:
    result = dict(os.environ)
    result.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    return result


def store_bytes(url: str) -> tuple[int, int]:
    """Records and bytes of the store's live segments."""
    store = Store.open(url)
    manifests = [store.manifest(tp) for tp in store.topic_partitions()]
    return (
        sum(s.live_records for m in manifests for s in m.segments),
        sum(s.size_bytes for m in manifests for s in m.segments),
    )


def generated(work: Path, name: str, *specs: GenerateSpec, clean_between: bool = False, parts: int = 1) -> str:
    """A store made of the specs in order (cached); with ``clean_between`` the job cleans it after the first;
    ``parts``: each spec written as that many appends (:func:`in_parts`)."""
    path = work / "stores" / name
    if not (path / ".complete").exists():
        shutil.rmtree(path, ignore_errors=True)
        store = Store.open(str(path))
        for index, spec in enumerate(specs):
            for part in in_parts(spec, parts):
                generate(store, part, now_ms=WRITTEN, threads=2)
            if clean_between and index == 0:
                job(work, str(path), copy=False)
        (path / ".complete").touch()
    return str(path)


def in_parts(spec: GenerateSpec, parts: int) -> list[GenerateSpec]:
    """The spec as ``parts`` appends one after another, each a slice of its records and of its time span, its keys
    drawn from the whole key space with a seed of its own: the generator builds a partition's records in memory
    at once (about 300 bytes a record while it does), which 100M records in one partition would not fit."""
    if parts == 1:
        return [spec]
    span = spec.time_span_ms // parts
    return [
        replace(
            spec,
            records=spec.records // parts,
            time_span_ms=span,
            seed=spec.seed * 1000 + index,
            end_time_ms=spec.end_time_ms - (parts - 1 - index) * span,
        )
        for index in range(parts)
    ]


def copy_store(source: str, target: str, link: bool = False) -> None:
    """A copy of the store for the job to change, flushed to disk first: the copy's writeback must not
    compete with the job it precedes (the engines compared read the source, which is long on disk). With
    ``link``, hard links to the source's files instead (no bytes copied, nothing to flush): a pass never writes
    into an object or a manifest version that exists, it creates new ones (:func:`unchanged` checks it)."""
    if link:
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(".complete"), copy_function=os.link)
        return
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".complete"))
    os.sync()


def files_of(path: str) -> dict[str, tuple[int, int, int]]:
    """Every file under ``path`` with its inode, size and modification time."""
    found = {}
    for root, _, names in os.walk(path):
        for name in names:
            stat = os.stat(os.path.join(root, name))
            found[os.path.join(root, name)] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    return found


def unchanged(source: str, before: dict[str, tuple[int, int, int]]) -> None:
    """The source store's files are as they were (a run on a copy of hard links must not have written into one)."""
    if files_of(source) != before:
        raise RuntimeError(
            f"the job changed files of {source} through the hard links of its copy: the store is "
            "spoilt, delete it (it is generated again)"
        )


def run_job(
    work: Path,
    url: str,
    extra: list[str] | None = None,
    command: list[str] | None = None,
    python: str = PYTHON,
    environ: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> Measure:
    """`compaction run` on the store at ``url`` (``environ``: its environment, else :func:`env`'s), run in ``cwd``
    (where Spark's Python workers start, with that folder first on their path); adds the report's figures."""
    conf = work / "bench.toml"
    conf.write_text(CONFIG)
    report = work / "report.json"
    report.unlink(missing_ok=True)
    try:
        measure = run_measured(
            [
                *(command or [PYTHON, "-m", "compaction.cli"]),
                "run",
                url,
                "--conf",
                str(conf),
                "--now",
                str(NOW),
                "--allow-future-now",
                "--report",
                str(report),
                *(extra or []),
            ],
            env=environ or env(python),
            cwd=cwd,
        )
    except RuntimeError as err:  # the report, when the run wrote one, says first what failed
        if report.exists():
            raise RuntimeError(f"the job failed partitions: {json.loads(report.read_text())['failures']}") from err
        raise
    doc = json.loads(report.read_text())
    measure.extra = {
        "records_read": doc["totals"]["messages_read"],
        "bytes_written": doc["totals"]["bytes_written"],
        "run_seconds": doc["elapsed_ms"] / 1000,
        "failed": doc["totals"]["failed"],
        "phases_ms": doc.get("phases_ms", {}),
        "driver_bytes": doc.get("driver_bytes"),
    }
    if doc["totals"]["failed"]:
        raise RuntimeError(f"the job failed partitions: {doc['failures']}")
    return measure


def survivors_of(store: Store, threads: int = 1) -> dict[str, np.ndarray]:
    """Per partition, the offsets of the live log (``threads`` partitions read at once: an object store's)."""

    def offsets(tp: Any) -> np.ndarray:
        return store.read(tp, columns=["offset"]).column("offset").to_numpy()

    partitions = store.topic_partitions()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return {str(tp): found for tp, found in zip(partitions, pool.map(offsets, partitions), strict=True)}


def job(
    work: Path,
    source: str,
    copy: bool = True,
    extra: list[str] | None = None,
    command: list[str] | None = None,
    python: str = PYTHON,
    environ: dict[str, str] | None = None,
    cwd: Path = ROOT,
    link: bool = False,
) -> Measure:
    """`compaction run` on (a copy of) the store, as :func:`run_job` runs it (``link``: the copy made of hard
    links); adds the survivors it left (``extra["survivors"]``: per partition, the live log's offsets)."""
    target = source
    before = files_of(source) if copy and link else None
    if copy:
        target = str(work / "run-copy")
        shutil.rmtree(target, ignore_errors=True)
        copy_store(source, target, link=link)
    try:
        measure = run_job(work, target, extra=extra, command=command, python=python, environ=environ, cwd=cwd)
        measure.extra["survivors"] = survivors_of(Store.open(target))
    finally:
        if copy:
            shutil.rmtree(target)
        if before is not None:
            unchanged(source, before)
    return measure


def sail_job(work: Path, source: str, link: bool = False) -> Measure:
    """The job on Sail, as :func:`job` runs it on local Spark: ``--remote sail``, the server's start included."""
    return job(
        work,
        source,
        command=[str(SAIL / "compaction")],
        python=str(SAIL / "python"),
        extra=["--remote", "sail"],
        link=link,
    )


def engine(work: Path, name: str, source: str, survivors: Path | None = None) -> Measure:
    """An engine's formulation on the store's segment files; ``extra["survivors"]`` is what it wrote (a file, or
    Spark's folder of files, per partition). A phase's floor adds ``floor_seconds`` (its own clock) and
    ``records`` (what it saw)."""
    output = work / f"out-{name}"
    shutil.rmtree(output, ignore_errors=True)
    measure = run_measured(
        [
            PYTHON,
            str(ROOT / "bench" / "engines.py"),
            name,
            source,
            str(output),
            *([str(survivors)] if survivors else []),
        ]
    )
    if name in PHASE_FLOORS:
        figures = json.loads(measure.extra["stdout"].strip().splitlines()[-1])
        measure.extra.update(floor_seconds=figures["seconds"], records=figures["records"])
    written = list(output.glob("*.parquet"))
    measure.extra["bytes_written"] = sum(
        f.stat().st_size for p in written for f in ([p] if p.is_file() else p.rglob("*.parquet"))
    )
    if name != "floor-read":
        measure.extra["survivors"] = {
            p.stem: pq.read_table(p, columns=["offset"]).column("offset").to_numpy() for p in written
        }
    shutil.rmtree(output, ignore_errors=True)
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
        raise RuntimeError(
            f"{name} kept {found[0]:,} records (offsets digest {found[1]}); the job kept "
            f"{expected[0]:,} ({expected[1]}): their outputs differ"
        )


#: Spark's bare start and stop, as pyspark gives them (a local session of Spark's defaults): what a run of a small
#: store is held to (issue 44: within 1.0x).
BARE_SPARK = (
    "from pyspark.sql import SparkSession; "
    "SparkSession.builder.master('local[*]').config('spark.ui.enabled', 'false').getOrCreate().stop()"
)


def spark_startup() -> Measure:
    code = (
        "import time; from compaction.engine.session import spark_session; t = time.perf_counter(); "
        "s = spark_session('local[*]', conf={'spark.ui.enabled': 'false'}); "
        "print(time.perf_counter() - t); s.stop()"
    )
    measure = run_measured([PYTHON, "-c", code], env=env())
    measure.extra["session_seconds"] = float(measure.extra["stdout"].strip().splitlines()[-1])
    return measure


def phases(row: dict[str, Any]) -> str:
    """A job row's phases in seconds: the driver's wall time, then the tasks' time summed over tasks."""
    ms = row.get("phases_ms") or {}
    driver = [f"{name} {ms[name] / 1000:.1f}" for name in ("startup", "plan", "clean", "commit") if name in ms]
    tasks = [f"{name[5:]} {ms[name] / 1000:.1f}" for name in ("task_read", "task_decide", "task_write") if name in ms]
    return ", ".join(driver) + (f" [task-s: {', '.join(tasks)}]" if tasks else "")


def driver_mb(row: dict[str, Any]) -> str:
    """What a job row's pass sent to executors and collected from them, in MB ("-" when its report has no figure)."""
    found = row.get("driver_bytes")
    return "-" if found is None else f"{found / 2**20:,.1f}"


def spread(row: dict[str, Any]) -> float:
    """(slowest - fastest) / median of a row's runs."""
    return (max(row["runs"]) - min(row["runs"])) / row["seconds"]


def median(measures: list[Measure]) -> dict[str, Any]:
    pick = sorted(measures, key=lambda m: m.seconds)[len(measures) // 2]
    result = {
        "seconds": round(statistics.median(m.seconds for m in measures), 2),
        "peak_rss_mb": round(max(m.peak_rss for m in measures) / 2**20),
        "runs": [round(m.seconds, 2) for m in measures],
        "cpu_seconds": round(statistics.median(m.cpu_seconds for m in measures), 2),
    }
    result.update({k: v for k, v in pick.extra.items() if k not in ("stdout", "survivors")})
    return result


def compare(
    work: Path,
    source: str,
    runs: int,
    job_source: str | None = None,
    also: tuple[str, ...] = (),
    link: bool = False,
    merges: bool = False,
) -> dict[str, Any]:
    """The job (on ``job_source``, else ``source``; ``link``: on a copy of hard links) against every peer's
    formulations (with ``merges``, the nightly merges too) and the floor, and the engines named in ``also`` (the
    phases' floors, PySpark SQL), all on
    ``source``, taking turns run by run; every output checked against the job's. The fastest peer's median is
    the bar (``x_fastest``); each phase's floor is set against the job's tasks' time in that phase
    (``phase_floors``), and PySpark SQL against the job (``x_job``)."""
    records, size = store_bytes(source)
    rows: dict[str, Any] = {"input_records": records, "input_bytes": size}
    peers = SELECTED["peers"]
    if merges and peers:  # a nightly scenario: the merges into a compacted table first, the full formulations after
        peers = (*MERGES, *(name for name in peers if name not in MERGES))
    others = (*peers, "floor", *also) if peers else ()
    sail = ("sail",) if SELECTED.get("sail") else ()
    measured: dict[str, list[Measure]] = {name: [] for name in ("job", *sail, *others)}
    survivors = work / "survivors.parquet"
    expected: tuple[int, str] | None = None
    stopped: dict[str, str] = {}  # the engines stopped at the memory cap (not run again)
    for _ in range(runs):  # the engines take turns, so a busy spell of the machine hits all alike
        ran = job(work, job_source or source, link=link)
        if expected is None:
            expected = digest(ran.extra["survivors"])
            kept = ran.extra["survivors"]
            pq.write_table(
                pa.table(
                    {
                        "partition": pa.array(
                            np.repeat(np.array(list(kept), dtype=object), [len(o) for o in kept.values()]), pa.string()
                        ),
                        "offset": np.concatenate(list(kept.values())),
                    }
                ),
                survivors,
            )
        check_output("the job", ran, expected)
        measured["job"].append(ran)
        if sail:
            on_sail = sail_job(work, job_source or source, link=link)
            check_output("the job on Sail", on_sail, expected)
            measured["sail"].append(on_sail)
        for name in others:
            if name in stopped:
                continue
            try:
                measure = engine(work, name, source, survivors if name in ("floor", "floor-write") else None)
            except OverMemoryCap as err:  # its row says so; the others go on
                stopped[name] = f"{name} {err}"
                print(f"   {stopped[name]}", flush=True)
                continue
            if name == "floor-read":
                if measure.extra["records"] != records:
                    raise RuntimeError(
                        f"floor-read read {measure.extra['records']:,} records; the store holds {records:,}"
                    )
            else:
                check_output(name, measure, expected)
            measured[name].append(measure)
    for name, measures in measured.items():
        if name in stopped:
            rows[name] = {"error": stopped[name]}
            continue
        row = median(measures)
        row["records_per_second"] = int(records / row["seconds"])
        row["mb_per_second"] = round(size / 2**20 / row["seconds"], 1)
        row["spread"] = round(spread(row), 3)
        if name in PHASE_FLOORS:
            row["floor_seconds"] = round(statistics.median(m.extra["floor_seconds"] for m in measures), 2)
        rows[name] = row
    job_ms = rows["job"].get("phases_ms") or {}
    rows["job"]["task_us_per_record"] = round(
        sum(job_ms.get(f"task_{p}", 0) for p in ("read", "decide", "write")) * 1000 / max(1, records), 3
    )
    for name in (*peers, "floor"):
        if name in rows and "cpu_seconds" in rows[name]:
            rows[name]["cpu_us_per_record"] = round(rows[name]["cpu_seconds"] * 1e6 / max(1, records), 3)
    if not peers:  # --job-only
        return rows
    finished = [name for name in peers if name not in stopped]
    if not finished:
        raise RuntimeError(f"every peer was stopped: {'; '.join(stopped.values())}")
    fastest = min(finished, key=lambda name: rows[name]["seconds"])
    rows["fastest_peer"] = fastest
    for name in ("job", *sail, *finished, "floor"):
        if name in stopped:
            continue
        rows[name]["x_fastest"] = round(rows[name]["seconds"] / rows[fastest]["seconds"], 2)
        if "floor" not in stopped:
            rows[name]["x_floor"] = round(rows[name]["seconds"] / rows["floor"]["seconds"], 2)
    for name in also:
        if name in SPARK_SQL and name not in stopped:
            rows[name]["x_job"] = round(rows[name]["seconds"] / rows["job"]["seconds"], 2)
    if any(name in PHASE_FLOORS for name in also):
        rows["phase_floors"] = phase_floors(measured)
    return rows


def phase_floors(measured: dict[str, list[Measure]]) -> dict[str, Any]:
    """Each phase: the job's tasks' seconds in it (summed over tasks, median of the runs) against its floor's
    seconds (median), the ratio and its goal."""
    result = {}
    for phase, goal in PHASE_GOALS.items():
        floors = measured.get(f"floor-{phase}")
        if not floors:
            continue
        task_s = statistics.median(m.extra["phases_ms"].get(f"task_{phase}", 0) / 1000 for m in measured["job"])
        floor_s = statistics.median(m.extra["floor_seconds"] for m in floors)
        result[phase] = {
            "job_task_seconds": round(task_s, 2),
            "floor_seconds": round(floor_s, 2),
            "x_floor": round(task_s / floor_s, 2),
            "goal": goal,
        }
    return result


def take_turns(runs: int, contenders: dict[str, tuple[str, Callable[[], Measure]]]) -> dict[str, list[Measure]]:
    """``runs`` rounds of every contender in order (name -> (the store it works on, its run)); each output is
    checked against the first output on the same store (so the job goes first)."""
    expected: dict[str, tuple[int, str]] = {}
    measured: dict[str, list[Measure]] = {name: [] for name in contenders}
    for _ in range(runs):
        for name, (store, run) in contenders.items():
            measure = run()
            expected.setdefault(store, digest(measure.extra["survivors"]))
            check_output(name, measure, expected[store])
            measured[name].append(measure)
    return measured


def job_row(measures: list[Measure]) -> dict[str, Any]:
    """The median of a contender's runs, with the spread."""
    row = median(measures)
    row["spread"] = round(spread(row), 3)
    return row


def max_task_records(source: str) -> tuple[int, int]:
    """The most records one task of the skewed partition holds (counted by reading each decision task's
    key range, and each rewrite's sources), and that partition's cleaned records."""
    from compaction.clean.cleaner import Cleaner, plan_store
    from compaction.clean.layout import SegmentCounts, lay_out
    from compaction.clean.tasks.decide import decide_facts

    store = Store.open(source)
    settings = Settings.load(overrides=tomllib.loads(CONFIG), environ={})
    cleaner = Cleaner(None, store, settings)
    the_plan = plan_store(store, settings, NOW)
    largest = max(the_plan.to_clean, key=lambda p: p.records)
    task = cleaner.task(largest, NOW)
    decided = [decide_facts(task.of_range(b)) for b in range(task.split.key_ranges)]
    held = [d.facts.table.num_rows for d in decided]
    segment_counts: dict[int, SegmentCounts] = {}
    for d in decided:
        for segment, _, counts in d.segment_counts(largest.segments):
            before = segment_counts.get(segment.base_offset)
            segment_counts[segment.base_offset] = before.merge(counts) if before else counts
    jobs = lay_out(largest.segments, segment_counts, largest.first_dirty_offset, task.policy)
    held += [sum(s.live_records for s in sources) for sources, _ in jobs]
    return max(held), largest.records


def s1_spec(records: int) -> GenerateSpec:
    return GenerateSpec(
        records=records, keys=records // 5, partitions=4, segment_records=500_000, end_time_ms=WRITTEN, seed=1
    )


def s1(work: Path, runs: int, records: int) -> dict[str, Any]:
    source = generated(work, f"s1-{records}", s1_spec(records))
    return compare(work, source, runs)


def s5(work: Path, runs: int, records: int) -> dict[str, Any]:
    """One hot partition: S1's records and keys in a single partition of 500k-record segments; with the floors of
    the job's phases and PySpark SQL's formulations."""
    source = generated(work, f"s5-{records}", replace(s1_spec(records), partitions=1, seed=6))
    return compare(work, source, runs, also=(*PHASE_FLOORS, *SPARK_SQL))


def k1(work: Path, runs: int, records: int) -> dict[str, Any]:
    """S1's records as zstd record batches: the job on the .log store, the peers on the Parquet copy."""
    parquet = generated(work, f"s1-{records}", s1_spec(records))
    kafka = generated(work, f"k1-{records}", replace(s1_spec(records), segment_format="kafka", compression="zstd"))
    result = compare(work, parquet, runs, job_source=kafka)
    result["log_bytes"] = store_bytes(kafka)[1]
    return result


def s2(work: Path, runs: int, records: int) -> dict[str, Any]:
    base = GenerateSpec(
        records=records * 10,
        keys=records * 10,
        update_ratio=0.0,
        partitions=4,
        segment_records=500_000,
        end_time_ms=WRITTEN,
        seed=2,
    )
    dirty = GenerateSpec(
        records=records, keys=records * 10, partitions=4, segment_records=250_000, end_time_ms=WRITTEN, seed=3
    )
    source = generated(work, f"s2-{records}", base, dirty, clean_between=True)
    alone = generated(work, f"s2-alone-{records}", dirty)
    result = nightly(compare(work, source, runs, merges=True), source)
    result["goals"] = {"x_fastest": 0.5, "x_bytes_written_vs_increment": 2.0, "peak_rss_mb": 2048}
    result["dirty_alone"] = median([job(work, alone) for _ in range(runs)])
    whole, single = result["job"], result["dirty_alone"]
    result["x_time_vs_alone"] = round(whole["seconds"] / single["seconds"], 2)
    result["x_run_time_vs_alone"] = round(whole["run_seconds"] / single["run_seconds"], 2)
    result["x_bytes_written_vs_alone"] = round(whole["bytes_written"] / single["bytes_written"], 2)
    return result


def s3(work: Path, runs: int, records: int) -> dict[str, Any]:
    spec = GenerateSpec(
        records=records,
        keys=records // 5,
        partitions=4,
        segment_records=500_000,
        partition0_share=0.8,
        hot_key_records=records // 20,
        end_time_ms=WRITTEN,
        seed=4,
    )
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
            spec = GenerateSpec(
                records=size, keys=size // 5, partitions=4, segment_records=500_000, end_time_ms=WRITTEN, seed=5
            )
            source = generated(work, f"s4-{size}", spec)
            target = str(work / "run-copy")
            shutil.rmtree(target, ignore_errors=True)
            copy_store(source, target)
            report = work / "report.json"
            measure = run_measured(
                [
                    str(ROOT / "scripts" / "spark-submit.sh"),
                    "--master",
                    cluster.url,
                    "--driver-memory",
                    "1g",
                    "--executor-memory",
                    "2g",
                    "--config",
                    str(conf),
                    "--python",
                    PYTHON,
                    "--",
                    target,
                    "--now",
                    str(NOW),
                    "--allow-future-now",
                    "--report",
                    str(report),
                ],
                env=env(),
            )
            doc = json.loads(report.read_text())
            if doc["totals"]["failed"]:
                raise RuntimeError(f"S4 failed partitions: {doc['failures']}")
            result[str(size)] = {
                "seconds": round(measure.seconds, 1),
                "driver_peak_rss_mb": measure.peak_rss // 2**20,
                "records_read": doc["totals"]["messages_read"],
                "records_per_second": int(doc["totals"]["messages_read"] / measure.seconds),
            }
            shutil.rmtree(target)
    return result


class Refused(Exception):
    """Raised when a scenario cannot run on this machine; its message is the one line that says why."""


#: Bytes a generated record takes in a Parquet segment (a 14-byte key, a 100-byte value, zstd), measured.
RECORD_BYTES = 85
#: What S6 generates its store in: appends of a twentieth each (5M records at full size).
S6_PARTS = 20


def s6_spec(records: int) -> GenerateSpec:
    """One partition of ``records`` records and a fifth as many keys in 200 segments (S5 five times over)."""
    return replace(s1_spec(records), partitions=1, segment_records=records // 200, seed=9)


def s6_store(work: Path, records: int, scenario: str = "S6", extra_gb: float = 0.0) -> str:
    """S6's store (generated once and kept), once the disk and the environment are checked: the job runs with
    Spark's default driver memory, and the scenario needs ``extra_gb`` besides S6's own disk."""
    for variable in ("SPARK_DRIVER_MEMORY", "PYSPARK_SUBMIT_ARGS"):
        if os.environ.get(variable):
            raise Refused(f"{scenario} refused: it runs the job with Spark's default driver memory; unset {variable}")
    store_gb = records * RECORD_BYTES / 1e9
    run_gb = 2 * records // 5 * RECORD_BYTES / 1e9 + extra_gb  # the survivors (a fifth), then one engine's at a time
    kept = (work / "stores" / f"s6-{records}" / ".complete").exists()
    free_gb = shutil.disk_usage(work).free / 1e9
    print(
        f"   {scenario} needs ~{store_gb + run_gb:.1f} GB of disk under {work}: S6's store, {store_gb:.1f} GB "
        f"(generated once and kept{'; there already' if kept else ''}), and {run_gb:.1f} GB besides; {free_gb:.1f} "
        "GB free",
        flush=True,
    )
    need_gb = run_gb + (0 if kept else store_gb)
    if free_gb < need_gb * 1.1:
        raise Refused(
            f"{scenario} refused: it needs {need_gb:.1f} GB free under {work} and {free_gb:.1f} GB are "
            "(free some, or point --work at a bigger disk)"
        )
    return generated(work, f"s6-{records}", s6_spec(records), parts=S6_PARTS)


def s6(work: Path, runs: int, records: int) -> dict[str, Any]:
    """A hot partition of 100M records with Spark's default driver memory, against the peers and the floors of its
    phases. Its store is kept; each run cleans a copy made of hard links (a copy of bytes would double the disk)."""
    source = s6_store(work, records)
    result = compare(work, source, runs, also=PHASE_FLOORS, link=True)
    result["driver_memory"] = "Spark's default driver memory (no spark.driver.memory given)"
    result["goals"] = {"x_fastest": 1.3, "peak_rss_mb": 4096}
    return result


def night_spec(records: int, keys: int, segment_records: int, seed: int) -> GenerateSpec:
    """A night's new records on a compacted log of ``keys`` keys: keys drawn from a twentieth more than it holds
    (about 95% updates of existing keys, 5% new ones), 5% tombstones, written over the last day."""
    return GenerateSpec(
        records=records,
        keys=keys * 21 // 20,
        partitions=1,
        tombstone_ratio=0.05,
        segment_records=segment_records,
        end_time_ms=WRITTEN,
        time_span_ms=86_400_000,
        seed=seed,
    )


def s9(work: Path, runs: int, records: int) -> dict[str, Any]:
    """The nightly steady state: S6's store after the job's first run (its records compacted to about a fifth), then
    a night of 1% new records (:func:`night_spec`), cleaned by a second run; against DuckDB and Polars merging the
    increment into their compacted table (and recomputing it whole). Goals: the second run at least twice as fast as
    the fastest peer, bytes written at most twice the increment's own, peak RSS at most 2 GB with Spark's default
    driver. The store is kept, made of hard links to S6's objects (the first run writes new objects only)."""
    spec = s6_spec(records)
    source6 = s6_store(work, records, "S9", extra_gb=spec.keys * 2 * RECORD_BYTES / 1e9)
    path = work / "stores" / f"s9-{records}"
    if not (path / ".complete").exists():
        shutil.rmtree(path, ignore_errors=True)
        before = files_of(source6)
        copy_store(source6, str(path), link=True)
        job(work, str(path), copy=False)  # the first run
        unchanged(source6, before)
        generate(
            Store.open(str(path)),
            night_spec(records // 100, spec.keys, spec.segment_records, seed=90),
            now_ms=WRITTEN,
            threads=2,
        )
        (path / ".complete").touch()
    result = nightly(compare(work, str(path), runs, link=True, merges=True), str(path))
    result["driver_memory"] = "Spark's default driver memory (no spark.driver.memory given)"
    result["goals"] = {"x_fastest": 0.5, "x_bytes_written_vs_increment": 2.0, "peak_rss_mb": 2048}
    return result


def nightly(result: dict[str, Any], source: str) -> dict[str, Any]:
    """A nightly scenario's figures beside the comparison: the increment's records and bytes (the live segments from
    the cleaner's checkpoint on) and the job's bytes written against them."""
    store = Store.open(source)
    manifests = [store.manifest(tp) for tp in store.topic_partitions()]
    night = [s for m in manifests for s in m.segments if s.next_offset > m.first_dirty_offset]
    result["increment_records"] = sum(s.live_records for s in night)
    result["increment_bytes"] = sum(s.size_bytes for s in night)
    result["x_bytes_written_vs_increment"] = round(result["job"]["bytes_written"] / result["increment_bytes"], 2)
    return result


def many_spec(partitions: int, records: int, segments: int = 4, seed: int = 7) -> GenerateSpec:
    """``partitions`` partitions of ``records`` records each in ``segments`` segments, a fifth as many keys."""
    return GenerateSpec(
        records=partitions * records,
        keys=partitions * records // 5,
        partitions=partitions,
        segment_records=records // segments,
        end_time_ms=WRITTEN,
        seed=seed,
    )


def s7(work: Path, runs: int, partitions: int) -> dict[str, Any]:
    """``partitions`` partitions of 2,000 records against the same number of records in 4 partitions (a fifth as
    many keys as records in each, 4 segments each), the job on both in turns; DuckDB on both checks the outputs."""
    stores = {
        "many": generated(work, f"s7-{partitions}x2000", many_spec(partitions, 2_000)),
        "few": generated(work, f"s7-4x{partitions * 500}", many_spec(4, partitions * 500)),
    }
    contenders: dict[str, tuple[str, Callable[[], Measure]]] = {}
    for which, source in stores.items():
        contenders[f"job {which}"] = (which, lambda source=source: job(work, source))
        if SELECTED["peers"]:  # --job-only: the job's runs are checked against each other only
            contenders[f"duckdb {which}"] = (which, lambda source=source: engine(work, "duckdb", source))
    measured = take_turns(runs, contenders)
    result: dict[str, Any] = {}
    for which, source in stores.items():
        records, size = store_bytes(source)
        result[which] = {
            "partitions": len(Store.open(source).topic_partitions()),
            "input_records": records,
            "input_bytes": size,
        }
        result[which].update(
            {name: job_row(measured[f"{name} {which}"]) for name in ("job", "duckdb") if f"{name} {which}" in measured}
        )
    result["x_many_vs_few"] = round(result["many"]["job"]["seconds"] / result["few"]["job"]["seconds"], 2)
    result["goal"] = MANY_GOAL
    return result


def s3_environment() -> dict[str, str]:
    """The job's environment for the test S3 server: its credentials, as users give them (AWS_* variables)."""
    from tests.helpers.s3server import CREDENTIALS

    return {**env(), **CREDENTIALS}


@contextlib.contextmanager
def s3_with_latency() -> Iterator[tuple[str, Any, Any]]:
    """A moto S3 server on 127.0.0.1 and a proxy in front of it that adds :data:`LATENCY_S` to every request
    (each on a thread of its own, so a client's requests in flight wait together); yields the server's endpoint,
    the proxy and a filesystem on the server (to set up and read back, never through the proxy). Both are stopped
    when the block ends (the server's process by its pid)."""
    import s3fs

    from tests.helpers.faultproxy import fault_proxy
    from tests.helpers.s3server import s3_server, storage_options

    with s3_server() as endpoint, fault_proxy(endpoint, delay_s=LATENCY_S) as proxy:
        yield endpoint, proxy, s3fs.S3FileSystem(**storage_options(endpoint))


def s3_job(work: Path, source: str, endpoint: str, fs: Any, proxy: Any = None) -> Measure:
    """The job on a copy of the local store ``source`` uploaded to a fresh folder of a bucket on the S3 server at
    ``endpoint`` (not timed), reached directly or, given ``proxy``, through it (``extra["requests"]``: the requests
    the job sent); the survivors read back directly; the copy deleted after."""
    from tests.helpers.s3server import storage_options

    url = f"s3://bench/run-{time.time_ns()}"
    if not fs.exists("bench"):
        fs.mkdir("bench")
    files = [f for f in Path(source).rglob("*") if f.is_file() and f.name != ".complete"]
    fs.put([str(f) for f in files], [f"{url}/{f.relative_to(source)}" for f in files])
    try:
        if proxy is not None:
            proxy.clear()
        via = proxy.endpoint if proxy is not None else endpoint
        measure = run_job(
            work, url, extra=["--storage-option", f"client_kwargs.endpoint_url={via}"], environ=s3_environment()
        )
        if proxy is not None:
            measure.extra["requests"] = len(proxy.requests)
            measure.extra["requests_by_kind"] = request_kinds(proxy.requests)
        measure.extra["survivors"] = survivors_of(Store.open(url, storage_options(endpoint)), threads=16)
    finally:
        fs.rm(url, recursive=True)
    return measure


def request_kinds(requests: list[str]) -> dict[str, int]:
    """The requests a run sent ("METHOD /path?query"), counted by method and by what they touched: listings,
    manifests, segments, other; the most first."""
    counts: dict[str, int] = {}
    for entry in requests:
        method, _, path = entry.partition(" ")
        kind = (
            "listings"
            if "list-type=" in path or "prefix=" in path
            else "manifests"
            if "/_manifests/" in path
            else "segments"
            if "/segments/" in path
            else "other"
        )
        counts[f"{method} {kind}"] = counts.get(f"{method} {kind}", 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def kinds(row: dict[str, Any]) -> str:
    return ", ".join(f"{kind} {count:,}" for kind, count in (row.get("requests_by_kind") or {}).items())


def s8(work: Path, runs: int, partitions: int) -> dict[str, Any]:
    """``partitions`` partitions of 1,000 records (4 segments each) on a moto S3 server, the job reaching it through
    a proxy that adds 50 ms to every request and directly, in turns; DuckDB on the local copy checks the outputs."""
    source = generated(work, f"s8-{partitions}x1000", many_spec(partitions, 1_000, seed=8))
    records, size = store_bytes(source)
    with s3_with_latency() as (endpoint, proxy, fs):
        contenders: dict[str, tuple[str, Callable[[], Measure]]] = {
            "job": ("s8", lambda: s3_job(work, source, endpoint, fs)),
            "job, 50 ms a request": ("s8", lambda: s3_job(work, source, endpoint, fs, proxy)),
            "duckdb": ("s8", lambda: engine(work, "duckdb", source)),
        }
        if not SELECTED["peers"]:  # --job-only
            del contenders["duckdb"]
        measured = take_turns(runs, contenders)
    result = {
        "partitions": partitions,
        "input_records": records,
        "input_bytes": size,
        "latency_ms": round(LATENCY_S * 1000),
        **{name: job_row(found) for name, found in measured.items()},
    }
    result["x_latency"] = round(result["job, 50 ms a request"]["seconds"] / result["job"]["seconds"], 2)
    result["goal"] = LATENCY_GOAL
    return result


def plan_commit(work: Path, partitions: int) -> dict[str, Any]:
    """The job's plan and commit phases on ``partitions`` tiny partitions (one segment of 10 records, 5 keys: each
    selected) on the S3 server behind the proxy's 50 ms a request; one run (the store is uploaded again for
    each), DuckDB on the local copy checking its output."""
    source = generated(work, f"tiny-{partitions}", many_spec(partitions, 10, segments=1, seed=10))
    with s3_with_latency() as (endpoint, proxy, fs):
        contenders: dict[str, tuple[str, Callable[[], Measure]]] = {
            "job, 50 ms a request": ("tiny", lambda: s3_job(work, source, endpoint, fs, proxy)),
            "duckdb": ("tiny", lambda: engine(work, "duckdb", source)),
        }
        if not SELECTED["peers"]:  # --job-only: nothing to check the one run against
            del contenders["duckdb"]
        measured = take_turns(1, contenders)
    row = job_row(measured["job, 50 ms a request"])
    return {
        "partitions": partitions,
        "latency_ms": round(LATENCY_S * 1000),
        "job": row,
        "plan_seconds": row["phases_ms"].get("plan", 0) / 1000,
        "commit_seconds": row["phases_ms"].get("commit", 0) / 1000,
        "goal_seconds": PLAN_COMMIT_GOAL_S,
    }


def startup(work: Path, runs: int) -> dict[str, Any]:
    """A run of a small store as users start the job: from this checkout (``make setup`` ran ``compaction warm-up``)
    and from the wheel installed in a fresh virtualenv of its own as the README installs it (``pip install``, then
    ``compaction warm-up``), taking turns. Rows of their own: the wheel's first run without the warm-up, the
    warm-up itself, and the wheel's first run after it (the first a user of the README meets)."""
    from tests.helpers.jobenv import build_wheel, job_environment

    small = generated(
        work,
        "startup",
        GenerateSpec(records=10_000, keys=2_000, partitions=1, segment_records=2_500, end_time_ms=WRITTEN, seed=7),
    )
    installed = work / "wheel-venv"
    shutil.rmtree(installed, ignore_errors=True)  # a fresh environment of the code measured, and no archive
    shutil.rmtree(work / "dist", ignore_errors=True)
    job_environment(installed, build_wheel(work / "dist"))
    wheel = ([str(installed / "bin" / "compaction")], str(installed / "bin" / "python"))
    commands = {"dev checkout": ([PYTHON, "-m", "compaction.cli"], PYTHON), "installed wheel": wheel}
    if SELECTED.get("sail"):
        commands["sail"] = ([str(SAIL / "compaction")], str(SAIL / "python"))
    rows: dict[str, Any] = {
        "installed wheel, no warm-up": median([job(work, small, command=wheel[0], python=wheel[1])])
    }
    warm_up = run_measured([*wheel[0], "warm-up"], env=env(wheel[1]))
    rows["installed wheel, first run"] = median([job(work, small, command=wheel[0], python=wheel[1])])
    measured: dict[str, list[Measure]] = {where: [] for where in commands}
    bare: list[Measure] = []
    for _ in range(runs):
        for where, (command, python) in commands.items():
            measured[where].append(
                job(
                    work, small, command=command, python=python, extra=["--remote", "sail"] if where == "sail" else None
                )
            )
        bare.append(run_measured([PYTHON, "-c", BARE_SPARK], env=env()))
    rows.update({where: median(measures) for where, measures in measured.items()})
    for row in rows.values():
        row["session_seconds"] = row["phases_ms"].get("startup", 0) / 1000
    rows["installed wheel"]["x_first_run"] = round(
        rows["installed wheel, first run"]["seconds"] / rows["installed wheel"]["seconds"], 2
    )
    rows["Spark alone"] = median(bare)
    for where in commands:
        rows[where]["x_bare_spark"] = round(rows[where]["seconds"] / rows["Spark alone"]["seconds"], 2)
    rows["warm-up"] = {"seconds": round(warm_up.seconds, 2), "peak_rss_mb": round(warm_up.peak_rss / 2**20)}
    return rows


def scaling(work: Path, runs: int, sizes: tuple[int, ...]) -> dict[str, Any]:
    result = {}
    for size in sizes:
        spec = GenerateSpec(
            records=size, keys=size // 5, partitions=4, segment_records=500_000, end_time_ms=WRITTEN, seed=1
        )
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
        spec = GenerateSpec(
            records=size, keys=size // 5, partitions=4, segment_records=500_000, end_time_ms=WRITTEN, seed=1
        )
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


#: The data source's formulations (bench/spark_source.py), taking turns; the goals of their ratios.
SOURCE_FORMULATIONS = ("read-source", "read-parquet", "read-floor", "write-source", "write-parquet", "stream-source")
SOURCE_PAIRS = {
    "read": ("read-source", "read-parquet"),
    "read_floor": ("read-floor", "read-parquet"),
    "write": ("write-source", "write-parquet"),
    "stream": ("stream-source", "write-source"),
}
SOURCE_GOALS = {"read": 1.2, "write": 1.3, "stream": 1.5}


def spark_source(work: Path, runs: int, records: int) -> dict[str, Any]:
    """S1's store through the data source compaction against the plain formulation of each verb, cold and warm."""
    source = generated(work, f"s1-{records}", s1_spec(records))
    live, size = store_bytes(source)
    folder = work / f"source-{records}"
    script = [PYTHON, str(ROOT / "bench" / "spark_source.py")]
    run_measured([*script, "inputs", source, str(folder)], env=env())  # the rows every write takes, made once
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in SOURCE_FORMULATIONS}
    for _ in range(runs):  # the formulations take turns, so a busy spell of the machine hits all alike
        for name in SOURCE_FORMULATIONS:
            figures = json.loads(
                run_measured([*script, name, source, str(folder)], env=env()).extra["stdout"].strip().splitlines()[-1]
            )
            for when in ("cold", "warm"):
                if figures[when]["records"] != live:
                    raise RuntimeError(
                        f"{name} ({when}) saw {figures[when]['records']:,} records; the store's live log holds {live:,}"
                    )
            measured[name].append(figures)
    rows: dict[str, Any] = {"input_records": live, "input_bytes": size}
    for name, results in measured.items():
        rows[name] = {
            when: {
                figure: round(statistics.median(r[when][figure] for r in results), 2)
                for figure in ("seconds", "cpu_seconds")
            }
            for when in ("cold", "warm")
        }
    rows["ratios"] = {
        what: {
            f"{when}_{figure}": round(rows[a][when][figure] / rows[b][when][figure], 2)
            for when in ("cold", "warm")
            for figure in ("seconds", "cpu_seconds")
        }
        for what, (a, b) in SOURCE_PAIRS.items()
    }
    rows["goals"] = SOURCE_GOALS
    return rows


def machine() -> dict[str, Any]:
    import duckdb
    import polars
    import pyarrow
    import pyspark

    cpu = platform.processor() or ""
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "pyarrow": pyarrow.__version__,
        "duckdb": duckdb.__version__,
        "polars": polars.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }


def table(results: dict[str, Any]) -> str:
    machine_ = results["machine"]
    lines = [
        f"machine: {machine_['cpu']}, {machine_['cores']} cores, {machine_['memory_gb']} GB; pyspark "
        f"{machine_['pyspark']}, duckdb {machine_['duckdb']}, polars {machine_['polars']}, pyarrow "
        f"{machine_['pyarrow']}; medians of {results['runs']} runs, the engines taking turns",
        f"Spark start-up (session only, median): {results['spark_startup_seconds']:.1f} s",
        "",
    ]
    header = (
        f"{'scenario':<9} {'engine':<15} {'wall s':>7} {'spread':>7} {'records/s':>11} {'peak RSS MB':>11} "
        f"{'x fastest':>9} {'x floor':>8} {'driver MB':>9}"
    )
    scenarios = results["scenarios"]
    compared = [
        name for name in ("S1", "S5", "S6", "S9", "S3", "K1", "S2") if name in scenarios and "job" in scenarios[name]
    ]
    if compared:
        lines += [header, "-" * len(header)]
    for name in compared:
        rows = scenarios[name]
        for engine_name in ("job", "sail", *MERGES, *PEERS, "floor", *SPARK_SQL, *PHASE_FLOORS):
            row = rows.get(engine_name)
            if row and "error" in row:
                lines.append(f"{name:<9} {engine_name:<15} {row['error']}")
            elif row:
                label = engine_name + (" *" if engine_name == rows.get("fastest_peer") else "")
                lines.append(
                    f"{name:<9} {label:<15} {row['seconds']:>7.1f} {row['spread']:>7.0%} "
                    f"{row['records_per_second']:>11,} {row['peak_rss_mb']:>11,} "
                    f"{row.get('x_fastest', float('nan')):>9.2f} {row.get('x_floor', float('nan')):>8.2f} "
                    f"{driver_mb(row) if engine_name == 'job' else '':>9}"
                )
    if compared:
        lines.append(
            "(* the fastest peer, the bar; every engine's output checked against the job's: the same "
            "records, the same offsets; driver MB: what the pass's Spark stages sent to executors and "
            "collected from them; floor-*: wall time of the process, their own figures below)"
        )
    for name in compared:
        rows = scenarios[name]
        for engine_name in ("job", "sail"):
            if rows.get(engine_name, {}).get("phases_ms"):
                lines.append(f"{name} {engine_name} phases (s): {phases(rows[engine_name])}")
        if rows.get("phase_floors"):
            lines.append(
                f"{name} phases against their floors (the job's task-s, summed over tasks / the floor's s, "
                "one thread): "
                + "; ".join(
                    f"{phase} {f['job_task_seconds']:.1f} / {f['floor_seconds']:.2f} = {f['x_floor']:.2f}x "
                    f"(goal <= {f['goal']}x)"
                    for phase, f in rows["phase_floors"].items()
                )
            )
        if any(rows.get(sql) for sql in SPARK_SQL):
            lines.append(
                f"{name} PySpark SQL as a data engineer writes it: "
                + "; ".join(
                    f"{sql} {rows[sql]['seconds']:.1f} s = {rows[sql]['x_job']:.2f}x the job"
                    for sql in SPARK_SQL
                    if rows.get(sql)
                )
                + f" (goal: the job >= {SPARK_SQL_GOAL:.0f}x faster)"
            )
    s6_rows = scenarios.get("S6")
    if s6_rows and "fastest_peer" in s6_rows:
        job_ = s6_rows["job"]
        lines.append(
            f"\nS6: {s6_rows['input_records']:,} records in one partition ({s6_rows['input_bytes'] / 1e9:.1f} "
            f"GB), {s6_rows['driver_memory']}: job {job_['seconds']:.1f} s = {job_['x_fastest']:.2f}x the "
            f"fastest peer ({s6_rows['fastest_peer']}, {s6_rows[s6_rows['fastest_peer']]['seconds']:.1f} s; "
            f"goal <= {s6_rows['goals']['x_fastest']}x); peak RSS of the job's process tree "
            f"{job_['peak_rss_mb']:,} MB (goal <= {s6_rows['goals']['peak_rss_mb']:,} MB); driver "
            f"{driver_mb(job_)} MB"
        )
        if "duckdb" in s6_rows and "cpu_us_per_record" in s6_rows["duckdb"]:
            lines.append(
                f"S6: the tasks' work {job_['task_us_per_record']:.2f} us a record (their read, decide and "
                f"write seconds) against DuckDB's CPU {s6_rows['duckdb']['cpu_us_per_record']:.2f} us (user + "
                "system of its whole query; goal: at most)"
            )
    for name in ("S9", "S2"):
        night = scenarios.get(name)
        if night and "fastest_peer" in night and "goals" in night:
            job_, goals = night["job"], night["goals"]
            lines.append(
                f"\n{name}: a night of {night['increment_records']:,} new records "
                f"({night['increment_bytes'] / 2**20:,.1f} MB) on {night['input_records']:,} live records: "
                f"job {job_['seconds']:.1f} s = {job_['x_fastest']:.2f}x the fastest peer "
                f"({night['fastest_peer']}, {night[night['fastest_peer']]['seconds']:.1f} s; goal <= "
                f"{goals['x_fastest']}x); bytes written {job_['bytes_written'] / 2**20:,.1f} MB = "
                f"{night['x_bytes_written_vs_increment']}x the increment's (goal <= "
                f"{goals['x_bytes_written_vs_increment']}x); peak RSS {job_['peak_rss_mb']:,} MB (goal <= "
                f"{goals['peak_rss_mb']:,} MB)"
            )
    s7_rows = scenarios.get("S7")
    if s7_rows and "many" in s7_rows:
        many, few = s7_rows["many"], s7_rows["few"]
        lines.append(
            f"\nS7: {many['partitions']:,} partitions x {many['input_records'] // many['partitions']:,} "
            f"records: job {many['job']['seconds']:.1f} s against the same {few['input_records']:,} records "
            f"in {few['partitions']} partitions {few['job']['seconds']:.1f} s = {s7_rows['x_many_vs_few']}x "
            f"(goal <= {s7_rows['goal']}x); runs {many['job']['runs']} vs {few['job']['runs']}"
            + (
                f"; DuckDB {many['duckdb']['seconds']:.1f} s vs {few['duckdb']['seconds']:.1f} s"
                if "duckdb" in many
                else ""
            )
        )
        for row in (many, few):
            lines.append(
                f"S7 job phases, {row['partitions']:,} partitions (s): {phases(row['job'])}; driver "
                f"{driver_mb(row['job'])} MB"
            )
    s8_rows = scenarios.get("S8")
    if s8_rows and "x_latency" in s8_rows:
        slow, fast = s8_rows["job, 50 ms a request"], s8_rows["job"]
        lines.append(
            f"\nS8: {s8_rows['partitions']:,} partitions x 1,000 records on S3 (moto): job "
            f"{slow['seconds']:.1f} s with {s8_rows['latency_ms']} ms added to each of its "
            f"{slow.get('requests', 0):,} requests against {fast['seconds']:.1f} s without = "
            f"{s8_rows['x_latency']}x (goal <= {s8_rows['goal']}x); runs {slow['runs']} vs {fast['runs']}"
        )
        for label, row in (("with 50 ms", slow), ("without", fast)):
            lines.append(f"S8 job phases {label} (s): {phases(row)}; driver {driver_mb(row)} MB")
        lines.append(f"S8 requests with 50 ms: {kinds(slow)}")
    tiny = scenarios.get("plan-commit")
    if tiny and "job" in tiny:
        lines.append(
            f"\nplan-commit: {tiny['partitions']:,} partitions on S3 (moto) at {tiny['latency_ms']} ms a "
            f"request: plan {tiny['plan_seconds']:.1f} s, commit {tiny['commit_seconds']:.1f} s (goal < "
            f"{tiny['goal_seconds']} s each); the run {tiny['job']['seconds']:.1f} s, "
            f"{tiny['job'].get('requests', 0):,} requests ({kinds(tiny['job'])}); phases (s): "
            f"{phases(tiny['job'])}; driver {driver_mb(tiny['job'])} MB"
        )
    for name, rows in scenarios.items():
        if rows.get("refused"):
            lines.append(rows["error"])
        elif "error" in rows:
            lines.append(f"{name}: FAILED: {rows['error'].strip().splitlines()[0][:300]}")
    s2_rows = results["scenarios"].get("S2")
    if s2_rows:
        lines.append(
            f"\nS2: job {s2_rows['job']['seconds']:.1f} s vs the 2M dirty records alone "
            f"{s2_rows['dirty_alone']['seconds']:.1f} s = {s2_rows['x_time_vs_alone']}x "
            f"(run only: {s2_rows['x_run_time_vs_alone']}x); bytes written "
            f"{s2_rows['job']['bytes_written'] / 2**20:,.1f} MB vs "
            f"{s2_rows['dirty_alone']['bytes_written'] / 2**20:,.1f} MB = "
            f"{s2_rows['x_bytes_written_vs_alone']}x; runs {s2_rows['job']['runs']} vs "
            f"{s2_rows['dirty_alone']['runs']} (spread {spread(s2_rows['job']):.0%})"
        )
    s3_rows = results["scenarios"].get("S3")
    if s3_rows and "S1" in results["scenarios"] and "max_records_per_task" in s3_rows:
        per_record = (s3_rows["job"]["seconds"] / s3_rows["input_records"]) / (
            results["scenarios"]["S1"]["job"]["seconds"] / results["scenarios"]["S1"]["input_records"]
        )
        lines.append(
            f"S3: largest task holds {s3_rows['max_records_per_task']:,} of the skewed partition's "
            f"{s3_rows['largest_partition_records']:,} records ({s3_rows['task_share_of_largest']:.0%}); "
            f"time per record {per_record:.2f}x S1's"
        )
    k1_rows = results["scenarios"].get("K1")
    if k1_rows:
        lines.append(
            f"K1: the job on .log segments ({k1_rows['log_bytes'] / 2**20:,.0f} MB of zstd record batches), "
            f"the peers on the Parquet copy ({k1_rows['input_bytes'] / 2**20:,.0f} MB)"
        )
    s4_rows = results["scenarios"].get("S4")
    if s4_rows:
        lines.append(
            "S4 (standalone cluster, driver 1 GB, executors 2 GB): "
            + "; ".join(
                f"{int(size):,} records {row['seconds']:.0f} s, driver peak RSS {row['driver_peak_rss_mb']:,} MB"
                for size, row in s4_rows.items()
            )
        )
    startup = results["scenarios"].get("startup")
    if startup:
        lines.append(
            "start-up (a run of a 10,000-record store; wall, and the Spark session's part): "
            + "; ".join(
                f"{where} {row['seconds']:.1f} s"
                + (f" (session {row['session_seconds']:.1f} s)" if "session_seconds" in row else "")
                for where, row in startup.items()
            )
        )
        if "x_bare_spark" in startup.get("dev checkout", {}):
            lines.append(
                f"start-up: a run of the small store takes {startup['dev checkout']['x_bare_spark']}x Spark's "
                f"bare start and stop ({startup['Spark alone']['seconds']:.1f} s; goal <= 1.0x)"
            )
        if "x_first_run" in startup.get("installed wheel", {}):
            lines.append(
                f"start-up: the wheel's first run after its warm-up takes "
                f"{startup['installed wheel']['x_first_run']}x a later run's time"
            )
    reads = results["scenarios"].get("read")
    if reads:
        lines.append(
            "read (stream every column as Arrow batches; read API vs DuckDB over a plain glob): "
            + "; ".join(
                f"{int(size):,} records {row['read']['seconds']:.1f} s ({row['read']['records_per_second']:,} "
                f"records/s, "
                f"peak RSS {row['read']['peak_rss_mb']:,} MB) vs DuckDB {row['duckdb-read']['seconds']:.1f} s "
                f"(peak RSS {row['duckdb-read']['peak_rss_mb']:,} MB) = {row['x_duckdb']}x"
                for size, row in reads.items()
            )
        )
    sourced = results["scenarios"].get("source")
    if sourced and "ratios" in sourced:
        for what, (a, b) in SOURCE_PAIRS.items():
            ratio = sourced["ratios"][what]
            lines.append(
                f"source {what}: {a} {sourced[a]['warm']['seconds']:.1f} s warm "
                f"({sourced[a]['cold']['seconds']:.1f} s cold) vs {b} {sourced[b]['warm']['seconds']:.1f} s "
                f"({sourced[b]['cold']['seconds']:.1f} s) = {ratio['warm_seconds']}x warm, "
                f"{ratio['cold_seconds']}x cold; CPU {ratio['warm_cpu_seconds']}x warm, "
                f"{ratio['cold_cpu_seconds']}x cold"
                + (f" (goal {SOURCE_GOALS[what]}x)" if what in SOURCE_GOALS else "")
            )
    scale = results["scenarios"].get("scaling")
    if scale:
        rates = [row["run_records_per_second"] for row in scale.values()]
        memory = [row["peak_rss_mb"] for row in scale.values()]
        lines.append(
            "scaling (job, run time without start-up): "
            + "; ".join(
                f"{int(size):,} records {row['run_seconds']:.1f} s ({row['run_records_per_second']:,} records/s, "
                f"peak RSS {row['peak_rss_mb']:,} MB)"
                for size, row in scale.items()
            )
            + f"; time per record varies {max(rates) / min(rates) - 1:.0%} and peak RSS "
            f"{max(memory) / min(memory) - 1:.0%} across sizes"
        )
        if all("sail" in row for row in scale.values()):
            lines.append(
                "scaling on Sail (run time without start-up): "
                + "; ".join(
                    f"{int(size):,} records {row['sail']['run_seconds']:.1f} s "
                    f"({row['sail']['run_records_per_second']:,} records/s, peak RSS {row['sail']['peak_rss_mb']:,} MB)"
                    for size, row in scale.items()
                )
            )
    return "\n".join(lines)


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = [
        s
        for s in ("S1", "S5", "S6", "S9", "S3", "K1", "S2")
        if s in results["scenarios"] and "fastest_peer" in results["scenarios"][s]
    ]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.25
    for i, name in enumerate(("job", "fastest peer", "floor")):
        values = [
            results["scenarios"][s][results["scenarios"][s]["fastest_peer"] if name == "fastest peer" else name][
                "seconds"
            ]
            for s in scenarios
        ]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each (a few minutes)")
    parser.add_argument(
        "--scenarios", default=None, help=f"comma list (default: {','.join(DEFAULT)}; with --quick {','.join(QUICK)})"
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--no-sail",
        action="store_true",
        help="leave out the job on Sail (run from .venv-sail, made by make sail-setup)",
    )
    parser.add_argument(
        "--job-only", action="store_true", help="time the job alone (no peers, no floor): a before/after of a change"
    )
    parser.add_argument(
        "--peers", default=None, help=f"comma list of the peers' formulations to run (default: all, {','.join(PEERS)})"
    )
    parser.add_argument(
        "--memory-cap-gb",
        type=float,
        default=MEMORY_CAP["bytes"] / 2**30,
        help="stop a measured process tree that holds more (default: three quarters of the machine's "
        "memory); a peer stopped so is left out of the bar and its row says why",
    )
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "compaction-bench"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    work, out = Path(args.work), Path(args.out)
    MEMORY_CAP["bytes"] = int(args.memory_cap_gb * 2**30)
    scale = 20 if args.quick else 1
    runs = 1 if args.quick else args.runs
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "startup": lambda: startup(work, runs),
        "S1": lambda: s1(work, runs, 20_000_000 // scale),
        "S5": lambda: s5(work, runs, 20_000_000 // scale),
        "S6": lambda: s6(work, runs, 100_000_000 // scale),
        "S9": lambda: s9(work, runs, 100_000_000 // scale),
        "S2": lambda: s2(work, runs, 2_000_000 // scale),
        "S3": lambda: s3(work, runs, 20_000_000 // scale),
        "S4": lambda: s4(work, 50_000_000 // scale),
        "K1": lambda: k1(work, runs, 20_000_000 // scale),
        "S7": lambda: s7(work, runs, 100 if args.quick else 1_000),
        "S8": lambda: s8(work, runs, 20 if args.quick else 300),
        "plan-commit": lambda: plan_commit(work, 50 if args.quick else 10_000),
        "scaling": lambda: scaling(
            work, runs, tuple(n // scale for n in (5_000_000, 10_000_000, 20_000_000, 50_000_000))
        ),
        "read": lambda: read(work, runs, tuple(n // scale for n in (5_000_000, 10_000_000, 20_000_000))),
        "source": lambda: spark_source(work, runs, 20_000_000 // scale),
    }
    chosen = args.scenarios.split(",") if args.scenarios else list(QUICK if args.quick else DEFAULT)
    unknown = [name for name in chosen if name not in steps]
    if unknown:
        parser.error(f"no scenario {', '.join(unknown)}; the scenarios are {', '.join(steps)}")
    if args.peers:
        SELECTED["peers"] = tuple(args.peers.split(","))
        if not set(SELECTED["peers"]) <= {*PEERS, *MERGES}:
            parser.error(f"--peers takes some of {', '.join((*PEERS, *MERGES))}")
    if not args.no_sail:
        if not (SAIL / "compaction").exists():
            parser.error(f"no Sail at {SAIL}: run `make sail-setup`, or give --no-sail")
        SELECTED["sail"] = ("sail",)
    if args.job_only:
        SELECTED["peers"] = ()
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    name = "quick" if args.quick else "latest"
    results: dict[str, Any] = {"machine": machine(), "quick": args.quick, "runs": runs, "scenarios": {}}
    startups = [spark_startup() for _ in range(runs)]
    results["spark_startup_seconds"] = round(statistics.median(m.extra["session_seconds"] for m in startups), 2)
    failed = []
    for scenario in chosen:
        started = time.perf_counter()
        print(f"== {scenario}", flush=True)
        try:
            results["scenarios"][scenario] = steps[scenario]()
        except Refused as refused:  # this machine cannot run it: one line, and the other scenarios still run
            results["scenarios"][scenario] = {"error": str(refused), "refused": True}
            failed.append(scenario)
            print(f"   {refused}", flush=True)
            continue
        except Exception as err:  # a failed run or a mismatch: recorded, the bench fails at the end
            results["scenarios"][scenario] = {"error": f"{type(err).__name__}: {err}"}
            failed.append(scenario)
            print(f"   FAILED after {time.perf_counter() - started:.0f} s: {type(err).__name__}: {err}", flush=True)
            continue
        finally:  # what is measured so far is kept, should a later scenario stop the bench
            (out / f"{name}.json").write_text(json.dumps(results, indent=1))
        print(f"   done in {time.perf_counter() - started:.0f} s", flush=True)
    chart(results, out / f"{name}.png")
    report = table(results)
    (out / f"{name}.txt").write_text(report + "\n")
    print(report)
    if failed:
        print(f"the bench failed: {', '.join(failed)} (see above)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
