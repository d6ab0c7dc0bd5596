"""What users would run instead, on the same segment files: keep the latest record per key and write Parquet in
offset order (one file per partition, zstd, like the job's segments); the I/O floor and the floor of each of the
job's phases; and two readers.

    python bench/engines.py ENGINE STORE OUTPUT_DIR [SURVIVORS]
    python bench/engines.py {read,duckdb-read} STORE

Each formulation keeps, per partition, every keyless record and the record with the highest offset of each key
(the job's offset strategy), reading exactly the live segments the store's manifests list:

- ``duckdb``: ``WHERE offset IN (SELECT max(offset) ... GROUP BY key)``, the fastest of DuckDB's formulations
  here (a ``SEMI JOIN`` on the same set is as fast); ``duckdb-qualify``: ``QUALIFY row_number() OVER
  (PARTITION BY key ORDER BY offset DESC) = 1``; ``duckdb-argmax``: ``arg_max(row, offset) GROUP BY key``.
- ``polars``: a semi-join on each key's max offset, the fastest of Polars' here; ``polars-unique``:
  ``unique(subset="key", keep="last", maintain_order=True)``; ``polars-window``: ``max().over("key")``.
- ``duckdb-merge``, ``polars-merge``: what a user keeping a compacted table does each night (S9, S2): the table
  (the segments below the cleaner's checkpoint, each key once) less the keys the increment (the segments from the
  checkpoint on) holds, an anti-join, and the increment's latest record per key; written whole, in offset order.
- ``floor``: what no engine can do with less: read every record of every segment and write the survivors
  (their offsets given in SURVIVORS, a Parquet file of ``partition``, ``offset``), with pyarrow, a segment at a
  time.
- ``spark-semijoin``, ``spark-window``: PySpark SQL as a data engineer writes it, in a local Spark session of
  Spark's defaults (``local[*]``, the UI off): the rows whose offset is among each key's max offsets (a left
  semi-join), or ``row_number() OVER (PARTITION BY key ORDER BY offset DESC) = 1``; written ordered by offset.

The floors of the job's phases, each in one thread (the job's phases are task-seconds, summed over tasks), print
a JSON line with the seconds of the phase's work alone (no interpreter start, no imports) and the records it saw:

- ``floor-read``: pyarrow reading every segment's decision columns (``offset``, ``key``,
  ``delete_horizon_ms``) once.
- ``floor-decide``: DuckDB's group-by of the keys and offsets (each key's max offset, and every keyless
  record), its read included; the survivors' offsets are written after the clock stops, to be checked.
- ``floor-write``: pyarrow writing the survivors (every column, the job's segment options) to Parquet; reading
  and filtering them (SURVIVORS) is not counted.

Every engine but the floors of the phases runs with 2 threads (the machine's cores, as the job's local Spark
has). The two readers stream
every column of topic ``orders`` as Arrow record batches and print how many records they saw: ``read`` through
the project's read API (manifests, deletion vectors, log starts), ``duckdb-read`` with DuckDB and a plain glob
over the segment folders (correct only on a store that has never been cleaned, as the benchmark's are).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's package, as harness.py does

THREADS = 2
#: The columns a pass decides by (offset strategy), read by every record's task.
DECISION_COLUMNS = ["offset", "key", "delete_horizon_ms"]
os.environ.setdefault("POLARS_MAX_THREADS", str(THREADS))

from compaction.store import Store  # noqa: E402


def live_segments(store_url: str) -> dict[str, list[str]]:
    """Per partition, the paths of its live segment objects (those with deletion vectors are refused)."""
    store = Store.open(store_url)
    return {str(tp): live_segments_of(store, tp) for tp in store.topic_partitions()}


def split_segments(store_url: str) -> dict[str, tuple[list[str], list[str]]]:
    """Per partition, the paths of its live segments below the cleaner's checkpoint (the compacted table) and
    from it on (the increment), for the merge formulations."""
    store = Store.open(store_url)
    result = {}
    for tp in store.topic_partitions():
        manifest = store.manifest(tp)
        paths = live_segments_of(store, tp)
        clean = [
            path
            for segment, path in zip(manifest.segments, paths, strict=True)
            if segment.next_offset <= manifest.first_dirty_offset
        ]
        result[str(tp)] = (clean, paths[len(clean) :])
    return result


def live_segments_of(store: Store, tp: Any) -> list[str]:
    manifest = store.manifest(tp)
    if any(s.deletes is not None for s in manifest.segments):
        raise SystemExit(f"{tp} has deletion vectors, which the baselines cannot apply")
    return [store.storage.path(f"{tp.prefix}/{s.path}") for s in manifest.segments]


def _listing(files: list[str]) -> str:
    return "[" + ", ".join(f"'{f}'" for f in files) + "]"


def duckdb_merge(inputs: dict[str, tuple[list[str], list[str]]], output: Path) -> None:
    """The increment merged into the compacted table: the table's rows whose key the increment does not hold, and the
    increment's latest row per key (and its keyless rows)."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {THREADS}")
    for name, (table, increment) in inputs.items():
        night = f"read_parquet({_listing(increment)})"
        kept = (
            f'SELECT * FROM {night} WHERE key IS NULL OR "offset" IN (SELECT max("offset") FROM {night} GROUP BY key)'
        )
        if table:
            kept = (
                f"SELECT * FROM read_parquet({_listing(table)}) t ANTI JOIN (SELECT DISTINCT key FROM {night} "
                f"WHERE key IS NOT NULL) n USING (key) UNION ALL {kept}"
            )
        con.execute(
            f"COPY ({kept} ORDER BY \"offset\") TO '{output / name}.parquet' (FORMAT parquet, COMPRESSION zstd)"
        )


