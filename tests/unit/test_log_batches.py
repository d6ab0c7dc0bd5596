"""The ``.log`` batch rebuild against kafka-python: batches a producer and a broker would write, built by kafka-python's
builder, cleaned by the job, and every batch of the result parsed by kafka-python's reader (every CRC checked).

What each test holds is Kafka's cleaner (``MemoryRecords.filterTo`` and ``checkBatchRetention``, reference §3.7,
§3.10-§3.11): which batches are copied byte for byte, which are rebuilt with what header, which stay as empty headers
for the producer state and which go; and the figures a rewrite leaves in the manifest for the passes after it.
"""

from __future__ import annotations

import struct
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kafka.record.util import calc_crc32c

from compaction.clean.batches import BatchPolicy, reframe
from compaction.clean.cleaner import Cleaner
from compaction.clean.tasks import facts as facts_module
from compaction.clean.tasks.facts import read_task_facts
from compaction.rules import Strategy
from compaction.store import Store
from compaction.store.formats import decode_log
from compaction.store.objects import read_log_bytes
from compaction.store.segment import records
from tests.helpers.builders import clean_task
from tests.helpers.inline import InlineSession
from tests.helpers.kafka_python import ParsedBatch, build_batch, marker_batch, parse
from tests.helpers.settings import settings_with
from tests.unit.test_log_cleaning import BASE, DAY, NOW, TP, TS, WHOLE, clean, commit_log

#: No segment counts as small: a segment is rewritten only for what it loses, never merged for its size.
LARGE = settings_with({**BASE, "log.segment.bytes": 200})
LARGE_SPLIT = settings_with({**BASE, "log.segment.bytes": 200, "cleaner": {**BASE["cleaner"], "task.max.records": 2}})


def store_() -> Store:
    return Store.open(tempfile.mkdtemp(prefix="log-batches-"))


def value(base: int, key: bytes, value: bytes | None, *, timestamp: int = TS, **producer: int | str | bool) -> bytes:
    """A batch of one record at ``base``."""
    return build_batch(base, [(timestamp, key, value, [])], **producer)  # type: ignore[arg-type]


def with_horizon(batch: bytes, horizon: int) -> bytes:
    """``batch`` as a cleaner that already stamped it wrote it (KIP-534): attribute bit 6, the horizon as its base
    timestamp, a fresh CRC."""
    out = bytearray(batch)
    (attributes,) = struct.unpack_from(">h", out, 21)
    struct.pack_into(">h", out, 21, attributes | 0x40)
    struct.pack_into(">q", out, 27, horizon)
    struct.pack_into(">I", out, 17, calc_crc32c(memoryview(out)[21:]))
    return bytes(out)


def parsed(store: Store) -> list[ParsedBatch]:
    """Every batch of the live log as kafka-python reads it."""
    return [
        b
        for s in store.manifest(TP).segments
        for b in parse(store.storage.read_buffer(f"{TP.prefix}/{s.path}").to_pybytes(), s.path)
    ]


def lasts(store: Store) -> list[int]:
    """Kafka's lastOffsetsPerBatch (empty batches included)."""
    return [b.last for b in parsed(store)]


def test_t21_an_empty_control_batch_keeps_a_producer_without_data() -> None:
    """Kafka's testCleanEmptyControlBatch: producer 1 wrote only a commit marker. The marker is stamped, then
    removed, but its batch stays as an empty control header: it holds the producer's epoch (rule 3a with no last
    data offset). While the producer is active, that segment is not rewritten for it again."""
    store = store_()
    store.append_log(
        TP,
        marker_batch(0, producer=1, epoch=3, commit=True, timestamp=TS) + value(1, b"2", b"2") + value(2, b"3", b"3"),
        now_ms=NOW,
    )
    store.append_log(TP, value(3, b"active", b"active"), now_ms=NOW)
    clean(store, LARGE)
    assert parsed(store)[0].horizon == NOW + DAY, "the marker of no transaction is stamped"
    clean(store, LARGE, now=NOW + DAY)
    marker, *rest = parsed(store)
    assert (marker.base, marker.last, marker.count, marker.control, marker.producer, marker.epoch) == (
        0,
        0,
        0,
        True,
        1,
        3,
    )
    assert (marker.horizon, marker.base_timestamp) == (None, -1), "an empty header carries no horizon"
    assert [r["offset"] for b in rest for r in b.records] == [1, 2, 3]
    first = store.manifest(TP).segments[0].path
    store.append_log(TP, value(4, b"4", b"4"), now_ms=NOW)
    clean(store, LARGE, now=NOW + DAY)
    assert store.manifest(TP).segments[0].path == first, "an empty batch that must stay leaves its segment as it is"
    assert lasts(store) == [0, 1, 2, 3, 4]


