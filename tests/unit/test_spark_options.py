"""The data source's options in the Kafka source's names, the filters it takes from Spark, and the Kafka source's
columns, without Spark (the source on Spark: tests/integration/test_spark_source.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from compaction.errors import InvalidArgumentError
from compaction.read.filters import RecordFilter
from compaction.spark.options import ReadOptions, Subscription, WriteOptions
from compaction.spark.reader import Pushed, PushingReader
from compaction.spark.rows import check_write_schema, read_ddl, read_schema, to_kafka
from compaction.store import Store, TopicPartition
from tests.helpers.builders import keyed

URL = {"path": "memory://store"}


def read(options: dict[str, str] | None = None, streaming: bool = False, **named: str) -> ReadOptions:
    given = {**(options or {}), **named}
    return ReadOptions.of({**URL, **{k.lower(): v for k, v in given.items()}}, streaming=streaming)


def test_defaults_are_the_kafka_sources() -> None:
    batch, stream = read(), read(streaming=True)
    assert (batch.starting, batch.ending, stream.starting) == ("earliest", "latest", "latest")
    assert not batch.include_headers and not batch.latest and batch.fail_on_data_loss
    assert batch.subscription == Subscription()


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            {"subscirbe": "orders"},
            r"does not know the option\(s\) subscirbe for a read: it takes path, conf, subscribe",
        ),
        ({"kafka.bootstrap.servers": "b:9092"}, r"option\(s\) kafka.bootstrap.servers"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "options subscribe and assign are both set"),
        ({"subscribe": " , "}, "names no topic"),
        ({"subscribe": "bad/name"}, "option subscribe: topic name 'bad/name'"),
        ({"subscribePattern": "("}, "is not a regular expression"),
        ({"assign": '{"a": 0}'}, "must be JSON like"),
        ({"assign": '{"a": ["x"]}'}, "partition 'x' of topic a is not a partition number"),
        ({"startingOffsets": "latest"}, "option startingOffsets cannot be latest here"),
        ({"endingOffsets": "earliest"}, "option endingOffsets cannot be earliest here"),
        ({"startingOffsets": '{"a": {"0": -3}}'}, r"-3 for a-0 must be an integer of at least -2"),
        ({"endingOffsets": '{"a": {"0": -2}}'}, r"-2 for a-0 must be an integer of at least -1"),
        ({"startingOffsets": "{"}, "is not JSON"),
        ({"includeHeaders": "yes"}, "option includeHeaders is 'yes': expected true or false"),
        ({"version": "0"}, "versions count from 1"),
    ],
    ids=lambda v: str(v)[:40],
)
def test_a_bad_option_is_refused_in_one_line_naming_it(options: dict[str, str], problem: str) -> None:
    with pytest.raises(InvalidArgumentError, match=problem) as caught:
        read(options)
    assert "\n" not in str(caught.value)


def test_the_offsets_json_and_versions_are_per_topic_and_partition() -> None:
    options = read(
        startingOffsets='{"orders": {"0": 23, "1": -2}}',
        endingOffsets='{"orders": {"0": -1}}',
        version='{"orders": {"1": 4}}',
    )
    assert options.starting == {"orders": {0: 23, 1: -2}} and options.ending == {"orders": {0: -1}}
    assert options.version == {"orders": {1: 4}} and read(version="7").version == 7


def test_a_streaming_read_refuses_what_only_a_batch_read_takes() -> None:
    for name in ("endingOffsets", "version", "latest"):
        with pytest.raises(InvalidArgumentError, match=f"option\\(s\\) {name} for a streaming read"):
            read({name: "1"}, streaming=True)


def test_a_write_takes_the_topic_option_and_a_stream_its_checkpoint() -> None:
    assert WriteOptions.of({**URL, "topic": "orders"}, streaming=False).topic == "orders"
    assert WriteOptions.of({**URL, "checkpointlocation": "/c"}, streaming=True).checkpoint == "/c"
    with pytest.raises(InvalidArgumentError, match="checkpointLocation for a write"):
        WriteOptions.of({**URL, "checkpointlocation": "/c"}, streaming=False)
    with pytest.raises(InvalidArgumentError, match="needs the store's URL"):
        WriteOptions.of({}, streaming=False)


def test_storage_options_nest_and_read_json() -> None:
    options = read({"storage.client_kwargs.endpoint_url": "http://127.0.0.1:9", "storage.retry_budget_ms": "500"})
    assert options.store.storage_options == {
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"},
        "retry_budget_ms": 500,
    }


def test_the_subscription_selects_topics_and_refuses_ones_the_store_lacks(memory_store: Store) -> None:
    for topic in ("orders", "orders-eu", "payments"):
        memory_store.append(TopicPartition(topic, 0), keyed("a=1"), now_ms=1)
    assert list(Subscription().select(memory_store)) == ["orders", "orders-eu", "payments"]
    assert list(Subscription(pattern="orders.*").select(memory_store)) == ["orders", "orders-eu"]
    assert list(Subscription(pattern="order").select(memory_store)) == [], "a pattern matches whole names"
    assert Subscription(assigned={"payments": (0,)}).select(memory_store) == {"payments": [0]}
    with pytest.raises(InvalidArgumentError, match=r"topic\(s\) refunds do not exist in store"):
        Subscription(topics=("orders", "refunds")).select(memory_store)


def test_pushed_filters_become_partitions_and_a_record_filter() -> None:
    reader = PushingReader(read())
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    filters = [
        EqualTo(("topic",), "orders"),
        In(("partition",), (0, 2, 3)),
        LessThan(("partition",), 3),
        GreaterThanOrEqual(("offset",), 100),
        LessThanOrEqual(("offset",), 199),
        GreaterThan(("timestamp",), t0),
        EqualTo(("key",), b"user-1"),
        IsNull(("value",)),
        Not(EqualTo(("partition",), 1)),
        In(("offset",), (1, 2)),
    ]
    left = list(reader.pushFilters(filters))
    assert left == filters[-3:], "what it cannot apply exactly goes back to Spark"
    pushed = reader.pushed
    assert pushed.topics == {"orders"} and [p for p in range(5) if pushed.allows(p)] == [0, 2]
    ms = int(t0.timestamp() * 1000)
    assert pushed.record_filter((150, None)) == RecordFilter(
        keys=(b"user-1",), start_offset=150, end_offset=200, since_ms=ms + 1, until_ms=None
    )


@pytest.mark.parametrize(
    ("kind", "micros", "bound"),
    [
        (GreaterThanOrEqual, 1_500, (2, None)),
        (GreaterThanOrEqual, 2_000, (2, None)),
        (GreaterThan, 1_500, (2, None)),
        (GreaterThan, 2_000, (3, None)),
        (LessThan, 1_500, (None, 2)),
        (LessThan, 2_000, (None, 2)),
        (LessThanOrEqual, 1_500, (None, 2)),
        (LessThanOrEqual, 2_000, (None, 3)),
        (EqualTo, 1_500, (2, 2)),
        (EqualTo, 2_000, (2, 3)),
    ],
)
def test_a_timestamp_in_microseconds_bounds_milliseconds_exactly(
    kind: type, micros: int, bound: tuple[int | None, int | None]
) -> None:
    pushed = Pushed()
    assert pushed.take(kind(("timestamp",), datetime.fromtimestamp(1_700_000_000 + micros / 1e6, UTC)), True)
    base = 1_700_000_000_000
    assert pushed.timestamps == tuple(None if b is None else base + b for b in bound)


def test_with_latest_only_the_choice_of_partitions_is_pushed() -> None:
    reader = PushingReader(read(latest="true"))
    filters = [EqualTo(("partition",), 1), GreaterThan(("offset",), 5), EqualTo(("key",), b"k")]
    assert list(reader.pushFilters(filters)) == filters[1:]


def test_a_read_has_the_kafka_sources_columns_and_a_negative_timestamp_is_none() -> None:
    schema = read_schema(include_headers=True, include_store_columns=False)
    assert schema.names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert read_ddl(schema).startswith("`key` binary, `value` binary, `topic` string, `partition` int, `offset` bigint")
    batch = pa.record_batch(
        {
            "offset": pa.array([7, 8], pa.int64()),
            "timestamp": pa.array([1_500, -1], pa.int64()),
            "key": pa.array([b"k", None]),
            "value": pa.array([b"v", None]),
            "headers": pa.array([[{"key": "h", "value": b"x"}], None], read_schema(True, False).field("headers").type),
        }
    )
    rows = to_kafka(batch, "orders", 3, schema).to_pylist()
    assert rows[0] == {
        "key": b"k",
        "value": b"v",
        "topic": "orders",
        "partition": 3,
        "offset": 7,
        "timestamp": datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=UTC),
        "timestampType": 0,
        "headers": [{"key": "h", "value": b"x"}],
    }
    assert rows[1]["timestamp"] is None and rows[1]["key"] is None


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ([("topic", "string"), ("vaule", "binary")], "column 'vaule' is not one a write to format compaction takes"),
        ([("topic", "string"), ("value", "int")], "column value is int: a write takes binary or string"),
        ([("value", "binary")], r"needs the column\(s\) topic \(or the topic option\)"),
        ([("topic", "string"), ("key", "binary")], r"needs the column\(s\) value"),
    ],
)
def test_a_frame_a_write_cannot_take_is_refused_naming_the_column(fields: list[tuple[str, str]], problem: str) -> None:
    with pytest.raises(InvalidArgumentError, match=problem):
        check_write_schema(fields, topic_option=False)


def test_a_kafka_sources_frame_is_written_as_it_is() -> None:
    kafka = [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    check_write_schema(kafka, topic_option=False)
    check_write_schema([("value", "string")], topic_option=True)