def polars_merge(inputs: dict[str, tuple[list[str], list[str]]], output: Path) -> None:
    """As :func:`duckdb_merge`, in Polars: an anti-join of the table on the increment's keys, then the increment's
    latest rows."""
    import polars as pl

    for name, (table, increment) in inputs.items():
        night = pl.scan_parquet(increment)
        parts = [_polars_semi_join(pl, night)]
        if table:
            keys = night.select("key").filter(pl.col("key").is_not_null()).unique()
            parts.insert(0, pl.scan_parquet(table).join(keys, on="key", how="anti"))
        pl.concat(parts).sort("offset").sink_parquet(output / f"{name}.parquet", compression="zstd")


def _duckdb(query: str) -> Callable[[dict[str, list[str]], Path], None]:
    """A DuckDB formulation: ``query`` selects the survivors of ``{files}`` (a list of Parquet files)."""

    def run(inputs: dict[str, list[str]], output: Path) -> None:
        import duckdb

        con = duckdb.connect()
        con.execute(f"SET threads = {THREADS}")
        for name, files in inputs.items():
            listing = "[" + ", ".join(f"'{f}'" for f in files) + "]"
            con.execute(
                f"COPY ({query.format(files=listing)} ORDER BY \"offset\") TO '{output / name}.parquet' "
                "(FORMAT parquet, COMPRESSION zstd)"
            )

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
    kept = pl.concat([latest.select("offset"), frame.filter(pl.col("key").is_null()).select("offset")])
    return frame.join(kept, on="offset", how="semi")


def _polars_unique(pl: Any, frame: Any) -> Any:
    keyed = frame.filter(pl.col("key").is_not_null())
    return pl.concat(
        [keyed.unique(subset="key", keep="last", maintain_order=True), frame.filter(pl.col("key").is_null())]
    )


def _polars_window(pl: Any, frame: Any) -> Any:
    latest = pl.col("offset") == pl.col("offset").max().over("key")
    return frame.filter(pl.col("key").is_null() | latest)


