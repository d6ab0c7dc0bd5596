"""Kafka's batch codecs, framed as Kafka writes them: gzip, snappy in xerial framing, LZ4 frames, zstd."""

from __future__ import annotations

import struct
from typing import Any

import cramjam
import lz4.frame

from compaction.kafka.layout import CODECS

# snappy-java's SnappyOutputStream (what Kafka wraps): a 16-byte header, then blocks of at most 32 KiB of
# input, each a big-endian int32 length and a raw snappy block. Not the snappy "framing format".
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")

# Kafka's default levels (KIP-390): gzip 6 (Deflater's default), LZ4 9, zstd 3.
_GZIP_LEVEL = 6
_LZ4_LEVEL = 9
_ZSTD_LEVEL = 3


def compress(codec: int, data: Any) -> bytes:
    """Compress a batch's records (any buffer) with codec id ``codec`` the way Kafka's producer does."""
    if codec == 1:
        return bytes(cramjam.gzip.compress(data, level=_GZIP_LEVEL))
    if codec == 2:
        view = memoryview(data).cast("B")
        parts = [_XERIAL_HEADER]
        for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
            block = cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES])
            parts += [_BLOCK_LENGTH.pack(len(block)), bytes(block)]
        return b"".join(parts)
    if codec == 3:
        # KafkaLZ4BlockOutputStream: one frame, 64 KiB independent blocks, no content size, no checksums.
        framed: bytes = lz4.frame.compress(
            data,
            compression_level=_LZ4_LEVEL,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return framed
    if codec == 4:
        return bytes(cramjam.zstd.compress(data, level=_ZSTD_LEVEL))
    raise ValueError(f"no compression codec with id {codec}; Kafka's are {dict(enumerate(CODECS))}")


def decompress(codec: int, data: Any) -> bytes:
    """Decompress a batch's records; raise ValueError if the bytes are not a valid stream of that codec."""
    try:
        if codec == 1:
            return bytes(cramjam.gzip.decompress(data))
        if codec == 2:
            return _xerial_decompress(memoryview(data).cast("B"))
        if codec == 3:
            return bytes(lz4.frame.decompress(data))
        if codec == 4:
            return bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, RuntimeError, struct.error) as err:
        raise ValueError(f"{CODECS[codec]} stream does not decompress: {err}") from err
    raise ValueError(f"no compression codec with id {codec}; Kafka's are {dict(enumerate(CODECS))}")


# A zstd frame's header (RFC 8878 §3.1.1): the magic number, then a descriptor byte whose two high bits size the
# frame's content size field (with bit 5, the single segment flag, 0 bytes means none), bit 5 saying there is no
# window byte, and two low bits sizing the dictionary id.
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_DICT_ID_BYTES = (0, 1, 2, 4)
_ZSTD_SIZE_BYTES = (0, 2, 4, 8)


def zstd_content_size(frame: Any) -> int | None:
    """The content size a zstd stream's first frame declares, or None where it declares none (a streaming
    writer's, Kafka's Java producer's) or the bytes are not a zstd frame header."""
    head = bytes(memoryview(frame)[:18])
    if len(head) < 5 or head[:4] != _ZSTD_MAGIC:
        return None
    descriptor = head[4]
    single = descriptor >> 5 & 1
    field = _ZSTD_SIZE_BYTES[descriptor >> 6] or single  # flag 0: one byte in a single segment frame, else none
    at = 5 + (1 - single) + _ZSTD_DICT_ID_BYTES[descriptor & 3]
    if not field or len(head) < at + field:
        return None
    size = int.from_bytes(head[at : at + field], "little")
    return size + 256 if field == 2 else size


def decompress_zstd_into(data: Any, out: memoryview) -> bool:
    """Decompress a zstd stream into ``out``, exactly filling it; False (``out`` then undefined) where the stream
    does not decompress to exactly that many bytes, so that the caller falls back to :func:`decompress`."""
    try:
        return bool(cramjam.zstd.decompress_into(data, out) == len(out))
    except cramjam.DecompressionError:
        return False


def _xerial_decompress(view: memoryview) -> bytes:
    if view[:8] != _XERIAL_MAGIC:
        # snappy-java reads a stream without the header as one raw block, and so does Kafka.
        return bytes(cramjam.snappy.decompress_raw(view))
    # The version and compatible-version ints are not checked: some writers store them little-endian.
    parts = []
    pos = len(_XERIAL_HEADER)
    while pos < len(view):
        (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
        pos += _BLOCK_LENGTH.size
        if length < 0 or pos + length > len(view):
            raise ValueError(f"xerial snappy block of {length} bytes runs past the stream's {len(view)} bytes")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(parts)
