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
LOG_APPEND_TIME_BIT = 0x08
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
    log_append_time: int | None = None,
) -> bytes:
    """One batch from kafka-python's builder at consecutive offsets from ``base``, set as a broker assigns it
    (outside the CRC); a control batch gets the control bit and a fresh CRC (kafka-python's producer writes none).
    With ``log_append_time``, the batch is one of a topic with ``message.timestamp.type=LogAppendTime`` as the
    broker writes it (``DefaultRecordBatch.setMaxTimestamp``): the timestamp type bit, that time as its max
    timestamp, a fresh CRC; its records keep the producer's timestamps, which readers no longer see."""
    builder = DefaultRecordBatchBuilder(2, CODECS[codec], transactional, producer, epoch, sequence, 1 << 30)
    for delta, (timestamp, key, value, headers) in enumerate(records):
        assert builder.append(delta, timestamp, key, value, headers) is not None
    built = builder.build()
    struct.pack_into(">q", built, 0, base)
    if control or log_append_time is not None:
        (attributes,) = struct.unpack_from(">h", built, 21)
        struct.pack_into(
            ">h",
            built,
            21,
            attributes | (CONTROL_BIT if control else 0) | (LOG_APPEND_TIME_BIT if log_append_time is not None else 0),
        )
        if log_append_time is not None:
            struct.pack_into(">q", built, 35, log_append_time)
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
    count: int = 0  # records, as the header says
    sequence: int = -1
    log_append_time: bool = False
    base_timestamp: int = -1
    max_timestamp: int = -1

    def header(self) -> dict[str, Any]:
        """Every field of the header (the reference model's names)."""
        return {
            "base": self.base,
            "last": self.last,
            "count": self.count,
            "producer": self.producer,
            "epoch": self.epoch,
            "sequence": self.sequence,
            "codec": self.codec,
            "log_append_time": self.log_append_time,
            "transactional": self.transactional,
            "control": self.control,
            "base_timestamp": self.base_timestamp,
            "max_timestamp": self.max_timestamp,
            "horizon": self.horizon,
        }


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
                read.records_count,
                read.base_sequence,
                read.timestamp_type == 1,
                read.first_timestamp,
                read.max_timestamp,
            )
        )
    assert reader.valid_bytes() == len(data), f"{where}: {len(data) - reader.valid_bytes()} bytes after its last batch"
    return found
