"""Cleaning ``.log`` segments at batch level: Kafka's batch scenarios (reference §8: T2, T13-T20, T56), real batches.

The record-level decisions are the rules' (and tested in test_cleaner.py); here what matters is each batch after a
pass: copied byte for byte, rebuilt with its base and last offset, producer fields, sequence and codec, kept
empty, or gone. Kafka's tests call ``doClean`` directly; this job plans its passes, so where a Kafka step cleans a
log with nothing new, the scenario appends a filler record to make the pass happen. Transactions left open in
Kafka's unit tests (which it treats as committed) get their commit marker here, as the last stable offset bounds
the cleanable range.

Runs in this process (the Arrow plan, whole and split into key ranges); the Spark plans run a few on Spark
(tests/integration/test_log_segments_on_spark.py).
"""

from __future__ import annotations

import tempfile
from typing import Any

import pyarrow as pa
import pytest

from compaction.clean.cleaner import Cleaner
from compaction.clean.results import RunReport
from compaction.config import Settings
from compaction.kafka import batch_table, encode
from compaction.store import SegmentFormat, Store, TopicPartition, Writer
from compaction.store.formats import decode_log
from compaction.store.log import appended_state
from compaction.store.segment import records
from compaction.store.verify import verify
from tests.helpers.batches import batch, log_bytes
from tests.helpers.builders import rec
from tests.helpers.inline import InlineSession
from tests.helpers.settings import settings_with

TP = TopicPartition("t", 0)
NOW = 1_800_000_000_000
DAY = 86_400_000
TS = NOW - 1000  # the records' time: their producers are active at NOW
BASE: dict[str, Any] = {
    "log.cleanup.policy": "compact",
    "log.cleaner.min.cleanable.ratio": 0.0,
    "producer.id.expiration.ms": 7 * DAY,
    "cleaner": {"deletion.vector.max.ratio": 0},
}
WHOLE = settings_with(BASE)
SPLIT = settings_with({**BASE, "cleaner": {**BASE["cleaner"], "task.max.records": 2}})


@pytest.fixture(params=["whole", "split"])
def settings(request: pytest.FixtureRequest) -> Settings:
    return WHOLE if request.param == "whole" else SPLIT


@pytest.fixture
def store() -> Store:
    return Store.open(tempfile.mkdtemp(prefix="log-cleaning-"))


def clean(store: Store, settings: Settings, now: int = NOW, spark: Any = None, plan: str = "arrow") -> RunReport:
    report = Cleaner(spark or InlineSession(), store, settings, dedupe_plan=plan).run(now)
    assert not report.failed, [r.error for r in report.failed]
    assert [p for r in verify(store) for p in r.problems] == []
    return report


