"""Kafka's own format end to end against an independent implementation: batches built by kafka-python (keys,
headers, tombstones, gzip, transactional producers, control records) are appended, cleaned, read back and exported;
kafka-python parses every batch the job wrote, every CRC validates, and the surviving records are what the reference
model keeps."""

from __future__ import annotations

import tempfile
from pathlib import Path

from compaction.clean.cleaner import Cleaner
from compaction.interop import export_partition
from compaction.store import Store, TopicPartition
from tests.helpers.inline import InlineSession
from tests.helpers.kafka_python import ParsedBatch, build_batch, marker_batch, parse
from tests.helpers.model import Config, Model, Rec
from tests.helpers.settings import settings_with

TP = TopicPartition("t", 0)
T0 = 1_800_000_000_000
RETENTION = 1000
SETTINGS = settings_with(
    {
        "log.cleanup.policy": "compact",
        "log.cleaner.min.cleanable.ratio": 0.0,
        "log.cleaner.delete.retention.ms": RETENTION,
        "producer.id.expiration.ms": 1,
    }
)


def kafka_python_batch(
    base: int,
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]],
    *,
    codec: str = "none",
    producer: int = -1,
    sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One batch from kafka-python's builder, each record written at ``T0`` plus its offset."""
    return build_batch(
        base,
        [(T0 + base + delta, key, value, headers) for delta, (key, value, headers) in enumerate(records)],
        codec=codec,
        producer=producer,
        epoch=0 if producer >= 0 else -1,
        sequence=sequence,
        transactional=transactional,
    )


def marker(offset: int, producer: int, commit: bool) -> bytes:
    return marker_batch(offset, producer=producer, epoch=0, commit=commit, timestamp=T0 + offset)


def history() -> tuple[list[bytes], list[list[Rec]]]:
    """Three appends of kafka-python batches, and the same records for the reference model."""
    gzip = "gzip"
    appends: list[bytes] = []
    recs: list[list[Rec]] = []
    h = [("trace", b"1"), ("v", b"\x00" * 8)]
    # 1: a committed transaction (gzip), plain records with a tombstone, an aborted transaction
    appends.append(
        b"".join(
            [
                kafka_python_batch(
                    0, [(b"a", b"a0", h), (b"b", b"b0", [])], codec=gzip, producer=7, sequence=0, transactional=True
                ),
                marker(2, 7, commit=True),
                kafka_python_batch(3, [(b"a", b"a1", h), (b"b", None, []), (None, b"keyless", [])], codec=gzip),
                kafka_python_batch(
                    6, [(b"c", b"c0", []), (b"a", b"a-aborted", [])], producer=8, sequence=0, transactional=True
                ),
                marker(8, 8, commit=False),
            ]
        )
    )
    recs.append(
        [
            Rec(0, "a", "a0", producer=7, transactional=True),
            Rec(1, "b", "b0", producer=7, transactional=True),
            Rec(2, None, None, producer=7, transactional=True, control="commit"),
            Rec(3, "a", "a1"),
            Rec(4, "b", None),
            Rec(5, None, "keyless"),
            Rec(6, "c", "c0", producer=8, transactional=True),
            Rec(7, "a", "a-aborted", producer=8, transactional=True),
            Rec(8, None, None, producer=8, transactional=True, control="abort"),
        ]
    )
    # 2: idempotent updates (gzip)
    appends.append(kafka_python_batch(9, [(b"c", b"c1", h), (b"d", b"d0", [])], codec=gzip, producer=9, sequence=0))
    recs.append([Rec(9, "c", "c1", producer=9), Rec(10, "d", "d0", producer=9)])
    # 3: the active segment
    appends.append(kafka_python_batch(11, [(b"e", b"e0", [])]))
    recs.append([Rec(11, "e", "e0")])
    return appends, recs


def test_kafka_python_batches_cleaned_and_read_back_by_kafka_python() -> None:
    store = Store.open(tempfile.mkdtemp(prefix="interop-"))
    model = Model("offset")
    appends, recs = history()
    config = Config(delete_retention_ms=RETENTION, producer_id_expiration_ms=1)
    for data, group in zip(appends, recs, strict=True):
        store.append_log(TP, data, now_ms=T0)
        model.append(group, T0)
    model.adopt([s.model_dump() for s in store.manifest(TP).segments], config)
    for now in (T0 + 10, T0 + 10 + RETENTION):  # the second pass purges the tombstone and the abort marker
        report = Cleaner(InlineSession(), store, SETTINGS).run(now)
        assert not report.failed, [r.error for r in report.failed]
        model.clean(model.plan(now, config), now, config)
        model.adopt([s.model_dump() for s in store.manifest(TP).segments], config)
        parsed: list[ParsedBatch] = [
            b
            for s in store.manifest(TP).segments
            for b in parse(store.storage.read_buffer(f"{TP.prefix}/{s.path}").to_pybytes())
        ]
        survivors = [r["offset"] for b in parsed for r in b.records]
        assert survivors == [r.offset for r in model.log]
        assert all(b.codec in (0, 1) for b in parsed)
        by_offset = {r["offset"]: r for b in parsed for r in b.records}
        if 3 in by_offset:
            assert (by_offset[3]["key"], by_offset[3]["value"], by_offset[3]["headers"]) == (
                b"a",
                b"a1",
                [("trace", b"1"), ("v", b"\x00" * 8)],
            ), "headers survive"
    assert survivors == [2, 3, 5, 8, 9, 10, 11], "the tombstone went; the markers wait for their horizon"
    exported = Path(tempfile.mkdtemp(prefix="interop-export-")) / "t-0"
    export_partition(store, TP, exported)
    read_back = [b for path in sorted(exported.glob("*.log")) for b in parse(path.read_bytes())]
    assert [r["offset"] for b in read_back for r in b.records] == survivors
    assert [(b.base, b.last) for b in read_back] == [(b.base, b.last) for b in parsed]
