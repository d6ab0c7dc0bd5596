"""What a small partition costs beyond its records, in one thread of this process: the job's pass, DuckDB and the
per-file floor, each on the same stores (the harness's S7 stores: many small partitions against the same records in
a few), so that the job's cost per partition stands beside the peer's and the floor's.

    python bench/per_file.py STORE [STORE ...] [--work DIR]

For each store, in turns: DuckDB's fastest formulation of the harness (one ``COPY`` per partition, ``threads=1``);
the floor, pyarrow reading each partition's segments whole and writing them back as one file (no decision, no
commit: what any engine pays per file); and the job's pass on a copy of the store, its tasks run in this process
(``LocalStages``: the same task bodies as on Spark, one at a time), with its report's phases. Prints wall and CPU
seconds of each, and per partition of the first store beyond the last one's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["POLARS_MAX_THREADS"] = "1"

import engines
import pyarrow as pa
import pyarrow.parquet as pq
from harness import CONFIG, NOW, copy_store

from compaction.clean.cleaner import Cleaner
from compaction.config import Settings
from compaction.engine.stages import LocalStages
from compaction.store import Store
from compaction.store.segment import PARQUET_COMPRESSION, PARQUET_WRITE_OPTIONS


def clocked(call: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall and CPU seconds of ``call`` (this process, every thread), and what it returned."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = call()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def floor(inputs: dict[str, list[str]], output: Path) -> None:
    """Each partition's segments read whole and written back as one file, as the job writes segments."""
    for name, files in inputs.items():
        table = pa.concat_tables(pq.read_table(f) for f in files)
        pq.write_table(table, output / f"{name}.parquet", compression=PARQUET_COMPRESSION, **PARQUET_WRITE_OPTIONS)


def measure(name: str, source: str, inputs: dict[str, list[str]], work: Path, settings: Settings) -> dict[str, float]:
    """DuckDB, the floor and the job on one store, in turns; each one's CPU seconds."""
    (work / "duckdb").mkdir()
    (work / "floor").mkdir()
    copy_store(source, str(work / "store"))  # flushed: its writeback does not compete with the runs
    runs = {
        "duckdb": lambda: engines.ENGINES["duckdb"](inputs, work / "duckdb"),
        "floor": lambda: floor(inputs, work / "floor"),
        "job": lambda: Cleaner(LocalStages(), Store.open(str(work / "store")), settings).run(NOW),
    }
    cpu = {}
    for engine, call in runs.items():
        wall, seconds, out = clocked(call)
        cpu[engine] = seconds
        phases = f"  phases {out.phases_ms}" if engine == "job" else ""
        print(f"{name} {engine:7} wall {wall:6.2f} s  cpu {seconds:6.2f} s{phases}", flush=True)
    return cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stores", nargs="+")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    engines.THREADS = 1
    engines._one_thread()
    settings = Settings.load(overrides=tomllib.loads(CONFIG), environ={})
    cpu: dict[str, dict[str, float]] = {}
    partitions: dict[str, int] = {}
    for source in args.stores:
        name = Path(source).name
        inputs = engines.live_segments(source)
        partitions[name] = len(inputs)
        work = Path(tempfile.mkdtemp(dir=args.work))
        try:
            cpu[name] = measure(name, source, inputs, work, settings)
        finally:
            shutil.rmtree(work)
    many, few = Path(args.stores[0]).name, Path(args.stores[-1]).name
    if many != few:
        extra = partitions[many] - partitions[few]
        for engine in cpu[many]:
            per = (cpu[many][engine] - cpu[few][engine]) / extra * 1000
            ratio = cpu[many][engine] / cpu[few][engine]
            print(f"{engine:7} {many} / {few}: {ratio:4.1f}x CPU; {per:5.1f} ms of CPU per partition beyond")
    return 0


if __name__ == "__main__":
    sys.exit(main())