def append(store: Store, *batches: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    """Append batches as one .log segment (a roll before and after)."""
    store.append_log(TP, log_bytes(*batches), now_ms=NOW)


def T(producer: int, base: int, *keys: str, sequence: int = 0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The reference's T(p)[k...]: a transactional batch, value = key."""
    return batch(
        base, *(rec(k, k) for k in keys), producer=producer, transactional=True, sequence=sequence, timestamp=TS
    )


def I(producer: int, base: int, *keys: str, sequence: int = 0) -> tuple[list[dict[str, Any]], dict[str, Any]]:  # noqa: E743
    """I(p, seq)[k...]: an idempotent batch."""
    return batch(base, *(rec(k, k) for k in keys), producer=producer, sequence=sequence, timestamp=TS)


def marker(kind: str, producer: int, offset: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return batch(
        offset, rec(None, None, control_type=kind), producer=producer, transactional=True, control=True, timestamp=TS
    )


def C(producer: int, offset: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return marker("commit", producer, offset)


def A(producer: int, offset: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return marker("abort", producer, offset)


def plain(offset: int, key: str, value: str | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A batch of one plain record (value = key unless given)."""
    return batch(offset, rec(key, value if value is not None else key), timestamp=TS)


def batches(store: Store) -> list[dict[str, Any]]:
    """Every batch of the live log, empty ones included, with its records' offsets and its bytes."""
    found = []
    for segment in store.manifest(TP).segments:
        if segment.format != "kafka":
            continue
        log = store.objects.read_log_segment(TP, segment)
        offsets = log.records.column("offset").to_pylist()
        data = bytes(memoryview(log.data))
        for j, row in enumerate(log.batches.to_pylist()):
            found.append(
                {
                    **row,
                    "last": row["base_offset"] + row["last_offset_delta"],
                    "offsets": [o for o, b in zip(offsets, log.batch_index.tolist(), strict=True) if b == j],
                    "bytes": data[row["position"] : row["position"] + row["size"]],
                }
            )
    return found


def last_offsets(store: Store) -> list[int]:
    """Kafka's lastOffsetsPerBatch (empty batches included)."""
    return [b["last"] for b in batches(store)]


def offsets(store: Store) -> list[int]:
    return store.read(TP, columns=["offset"]).column("offset").to_pylist()


def keys(store: Store) -> list[str]:
    return [
        r["key"].decode()
        for r in store.read(TP).to_pylist()
        if not r["is_control"] and r["value"] is not None and r["key"] is not None
    ]


def commit_log(store: Store, data: bytes) -> None:
    """Commit batches as a .log segment as they are, horizons included (a log an earlier pass cleaned)."""
    log = decode_log(data, "test")
    bases = log.batches.column("base_offset").to_pylist()
    meta = store.objects.write_segment(
        TP,
        log.records,
        bases[0],
        int(log.batch_last_offsets[-1]) + 1,
        created_ms=NOW,
        segment_format=SegmentFormat.KAFKA,
        batches=log.batches,
        encoded=data,
    )
    store.commit(
        TP,
        lambda latest: appended_state(latest, [meta], log.records, "test"),
        writer=Writer(),
        operation="append",
        now_ms=NOW,
    )


def with_horizon(horizon: int, *items: tuple[list[dict[str, Any]], dict[str, Any]]) -> bytes:
    rows = [r for placed, _ in items for r in placed]
    return encode(records(rows), batch_table([{**b, "delete_horizon_ms": horizon} for _, b in items]))


def test_t2_the_last_batch_before_the_uncleanable_offset_stays_empty(store: Store, settings: Settings) -> None:
    """KAFKA-17076: every record goes, yet the batch whose next offset is the first uncleanable one stays as an
    empty batch and keeps the log's last offset."""
    for first, last in ((0, 13), (14, 27), (28, 41)):  # tombstones an earlier pass stamped, horizon now passed
        commit_log(
            store, with_horizon(NOW - 1, *(batch(i, rec(str(i), None), timestamp=TS) for i in range(first, last + 1)))
        )
    append(store, plain(42, "42"))
    clean(store, settings)
    manifest = store.manifest(TP)
    assert len(manifest.segments) == 2
    (only,) = [b for b in batches(store) if b["last"] < 42]
    assert (only["record_count"], only["last"], only["size"]) == (0, 41, 61)
    assert offsets(store) == [42] and manifest.log_end_offset == 43


def test_t13_idempotent_batches_keep_their_offsets_and_sequences(store: Store, settings: Settings) -> None:
    append(store, I(1, 0, "1", "2", "3"), I(2, 3, "3", "1", "4"), I(3, 6, "1", "4"))
    original = {b["base_offset"]: b for b in batches(store)}
    append(store, plain(8, "active"))
    clean(store, settings)
    assert last_offsets(store) == [2, 5, 7, 8]
    assert keys(store) == ["2", "3", "1", "4", "active"] and offsets(store) == [1, 3, 6, 7, 8]
    after = {b["base_offset"]: b for b in batches(store)}
    assert [(after[b]["base_sequence"], after[b]["producer_id"]) for b in (0, 3, 6)] == [(0, 1), (0, 2), (0, 3)]
    assert after[6]["bytes"] == original[6]["bytes"], "a batch that keeps every record is copied byte for byte"
    assert after[0]["bytes"] != original[0]["bytes"]
    append(store, I(4, 9, "2"))
    append(store, plain(10, "active-2"))
    clean(store, settings)
    assert last_offsets(store) == [2, 5, 7, 8, 9, 10]
    assert keys(store) == ["3", "1", "4", "active", "2", "active-2"]
    emptied = batches(store)[0]
    assert (emptied["record_count"], emptied["base_sequence"], emptied["producer_id"], emptied["size"]) == (
        0,
        0,
        1,
        61,
    ), "producer 1's last batch stays, empty, with its sequence"


def test_t14_an_active_producers_last_batch_stays_empty(store: Store, settings: Settings) -> None:
    append(store, plain(0, "0"), I(1, 1, "0"), I(2, 2, "0"), I(3, 3, "0"), I(2, 4, "1", sequence=1))
    append(store, plain(5, "active"))
    clean(store, settings)
    assert last_offsets(store) == [1, 3, 4, 5]
    assert keys(store) == ["0", "1", "active"] and offsets(store) == [3, 4, 5]
    assert [(b["producer_id"], b["base_sequence"], b["record_count"]) for b in batches(store)[:3]] == [
        (1, 0, 0),
        (3, 0, 1),
        (2, 1, 1),
    ]


def test_an_expired_producers_last_batch_goes(store: Store, settings: Settings) -> None:
    append(store, plain(0, "0"), I(1, 1, "0"), I(2, 2, "0"))
    append(store, plain(3, "active"))
    assert sorted(store.manifest(TP).producer_state) == [1, 2]
    clean(store, settings, now=TS + 7 * DAY)  # producer.id.expiration.ms after their last batch
    assert last_offsets(store) == [2, 3]
    assert store.manifest(TP).producer_state == {}, "the pass forgets the producers it found expired, as Kafka does"


def test_t15_the_last_batch_of_an_aborted_transaction_stays_empty(store: Store, settings: Settings) -> None:
    append(store, T(1, 0, "1"), T(1, 1, "2", "3", sequence=1), A(1, 3))
    append(store, plain(4, "active"))
    clean(store, settings)
    assert last_offsets(store) == [2, 3, 4] and keys(store) == ["active"] and offsets(store) == [3, 4]
    assert [b["record_count"] for b in batches(store)[:2]] == [0, 1]
    append(store, T(1, 5, "1", "5", sequence=3), C(1, 7))
    append(store, plain(8, "active-2"))
    clean(store, settings)
    assert last_offsets(store) == [3, 4, 6, 7, 8], "the empty batch goes once the producer wrote a newer one"
    assert keys(store) == ["active", "1", "5", "active-2"] and offsets(store) == [3, 4, 5, 6, 7, 8]


def test_t16_transaction_aware_cleaning_in_batches(store: Store, settings: Settings) -> None:
    append(
        store,
        T(1, 0, "1", "2"),
        T(2, 2, "2", "3"),
        T(1, 4, "3", "4", sequence=2),
        A(1, 6),
        C(2, 7),
        T(1, 8, "2", sequence=4),
        C(1, 9),
    )
    append(store, plain(10, "active"))
    clean(store, settings)
    assert keys(store) == ["3", "2", "active"] and offsets(store) == [3, 6, 7, 8, 9, 10]
    assert last_offsets(store) == [3, 6, 7, 8, 9, 10]
    rebuilt = batches(store)[0]
    assert (rebuilt["base_offset"], rebuilt["last"], rebuilt["offsets"], rebuilt["attributes"] & 0x10) == (
        2,
        3,
        [3],
        0x10,
    ), "a rebuilt batch keeps its base and last offset (a gap inside) and its flags"


def test_t17_aborted_transactions_spanning_segments(store: Store, settings: Settings) -> None:
    append(store, T(1, 0, "1", "2"), T(3, 2, "2", "3"), T(2, 4, "3", "4"))
    append(
        store,
        T(2, 6, "5", "6", sequence=2),
        T(3, 8, "6", "7", sequence=2),
        T(1, 10, "7", "8", sequence=2),
        A(2, 12),
        T(3, 13, "8", "9", sequence=4),
        C(3, 15),
        T(1, 16, "9", "10", sequence=4),
        A(1, 18),
    )
    clean(store, settings)  # the active segment [6, 19) holds the markers: only [0, 6) is cleaned
    assert keys(store) == ["2", "3", "5", "6", "6", "7", "7", "8", "8", "9", "9", "10"]
    assert [(b["base_offset"], b["last"], b["record_count"]) for b in batches(store)[:2]] == [(2, 3, 2), (4, 5, 0)], (
        "the aborted batch before the uncleanable offset stays, empty"
    )


def test_t18_commit_marker_lifecycle_in_batches(store: Store, settings: Settings) -> None:
    append(store, T(1, 0, "1"), T(1, 1, "2", "3", sequence=1), C(1, 3))
    append(store, T(1, 4, "2", sequence=3), C(1, 5))
    append(store, plain(6, "filler-6"))
    clean(store, settings)
    assert keys(store) == ["1", "3", "2", "filler-6"] and offsets(store) == [0, 2, 3, 4, 5, 6]
    append(store, T(1, 7, "1", "3", sequence=4), C(1, 9))
    append(store, plain(10, "filler-10"))
    clean(store, settings)
    assert offsets(store) == [3, 4, 5, 6, 7, 8, 9, 10], "@3 stays: this pass still read its records"
    append(store, plain(11, "filler-11"))
    clean(store, settings)
    stamped = {b["base_offset"]: b["delete_horizon_ms"] for b in batches(store)}
    assert stamped[3] == NOW + DAY and stamped[5] is None, "the marker batch carries its horizon (bit 6)"
    clean(store, settings, now=NOW + DAY)
    assert offsets(store) == [4, 5, 6, 7, 8, 9, 10, 11]


def test_t19_an_abort_marker_goes_two_passes_after_its_records(store: Store, settings: Settings) -> None:
    append(store, T(1, 0, "1"), A(1, 1), T(1, 2, "2", sequence=1), T(1, 3, "2", sequence=2), C(1, 4))
    append(store, plain(5, "filler-5"))
    clean(store, settings)
    assert keys(store) == ["2", "filler-5"] and offsets(store) == [1, 3, 4, 5]
    append(store, plain(6, "filler-6"))
    clean(store, settings)  # the abort marker has no records left: stamped
    clean(store, settings, now=NOW + DAY)
    assert offsets(store) == [3, 4, 5, 6]


def test_t20_empty_batches_keep_producers_until_they_write_again(store: Store, settings: Settings) -> None:
    append(store, T(1, 0, "2", "3"))
    append(store, T(2, 2, "2", "3"), C(2, 4))
    append(store, plain(5, "2"), plain(6, "3"), C(1, 7))
    append(store, plain(8, "active"))
    clean(store, settings)
    assert keys(store) == ["2", "3", "active"] and offsets(store) == [4, 5, 6, 7, 8]
    assert last_offsets(store) == [1, 3, 4, 5, 6, 7, 8]
    append(store, T(2, 9, "1", sequence=2), C(2, 10))
    append(store, plain(11, "active-2"))
    clean(store, settings)
    assert keys(store) == ["2", "3", "active", "1", "active-2"]
    assert offsets(store) == [4, 5, 6, 7, 8, 9, 10, 11]
    assert last_offsets(store) == [1, 4, 5, 6, 7, 8, 9, 10, 11], "producer 2's empty batch went"
    horizons = {b["base_offset"]: b["delete_horizon_ms"] for b in batches(store)}
    assert horizons[4] is None, "C(2)@4 stays unstamped: this pass still read its transaction's empty batch"
    append(store, plain(12, "filler"))
    clean(store, settings)
    assert {b["base_offset"]: b["delete_horizon_ms"] for b in batches(store)}[4] == NOW + DAY
    append(store, plain(13, "filler"))
    clean(store, settings, now=NOW + DAY)
    assert offsets(store) == [5, 6, 7, 8, 9, 10, 11, 12, 13] and last_offsets(store)[0] == 1


def test_t56_the_horizon_goes_in_the_base_timestamp_and_record_times_stay(store: Store, settings: Settings) -> None:
    append(
        store,
        batch(
            0, rec("a", "x", timestamp=5), rec("b", None, timestamp=10), rec("c", "y", timestamp=15), compression="zstd"
        ),
    )
    append(store, plain(3, "active"))
    clean(store, settings)
    stamped = batches(store)[0]
    assert stamped["delete_horizon_ms"] == NOW + DAY == stamped["base_timestamp"]
    assert stamped["attributes"] & 0x40 and stamped["compression"] == "zstd", "bit 6 set, codec kept"
    assert [r["timestamp"] for r in store.read(TP).to_pylist()][:3] == [5, 10, 15]


def test_t56_a_rebuilt_batch_keeps_its_last_offset(store: Store, settings: Settings) -> None:
    append(
        store,
        batch(
            0,
            rec(None, "5", offset=5),
            rec("k", "8", offset=8),
            rec(None, "10", offset=10),
            producer=23,
            epoch=5,
            sequence=10,
            compression="gzip",
            timestamp=TS,
        ),
    )
    append(store, plain(11, "active"))
    drop = settings_with({**BASE, "cleaner": {**BASE["cleaner"], "keyless.records": "drop"}})
    clean(store, drop)
    rebuilt = batches(store)[0]
    assert (
        rebuilt["base_offset"],
        rebuilt["last"],
        rebuilt["offsets"],
        rebuilt["base_sequence"],
        rebuilt["producer_epoch"],
        rebuilt["compression"],
    ) == (0, 10, [8], 10, 5, "gzip")


def test_t56_an_empty_batch_is_a_bare_header(store: Store, settings: Settings) -> None:
    commit_log(
        store,
        with_horizon(
            NOW - 1,
            batch(
                3,
                rec("a", None, timestamp=11),
                rec("b", None, timestamp=12),
                producer=23,
                epoch=5,
                sequence=10,
                compression="gzip",
            ),
        ),
    )
    append(store, plain(5, "active"))
    clean(store, settings)
    empty = batches(store)[0]
    assert {
        k: empty[k]
        for k in (
            "record_count",
            "max_timestamp",
            "base_offset",
            "last",
            "base_sequence",
            "size",
            "base_timestamp",
            "delete_horizon_ms",
            "compression",
            "producer_id",
            "producer_epoch",
        )
    } == {
        "record_count": 0,
        "max_timestamp": 12,
        "base_offset": 3,
        "last": 4,
        "base_sequence": 10,
        "size": 61,
        "base_timestamp": -1,
        "delete_horizon_ms": None,
        "compression": "none",
        "producer_id": 23,
        "producer_epoch": 5,
    }


def test_parquet_segments_written_as_kafka_are_framed_in_batches(store: Store, settings: Settings) -> None:
    store.append(
        TP, records([{"key": "a", "value": "1"}, {"key": "b", "value": None}, {"key": "a", "value": "2"}]), now_ms=NOW
    )
    store.append(TP, records([{"key": "c", "value": "3"}]), now_ms=NOW)
    kafka = settings_with({**BASE, "topics": {"t": {"segment.format": "kafka"}}})
    clean(store, kafka)
    first = store.manifest(TP).segments[0]
    assert first.format == "kafka"
    assert [(b["base_offset"], b["offsets"], b["delete_horizon_ms"]) for b in batches(store)[:1]] == [
        (1, [1, 2], NOW + DAY)
    ]
    assert [r["delete_horizon_ms"] for r in store.read(TP).to_pylist()] == [NOW + DAY, None, None], (
        "the batch's horizon is its tombstone's, not its values'"
    )


def test_framing_keeps_one_horizon_per_batch() -> None:
    from compaction.store.formats import frame_batches

    rows = records(
        [
            {"offset": 0, "key": "a", "value": None, "delete_horizon_ms": 7},
            {"offset": 1, "key": "b", "value": "x"},
            {"offset": 2, "key": "c", "value": None},
            {"offset": 3, "key": "d", "value": None, "delete_horizon_ms": 7},
            {
                "offset": 4,
                "key": None,
                "value": None,
                "is_control": True,
                "control_type": "commit",
                "producer_id": 3,
                "is_transactional": True,
            },
        ]
    )
    framed = frame_batches(rows, "zstd").to_pylist()
    assert [(b["base_offset"], b["record_count"], b["delete_horizon_ms"], b["compression"]) for b in framed] == [
        (0, 2, 7, "zstd"),
        (2, 1, None, "zstd"),
        (3, 1, 7, "zstd"),
        (4, 1, None, "none"),
    ]


def test_a_batch_with_a_deletion_vector_reads_without_its_deleted_records(store: Store) -> None:
    vectors = settings_with({**BASE, "log.segment.bytes": 200, "cleaner": {"deletion.vector.max.ratio": 0.5}})
    append(store, *(plain(i, f"k{i}") for i in range(10)))
    append(store, plain(10, "x"))
    clean(store, vectors)
    append(store, plain(11, "k3"))
    append(store, plain(12, "y"))
    clean(store, vectors)
    (segment, *_) = store.manifest(TP).segments
    assert segment.deletes is not None and segment.deletes.count == 1
    assert 3 not in offsets(store) and pa.array(offsets(store)).to_pylist()[:3] == [0, 1, 2]


def test_a_segment_whose_empty_batch_need_not_stay_is_rewritten(store: Store) -> None:
    large = settings_with({**BASE, "log.segment.bytes": 200})  # no segment counts as small
    append(store, I(1, 0, "a"), plain(1, "b"))
    append(store, plain(2, "a"))
    append(store, plain(3, "active"))
    clean(store, large)
    assert last_offsets(store)[:2] == [0, 1] and batches(store)[0]["record_count"] == 0
    assert [b.last_offset for b in store.manifest(TP).segments[0].empty_batches] == [0]
    append(store, I(1, 4, "c", sequence=1))
    append(store, plain(5, "active-2"))
    clean(store, large)
    assert last_offsets(store) == [1, 2, 3, 4, 5], "producer 1 wrote again: its empty batch went"


def test_a_producer_expires_by_its_last_batch_even_once_a_pass_dropped_it(store: Store) -> None:
    """Producer 1 wrote ``b``, then ``a`` with its clock behind (an older max timestamp). Its last batch (``a``) is
    3 s old at the first pass: it has expired, and that batch goes with its superseded record. Its earlier batch
    (``b``), which survives, is younger; but Kafka's producer state keeps the last batch a producer wrote, whatever
    cleaning removed since: once ``b`` is superseded, the producer is still expired and its batch goes too."""
    settings = settings_with({**BASE, "producer.id.expiration.ms": 3000})
    b = batch(0, rec("b", "b"), producer=1, sequence=0, timestamp=NOW)
    a = batch(1, rec("a", "a"), producer=1, sequence=1, timestamp=NOW - 4000)
    for item in (b, a, plain(2, "a")):
        append(store, item)
    append(store, plain(3, "z"))
    clean(store, settings)
    assert [(b["last"], b["record_count"]) for b in batches(store)] == [(0, 1), (2, 1), (3, 1)]
    append(store, plain(4, "b"))
    append(store, plain(5, "y"))
    clean(store, settings, now=NOW + 1000)
    assert [(b["last"], b["record_count"]) for b in batches(store)] == [(2, 1), (3, 1), (4, 1), (5, 1)]
