"""The streaming read's offsets and ranges without Spark: the Kafka source's offsets per topic and partition,
``startingOffsets``, a partition that appears later, a log start that retention moved past the stream, and each
range read at the partition's newest version (on Spark: tests/integration/test_spark_stream.py)."""

from __future__ import annotations

import pytest

from compaction.errors import InvalidArgumentError
from compaction.spark.options import ReadOptions
from compaction.spark.stream import RangePartition, StoreStreamReader
from compaction.store import Replacement, Store, TopicPartition, Writer
from tests.helpers.builders import keyed

NOW = 1_767_225_600_000


def reader(store: Store, **options: str) -> StoreStreamReader:
    return StoreStreamReader(
        ReadOptions.of({"path": store.url, **{k.lower(): v for k, v in options.items()}}, streaming=True)
    )


def offsets_read(stream: StoreStreamReader, start: dict, end: dict) -> list[tuple[int, int]]:
    return [
        (row["partition"], row["offset"])
        for part in stream.partitions(start, end)
        for batch in stream.read(part)
        for row in batch.to_pylist()
    ]


def test_offsets_are_the_kafka_sources_and_start_where_asked(memory_store: Store) -> None:
    for p in (0, 1):
        memory_store.append(TopicPartition("orders", p), keyed("a=1 b=2 c=3"), now_ms=NOW)
    assert reader(memory_store).initialOffset() == {"orders": {"0": 3, "1": 3}}, "latest by default"
    assert reader(memory_store, startingOffsets="earliest").initialOffset() == {"orders": {"0": 0, "1": 0}}
    given = reader(memory_store, startingOffsets='{"orders": {"0": 1, "1": -1}}')
    assert given.initialOffset() == {"orders": {"0": 1, "1": 3}}
    stream = reader(memory_store, subscribe="orders")
    start = {"orders": {"0": 1, "1": 3}}
    memory_store.append(TopicPartition("orders", 1), keyed("d=4"), now_ms=NOW)
    end = stream.latestOffset(start, None)
    assert end == {"orders": {"0": 3, "1": 4}}
    assert offsets_read(stream, start, end) == [(0, 1), (0, 2), (1, 3)]
    assert stream.partitions(end, end) == [], "nothing new: no task"


def test_a_partition_that_appears_later_is_read_from_its_log_start(memory_store: Store) -> None:
    memory_store.append(TopicPartition("orders", 0), keyed("a=1"), now_ms=NOW)
    stream = reader(memory_store)
    start = stream.initialOffset()
    memory_store.append(TopicPartition("orders", 1), keyed("x=1 y=2"), now_ms=NOW)
    end = stream.latestOffset(start, None)
    parts = stream.partitions(start, end)
    assert [(p.topic, p.partition, p.start, p.end) for p in parts if isinstance(p, RangePartition)] == [
        ("orders", 1, None, 2)
    ]
    assert offsets_read(stream, start, end) == [(1, 0), (1, 1)]


def test_offsets_retention_deleted_before_the_stream_read_them_fail_unless_told(memory_store: Store) -> None:
    tp = TopicPartition("orders", 0)
    memory_store.append(tp, keyed("a=1 b=2"), now_ms=NOW)
    memory_store.append(tp, keyed("c=3 d=4"), now_ms=NOW)
    manifest = memory_store.manifest(tp)
    memory_store.replace(tp, Replacement((manifest.segments[0],), (), 0, 2, 0, 2), writer=Writer(), now_ms=NOW)
    with pytest.raises(InvalidArgumentError, match=r"offsets \[0, 2\) of orders-0 were deleted .* failOnDataLoss"):
        offsets_read(reader(memory_store), {"orders": {"0": 0}}, {"orders": {"0": 4}})
    assert offsets_read(reader(memory_store, failOnDataLoss="false"), {"orders": {"0": 0}}, {"orders": {"0": 4}}) == [
        (0, 2),
        (0, 3),
    ]


def test_a_range_is_read_at_the_newest_version(memory_store: Store) -> None:
    tp = TopicPartition("orders", 0)
    memory_store.append(tp, keyed("a=1 b=2 a=3"), now_ms=NOW)
    stream = reader(memory_store, startingOffsets="earliest")
    start = stream.initialOffset()
    end = stream.latestOffset(start, None)
    planned = stream.partitions(start, end)
    manifest = memory_store.manifest(tp)
    kept = memory_store.objects.write_segment(tp, keyed("b=2 a=3", start=1), 0, 3, created_ms=NOW)
    memory_store.replace(tp, Replacement((manifest.segments[0],), (kept,), 0, 3, 0, 0), writer=Writer(), now_ms=NOW)
    assert [row["offset"] for part in planned for batch in stream.read(part) for row in batch.to_pylist()] == [1, 2], (
        "the record a compaction removed after the batch was planned is not delivered"
    )
