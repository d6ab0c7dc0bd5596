"""Kafka's record batch v2 through an independent implementation (kafka-python): batches built by its
``DefaultRecordBatchBuilder`` as a producer and a broker write them, and logs parsed by its reader, every CRC checked.

The job's own codec is not used here, so a test that appends these batches and parses what the job wrote holds the
job to Kafka's format rather than to itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import calc_crc32c

#: kafka-python's codec ids (the batch attributes' low three bits), by Kafka's names.
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COMMIT_KEY, ABORT_KEY = b"\x00\x00\x00\x01", b"\x00\x00\x00\x00"  # a control record's version and type
MARKER_VALUE = b"\x00\x00\x00\x00\x00\x00"  # its version and the coordinator's epoch
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40  # KIP-534: the batch's first timestamp is its delete horizon

#: One record to build: (timestamp, key, value, headers).
Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]


def build_batch(
    base: int,
    records: list[Record],
    *,
    codec: str = "none",
    producer: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    """One batch from kafka-python's builder at consecutive offsets from ``base``, set as a broker assigns it
    (outside the CRC); a control batch gets the control bit and a fresh CRC (kafka-python's producer writes none)."""
    builder = DefaultRecordBatchBuilder(2, CODECS[codec], transactional, producer, epoch, sequence, 1 << 30)
    for delta, (timestamp, key, value, headers) in enumerate(records):
        assert builder.append(delta, timestamp, key, value, headers) is not None
    built = builder.build()
    struct.pack_into(">q", built, 0, base)
    if control:
        (attributes,) = struct.unpack_from(">h", built, 21)
        struct.pack_into(">h", built, 21, attributes | CONTROL_BIT)
        struct.pack_into(">I", built, 17, calc_crc32c(memoryview(built)[21:]))
    return bytes(built)


def marker_batch(offset: int, *, producer: int, epoch: int, commit: bool, timestamp: int) -> bytes:
    """A transaction's commit or abort marker, as the coordinator writes it."""
    return build_batch(
        offset,
        [(timestamp, COMMIT_KEY if commit else ABORT_KEY, MARKER_VALUE, [])],
        producer=producer,
        epoch=epoch,
        transactional=True,
        control=True,
    )


@dataclass(frozen=True)
class ParsedBatch:
    base: int
    last: int
    codec: int
    producer: int
    epoch: int
    transactional: bool
    control: bool
    horizon: int | None  # KIP-534's delete horizon, when the batch has one
    records: list[dict[str, Any]]


def parse(data: bytes, where: str = "log") -> list[ParsedBatch]:
    """Every batch of a log as kafka-python reads it, after checking that its CRC validates."""
    found = []
    reader = MemoryRecords(data)
    while (read := reader.next_batch()) is not None:
        assert read.validate_crc(), f"{where}: the batch at {read.base_offset} fails its CRC in kafka-python"
        records = [
            {"offset": r.offset, "timestamp": r.timestamp, "key": r.key, "value": r.value, "headers": list(r.headers)}
            for r in read
        ]
        horizon = read.first_timestamp if read.attributes & DELETE_HORIZON_BIT else None
        found.append(
            ParsedBatch(
                read.base_offset,
                read.base_offset + read.last_offset_delta,
                read.compression_type,
                read.producer_id,
                read.producer_epoch,
                read.is_transactional,
                read.is_control_batch,
                horizon,
                records,
            )
        )
    assert reader.valid_bytes() == len(data), f"{where}: {len(data) - reader.valid_bytes()} bytes after its last batch"
    return found
