"""Tiny builders for Kafka record batches (real bytes, through the codec), and the corruptions bad input tests use."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import crc32c

from compaction.kafka import batch_table, encode
from compaction.store.segment import records

NO_PRODUCER = {"producer_id": -1, "producer_epoch": -1}


def batch(
    base: int,
    *rows: dict[str, Any],
    last: int | None = None,
    producer: int = -1,
    epoch: int = 0,
    sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    compression: str = "none",
    timestamp: int = 1_000,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One batch's records and row: ``rows`` are ``{"key", "value", ...}`` at offsets ``base, base + 1, ...``
    (or their own ``offset``); ``last`` its last offset when the batch has gaps or no records."""
    pid = {"producer_id": producer, "producer_epoch": epoch if producer >= 0 else -1}
    placed = []
    for i, row in enumerate(rows):
        placed.append(
            {
                "offset": base + i,
                "timestamp": timestamp + i,
                **pid,
                "is_transactional": transactional,
                "is_control": control,
                **row,
            }
        )
    attributes = (0x10 if transactional else 0) | (0x20 if control else 0)
    last_offset = last if last is not None else placed[-1]["offset"]
    row = {
        "base_offset": base,
        "last_offset_delta": last_offset - base,
        "attributes": attributes,
        "compression": compression,
        "base_sequence": sequence,
        "record_count": len(placed),
        "max_timestamp": placed[-1]["timestamp"] if placed else timestamp,
        **pid,
    }
    return placed, row


def log_bytes(*batches: tuple[list[dict[str, Any]], dict[str, Any]]) -> bytes:
    """Encode batches (from :func:`batch`) back to back."""
    rows = [r for placed, _ in batches for r in placed]
    return encode(records(rows), batch_table([b for _, b in batches]))


def _recrc(data: bytearray, at: int = 0) -> bytearray:
    length = struct.unpack_from(">i", data, at + 8)[0]
    struct.pack_into(">I", data, at + 17, crc32c.crc32c(bytes(data[at + 21 : at + 12 + length])))
    return data


def flip_byte(data: bytes) -> bytes:
    out = bytearray(data)
    out[-1] ^= 0x01
    return bytes(out)


def truncate(data: bytes) -> bytes:
    return data[:-5]


def length_past_end(data: bytes) -> bytes:
    out = bytearray(data)
    struct.pack_into(">i", out, 8, struct.unpack_from(">i", out, 8)[0] + 1000)
    return bytes(out)


def unknown_magic(data: bytes) -> bytes:
    out = bytearray(data)
    out[16] = 7
    return bytes(out)


def unknown_codec(data: bytes) -> bytes:
    """Codec id 5 (unassigned) in the attributes, with a CRC that matches: only the codec is wrong."""
    out = bytearray(data)
    attributes = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, (attributes & ~0x07) | 5)
    return bytes(_recrc(out))


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "flipped byte": flip_byte,
    "truncated batch": truncate,
    "length past the end": length_past_end,
    "unknown magic": unknown_magic,
    "unsupported codec id": unknown_codec,
}