def test_the_empty_control_batch_of_an_older_epoch_goes() -> None:
    """Producer 1's commit marker at epoch 2, then an abort marker at epoch 3 (a bumped epoch, no data since): once
    both markers are removed, only the epoch 3 one is the producer's last batch and stays empty."""
    store = store_()
    store.append_log(
        TP,
        marker_batch(0, producer=1, epoch=2, commit=True, timestamp=TS)
        + marker_batch(1, producer=1, epoch=3, commit=False, timestamp=TS)
        + value(2, b"2", b"2"),
        now_ms=NOW,
    )
    store.append_log(TP, value(3, b"active", b"active"), now_ms=NOW)
    clean(store, LARGE)
    clean(store, LARGE, now=NOW + DAY)
    assert [(b.last, b.count, b.control, b.epoch) for b in parsed(store)][:2] == [(1, 0, True, 3), (2, 1, False, -1)]


def test_producer_id_zero_is_a_producer() -> None:
    """Kafka hands out producer ids from 0: producer 0's last batch, all of it superseded, stays as an empty header
    with the producer's epoch and sequence."""
    store = store_()
    store.append_log(
        TP,
        value(0, b"k", b"old", producer=0, epoch=4, sequence=7) + value(1, b"k", b"new"),
        now_ms=NOW,
    )
    store.append_log(TP, value(2, b"active", b"active"), now_ms=NOW)
    clean(store, WHOLE)
    first = parsed(store)[0]
    assert (first.base, first.last, first.count, first.producer, first.epoch, first.sequence) == (0, 0, 0, 0, 4, 7)
    assert lasts(store) == [0, 1, 2]


def test_an_expired_producer_goes_beside_an_active_one() -> None:
    """Two producers lose every record of their last batch: producer 1, which last wrote more than
    producer.id.expiration.ms ago, loses its batch; producer 2, still active, keeps it as an empty header."""
    store = store_()
    store.append_log(
        TP,
        value(0, b"a", b"1", timestamp=NOW - 8 * DAY, producer=1, epoch=0, sequence=0)
        + value(1, b"b", b"1", producer=2, epoch=0, sequence=5)
        + build_batch(2, [(TS, b"a", b"2", []), (TS, b"b", b"2", [])]),
        now_ms=NOW,
    )
    store.append_log(TP, value(4, b"active", b"active"), now_ms=NOW)
    clean(store, WHOLE)
    assert [(b.last, b.count, b.producer, b.sequence) for b in parsed(store)] == [
        (1, 0, 2, 5),
        (3, 2, -1, -1),
        (4, 1, -1, -1),
    ]


