"""The write of the data source ``compaction`` without Spark: its tasks' code (:func:`write_task`) and its commit
(:func:`commit_write`) called as Spark calls them, on memory and local stores. Rows reach the right partitions
(their own, murmur2's, keyless in turn), offsets are kept or claimed, a partition commits once with all its pieces,
a concurrent writer or a failed task attempt moves pieces rather than losing or reordering them, a replayed
streaming batch commits nothing twice, and bad input is refused naming the topic, partition and field before
anything commits (on Spark: tests/integration/test_spark_source.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from compaction.errors import CommitConflictError, InvalidRecordsError, OffsetOverlapError
from compaction.kafka.partitioner import default_partition
from compaction.kafka.sizes import single_record_batch_bytes
from compaction.spark.writer import Stream, WriteMessage, WritePlan, commit_write, write_task
from compaction.store import SegmentFormat, Store, TopicPartition
from compaction.store.formats import encode_log, frame_batches
from compaction.store.manifest import SEGMENT_DIR
from compaction.store.segment import records
from compaction.store.verify import verify
from tests.helpers.builders import keyed
from tests.helpers.settings import settings_with

NOW = 1_767_225_600_000
TOPIC = "orders"


@pytest.fixture
def store(request: pytest.FixtureRequest, backend: str) -> Store:
    """A store with ``orders`` of 3 partitions: partition 0 holds offsets [0, 2), the others nothing yet."""
    opened: Store = request.getfixturevalue(f"{backend}_store")
    opened.append(TopicPartition(TOPIC, 0), keyed("a=1 b=2"), now_ms=NOW)
    for p in (1, 2):
        opened.append(TopicPartition(TOPIC, p), keyed("z=0", start=0), now_ms=NOW)
    return opened


def plan_of(store: Store, topic: str | None = None, flags: tuple[str, ...] = ()) -> WritePlan:
    return WritePlan.of(store, settings_with(flags=flags), topic, NOW)


def rows(**columns: list) -> pa.RecordBatch:
    """A batch as Spark hands a write (Spark's types: strings, binary, int32 partition, timestamps in µs UTC)."""
    types = {
        "topic": pa.string(),
        "partition": pa.int32(),
        "key": pa.binary(),
        "value": pa.binary(),
        "offset": pa.int64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    return pa.record_batch({name: pa.array(values, types[name]) for name, values in columns.items()})


def log(store: Store, partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
    table = store.read(TopicPartition(TOPIC, partition), columns=["offset", "key", "value"])
    return list(zip(*(table.column(c).to_pylist() for c in ("offset", "key", "value")), strict=True))


def test_rows_go_to_their_partition_or_where_kafkas_partitioner_sends_them(store: Store) -> None:
    plan = plan_of(store)
    batch = rows(
        topic=[TOPIC] * 6,
        partition=[1, None, None, None, None, 2],
        key=[b"k1", b"user-7", None, None, None, b"k9"],
        value=[b"a", b"b", b"c", b"d", b"e", b"f"],
    )
    message = write_task(plan, [batch], task=4)
    commit_write(store, [message], time_ms=NOW)
    placed = {p: [v for _, _, v in log(store, p)][1 if p else 2 :] for p in range(3)}
    murmur = default_partition(b"user-7", 3)
    keyless = [(4 + i) % 3 for i in range(3)]  # in turn, from the task's number
    expected: dict[int, list[bytes]] = {0: [], 1: [b"a"], 2: [b"f"]}
    expected[murmur].append(b"b")
    for value, partition in zip([b"c", b"d", b"e"], keyless, strict=True):
        expected[partition].append(value)
    assert {p: sorted(v or b"" for v in values) for p, values in placed.items()} == {
        p: sorted(values) for p, values in expected.items()
    }


def test_rows_without_offsets_continue_each_partitions_log_in_their_order_across_tasks(store: Store) -> None:
    plan = plan_of(store)
    first = write_task(
        plan, [rows(topic=[TOPIC] * 3, partition=[0] * 3, key=[b"x", b"y", b"x"], value=[b"1", b"2", b"3"])], task=0
    )
    second = write_task(plan, [rows(topic=[TOPIC] * 2, partition=[0, 0], key=[b"y", b"z"], value=[b"4", b"5"])], task=1)
    result = commit_write(store, [second, first], time_ms=NOW)
    assert result.versions == {TopicPartition(TOPIC, 0): 2}, "one commit for the partition, with both tasks' rows"
    got = log(store, 0)
    assert [o for o, _, _ in got] == [0, 1, 2, 3, 4, 5, 6]
    values = [v for _, _, v in got][2:]
    assert values in ([b"1", b"2", b"3", b"4", b"5"], [b"4", b"5", b"1", b"2", b"3"]), "each task's rows in order"
    assert not [p for r in verify(store) for p in r.problems]
    leftovers = [e.name for e in store.storage.list_dir(f"{TOPIC}/0/{SEGMENT_DIR}") if e.name.startswith("_claim")]
    assert leftovers == [], "the commit gives its claims back"


def test_offsets_rows_carry_are_kept_gaps_and_all(store: Store) -> None:
    plan = plan_of(store)
    message = write_task(
        plan,
        [
            rows(
                topic=[TOPIC] * 3,
                partition=[0] * 3,
                key=[b"a", b"b", b"c"],
                value=[b"1", b"2", b"3"],
                offset=[5, 9, 10],
            )
        ],
        task=0,
    )
    commit_write(store, [message], time_ms=NOW)
    assert [o for o, _, _ in log(store, 0)] == [0, 1, 5, 9, 10]
    assert store.manifest(TopicPartition(TOPIC, 0)).log_end_offset == 11


def test_offsets_at_or_below_the_log_end_are_refused_and_nothing_commits(store: Store) -> None:
    plan = plan_of(store)
    fine = write_task(plan, [rows(topic=[TOPIC], partition=[1], key=[b"k"], value=[b"v"])], task=0)
    taken = write_task(
        plan, [rows(topic=[TOPIC] * 2, partition=[0, 0], key=[b"a", b"b"], value=[b"1", b"2"], offset=[1, 2])], task=1
    )
    before = {p: store.manifest(TopicPartition(TOPIC, p)).version for p in range(3)}
    with pytest.raises(
        OffsetOverlapError,
        match=r"records for orders-0: offsets from 1 are at or below the "
        r"partition's log end 2",
    ):
        commit_write(store, [fine, taken], time_ms=NOW)
    assert {p: store.manifest(TopicPartition(TOPIC, p)).version for p in range(3)} == before


def test_offsets_two_tasks_both_wrote_are_refused(store: Store) -> None:
    plan = plan_of(store)
    one = write_task(
        plan, [rows(topic=[TOPIC] * 2, partition=[1, 1], key=[b"a", b"b"], value=[b"1", b"2"], offset=[10, 20])], task=0
    )
    two = write_task(
        plan, [rows(topic=[TOPIC] * 2, partition=[1, 1], key=[b"c", b"d"], value=[b"3", b"4"], offset=[15, 25])], task=1
    )
    with pytest.raises(OffsetOverlapError, match=r"orders-1: offsets \[10, 21\) and \[15, 26\) come from two tasks"):
        commit_write(store, [one, two], time_ms=NOW)


def test_a_concurrent_append_moves_the_claimed_pieces_after_it_without_losing_or_reordering(store: Store) -> None:
    plan = plan_of(store)
    message = write_task(
        plan, [rows(topic=[TOPIC] * 3, partition=[2] * 3, key=[b"a", b"b", b"c"], value=[b"1", b"2", b"3"])], task=0
    )
    assert message.pieces[0].segment.base_offset == 1
    store.append(TopicPartition(TOPIC, 2), keyed("other=x"), now_ms=NOW)  # another writer lands first, at 1
    commit_write(store, [message], time_ms=NOW)
    assert log(store, 2) == [(0, b"z", b"0"), (1, b"other", b"x"), (2, b"a", b"1"), (3, b"b", b"2"), (4, b"c", b"3")]
    assert not [p for r in verify(store) for p in r.problems]


def test_a_failed_task_attempts_claim_leaves_no_gap(store: Store) -> None:
    plan = plan_of(store)
    lost = write_task(plan, [rows(topic=[TOPIC] * 2, partition=[1, 1], key=[b"a", b"b"], value=[b"1", b"2"])], task=0)
    kept = write_task(plan, [rows(topic=[TOPIC], partition=[1], key=[b"c"], value=[b"3"])], task=1)
    assert lost.pieces[0].segment.base_offset == 1 and kept.pieces[0].segment.base_offset == 3
    commit_write(store, [None, kept], time_ms=NOW)  # the first task's attempt failed: Spark hands None
    assert log(store, 1) == [(0, b"z", b"0"), (1, b"c", b"3")]


def test_a_replayed_streaming_batch_commits_nothing_twice(store: Store) -> None:
    plan = plan_of(store)

    def batch() -> WriteMessage:
        return write_task(
            replace(plan, write_id=f"w{len(seen)}"),
            [rows(topic=[TOPIC] * 2, partition=[1, 2], key=[b"a", b"b"], value=[b"1", b"2"])],
            task=0,
        )

    seen: list[WriteMessage] = []
    seen.append(batch())
    commit_write(store, seen[:1], time_ms=NOW, stream=Stream("query-1", 0))
    seen.append(batch())
    # The crash came after the commit: the query runs batch 0 again, which both partitions already hold.
    again = commit_write(store, seen[1:], time_ms=NOW, stream=Stream("query-1", 0))
    assert set(again.versions.values()) == {None}
    seen.append(batch())
    commit_write(store, seen[2:], time_ms=NOW, stream=Stream("query-1", 1))
    for p in (1, 2):
        manifest = store.manifest(TopicPartition(TOPIC, p))
        assert manifest.streams == {"query-1": 1}
        assert len(log(store, p)) == 3, "the first batch once, the second once"
    store.append(TopicPartition(TOPIC, 1), keyed("q=9"), now_ms=NOW)
    assert store.manifest(TopicPartition(TOPIC, 1)).streams == {"query-1": 1}, "later commits carry it over"


def test_a_partition_of_a_kafka_topic_receives_record_batches(local_store: Store) -> None:
    local_store.append_log(
        TopicPartition("logs", 0), encode_log(keyed("a=1", start=0), frame_batches(keyed("a=1", start=0))), now_ms=NOW
    )
    plan = plan_of(local_store)
    message = write_task(plan, [rows(topic=["logs"], key=[b"b"], value=[b"2"])], task=0)
    commit_write(local_store, [message], time_ms=NOW)
    manifest = local_store.manifest(TopicPartition("logs", 0))
    assert [s.format for s in manifest.segments] == [SegmentFormat.KAFKA] * 2
    assert local_store.read(TopicPartition("logs", 0), columns=["offset", "key"]).to_pylist() == [
        {"offset": 0, "key": b"a"},
        {"offset": 1, "key": b"b"},
    ]


def test_timestamps_are_kept_or_the_writes_and_one_before_1970_is_refused(store: Store) -> None:
    plan = plan_of(store)
    stamp = datetime(2026, 1, 2, 3, 4, 5, 678_999, tzinfo=UTC)
    stamped = write_task(
        plan,
        [rows(topic=[TOPIC] * 2, partition=[1, 1], key=[b"a", b"b"], value=[b"1", b"2"], timestamp=[stamp, None])],
        task=0,
    )
    unstamped = write_task(plan, [rows(topic=[TOPIC], partition=[2], key=[b"c"], value=[b"3"])], task=1)
    commit_write(store, [stamped, unstamped], time_ms=NOW)
    got = store.read(TopicPartition(TOPIC, 1), columns=["timestamp"]).column("timestamp").to_pylist()[1:]
    assert got == [int(stamp.timestamp() * 1000), None], "floored to the ms; a null one: a record without one"
    assert store.read(TopicPartition(TOPIC, 2), columns=["timestamp"]).column("timestamp").to_pylist()[1:] == [NOW]
    before = datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    with pytest.raises(
        InvalidRecordsError,
        match=r"^a record for orders-1: field timestamp -1 ms is before "
        r"1970-01-01",
    ):
        write_task(plan, [rows(topic=[TOPIC], partition=[1], key=[b"a"], value=[b"1"], timestamp=[before])], task=0)


@pytest.mark.parametrize(
    ("batch", "problem"),
    [
        (
            rows(topic=[TOPIC, None], partition=[0, 2], key=[b"a", b"b"], value=[b"1", b"2"]),
            r"^a record for partition 2: field topic is null",
        ),
        (
            rows(topic=[TOPIC], partition=[3], key=[b"a"], value=[b"1"]),
            r"^a record for orders-3: field partition 3 is outside topic orders's partitions 0 to 2",
        ),
        (
            rows(topic=[TOPIC], partition=[-1], key=[b"a"], value=[b"1"]),
            r"^a record for orders--1: field partition -1 is outside",
        ),
        (
            rows(topic=["payments"], partition=[0], key=[b"a"], value=[b"1"]),
            r"^a record for topic payments: topic payments does not exist in store",
        ),
        (
            rows(topic=[TOPIC], partition=[1], key=[b"a"], value=[b"x" * 2000]),
            r"^a record for orders-1: field value makes a record of 2,0\d\d bytes \(as a Kafka batch\), over topic "
            r"orders's max.message.bytes 1,000",
        ),
    ],
    ids=["null topic", "partition outside", "negative partition", "unknown topic", "too large"],
)
def test_bad_rows_are_refused_naming_the_topic_partition_and_field(
    store: Store, batch: pa.RecordBatch, problem: str
) -> None:
    plan = plan_of(store, flags=("orders:max.message.bytes=1000",))
    with pytest.raises(InvalidRecordsError, match=problem):
        write_task(plan, [batch], task=0)


def test_transactional_rows_are_left_to_append(store: Store) -> None:
    batch = rows(topic=[TOPIC], partition=[1], key=[b"a"], value=[b"1"]).append_column(
        "is_transactional", pa.array([True])
    )
    with pytest.raises(InvalidRecordsError, match=r"^a record for orders-1: field is_transactional is true"):
        write_task(plan_of(store), [batch], task=0)


def test_a_tasks_partition_becomes_several_segments_past_the_segment_size(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compaction.spark import writer

    monkeypatch.setattr(writer, "SEGMENT_RECORDS", 4)
    values = [str(i).encode() for i in range(10)]
    message = write_task(
        plan_of(store),
        [
            rows(topic=[TOPIC] * 5, partition=[1] * 5, key=values[:5], value=values[:5]),
            rows(topic=[TOPIC] * 5, partition=[1] * 5, key=values[5:], value=values[5:]),
        ],
        task=0,
    )
    assert [(p.segment.base_offset, p.segment.next_offset) for p in message.pieces] == [(1, 6), (6, 11)]
    commit_write(store, [message], time_ms=NOW)
    assert [v for _, _, v in log(store, 1)][1:] == values


def test_a_records_size_is_its_batch_of_its_own() -> None:
    table = records(
        [
            {
                "offset": 0,
                "key": "k",
                "value": "x" * 300,
                "headers": [{"key": "h", "value": b"abc"}, {"key": "hh", "value": None}],
            },
            {"offset": 0, "key": None, "value": None},
            {"offset": 0, "key": "kk" * 100, "value": "y" * 20_000},
        ]
    )
    sizes = single_record_batch_bytes(table.column("key"), table.column("value"), table.column("headers"))
    assert sizes.tolist() == [len(encode_log(table.slice(i, 1), frame_batches(table.slice(i, 1)))) for i in range(3)]


def test_a_commit_conflict_on_explicit_offsets_is_a_conflict(store: Store) -> None:
    plan = plan_of(store)
    message = write_task(plan, [rows(topic=[TOPIC], partition=[1], key=[b"a"], value=[b"1"], offset=[1])], task=0)
    from compaction.spark import writer

    newest = store.manifest(TopicPartition(TOPIC, 1))
    store.append(TopicPartition(TOPIC, 1), keyed("b=2"), now_ms=NOW)  # lands after the check read the log end
    with pytest.raises(CommitConflictError, match="a concurrent writer took offsets up to 2"):
        writer._commit_partition(
            store, TopicPartition(TOPIC, 1), message.pieces, newest, time_ms=NOW, run_id="r", stream=None
        )
