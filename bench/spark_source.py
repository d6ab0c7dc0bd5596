"""The data source ``compaction`` against the plain formulation of each verb, on the same rows and files, each in a
local Spark session of Spark's defaults (``local[*]``, the UI off) of its own:

    python bench/spark_source.py FORMULATION STORE WORK

- ``read-source``: ``spark.read.format("compaction").load(STORE)`` written to Spark's ``noop`` sink (every row,
  every column, nothing kept); ``read-parquet``: ``spark.read.parquet`` of the same live segment files, the same
  way (it would return superseded rows too on a cleaned store; the benchmark's is never cleaned).
- ``read-floor``: the floor of any Python data source: one that only reads the same files with pyarrow and hands
  their batches (the Kafka source's columns, none of the store's checks) to Spark, the same way.
- ``inputs``: the store's rows as Kafka-shaped Parquet files (``topic``, ``partition``, ``key``, ``value``,
  ``timestamp``) under ``WORK/inputs`` (made once): the rows every write takes.
- ``write-source``: those rows written with ``df.write.format("compaction").mode("append")`` to a new store of the
  topic's partitions (offsets claimed from the log end); ``write-parquet``: the same rows with ``df.write.parquet``.
- ``stream-source``: the same files as a file stream (``maxFilesPerTrigger``: ten micro-batches), written with
  ``writeStream.format("compaction")`` to a new store, ``availableNow``.

Each runs twice in its session, ``cold`` (its first verb: Spark's JIT and its Python processes started, which import
the package) and ``warm`` (the same again, as a long-lived session runs it), and prints one JSON line with both: the
seconds of the verb alone (the session's start and stop left out), the CPU seconds
of this process tree over them (user and system, the JVM's and the Python workers' included: a figure a busy
machine disturbs less than the wall clock), and the records it read or wrote, which the harness checks against the
store's.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's package, as harness.py does

import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from compaction.engine.session import spark_session
from compaction.store import Store

TOPIC = "orders"
INPUT_FILES = 40
BATCHES = 10


def live_files(store: Store) -> list[str]:
    """Every live segment object of the store (the benchmark's stores have neither deletion vectors nor log starts
    inside a segment: a plain read of these files is the live log)."""
    return [
        store.storage.path(f"{tp.prefix}/{s.path}")
        for tp in store.topic_partitions()
        for s in store.manifest(tp).segments
    ]


def new_store(url: str, partitions: int) -> Store:
    shutil.rmtree(url, ignore_errors=True)
    store = Store.open(url)
    store.create_topic(TOPIC, partitions, now_ms=1_800_000_000_000)
    return store


def records_of(url: str) -> int:
    store = Store.open(url)
    return sum(s.record_count for tp in store.topic_partitions() for s in store.manifest(tp).segments)


def tree_cpu() -> float:
    """User and system seconds of this process and its descendants (the JVM, Python workers), those they reaped
    included."""
    total = 0.0
    for process in [psutil.Process(os.getpid()), *psutil.Process(os.getpid()).children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:  # a process that has just ended: its parent holds its time now
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


class FloorReader(DataSourceReader):
    """Each live file read with pyarrow, its batches handed over as they are, in the Kafka source's columns."""

    def __init__(self, files: list[str]) -> None:
        self.files = files

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(f) for f in self.files]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for batch in pq.ParquetFile(partition.value).iter_batches(batch_size=65_536, columns=list(FLOOR_COLUMNS)):
            rows = batch.num_rows
            stamps = pc.multiply(batch.column("timestamp"), 1000).cast(pa.timestamp("us", tz="UTC"))
            yield pa.record_batch(
                [
                    batch.column("key"),
                    batch.column("value"),
                    pa.repeat(TOPIC, rows),
                    pa.repeat(pa.scalar(0, pa.int32()), rows),
                    batch.column("offset"),
                    stamps,
                    pa.repeat(pa.scalar(0, pa.int32()), rows),
                ],
                schema=FLOOR_SCHEMA,
            )