def _kept(survivors: Path) -> Callable[[str], Any]:
    """Per partition name, the offsets the job kept (SURVIVORS), sorted, as a NumPy array."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    kept = pq.read_table(survivors)
    return lambda name: np.sort(kept.filter(pc.equal(kept.column("partition"), name)).column("offset").to_numpy())


def _survivor_pieces(files: list[str], offsets: Any) -> Any:
    """Each segment's survivors in turn (one segment's records held at a time), looked up among the kept offsets
    of the segment's own range (a set of all of them, built again for each segment, would cost more than the
    segment)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for file in files:
        table = pq.read_table(file)
        if not table.num_rows:
            continue
        low, high = pc.min_max(table.column("offset")).values()
        ours = offsets[np.searchsorted(offsets, low.as_py()) : np.searchsorted(offsets, high.as_py(), side="right")]
        yield table.filter(pc.is_in(table.column("offset"), value_set=pa.array(ours)))


def run_floor(inputs: dict[str, list[str]], output: Path, survivors: Path) -> None:
    import pyarrow.parquet as pq

    kept = _kept(survivors)
    for name, files in inputs.items():
        writer = None
        for piece in _survivor_pieces(files, kept(name)):
            writer = writer or pq.ParquetWriter(output / f"{name}.parquet", piece.schema, compression="zstd")
            writer.write_table(piece)
        if writer:
            writer.close()


def _one_thread() -> None:
    import pyarrow as pa

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)


def floor_read(inputs: dict[str, list[str]]) -> dict[str, Any]:
    import pyarrow.parquet as pq

    _one_thread()
    records = 0
    started = time.perf_counter()
    for files in inputs.values():
        for file in files:
            records += pq.read_table(file, columns=DECISION_COLUMNS, use_threads=False).num_rows
    return {"seconds": time.perf_counter() - started, "records": records}


def floor_decide(inputs: dict[str, list[str]], output: Path, keyless: bool) -> dict[str, Any]:
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    con = duckdb.connect()
    con.execute("SET threads = 1")
    seconds, records, found = 0.0, 0, {}
    for name, files in inputs.items():
        listing = "[" + ", ".join(f"'{f}'" for f in files) + "]"
        query = f'SELECT max("offset") AS "offset" FROM read_parquet({listing}) WHERE key IS NOT NULL GROUP BY key'
        if keyless:  # a keyless record is its own winner (the generated stores have none unless asked)
            query += f' UNION ALL SELECT "offset" FROM read_parquet({listing}) WHERE key IS NULL'
        started = time.perf_counter()
        found[name] = pa.table(con.sql(query).arrow())  # a table (DuckDB 1) or a reader (DuckDB 2)
        seconds += time.perf_counter() - started
        records += found[name].num_rows
    for name, offsets in found.items():
        pq.write_table(offsets, output / f"{name}.parquet")
    return {"seconds": seconds, "records": records}


