"""Kafka partition directories: import checks and loads ``.log`` files, export writes them back with the indexes
Kafka's LogSegment builds; an uncleaned import exports the same bytes, for every codec."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest
from kafka.record.memory_records import MemoryRecords

from compaction.cli import main
from compaction.errors import InvalidArgumentError, InvalidRecordsError
from compaction.interop import export_partition, import_partition
from compaction.kafka import CODECS
from compaction.store import Store, TopicPartition, Writer
from tests.helpers.batches import CORRUPTIONS, batch, log_bytes
from tests.helpers.builders import rec

TP = TopicPartition("t", 0)
NOW = 1_800_000_000_000


def value(i: int) -> str:
    return f"value-{i:04d}-" + "x" * 90


def write_dir(root: Path, codec: str = "none") -> Path:
    """Two files: [0, 40) with 20 two-record batches, a transaction aborted and one committed; [40, 61)."""
    root.mkdir(parents=True, exist_ok=True)
    first = [
        batch(2 * i, rec(f"k{i % 7}", value(i)), rec(f"k{i % 5}", value(i)), compression=codec, timestamp=NOW + i)
        for i in range(17)
    ]
    first += [
        batch(
            34,
            rec("t1", "a"),
            rec("t2", "b"),
            producer=5,
            transactional=True,
            sequence=0,
            compression=codec,
            timestamp=NOW + 40,
        ),
        batch(36, rec("t3", "c"), producer=6, transactional=True, sequence=0, compression=codec, timestamp=NOW + 41),
        batch(
            37, rec(None, None, control_type="abort"), producer=5, transactional=True, control=True, timestamp=NOW + 42
        ),
        batch(
            38, rec(None, None, control_type="commit"), producer=6, transactional=True, control=True, timestamp=NOW + 43
        ),
    ]
    (root / "00000000000000000000.log").write_bytes(log_bytes(*first))
    second = [batch(40 + i, rec(f"k{i}", value(i)), compression=codec, timestamp=NOW + 50 + i) for i in range(21)]
    (root / "00000000000000000040.log").write_bytes(log_bytes(*second))
    return root


@pytest.mark.parametrize("codec", CODECS)
def test_an_uncleaned_import_exports_the_same_files_for_every_codec(tmp_path: Path, codec: str) -> None:
    source = write_dir(tmp_path / "in", codec)
    store = Store.open(str(tmp_path / "store"))
    manifest = import_partition(store, TP, source, now_ms=NOW)
    assert [(s.base_offset, s.next_offset, s.format) for s in manifest.segments] == [
        (0, 40, "kafka"),
        (40, 61, "kafka"),
    ]
    assert manifest.log_end_offset == 61 and manifest.first_dirty_offset == 0
    export_partition(store, TP, tmp_path / "out")
    for name in ("00000000000000000000.log", "00000000000000000040.log"):
        assert (tmp_path / "out" / name).read_bytes() == (source / name).read_bytes()
    # The export imports and exports again to the very same directory, indexes included.
    import_partition(store, TopicPartition("t", 1), tmp_path / "out", now_ms=NOW)
    export_partition(store, TopicPartition("t", 1), tmp_path / "again")
    first = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    assert first == {p.name: p.read_bytes() for p in (tmp_path / "again").iterdir()}
    assert sorted(first) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "00000000000000000000.txnindex",
        "00000000000000000040.index",
        "00000000000000000040.log",
        "00000000000000000040.timeindex",
    ]


def test_indexes_have_an_entry_each_time_4096_bytes_were_written(tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    # 30 batches of one record, 200 bytes each.
    batches = [batch(i, rec("k", "v" * 129), timestamp=NOW + (i if i != 25 else -20)) for i in range(30)]
    data = log_bytes(*batches)
    assert len(data) == 30 * 200
    (source / "00000000000000000100.log").write_bytes(data)
    store = Store.open(str(tmp_path / "store"))
    with pytest.raises(InvalidRecordsError, match="batch at offset 0 starts before the segment's base offset 100"):
        import_partition(store, TP, source, now_ms=NOW)
    (source / "00000000000000000100.log").unlink()
    (source / "00000000000000000000.log").write_bytes(data)
    import_partition(store, TP, source, now_ms=NOW)
    export_partition(store, TP, tmp_path / "out")
    index = (tmp_path / "out" / "00000000000000000000.index").read_bytes()
    # Positions 0, 200, ...: the first entry once more than 4096 bytes lie behind the last (at 4200, batch 21), and
    # it names the batch's last offset and its position.
    assert list(struct.iter_unpack(">ii", index)) == [(21, 4200)]
    timeindex = (tmp_path / "out" / "00000000000000000000.timeindex").read_bytes()
    assert list(struct.iter_unpack(">qi", timeindex)) == [(NOW + 21, 21), (NOW + 29, 29)]


def test_the_txnindex_names_each_aborted_transaction(tmp_path: Path) -> None:
    store = Store.open(str(tmp_path / "store"))
    import_partition(store, TP, write_dir(tmp_path / "in"), now_ms=NOW)
    export_partition(store, TP, tmp_path / "out")
    entries = list(struct.iter_unpack(">hqqqq", (tmp_path / "out" / "00000000000000000000.txnindex").read_bytes()))
    # Producer 5 aborted [34, 37] while producer 6's transaction (from 36) was still open: the LSO was 36.
    assert entries == [(0, 5, 34, 37, 36)]


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_bad_input_refuses_the_whole_import_naming_the_file_and_offset(tmp_path: Path, corruption: str) -> None:
    source = write_dir(tmp_path / "in")
    bad = source / "00000000000000000040.log"
    bad.write_bytes(CORRUPTIONS[corruption](log_bytes(batch(40, rec("a", "b")))))
    store = Store.open(str(tmp_path / "store"))
    with pytest.raises(InvalidRecordsError, match=r"00000000000000000040\.log.*batch at offset 40"):
        import_partition(store, TP, source, now_ms=NOW)
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.*"))


def test_a_txnindex_that_disagrees_with_the_markers_refuses_the_import(tmp_path: Path) -> None:
    source = write_dir(tmp_path / "in")
    (source / "00000000000000000000.txnindex").write_bytes(struct.pack(">hqqqq", 0, 6, 36, 38, 39))
    with pytest.raises(InvalidRecordsError, match="producer 6 ending at offset 38 has no abort marker"):
        import_partition(Store.open(str(tmp_path / "store")), TP, source, now_ms=NOW)


def test_export_leaves_out_deleted_records_and_kafka_python_reads_it(tmp_path: Path) -> None:
    store = Store.open(str(tmp_path / "store"))
    manifest = import_partition(store, TP, write_dir(tmp_path / "in", "gzip"), now_ms=NOW)
    segment = manifest.segments[1]
    vector = store.objects.write_deletes(
        TP,
        segment,
        pa.array([40, 41, 45], pa.int64()),
        created_ms=NOW,
        live_min_delete_horizon_ms=None,
        live_first_timestamp=NOW + 52,
        live_max_timestamp=NOW + 70,
    )
    changed = segment.model_copy(update={"deletes": vector})
    store.commit(
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
    export_partition(store, TP, tmp_path / "out")
    reader = MemoryRecords((tmp_path / "out" / "00000000000000000040.log").read_bytes())
    seen = []
    while (read := reader.next_batch()) is not None:
        assert read.validate_crc()
        seen += [r.offset for r in read]
    assert seen == [42, 43, 44, *range(46, 61)]
    with pytest.raises(InvalidArgumentError, match="not an empty directory"):
        export_partition(store, TP, tmp_path / "out")


def test_import_and_export_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "store")
    assert (
        main(["import", store, "t", "0", str(write_dir(tmp_path / "in")), "--now", str(NOW), "--allow-future-now"]) == 0
    )
    assert "offsets [0, 61)" in capsys.readouterr().out
    assert main(["export", store, "t", "0", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "00000000000000000040.log").read_bytes() == (
        tmp_path / "in" / "00000000000000000040.log"
    ).read_bytes()
    assert main(["import", store, "t", "0", str(tmp_path / "in")]) == 4  # it would not continue the log
