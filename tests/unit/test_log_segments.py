"""Kafka ``.log`` segments in the store: append keeps the batches' bytes and offsets, read and verify decode them,
status names the format, deletion vectors hide their records, and bad batches are refused naming the offset."""

from __future__ import annotations

import pyarrow as pa
import pytest

from compaction.clean.settings import TopicConfig, check_value
from compaction.errors import ConfigError, InvalidRecordsError, OffsetOverlapError
from compaction.kafka import batch_table, encode
from compaction.store import SegmentFormat, Store, TopicPartition, Writer
from compaction.store.formats import frame_batches
from compaction.store.log import appended_state
from compaction.store.segment import records
from compaction.store.status import partition_status
from compaction.store.verify import verify
from tests.helpers.batches import CORRUPTIONS, batch, log_bytes
from tests.helpers.builders import rec
from tests.helpers.settings import settings_with

TP = TopicPartition("t", 0)
NOW = 1_800_000_000_000


def two_batches(base: int = 0) -> bytes:
    return log_bytes(
        batch(base, rec("a", "1"), rec("b", None), rec(None, "x")),
        batch(base + 5, rec("a", "2"), last=base + 7, producer=3, sequence=0),
    )


def test_append_keeps_the_bytes_offsets_and_batches(memory_store: Store) -> None:
    data = two_batches(40)
    manifest = memory_store.append_log(TP, data, now_ms=NOW)
    (segment,) = manifest.segments
    assert segment.format == "kafka" and segment.path.endswith(".log")
    assert (segment.base_offset, segment.next_offset, manifest.log_start_offset, manifest.log_end_offset) == (
        40,
        48,
        40,
        48,
    )
    assert (segment.record_count, segment.tombstone_count, segment.keyless_count) == (4, 1, 1)
    assert memory_store.storage.read_buffer(f"{TP.prefix}/{segment.path}").to_pybytes() == data
    log = memory_store.objects.read_log_segment(TP, segment)
    assert log.batches.column("base_offset").to_pylist() == [40, 45]
    assert log.batch_last_offsets.tolist() == [42, 47]
    rows = memory_store.read(TP).to_pylist()
    assert [(r["offset"], r["key"], r["value"], r["producer_id"]) for r in rows] == [
        (40, b"a", b"1", -1),
        (41, b"b", None, -1),
        (42, None, b"x", -1),
        (45, b"a", b"2", 3),
    ]


def test_appended_batches_must_start_at_the_log_end(memory_store: Store) -> None:
    memory_store.append_log(TP, two_batches(0), now_ms=NOW)
    with pytest.raises(OffsetOverlapError, match=r"first batch's base offset is 0.*the first must be 8"):
        memory_store.append_log(TP, two_batches(0), now_ms=NOW)
    with pytest.raises(InvalidRecordsError, match=r"base offset is 9.*the first must be 8"):
        memory_store.append_log(TP, two_batches(9), now_ms=NOW)
    manifest = memory_store.append_log(TP, two_batches(8), now_ms=NOW)
    assert [s.base_offset for s in manifest.segments] == [0, 8] and manifest.version == 2


def test_parquet_and_log_segments_share_a_partition(memory_store: Store) -> None:
    memory_store.append(TP, records([{"key": "p", "value": "q"}]), now_ms=NOW)
    manifest = memory_store.append_log(TP, two_batches(1), now_ms=NOW)
    assert [s.format for s in manifest.segments] == ["parquet", "kafka"]
    assert memory_store.read(TP, columns=["offset"]).column("offset").to_pylist() == [0, 1, 2, 3, 6]
    assert partition_status(manifest).format == "mixed"
    assert [p for r in verify(memory_store) for p in r.problems] == []


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_bad_batches_are_refused_naming_the_offset_and_nothing_is_written(memory_store: Store, corruption: str) -> None:
    data = CORRUPTIONS[corruption](log_bytes(batch(30, rec("a"), rec("b"))))
    with pytest.raises(InvalidRecordsError, match="batch at offset 30"):
        memory_store.append_log(TP, data, now_ms=NOW, where="in.log")
    assert memory_store.latest(TP) is None
    assert memory_store.storage.list_dir(TP.prefix, detail=False) == []


def test_an_appended_delete_horizon_is_refused() -> None:
    store = Store.open("memory://horizon-refused")
    placed, row = batch(0, rec("a", None))
    row["delete_horizon_ms"] = NOW
    with pytest.raises(InvalidRecordsError, match="offset 0 carries a delete horizon"):
        store.append_log(TP, encode(records(placed), batch_table([row])), now_ms=NOW)


def commit_raw(store: Store, data: bytes, tp: TopicPartition = TP) -> None:
    """Commit bytes as a .log segment whose manifest checksum matches them (a writer's bug, or bit rot before the
    upload): only the batches' own CRCs can tell."""
    rows = records([{"offset": 0, "key": "a", "value": "v"}])
    meta = store.objects.write_segment(
        tp, rows, 0, 2, created_ms=NOW, segment_format=SegmentFormat.KAFKA, encoded=data, batches=frame_batches(rows)
    )
    store.commit(
        tp, lambda latest: appended_state(latest, [meta], rows, "raw"), writer=Writer(), operation="append", now_ms=NOW
    )