@pytest.mark.parametrize("key_ranges", [False, True], ids=["whole", "key ranges"])
def test_a_stale_empty_batch_after_a_segment_without_any_goes(key_ranges: bool) -> None:
    """Producer 1's empty batch stays while it is the producer's last; once the producer writes again, the pass
    rewrites the segment that holds it, wherever it stands in the log, and drops it, whether it decides the
    partition whole or in key ranges."""
    settings = LARGE_SPLIT if key_ranges else LARGE
    store = store_()
    store.append_log(TP, value(0, b"x", b"x"), now_ms=NOW)
    store.append_log(TP, value(1, b"a", b"1", producer=1, epoch=0, sequence=0) + value(2, b"b", b"b"), now_ms=NOW)
    store.append_log(TP, value(3, b"a", b"2"), now_ms=NOW)
    store.append_log(TP, value(4, b"active", b"active"), now_ms=NOW)
    clean(store, settings)
    assert [(b.last, b.count) for b in parsed(store)][:3] == [(0, 1), (1, 0), (2, 1)]
    store.append_log(
        TP,
        value(5, b"c", b"c", producer=1, epoch=0, sequence=1) + value(6, b"d", b"d") + value(7, b"e", b"e"),
        now_ms=NOW,
    )
    store.append_log(TP, value(8, b"active-2", b"active-2"), now_ms=NOW)
    clean(store, settings)
    assert lasts(store) == [0, 2, 3, 4, 5, 6, 7, 8], "producer 1 wrote again: its empty batch went"


def test_a_batch_that_keeps_its_one_record_is_copied_byte_for_byte() -> None:
    """A gzip batch of one record, beside a batch that loses its record: the segment is rewritten, the untouched
    batch copied as kafka-python wrote it (its compression and CRC), not rebuilt."""
    store = store_()
    kept = value(0, b"a", b"v" * 50, codec="gzip", producer=5, epoch=0, sequence=0)
    store.append_log(TP, kept + value(1, b"b", b"1"), now_ms=NOW)
    store.append_log(TP, value(2, b"b", b"2"), now_ms=NOW)
    store.append_log(TP, value(3, b"active", b"active"), now_ms=NOW)
    clean(store, LARGE)
    first = store.manifest(TP).segments[0]
    data = store.storage.read_buffer(f"{TP.prefix}/{first.path}").to_pybytes()
    assert data == kept and [b.last for b in parse(data)] == [0]


def test_a_rewrite_gives_the_manifest_the_horizons_it_stamped() -> None:
    """A pass stamps a tombstone's batch with its first horizon: the rewritten segment's earliest delete horizon,
    which schedules the purge, is that horizon."""
    store = store_()
    store.append_log(TP, build_batch(0, [(TS, b"a", b"1", []), (TS, b"t", None, [])]), now_ms=NOW)
    store.append_log(TP, value(2, b"a", b"2"), now_ms=NOW)
    store.append_log(TP, value(3, b"active", b"active"), now_ms=NOW)
    clean(store, LARGE)
    (rebuilt, *_) = parsed(store)
    assert (rebuilt.base, rebuilt.last, rebuilt.horizon, [r["offset"] for r in rebuilt.records]) == (
        0,
        1,
        NOW + DAY,
        [1],
    )
    assert store.manifest(TP).segments[0].min_delete_horizon_ms == NOW + DAY


def test_a_rewrite_keeps_the_horizons_of_batches_stamped_before() -> None:
    """One batch was stamped by an earlier pass (horizon H, not passed), another gets its first horizon now: the
    first keeps H whether it is copied or rebuilt, and the segment's earliest horizon is still H."""
    store = store_()
    h = NOW + 10
    commit_log(
        store,
        with_horizon(build_batch(0, [(TS, b"x", None, []), (TS, b"y", b"1", [])]), h)
        + with_horizon(build_batch(2, [(TS, b"z", None, [])]), h)
        + value(3, b"t", None),
    )
    store.append_log(TP, value(4, b"y", b"2"), now_ms=NOW)
    store.append_log(TP, value(5, b"active", b"active"), now_ms=NOW)
    clean(store, LARGE)
    assert [(b.base, b.last, b.horizon, [r["offset"] for r in b.records]) for b in parsed(store)][:3] == [
        (0, 1, h, [0]),
        (2, 2, h, [2]),
        (3, 3, NOW + DAY, [3]),
    ]
    assert store.manifest(TP).segments[0].min_delete_horizon_ms == h


