"""What users would run instead, on the same segment files: keep the latest record per key and write Parquet in
offset order (one file per partition, zstd, like the job's segments); the I/O floor; and two readers.

    python bench/engines.py ENGINE STORE OUTPUT_DIR [SURVIVORS]
    python bench/engines.py {read,duckdb-read} STORE

Each formulation keeps, per partition, every keyless record and the record with the highest offset of each key
(the job's offset strategy), reading exactly the live segments the store's manifests list:

- ``duckdb``: ``WHERE offset IN (SELECT max(offset) ... GROUP BY key)``, the fastest of DuckDB's formulations
  here (a ``SEMI JOIN`` on the same set is as fast); ``duckdb-qualify``: ``QUALIFY row_number() OVER
  (PARTITION BY key ORDER BY offset DESC) = 1``; ``duckdb-argmax``: ``arg_max(row, offset) GROUP BY key``.
- ``polars``: a semi-join on each key's max offset, the fastest of Polars' here; ``polars-unique``:
  ``unique(subset="key", keep="last", maintain_order=True)``; ``polars-window``: ``max().over("key")``.
- ``floor``: what no engine can do with less: read every record of every segment and write the survivors
  (their offsets given in SURVIVORS, a Parquet file of ``partition``, ``offset``), with pyarrow.

Every engine runs with 2 threads (the machine's cores, as the job's local Spark has). The two readers stream
every column of topic ``orders`` as Arrow record batches and print how many records they saw: ``read`` through
the project's read API (manifests, deletion vectors, log starts), ``duckdb-read`` with DuckDB and a plain glob
over the segment folders (correct only on a store that has never been cleaned, as the benchmark's are).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's package, as harness.py does

THREADS = 2
os.environ.setdefault("POLARS_MAX_THREADS", str(THREADS))

from compaction.store import Store  # noqa: E402


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


def _duckdb(query: str) -> Callable[[dict[str, list[str]], Path], None]:
    """A DuckDB formulation: ``query`` selects the survivors of ``{files}`` (a list of Parquet files)."""

    def run(inputs: dict[str, list[str]], output: Path) -> None:
        import duckdb

        con = duckdb.connect()
        con.execute(f"SET threads = {THREADS}")
        for name, files in inputs.items():
            listing = "[" + ", ".join(f"'{f}'" for f in files) + "]"
            con.execute(f"COPY ({query.format(files=listing)} ORDER BY \"offset\") TO '{output / name}.parquet' "
                        "(FORMAT parquet, COMPRESSION zstd)")

    return run


def _polars(survivors: Callable[[Any, Any], Any]) -> Callable[[dict[str, list[str]], Path], None]:
    """A Polars formulation: ``survivors(scan)`` is a LazyFrame of a partition's survivors."""

    def run(inputs: dict[str, list[str]], output: Path) -> None:
        import polars as pl

        for name, files in inputs.items():
            frame = survivors(pl, pl.scan_parquet(files))
            frame.sort("offset").sink_parquet(output / f"{name}.parquet", compression="zstd")

    return run


def _polars_semi_join(pl: Any, frame: Any) -> Any:
    keyed = frame.filter(pl.col("key").is_not_null())
    latest = keyed.group_by("key").agg(pl.col("offset").max())
    kept = pl.concat([latest.select("offset"),
                      frame.filter(pl.col("key").is_null()).select("offset")])
    return frame.join(kept, on="offset", how="semi")


def _polars_unique(pl: Any, frame: Any) -> Any:
    keyed = frame.filter(pl.col("key").is_not_null())
    return pl.concat([keyed.unique(subset="key", keep="last", maintain_order=True),
                      frame.filter(pl.col("key").is_null())])


def _polars_window(pl: Any, frame: Any) -> Any:
    latest = pl.col("offset") == pl.col("offset").max().over("key")
    return frame.filter(pl.col("key").is_null() | latest)


def run_floor(inputs: dict[str, list[str]], output: Path, survivors: Path) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    kept = pq.read_table(survivors)
    for name, files in inputs.items():
        offsets = kept.filter(pc.equal(kept.column("partition"), name)).column("offset")
        table = pq.read_table(files)
        table = table.filter(pc.is_in(table.column("offset"), value_set=offsets.combine_chunks()))
        pq.write_table(table, output / f"{name}.parquet", compression="zstd")
        del table
        pa.default_memory_pool().release_unused()


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


#: Each engine's formulations, its fastest first (as measured here; ``harness.py`` still takes the fastest of
#: every run as the bar).
ENGINES: dict[str, Callable[[dict[str, list[str]], Path], None]] = {
    "duckdb": _duckdb('SELECT * FROM read_parquet({files}) WHERE key IS NULL OR "offset" IN '
                      '(SELECT max("offset") FROM read_parquet({files}) GROUP BY key)'),
    "duckdb-qualify": _duckdb('SELECT * FROM read_parquet({files}) QUALIFY key IS NULL OR '
                              'row_number() OVER (PARTITION BY key ORDER BY "offset" DESC) = 1'),
    "duckdb-argmax": _duckdb('SELECT * FROM (SELECT unnest(arg_max(t, t."offset")) FROM read_parquet({files}) t '
                             'WHERE key IS NOT NULL GROUP BY key UNION ALL '
                             'SELECT * FROM read_parquet({files}) WHERE key IS NULL)'),
    "polars": _polars(_polars_semi_join),
    "polars-unique": _polars(_polars_unique),
    "polars-window": _polars(_polars_window),
}
READERS = {"read": read_stream, "duckdb-read": read_duckdb}


def main() -> None:
    engine, store = sys.argv[1], sys.argv[2]
    if engine in READERS:
        print(READERS[engine](store))
        return
    output = Path(sys.argv[3])
    output.mkdir(parents=True, exist_ok=True)
    if engine == "floor":
        run_floor(live_segments(store), output, Path(sys.argv[4]))
    else:
        ENGINES[engine](live_segments(store), output)


if __name__ == "__main__":
    main()