def test_verify_checks_the_batches_crc_and_framing(memory_store: Store) -> None:
    commit_raw(memory_store, CORRUPTIONS["flipped byte"](log_bytes(batch(0, rec("a"), rec("b")))))
    problems = [str(p) for r in verify(memory_store) for p in r.problems]
    assert len(problems) == 1 and "batch at offset 0" in problems[0] and "CRC-32C" in problems[0]


def test_verify_names_batches_out_of_order(memory_store: Store) -> None:
    commit_raw(memory_store, log_bytes(batch(1, rec("a")), batch(0, rec("b"))))
    problems = [str(p) for r in verify(memory_store) for p in r.problems]
    assert any("batch at offset 0 starts at or before the previous batch's last offset 1" in p for p in problems)


def test_a_deletion_vector_hides_records_of_a_log_segment(memory_store: Store) -> None:
    manifest = memory_store.append_log(TP, two_batches(0), now_ms=NOW)
    segment = manifest.segments[0]
    vector = memory_store.objects.write_deletes(
        TP,
        segment,
        pa.array([1, 5], pa.int64()),
        created_ms=NOW,
        live_min_delete_horizon_ms=None,
        live_first_timestamp=1000,
        live_max_timestamp=1002,
    )
    segment = segment.model_copy(update={"deletes": vector})
    memory_store.commit(
        TP,
        lambda latest: {
            **latest.model_dump(  # type: ignore[union-attr]
                include={
                    "log_start_offset",
                    "log_end_offset",
                    "last_stable_offset",
                    "first_dirty_offset",
                }
            ),
            "segments": (segment,),
        },
        writer=Writer(),
        operation="clean",
        now_ms=NOW,
    )
    assert memory_store.read(TP, columns=["offset"]).column("offset").to_pylist() == [0, 2]
    assert [p for r in verify(memory_store) for p in r.problems] == []


def test_segment_format_is_a_topic_setting() -> None:
    assert TopicConfig().segment_format is None
    assert check_value("segment.format", "kafka") == "kafka"
    with pytest.raises(
        ConfigError,
        match=r"Invalid value orc for configuration segment.format: String must be one "
        "of: parquet, kafka",
    ):
        check_value("segment.format", "orc")


# The cleaner over .log segments ------------------------------------------------------------------------------


def _settings(**topic: str):

    return settings_with(
        {
            "log.cleanup.policy": "compact",
            "log.cleaner.min.cleanable.ratio": 0.0,
            "topics": {"t": topic} if topic else {},
        }
    )


def _files(store: Store, tp: TopicPartition) -> dict[str, bytes]:
    root = store.storage.fs
    base = f"{store.storage.root}/{tp.prefix}"
    return {path: root.cat_file(path) for path in sorted(root.find(base))}


def test_the_read_api_streams_log_segments(memory_store: Store) -> None:
    from compaction.read.scan import read_table

    memory_store.append(TP, records([{"key": "p", "value": "q"}]), now_ms=NOW)
    manifest = memory_store.append_log(TP, two_batches(1), now_ms=NOW)
    vector = memory_store.objects.write_deletes(
        TP, manifest.segments[1], pa.array([2], pa.int64()), created_ms=NOW, live_min_delete_horizon_ms=None
    )
    changed = manifest.segments[1].model_copy(update={"deletes": vector})
    memory_store.commit(
        TP,
        lambda latest: {
            **latest.model_dump(  # type: ignore[union-attr]
                include={
                    "log_start_offset",
                    "log_end_offset",
                    "last_stable_offset",
                    "first_dirty_offset",
                }
            ),
            "segments": (latest.segments[0], changed),  # type: ignore[union-attr]
        },
        writer=Writer(),
        operation="clean",
        now_ms=NOW,
    )
    table = read_table(memory_store, "t", 0, columns=["offset", "key", "value"])
    assert table.to_pylist() == [
        {"offset": 0, "key": b"p", "value": b"q"},
        {"offset": 1, "key": b"a", "value": b"1"},
        {"offset": 3, "key": None, "value": b"x"},
        {"offset": 6, "key": b"a", "value": b"2"},
    ]


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_every_kind_of_bad_batch_makes_its_partition_uncleanable_alone(tmp_path, corruption: str) -> None:
    from compaction.clean.cleaner import Cleaner
    from tests.helpers.inline import InlineSession

    store = Store.open(str(tmp_path / "store"))
    bad, good = TopicPartition("t", 0), TopicPartition("t", 1)
    commit_raw(store, CORRUPTIONS[corruption](log_bytes(batch(0, rec("a"), rec("a")))), bad)
    for tp in (bad, good):
        if tp == good:
            store.append_log(tp, log_bytes(batch(0, rec("a", "1"), rec("a", "2"))), now_ms=NOW)
        store.append_log(tp, log_bytes(batch(2, rec("b"), timestamp=NOW)), now_ms=NOW)
    before = _files(store, bad)
    report = Cleaner(InlineSession(), store, _settings()).run(NOW)
    results = {r.partition: r for r in report.partitions}
    assert results["t-1"].status == "cleaned" and store.read(good, columns=["offset"]).column("offset").to_pylist() == [
        1,
        2,
    ]
    assert results["t-0"].status == "failed" and "batch at offset 0" in (results["t-0"].error or "")
    assert _files(store, bad) == before