def floor_write(inputs: dict[str, list[str]], output: Path, survivors: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from compaction.store.segment import PARQUET_COMPRESSION, PARQUET_WRITE_OPTIONS

    _one_thread()
    kept = _kept(survivors)
    seconds, records = 0.0, 0
    for name, files in inputs.items():
        writer = None
        for piece in _survivor_pieces(files, kept(name)):
            started = time.perf_counter()
            writer = writer or pq.ParquetWriter(
                output / f"{name}.parquet", piece.schema, compression=PARQUET_COMPRESSION, **PARQUET_WRITE_OPTIONS
            )
            writer.write_table(piece)
            seconds += time.perf_counter() - started
            records += piece.num_rows
        started = time.perf_counter()
        if writer:
            writer.close()
        seconds += time.perf_counter() - started
    return {"seconds": seconds, "records": records}


def _spark(survivors: Callable[[Any], Any]) -> Callable[[dict[str, list[str]], Path], None]:
    """A PySpark SQL formulation: ``survivors(frame)`` is a partition's survivors; each partition is written as a
    folder of Parquet files ordered by offset (``<partition>.parquet/``)."""

    def run(inputs: dict[str, list[str]], output: Path) -> None:
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[*]")
            .appName("keep-latest")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            for name, files in inputs.items():
                frame = survivors(spark.read.parquet(*files))
                frame.orderBy("offset").write.option("compression", "zstd").parquet(str(output / f"{name}.parquet"))
        finally:
            spark.stop()

    return run


def _spark_semi_join(frame: Any) -> Any:
    from pyspark.sql import functions as F

    latest = frame.where(F.col("key").isNotNull()).groupBy("key").agg(F.max("offset").alias("offset"))
    kept = latest.select("offset").unionByName(frame.where(F.col("key").isNull()).select("offset"))
    return frame.join(kept, on="offset", how="left_semi")


def _spark_window(frame: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    latest = Window.partitionBy("key").orderBy(F.col("offset").desc())
    ranked = frame.withColumn("rank", F.row_number().over(latest))
    return ranked.where(F.col("key").isNull() | (F.col("rank") == 1)).drop("rank")


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
    "duckdb": _duckdb(
        'SELECT * FROM read_parquet({files}) WHERE key IS NULL OR "offset" IN '
        '(SELECT max("offset") FROM read_parquet({files}) GROUP BY key)'
    ),
    "duckdb-qualify": _duckdb(
        "SELECT * FROM read_parquet({files}) QUALIFY key IS NULL OR "
        'row_number() OVER (PARTITION BY key ORDER BY "offset" DESC) = 1'
    ),
    "duckdb-argmax": _duckdb(
        'SELECT * FROM (SELECT unnest(arg_max(t, t."offset")) FROM read_parquet({files}) t '
        "WHERE key IS NOT NULL GROUP BY key UNION ALL "
        "SELECT * FROM read_parquet({files}) WHERE key IS NULL)"
    ),
    "polars": _polars(_polars_semi_join),
    "polars-unique": _polars(_polars_unique),
    "polars-window": _polars(_polars_window),
}
#: The nightly merges of an increment into a compacted table (S9, S2): they take the table and the increment apart.
MERGES: dict[str, Callable[[dict[str, tuple[list[str], list[str]]], Path], None]] = {
    "duckdb-merge": duckdb_merge,
    "polars-merge": polars_merge,
}
#: PySpark SQL's formulations, which the job is held to beat (not peers: nobody picks Spark on one machine for speed).
SPARK_SQL: dict[str, Callable[[dict[str, list[str]], Path], None]] = {
    "spark-semijoin": _spark(_spark_semi_join),
    "spark-window": _spark(_spark_window),
}
READERS = {"read": read_stream, "duckdb-read": read_duckdb}
#: The floors of the job's phases (their own clock, printed as JSON).
PHASE_FLOORS = ("floor-read", "floor-decide", "floor-write")


def keyless_records(store_url: str) -> int:
    store = Store.open(store_url)
    return sum(s.keyless_count for tp in store.topic_partitions() for s in store.manifest(tp).segments)


def main() -> None:
    engine, store = sys.argv[1], sys.argv[2]
    if engine in READERS:
        print(READERS[engine](store))
        return
    if engine in MERGES:
        output = Path(sys.argv[3])
        output.mkdir(parents=True, exist_ok=True)
        MERGES[engine](split_segments(store), output)
        return
    inputs = live_segments(store)
    if engine == "floor-read":
        print(json.dumps(floor_read(inputs)))
        return
    output = Path(sys.argv[3])
    output.mkdir(parents=True, exist_ok=True)
    if engine == "floor":
        run_floor(inputs, output, Path(sys.argv[4]))
    elif engine == "floor-decide":
        print(json.dumps(floor_decide(inputs, output, keyless_records(store) > 0)))
    elif engine == "floor-write":
        print(json.dumps(floor_write(inputs, output, Path(sys.argv[4]))))
    else:
        {**ENGINES, **SPARK_SQL}[engine](inputs, output)


if __name__ == "__main__":
    main()
