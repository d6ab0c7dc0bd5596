"""Zigzag varints (Kafka's ``ByteUtils.readVarint``/``writeVarint``) read and written for many positions at once."""

from __future__ import annotations

import numpy as np

#: Bytes a varint may take: 5 for Kafka's int32 fields, 10 for the int64 timestamp delta.
INT_BYTES = 5
LONG_BYTES = 10

# A value needs k+1 bytes when it is >= 2**(7k).
_SIZE_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_SEVEN_BITS = np.uint64(0x7F)
_ONE = np.uint64(1)


def _two_byte_tables() -> tuple[np.ndarray, np.ndarray]:
    """For every two-byte window (first byte in the low bits): the size of the varint starting there (0 when it
    takes three bytes or more) and its value."""
    window = np.arange(1 << 16, dtype=np.int64)
    low, high = window & 0xFF, window >> 8
    one = low < 0x80
    two = ~one & (high < 0x80)
    raw = np.where(one, low, (low & 0x7F) | (high << 7))
    return np.where(one, 1, np.where(two, 2, 0)), (raw >> 1) ^ -(raw & 1)


#: Most of a record's varints (lengths under 8 KiB, small deltas) take one or two bytes: two table lookups
#: decode them, and only the rest go through the byte-by-byte loop.
SIZE_OF_WINDOW, VALUE_OF_WINDOW = _two_byte_tables()


def windows(buf: np.ndarray) -> np.ndarray:
    """Every two-byte window of ``buf`` (uint8) as a little-endian uint16, without a copy: ``windows[p]`` is
    ``buf[p] | buf[p + 1] << 8``."""
    return np.ndarray((max(len(buf) - 1, 0),), dtype="<u2", buffer=buf, strides=(1,))


def read(buf: np.ndarray, pos: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read the zigzag varint starting at each of ``pos`` in ``buf`` (uint8).

    Returns ``(values, sizes, bad)``: the decoded int64 values, how many bytes each took, and which ran past
    ``max_bytes`` (Kafka: "Varint is too long"). Reads past the end of ``buf`` see its last byte instead of
    failing (a value read so is wrong), so callers check that every field ends inside its record.
    """
    values = np.zeros(len(pos), dtype=np.int64)
    sizes = np.zeros(len(pos), dtype=np.int64)
    bad = np.zeros(len(pos), dtype=bool)
    if not len(pos):
        return values, sizes, bad
    if len(buf):
        last = len(buf) - 1
        if last:
            # One gather of the unaligned two-byte windows: 2.9 ms for a K1 segment's 500k records, against 12 ms
            # for two byte gathers (numpy 2, this machine). A position on the last byte sees it twice.
            window = windows(buf)[np.minimum(pos, last - 1)]
            window[pos >= last] = int(buf[last]) * 0x101
        else:
            window = np.full(len(pos), int(buf[0]) * 0x101, dtype=np.uint16)
        sizes = SIZE_OF_WINDOW[window]
        values = VALUE_OF_WINDOW[window]
        slow = np.flatnonzero(sizes == 0)
    else:
        slow = np.arange(len(pos))
    if slow.size:
        values[slow], sizes[slow], bad[slow] = _read_bytewise(buf, pos[slow], max_bytes)
    return values, sizes, bad


def _read_bytewise(buf: np.ndarray, pos: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    last = max(len(buf) - 1, 0)
    first = buf[np.minimum(pos, last)] if len(buf) else np.zeros(len(pos), dtype=np.uint8)
    raw = (first & 0x7F).astype(np.uint64)
    sizes = np.ones(len(pos), dtype=np.int64)
    bad = np.zeros(len(pos), dtype=bool)
    more = np.flatnonzero(first & 0x80)
    for i in range(1, max_bytes + 1):
        if not more.size:
            break
        if i == max_bytes:
            bad[more] = True
            break
        byte = buf[np.minimum(pos[more] + i, last)]
        raw[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * i)
        sizes[more] += 1
        more = more[(byte & 0x80) != 0]
    values = (raw >> _ONE).view(np.int64) ^ -(raw & _ONE).view(np.int64)
    return values, sizes, bad


def zigzag(values: np.ndarray) -> np.ndarray:
    """Kafka's zigzag mapping of int64 values to uint64 (0, -1, 1, -2 ... become 0, 1, 2, 3 ...)."""
    values = values.astype(np.int64, copy=False)
    return ((values << 1) ^ (values >> 63)).view(np.uint64)


def sizes(encoded: np.ndarray) -> np.ndarray:
    """How many bytes each zigzag-encoded value (uint64) takes as a varint."""
    return np.searchsorted(_SIZE_THRESHOLDS, encoded, side="right").astype(np.int64) + 1


def write(out: np.ndarray, pos: np.ndarray, encoded: np.ndarray, nbytes: np.ndarray) -> None:
    """Write each zigzag-encoded value (uint64) as a varint of ``nbytes`` bytes at ``pos`` in ``out`` (uint8)."""
    todo = np.arange(len(pos))
    for i in range(LONG_BYTES):
        if i:
            todo = todo[nbytes[todo] > i]
        if not todo.size:
            break
        group = (encoded[todo] >> np.uint64(7 * i)) & _SEVEN_BITS
        continues = (nbytes[todo] > i + 1).astype(np.uint64) << np.uint64(7)
        out[pos[todo] + i] = (group | continues).astype(np.uint8)