def test_parquet_and_log_segments_merged_into_one_log_segment() -> None:
    """A Parquet segment (its tombstone gets its first horizon) and a .log segment merged into one .log segment:
    the Parquet records framed anew, the .log batch copied as kafka-python wrote it, and the pass's horizon is
    the partition's next one."""
    store = store_()
    store.append(TP, records([{"key": "a", "value": "1"}, {"key": "t", "value": None}]), now_ms=NOW)
    log = value(2, b"b", b"v" * 50, codec="lz4", producer=3, epoch=0, sequence=0)
    store.append_log(TP, log, now_ms=NOW)
    store.append_log(TP, value(3, b"active", b"active"), now_ms=NOW)
    kafka = settings_with({**BASE, "topics": {"t": {"segment.format": "kafka"}}})
    clean(store, kafka)
    first = store.manifest(TP).segments[0]
    assert (first.format, first.base_offset, first.next_offset) == ("kafka", 0, 3)
    data = store.storage.read_buffer(f"{TP.prefix}/{first.path}").to_pybytes()
    assert data.endswith(log)
    assert [(b.base, b.horizon, [r["key"] for r in b.records]) for b in parse(data)] == [
        (0, NOW + DAY, [b"a", b"t"]),
        (2, None, [b"b"]),
    ]
    assert store.manifest(TP).next_horizon_ms == NOW + DAY


def test_the_rows_and_records_of_a_rebuilt_segment_are_what_its_bytes_decode_to() -> None:
    """One segment's batches through a pass, by the rebuild alone: a batch whose tombstone gets its first horizon is
    rebuilt, an untouched one copied, one that loses every record goes, one that loses a record is rebuilt, an active
    producer's last batch stays empty, a named marker is stamped. The records and batch rows the rebuild hands on
    (from which the manifest's figures and producer state come) are exactly what kafka-python and the job's decoder
    read from its bytes."""
    h = NOW + DAY
    untouched = value(2, b"b", b"v" * 50, codec="gzip")  # built once: a gzip header holds the second it was written
    source = b"".join(
        [
            build_batch(0, [(TS, b"a", b"1", []), (TS, b"t", None, [])], producer=1, epoch=0, sequence=0),
            untouched,
            value(3, b"c", b"1"),
            build_batch(
                4, [(TS, b"d", b"v" * 50, []), (TS, b"e", b"v" * 50, [])], codec="lz4", producer=2, epoch=0, sequence=9
            ),
            value(6, b"f", b"1", producer=3, epoch=1, sequence=4),
            marker_batch(7, producer=4, epoch=0, commit=True, timestamp=TS),
        ]
    )
    segment = decode_log(source, "source")
    keep = np.array([True, True, True, False, False, True, False, True])
    policy = BatchPolicy(first_uncleanable_offset=100, active_producers={3: (1, 6), 4: (0, None)})
    framed = reframe(segment, keep, np.array([7]), h, policy)
    read = parse(framed.data, "rebuilt")
    assert [(b.base, b.last, b.count, b.producer, b.horizon) for b in read] == [
        (0, 1, 2, 1, h),
        (2, 2, 1, -1, None),
        (4, 5, 1, 2, None),
        (6, 6, 0, 3, None),
        (7, 7, 1, 4, h),
    ]
    assert [r["offset"] for b in read for r in b.records] == [0, 1, 2, 5, 7]
    assert untouched in framed.data, "the untouched batch is copied as it was"
    assert (read[2].codec, read[2].sequence, read[3].epoch, read[3].sequence) == (3, 9, 1, 4)
    decoded = decode_log(framed.data, "rebuilt")
    assert framed.records.to_pylist() == decoded.records.to_pylist()
    columns = ["base_offset", "last_offset_delta", "record_count", "producer_id", "producer_epoch", "delete_horizon_ms"]
    assert framed.batches.select(columns).to_pylist() == decoded.batches.select(columns).to_pylist()
    assert framed.stamped == 2


