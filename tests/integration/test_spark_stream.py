"""The streaming verbs of the data source ``compaction``, on a classic session and on Spark Connect: a streaming write
of Kafka-shaped rows (the Kafka-to-store mirror, its rows from a file source since the Kafka connector's jar is not
installable here) is exactly once, also when the query is killed (SIGKILL) between its objects and its commit and
restarted; a streaming read delivers each record once, across a compaction and an erasure, and resumes exactly from
its checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compaction.clean.cleaner import Cleaner
from compaction.erasure import forget
from compaction.spark import register
from compaction.store import Store, TopicPartition
from compaction.store.manifest import SEGMENT_DIR
from compaction.store.segment import records
from tests.helpers.faultproxy import Fault, fault_proxy
from tests.helpers.s3server import new_bucket, storage_options
from tests.helpers.settings import settings_with

pytestmark = [pytest.mark.spark]

NOW = 1_767_225_600_000
TOPIC = "orders"
KAFKA_DDL = (
    "topic string, partition int, offset bigint, key binary, value binary, timestamp timestamp, "
    "headers array<struct<key:string,value:binary>>"
)
KAFKA_ROWS = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


def kafka_file(folder: Path, index: int, partitions: int = 2, per_partition: int = 50) -> None:
    """The index-th file of Kafka-shaped rows a Kafka source would read: each partition's next offsets, in order."""
    rows = [
        {
            "topic": TOPIC,
            "partition": p,
            "offset": index * per_partition + i,
            "key": f"key-{(index * per_partition + i) % 37}".encode(),
            "value": f"{p}:{index}:{i}".encode(),
            "timestamp": NOW * 1000 + i,
            "headers": [{"key": "seq", "value": str(i).encode()}],
        }
        for p in range(partitions)
        for i in range(per_partition)
    ]
    pq.write_table(pa.Table.from_pylist(rows, KAFKA_ROWS), folder / f"part-{index:04d}.parquet")


def new_topic(url: str, partitions: int = 2, options: dict[str, Any] | None = None) -> Store:
    store = Store.open(url, options)
    store.create_topic(TOPIC, partitions, now_ms=NOW)
    return store


def offsets_and_values(store: Store, partition: int) -> list[tuple[int, bytes]]:
    table = store.read(TopicPartition(TOPIC, partition), columns=["offset", "value"])
    return list(zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True))


def test_the_kafka_mirror_is_exactly_once_offsets_and_all(any_spark: Any, tmp_path: Path) -> None:
    inputs, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    inputs.mkdir()
    store = new_topic(str(tmp_path / "store"))
    for index in range(3):
        kafka_file(inputs, index)

    def run() -> None:
        source = any_spark.readStream.schema(KAFKA_DDL).option("maxFilesPerTrigger", 1).parquet(str(inputs))
        query = (
            source.writeStream.format("compaction")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start(store.url)
        )
        query.awaitTermination(600)
        assert query.exception() is None

    run()
    kafka_file(inputs, 3)
    run()  # the same query again: only the new file's rows
    run()  # nothing new
    for p in range(2):
        got = offsets_and_values(store, p)
        assert got == [(o, f"{p}:{o // 50}:{o % 50}".encode()) for o in range(200)], "every row once, offsets kept"
        manifest = store.manifest(TopicPartition(TOPIC, p))
        assert list(manifest.streams.values()) == [3], "four micro-batches: 0 to 3, the last recorded"
    assert not any(
        name.startswith("_claim")
        for p in range(2)
        for name in os.listdir(tmp_path / "store" / TOPIC / str(p) / SEGMENT_DIR)
    )


# Killed between its objects and its commit ------------------------------------------------------------------------

KILLED = textwrap.dedent("""
    import sys
    from compaction.engine.session import spark_session
    inputs, checkpoint, url, endpoint, trigger = sys.argv[1:6]
    spark = spark_session("local[2]", conf={"spark.ui.enabled": "false", "spark.task.maxFailures": "1"})
    source = spark.readStream.schema("topic string, key binary, value binary").option("maxFilesPerTrigger", 1)
    writer = (source.parquet(inputs).writeStream.format("compaction").option("checkpointLocation", checkpoint)
              .option("storage.client_kwargs.endpoint_url", endpoint).option("storage.retry_budget_ms", "600000"))
    writer = writer.trigger(availableNow=True) if trigger == "available" else writer.trigger(processingTime="1 second")
    query = writer.start(url)
    print("started", flush=True)
    query.awaitTermination()
""")


