"""Baselines users would run instead, on the same segment files: keep the latest record per key, write
Parquet in offset order (one file per partition, zstd, like the job's segments); and the I/O floor.

    python bench/engines.py {duckdb,polars,floor} STORE OUTPUT_DIR
    python bench/engines.py {read,duckdb-read} STORE

Each keeps, per partition, every keyless record and the record with the highest offset of each key (the
job's offset strategy), reading exactly the live segments the store's manifests list.

The two readers stream every column of topic ``orders`` as Arrow record batches and print how many
records they saw: ``read`` through the project's read API (manifests, deletion vectors, log starts),
``duckdb-read`` with DuckDB and a plain glob over the segment folders (correct only on a store that has
never been cleaned, as the benchmark's are).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's package, as harness.py does

from compaction.store import Store


def live_segments(store_url: str) -> dict[str, list[str]]:
    """Per partition, the paths of its live segment objects (those with deletion vectors are refused)."""
    store = Store.open(store_url)
    result = {}
    for tp in store.topic_partitions():
        manifest = store.manifest(tp)
        if any(s.deletes is not None for s in manifest.segments):
            raise SystemExit(f"{tp} has deletion vectors, which the baselines cannot apply")
        result[str(tp)] = [store.storage.path(f"{tp.prefix}/{s.path}") for s in manifest.segments]
    return result


def run_duckdb(inputs: dict[str, list[str]], output: Path) -> None:
    import duckdb

    con = duckdb.connect()
    for name, files in inputs.items():
        listing = ", ".join(f"'{f}'" for f in files)
        # The fastest of the formulations tried (QUALIFY row_number(), a SEMI JOIN on max(offset), this).
        con.execute(f"""
            COPY (
                SELECT * FROM read_parquet([{listing}])
                WHERE key IS NULL OR "offset" IN (
                    SELECT max("offset") FROM read_parquet([{listing}]) GROUP BY key)
                ORDER BY "offset"
            ) TO '{output / name}.parquet' (FORMAT parquet, COMPRESSION zstd)""")


def run_polars(inputs: dict[str, list[str]], output: Path) -> None:
    import polars as pl

    for name, files in inputs.items():
        frame = pl.scan_parquet(files)
        latest = pl.col("offset") == pl.col("offset").max().over("key")
        frame.filter(pl.col("key").is_null() | latest).sort("offset").sink_parquet(
            output / f"{name}.parquet", compression="zstd")


def run_floor(inputs: dict[str, list[str]], output: Path) -> None:
    import pyarrow.parquet as pq

    for name, files in inputs.items():
        pq.write_table(pq.read_table(files), output / f"{name}.parquet", compression="zstd")


def read_stream(store_url: str) -> int:
    from compaction.read.scan import scan

    return sum(batch.num_rows for batch in scan(store_url, "orders").to_batches())


def read_duckdb(store_url: str) -> int:
    import duckdb

    con = duckdb.connect()
    try:
        relation = con.sql(f"SELECT * FROM read_parquet('{store_url}/orders/*/segments/*.parquet')")
        return sum(batch.num_rows for batch in relation.to_arrow_reader(65_536))
    finally:
        con.close()


ENGINES = {"duckdb": run_duckdb, "polars": run_polars, "floor": run_floor}
READERS = {"read": read_stream, "duckdb-read": read_duckdb}


def main() -> None:
    engine, store = sys.argv[1], sys.argv[2]
    if engine in READERS:
        print(READERS[engine](store))
        return
    output = Path(sys.argv[3])
    output.mkdir(parents=True, exist_ok=True)
    ENGINES[engine](live_segments(store), output)


if __name__ == "__main__":
    main()
