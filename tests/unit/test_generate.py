"""The generator is deterministic for a seed and honours its ratios."""

from __future__ import annotations

import pyarrow.compute as pc

from compaction.store import SegmentFormat, Store, TopicPartition
from compaction.synthetic import GenerateSpec, generate, partition_records
from tests.helpers.builders import rec, table


def test_same_seed_same_records_and_different_seed_different_records() -> None:
    spec = GenerateSpec(records=2000, keys=100, partitions=2, seed=7)
    assert partition_records(spec, 0, 1, 0).equals(partition_records(spec, 0, 1, 0))
    other = GenerateSpec(records=2000, keys=100, partitions=2, seed=8)
    assert not partition_records(spec, 0, 1, 0).equals(partition_records(other, 0, 1, 0))


def test_ratios_cardinality_and_partitioning() -> None:
    spec = GenerateSpec(
        records=40_000,
        keys=1000,
        partitions=4,
        tombstone_ratio=0.1,
        keyless_ratio=0.05,
        missing_timestamp_ratio=0.2,
        seed=1,
    )
    table = partition_records(spec, 0, 2, 0)
    n = table.num_rows
    assert n == 10_000
    keys = table.column("key")
    assert abs(keys.null_count / n - 0.05) < 0.01
    tombstones = pc.sum(pc.and_(pc.is_valid(keys), pc.is_null(table.column("value")))).as_py()
    assert abs(tombstones / (n - keys.null_count) - 0.1) < 0.015
    assert abs(table.column("timestamp").null_count / n - 0.2) < 0.015
    distinct = pc.unique(pc.drop_null(keys)).to_pylist()
    assert len(distinct) <= 250
    assert all(int(k[4:]) % 4 == 2 for k in distinct), "keys of partition 2 hash to partition 2"


def test_update_ratio_bounds_new_keys() -> None:
    spec = GenerateSpec(records=10_000, keys=100_000, partitions=1, update_ratio=0.9, seed=3)
    keys = partition_records(spec, 0, 0, 0).column("key")
    assert abs(len(pc.unique(keys)) / 10_000 - 0.1) < 0.02


def test_generate_writes_segments_and_appends_after_the_log_end(local_store: Store) -> None:
    spec = GenerateSpec(topics=("a", "b"), records=1000, keys=50, partitions=2, segment_records=200)
    generate(local_store, spec, now_ms=5)
    manifests = generate(local_store, spec, now_ms=6)
    assert len(manifests) == 4
    m = local_store.manifest(TopicPartition("b", 1))
    assert (m.version, m.log_end_offset, len(m.segments)) == (2, 1000, 6)
    assert m.writer.operation == "generate"
    assert local_store.read(TopicPartition("b", 1)).column("offset").to_pylist() == list(range(1000))


def test_generate_after_an_open_transaction_keeps_the_last_stable_offset_at_its_first_offset(
    local_store: Store,
) -> None:
    tp = TopicPartition("orders", 0)
    local_store.append(tp, table(rec("a"), rec("b", producer_id=7, is_transactional=True), rec("c")), now_ms=1)
    [manifest] = generate(local_store, GenerateSpec(records=10, keys=5, partitions=1), now_ms=2)
    # Kafka's LSO: consumers reading committed data stop before the open transaction, not at the log end.
    assert (manifest.log_end_offset, manifest.open_transactions, manifest.last_stable_offset) == (13, {7: 1}, 1)


def test_skew_puts_a_share_of_records_in_partition_0_and_one_hot_key() -> None:
    spec = GenerateSpec(records=10_000, keys=1000, partitions=4, partition0_share=0.8, hot_key_records=3000)
    sizes = [partition_records(spec, 0, p, 0).num_rows for p in range(4)]
    assert sizes == [8000, 667, 667, 666]
    keys = partition_records(spec, 0, 0, 0).column("key").to_pylist()
    assert max(keys.count(k) for k in set(keys)) >= 3000


def test_kafka_format_with_transactions_writes_batches_kafka_python_reads(tmp_path) -> None:
    from kafka.record.memory_records import MemoryRecords

    store = Store.open(str(tmp_path / "store"))
    spec = GenerateSpec(
        records=3000,
        keys=200,
        partitions=1,
        segment_format=SegmentFormat.KAFKA,
        compression="zstd",
        transactional_ratio=0.5,
        abort_ratio=0.5,
        transaction_records=50,
        segment_records=1000,
        seed=5,
    )
    (manifest,) = generate(store, spec, now_ms=1_767_225_600_000)
    assert {s.format for s in manifest.segments} == {"kafka"} and manifest.last_stable_offset == manifest.log_end_offset
    table = store.read(TopicPartition("orders", 0))
    markers = table.filter(table.column("is_control")).column("control_type").to_pylist()
    assert 20 <= len(markers) <= 40 and 0 < markers.count("abort") < len(markers)
    assert table.num_rows == 3000 + len(markers)
    sequences: dict[int, int] = {}
    batches = 0
    for segment in manifest.segments:
        reader = MemoryRecords(store.storage.read_buffer(f"orders/0/{segment.path}").to_pybytes())
        while (read := reader.next_batch()) is not None:
            batches += 1
            assert read.validate_crc()
            assert read.compression_type == (0 if read.is_control_batch else 4)
            if read.producer_id >= 0 and not read.is_control_batch:  # sequences run on per producer
                assert read.base_sequence == sequences.get(read.producer_id, 0)
                sequences[read.producer_id] = read.base_sequence + len(list(read))
    assert batches > len(markers) and sequences


def test_generate_command_writes_kafka_segments(tmp_path, capsys) -> None:
    import json

    from compaction.cli import main

    root = str(tmp_path / "cli-store")
    assert (
        main(
            [
                "generate",
                root,
                "--records",
                "500",
                "--partitions",
                "1",
                "--format",
                "kafka",
                "--compression",
                "lz4",
                "--transactional-ratio",
                "1",
                "--abort-ratio",
                "1",
                "--now",
                "1767225600000",
            ]
        )
        == 0
    )
    assert main(["status", root, "--json"]) == 0
    (status,) = json.loads(capsys.readouterr().out.split("\n", 1)[1])["partitions"]
    assert status["format"] == "kafka" and status["records"] == 505
    assert main(["generate", root, "--compression", "zstd"]) == 4  # a codec needs --format kafka