FLOOR_COLUMNS = ("key", "value", "offset", "timestamp")
FLOOR_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)


class FloorSource(DataSource):
    """``format("floor")`` with the option ``files`` (a JSON list)."""

    @classmethod
    def name(cls) -> str:
        return "floor"

    def schema(self) -> str:
        return (
            "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
            "timestampType int"
        )

    def reader(self, schema: Any) -> DataSourceReader:
        return FloorReader(json.loads(self.options["files"]))


class Clock:
    """The wall and CPU seconds of what runs inside ``with clock:``."""

    def __enter__(self) -> Clock:
        self.started, self.cpu = time.perf_counter(), tree_cpu()
        return self

    def __exit__(self, *_: Any) -> None:
        self.seconds, self.cpu = time.perf_counter() - self.started, tree_cpu() - self.cpu


def run(formulation: str, source: str, work: Path, spark: Any, attempt: int) -> dict[str, Any]:
    """One run of the formulation (``attempt``: 0 in a new session, 1 the same again in it)."""
    store = Store.open(source)
    inputs = str(work / "inputs")
    clock = Clock()
    if formulation in ("read-source", "read-parquet", "read-floor"):
        files = live_files(store)
        if formulation == "read-floor":
            spark.dataSource.register(FloorSource)
            frame = spark.read.format("floor").option("files", json.dumps(files)).load()
        else:
            frame = (
                spark.read.format("compaction").load(source)
                if formulation == "read-source"
                else spark.read.parquet(*files)
            )
        with clock:
            frame.write.format("noop").mode("overwrite").save()
        return {"seconds": clock.seconds, "cpu_seconds": clock.cpu, "records": frame.count()}
    if formulation == "inputs":
        if not (work / "inputs" / "_SUCCESS").exists():
            (
                spark.read.format("compaction")
                .load(source)
                .select("topic", "partition", "key", "value", "timestamp")
                .repartition(INPUT_FILES)
                .write.mode("overwrite")
                .parquet(inputs)
            )
        return {"seconds": 0, "cpu_seconds": 0, "records": spark.read.parquet(inputs).count()}
    target = str(work / f"out-{formulation}-{attempt}")
    if formulation == "write-parquet":
        shutil.rmtree(target, ignore_errors=True)
        with clock:
            spark.read.parquet(inputs).write.parquet(target)
        records = spark.read.parquet(target).count()
        shutil.rmtree(target)
        return {"seconds": clock.seconds, "cpu_seconds": clock.cpu, "records": records}
    new_store(target, len(store.partitions(TOPIC)))
    if formulation == "write-source":
        with clock:
            spark.read.parquet(inputs).write.format("compaction").mode("append").save(target)
    elif formulation == "stream-source":
        schema = spark.read.parquet(inputs).schema
        checkpoint = work / f"checkpoint-{attempt}"
        shutil.rmtree(checkpoint, ignore_errors=True)
        with clock:
            query = (
                spark.readStream.schema(schema)
                .option("maxFilesPerTrigger", INPUT_FILES // BATCHES)
                .parquet(inputs)
                .writeStream.format("compaction")
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start(target)
            )
            query.awaitTermination()
        shutil.rmtree(checkpoint)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    else:
        raise SystemExit(f"no formulation {formulation}")
    records = records_of(target)
    shutil.rmtree(target)
    return {"seconds": clock.seconds, "cpu_seconds": clock.cpu, "records": records}


def main() -> None:
    formulation, source, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    work.mkdir(parents=True, exist_ok=True)
    spark = spark_session("local[*]", conf={"spark.ui.enabled": "false"})
    try:
        cold = run(formulation, source, work, spark, 0)
        warm = run(formulation, source, work, spark, 1) if formulation != "inputs" else cold
        print(json.dumps({"cold": cold, "warm": warm}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