def plain_file(folder: Path, index: int) -> set[bytes]:
    """Rows without partition or offset: keyed ones go where murmur2 sends them, keyless ones in turn."""
    values = [f"{index}:{i}".encode() for i in range(40)]
    keys = [None if i % 5 == 0 else f"user-{i}".encode() for i in range(40)]
    pq.write_table(
        pa.table({"topic": [TOPIC] * 40, "key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}),
        folder / f"part-{index:04d}.parquet",
    )
    return set(values)


def wait_for(what: str, condition: Any, process: subprocess.Popen[str], seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        ended = process.poll() is not None
        assert not ended, f"the query ended before {what}: {process.stderr.read()[-3000:] if process.stderr else ''}"
        assert time.monotonic() < deadline, f"no {what} after {seconds} s"
        time.sleep(0.5)


@pytest.mark.s3
@pytest.mark.slow
def test_a_streaming_write_killed_between_its_objects_and_its_commit_writes_every_row_once(
    s3_endpoint: str, tmp_path: Path
) -> None:
    inputs, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    inputs.mkdir()
    url = new_bucket(s3_endpoint)
    store = new_topic(url, options=storage_options(s3_endpoint))
    script = tmp_path / "stream.py"
    script.write_text(KILLED)
    written = plain_file(inputs, 0)

    def committed(partition: int, batch: int) -> bool:
        return batch in store.manifest(TopicPartition(TOPIC, partition)).streams.values()

    with fault_proxy(s3_endpoint) as proxy:
        command = [sys.executable, str(script), str(inputs), str(checkpoint), url, proxy.endpoint]
        process = subprocess.Popen(
            [*command, "processing"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            wait_for("batch 0 committed", lambda: committed(0, 0) and committed(1, 0), process)
            # Partition 1's commits never land from now on (each PUT of its manifests reset): batch 1 writes its
            # objects, commits partition 0 and keeps retrying partition 1's manifest.
            proxy.inject(Fault("reset", method="PUT", path=f"/{TOPIC}/1/_manifests/", times=10**6))
            written |= plain_file(inputs, 1)
            wait_for(
                "batch 1 stuck in its commit",
                lambda: committed(0, 1) and any(f"/{TOPIC}/1/_manifests/" in hit for hit in proxy.hits),
                process,
            )
            objects = store.storage.list_dir(f"{TOPIC}/1/{SEGMENT_DIR}")
            live = {s.path.rpartition("/")[2] for s in store.manifest(TopicPartition(TOPIC, 1)).segments}
            assert [o.name for o in objects if o.name.endswith(".parquet") and o.name not in live], (
                "batch 1's objects for partition 1 are written, and no manifest names them"
            )
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(60)
        assert not committed(1, 1)
        proxy.clear()
        written |= plain_file(inputs, 2)
        again = subprocess.run(
            [*command, "available"], cwd=tmp_path, capture_output=True, text=True, timeout=600, start_new_session=True
        )
        assert again.returncode == 0, again.stderr[-3000:]
    values = [v for p in range(2) for _, v in offsets_and_values(store, p)]
    assert sorted(values) == sorted(written), "every input row exactly once"
    for p in range(2):
        offsets = [o for o, _ in offsets_and_values(store, p)]
        assert offsets == list(range(len(offsets))), "offsets follow one another"
        assert list(store.manifest(TopicPartition(TOPIC, p)).streams.values()) == [2]


# Streaming read ---------------------------------------------------------------------------------------------------


def append(store: Store, partition: int, pairs: Sequence[tuple[str | None, str | None]]) -> None:
    store.append(
        TopicPartition(TOPIC, partition),
        records([{"key": k, "value": v, "timestamp": NOW - 60_000} for k, v in pairs]),
        now_ms=NOW,
    )


def live_log(store: Store) -> set[tuple[int, int, bytes | None]]:
    found = set()
    for p in range(2):
        table = store.read(TopicPartition(TOPIC, p), columns=["offset", "value"])
        found |= {
            (p, o, v)
            for o, v in zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True)
        }
    return found


def test_a_streaming_read_delivers_each_live_record_once_across_a_compaction_an_erasure_and_a_restart(
    any_spark: Any, tmp_path: Path
) -> None:
    register(any_spark)
    store = new_topic(str(tmp_path / "store"))
    for p in range(2):
        append(store, p, [(f"k{i % 4}", f"first-{p}-{i}") for i in range(12)])
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def batch() -> list[tuple[int, int, bytes | None]]:
        stream = (
            any_spark.readStream.format("compaction")
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .load(store.url)
            .selectExpr("partition", "offset", "value")
        )
        query = (
            stream.writeStream.format("parquet")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start(str(sink))
        )
        query.awaitTermination(600)
        assert query.exception() is None
        delivered = pq.read_table(sink) if any(sink.glob("*.parquet")) else None
        return [] if delivered is None else [(r["partition"], r["offset"], r["value"]) for r in delivered.to_pylist()]

    first = batch()
    assert set(first) == live_log(store) and len(first) == 24
    for p in range(2):
        append(store, p, [(f"k{i % 4}", f"second-{p}-{i}") for i in range(8)] + [("gone", f"erased-{p}")])
    settings = settings_with(
        {"log.cleanup.policy": "compact", "log.roll.ms": 1, "log.cleaner.min.cleanable.ratio": 0.01}
    )
    assert Cleaner(any_spark, store, settings).run(NOW).totals["cleaned"] == 2  # a compaction between two batches
    forget(store, TOPIC, [b"gone"], now_ms=NOW)
    Cleaner(any_spark, store, settings).run(NOW + 1)  # the erasure, carried out
    for p in range(2):
        append(store, p, [("k1", f"third-{p}")])
    second = batch()
    delivered = [(p, o) for p, o, _ in second]
    assert len(delivered) == len(set(delivered)), "no offset delivered twice"
    ends = {p: max(o for q, o, _ in first if q == p) for p in range(2)}
    expected = {(p, o, v) for p, o, v in live_log(store) if o > ends[p]}
    assert set(second) - set(first) == expected, "every record live when the batch read, none it had delivered"
    assert not [v for _, _, v in second if v is not None and v.startswith(b"erased")], "an erased key is not delivered"
    assert {v for _, _, v in second if v is not None and v.startswith(b"third")} == {b"third-0", b"third-1"}
    assert batch() == second, "a restart from the checkpoint with nothing new delivers nothing"