def test_a_segment_held_without_its_bytes_reads_them_again_only_to_copy_a_batch_whole() -> None:
    """A task holds a dirty ``.log`` segment decoded for its rewrite, not its bytes: the rewrite reads them again (as
    the object was committed) when a batch is copied whole, and not at all when every batch is rebuilt or goes."""
    untouched = value(1, b"b", b"v" * 50, codec="gzip")
    source = value(0, b"a", b"1") + untouched + build_batch(2, [(TS, b"c", b"1", []), (TS, b"d", b"1", [])])
    segment = decode_log(source, "source")
    held = replace(segment, data=None)
    policy = BatchPolicy(first_uncleanable_offset=100)
    loads: list[int] = []

    def load() -> bytes:
        loads.append(1)
        return source

    copied = np.array([False, True, True, False])
    assert reframe(held, copied, np.zeros(0, dtype=np.int64), NOW, policy, load).data == (
        reframe(segment, copied, np.zeros(0, dtype=np.int64), NOW, policy).data
    )
    assert untouched in reframe(held, copied, np.zeros(0, dtype=np.int64), NOW, policy, load).data
    assert len(loads) == 2
    rebuilt = np.array([False, False, True, False])
    assert reframe(held, rebuilt, np.zeros(0, dtype=np.int64), NOW, policy, load).data == (
        reframe(segment, rebuilt, np.zeros(0, dtype=np.int64), NOW, policy).data
    )
    assert len(loads) == 2, "no batch copied whole: the bytes are not read"
    with pytest.raises(
        ValueError, match=r"^reframe: a batch is copied whole, but the segment's bytes are neither held nor loadable$"
    ):
        reframe(held, copied, np.zeros(0, dtype=np.int64), NOW, policy)


def test_a_task_holds_the_dirty_log_segments_it_will_rewrite_decoded_but_not_their_bytes() -> None:
    store = store_()
    store.append_log(TP, value(0, b"a", b"1") + value(1, b"b", b"1"), now_ms=NOW)
    store.append_log(TP, value(2, b"a", b"2"), now_ms=NOW)
    segments = store.manifest(TP).segments
    task = clean_task(TP, store, segments, segment_format="kafka", now_ms=NOW)
    facts = read_task_facts(task, frozenset(s.base_offset for s in segments))
    assert sorted(facts.logs) == [s.base_offset for s in segments]
    assert all(log.data is None and log.records.num_rows for log in facts.logs.values())
    assert read_log_bytes(store.storage, TP, segments[0]).to_pybytes() == value(0, b"a", b"1") + value(1, b"b", b"1")


