"""K1's read phase in one thread of this process, against DuckDB on the Parquet copy of the same records.

    python bench/kafka_read.py KAFKA_STORE PARQUET_STORE [--topic orders] [--partition 3] [--rounds 3]

``KAFKA_STORE`` is the harness's K1 store (``<work>/stores/k1-20000000``: S1's records as `.log` segments of zstd
record batches), ``PARQUET_STORE`` its Parquet copy (``<work>/stores/s1-20000000``, the records the peers read).
For one partition, each in turn and ``--rounds`` times: the job's read of its `.log` segments (each object's bytes
checked against the commit, decoded to records and batches, offsets checked: what a task's read does for a
`.log` segment); the same records read from the Parquet copy by DuckDB (``threads=1``, every column to Arrow) and by
pyarrow; zstd alone (every batch decompressed, then a fifth of the records compressed again at Kafka's level 3: the
codec work a first compaction of K1 cannot skip); and DuckDB's whole compaction of the partition from the Parquet
copy (the harness's fastest formulation, ``threads=1``). Prints wall and CPU seconds of each. Arrow allocates from
jemalloc on huge pages, as in the job's Spark Python workers, unless ``ARROW_DEFAULT_MEMORY_POOL`` names a pool
(``JE_ARROW_MALLOC_CONF`` other jemalloc settings).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compaction.engine.daemon import ARROW_MEMORY  # noqa: E402 (imports nothing of Arrow)

for name, value in ARROW_MEMORY.items():  # the job's workers' Arrow memory, before Arrow is imported
    os.environ.setdefault(name, value)

import cramjam  # noqa: E402
import duckdb  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from compaction.kafka import HEADER_BYTES, decode  # noqa: E402
from compaction.store import Store, TopicPartition  # noqa: E402


def cpu() -> float:
    times = os.times()
    return times.user + times.system


def measure(name: str, step: Callable[[], int], rounds: int) -> None:
    runs = []
    for _ in range(rounds):
        wall, used = time.perf_counter(), cpu()
        rows = step()
        runs.append(f"{time.perf_counter() - wall:.2f} s wall, {cpu() - used:.2f} s CPU")
    print(f"{name:<34} {rows:>10,} rows   " + "; ".join(runs), flush=True)


def batch_payloads(paths: list[Path]) -> list[bytes]:
    """Every batch's compressed records, of every `.log` segment in ``paths``."""
    payloads = []
    for path in paths:
        data = path.read_bytes()
        batches = decode(data, where=str(path)).batches
        starts = batches.column("position").to_numpy() + HEADER_BYTES
        ends = batches.column("position").to_numpy() + batches.column("size").to_numpy()
        payloads += [data[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    return payloads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kafka_store", type=Path)
    parser.add_argument("parquet_store", type=Path)
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--partition", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tp = TopicPartition(args.topic, args.partition)
    store = Store.open(str(args.kafka_store))
    segments = store.manifest(tp).segments
    logs = sorted((args.kafka_store / args.topic / str(args.partition) / "segments").glob("*.log"))
    parquet = [
        str(p) for p in sorted((args.parquet_store / args.topic / str(args.partition) / "segments").glob("*.parquet"))
    ]
    if not segments or len(logs) != len(segments) or not parquet:
        parser.error(f"no .log segments of {tp} in {args.kafka_store}, or no Parquet ones in {args.parquet_store}")
    con = duckdb.connect(config={"threads": 1})
    payloads = batch_payloads(logs)

    def job_read() -> int:
        return sum(store.objects.read_log_segment(tp, segment).records.num_rows for segment in segments)

    def codec() -> int:
        records = [cramjam.zstd.decompress(payload) for payload in payloads]
        for batch in records[: len(records) // 5]:
            cramjam.zstd.compress(batch, level=3)
        return len(records)

    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "compacted.parquet"

        def duckdb_compaction() -> int:
            con.execute(
                f"""COPY (SELECT * FROM read_parquet({parquet}) WHERE "offset" IN
                (SELECT max("offset") FROM read_parquet({parquet}) GROUP BY key) ORDER BY "offset")
                TO '{out}' (FORMAT parquet)"""
            )
            return int(con.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchall()[0][0])

        measure("job: read the .log segments", job_read, args.rounds)
        measure(
            "duckdb: read the Parquet copy",
            lambda: con.sql(f"SELECT * FROM read_parquet({parquet})").to_arrow_table().num_rows,
            args.rounds,
        )
        measure(
            "pyarrow: read the Parquet copy",
            lambda: sum(pq.read_table(p, use_threads=False).num_rows for p in parquet),
            args.rounds,
        )
        measure("zstd: decompress all, compress 1/5", codec, args.rounds)
        measure("duckdb: the whole compaction", duckdb_compaction, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