def test_a_held_segment_whose_object_changed_before_its_rewrite_fails_the_partition_and_keeps_its_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rewrite reads a held segment's bytes again to copy a batch whole: bytes that changed since the commit
    (here between the winner search's read and the rewrite) are refused, the partition fails with the object named,
    and the store keeps the version it had."""
    store = store_()
    store.append_log(TP, value(0, b"a", b"1") + value(1, b"b", b"1"), now_ms=NOW)
    store.append_log(TP, value(2, b"b", b"2"), now_ms=NOW)
    store.append_log(TP, value(3, b"active", b"active"), now_ms=NOW)
    before = store.manifest(TP)
    path = Path(store.storage.path(f"{TP.prefix}/{before.segments[0].path}"))
    read_range = facts_module._read_range

    def then_changed(*args: Any, **kwargs: Any) -> Any:
        found = read_range(*args, **kwargs)
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF  # the same size, other bytes
        path.write_bytes(bytes(data))
        return found

    monkeypatch.setattr(facts_module, "_read_range", then_changed)
    report = Cleaner(InlineSession(), store, LARGE).run(NOW)
    (failed,) = report.failed
    error = failed.error or ""
    assert "does not match the checksum the manifest records" in error
    assert before.segments[0].path in error
    assert store.manifest(TP) == before


def _superseded_store() -> Store:
    """Three dirty ``.log`` segments and an active one: the first's batch of a, b, c loses a to the second segment, b
    to the third (a tombstone) and c to the third's c, written later with an older timestamp; the second's a, d, f
    lose d to the third (a third of its records: marked, and left out only as the read ends); e stands."""
    store = store_()
    store.append_log(TP, build_batch(0, [(TS, b"a", b"1", []), (TS, b"b", b"1", []), (TS, b"c", b"1", [])]), now_ms=NOW)
    store.append_log(TP, value(3, b"a", b"2") + value(4, b"d", b"1") + value(5, b"f", b"1"), now_ms=NOW)
    store.append_log(
        TP,
        value(6, b"b", None) + value(7, b"e", b"1") + value(8, b"c", b"2", timestamp=TS - 10) + value(9, b"d", b"2"),
        now_ms=NOW,
    )
    store.append_log(TP, value(10, b"active", b"active"), now_ms=NOW)
    return store


def test_a_task_holds_of_its_dirty_log_segments_only_the_records_no_later_segment_supersedes() -> None:
    """Under the offset strategy a record whose key a later segment of the range holds loses whatever else holds, so
    a task keeping dirty segments decoded for their rewrite drops those records as it reads on: a first run holds
    about one record per key, not the partition's records. Not under the timestamp strategy (c's later record is
    older: the first c wins), where the task holds every live record."""
    store = _superseded_store()
    segments = store.manifest(TP).segments[:3]
    whole = frozenset(s.base_offset for s in segments)
    task = clean_task(TP, store, segments, segment_format="kafka", now_ms=NOW)
    facts = read_task_facts(task, whole)
    assert facts.logs[0].records.num_rows == 0 and facts.records[0] is facts.logs[0].records
    assert len(facts.logs[0].batch_index) == 0 and facts.logs[0].batches.num_rows == 1, "its batch stays known"
    assert facts.logs[3].records.column("key").to_pylist() == [b"a", b"f"], "nothing later holds a or f"
    assert facts.logs[3].batch_index.tolist() == [0, 2] and facts.records[3] is facts.logs[3].records
    assert {base: rows.tolist() for base, rows in facts.held_rows.items()} == {0: [], 3: [0, 2]}
    assert facts.logs[6].records.num_rows == 4 and 6 not in facts.held_rows, "the last segment holds every record"
    assert facts.table.num_rows == 10, "the facts keep every row: the winner search sees them all"
    by_time = read_task_facts(replace(task, context=replace(task.context, strategy=Strategy.TIMESTAMP)), whole)
    assert by_time.held_rows == {} and by_time.logs[0].records.num_rows == 3


def test_dropping_superseded_records_as_read_leaves_the_rewrites_byte_for_byte_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same pass with the held records pruned and whole: the same objects, the same manifest figures."""
    pruned, held = _superseded_store(), _superseded_store()
    assert not Cleaner(InlineSession(), pruned, LARGE).run(NOW).failed
    with monkeypatch.context() as m:
        m.setattr(facts_module, "supersedes_as_read", lambda task: False)
        assert not Cleaner(InlineSession(), held, LARGE).run(NOW).failed
    assert [r["key"] for b in parsed(pruned) for r in b.records] == [b"a", b"f", b"b", b"e", b"c", b"d", b"active"]

    def objects(store: Store) -> list[bytes]:
        return [store.storage.read_buffer(f"{TP.prefix}/{s.path}").to_pybytes() for s in store.manifest(TP).segments]

    assert objects(pruned) == objects(held)
    figures = ["base_offset", "next_offset", "record_count", "size_bytes", "live_record_count"]
    assert [s.model_dump(include=set(figures)) for s in pruned.manifest(TP).segments] == [
        s.model_dump(include=set(figures)) for s in held.manifest(TP).segments
    ]


def test_a_kept_record_missing_from_the_held_ones_fails_its_partition_and_keeps_its_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Were a record dropped as superseded that its verdicts keep (here: the timestamp strategy, where a later record
    can lose), the rewrite refuses to write the segment without it: the partition fails, the store keeps its
    version."""
    store = _superseded_store()
    before = store.manifest(TP)
    monkeypatch.setattr(facts_module, "supersedes_as_read", lambda task: True)
    by_time = settings_with({**BASE, "log.segment.bytes": 200, "log.cleaner.compaction.strategy": "timestamp"})
    report = Cleaner(InlineSession(), store, by_time).run(NOW)
    (failed,) = report.failed
    assert "a record its verdicts keep was not held for its rewrite" in (failed.error or "")
    assert before.segments[0].path in (failed.error or "")
    assert store.manifest(TP) == before
