"""Kafka's own log format: record batch v2 (magic 2), decoded to and encoded from the segment record schema.

    decoded = decode(data, where="orders/0/00000000000000000000.log")
    decoded.records   # RECORD_SCHEMA: one row per record (the segment schema of compaction.segment)
    decoded.batches   # BATCH_SCHEMA: one row per batch, empty batches included
    encode(decoded.records, decoded.batches)   # the same batches, each with its codec; byte for byte when
                                               # uncompressed with CREATE_TIME (compressors may differ from Java's)

Vocabulary (Kafka's ``DefaultRecordBatch``):

- **batch**: a 61-byte header plus records; it covers the offsets ``[base_offset, base_offset +
  last_offset_delta]`` (both inclusive), which may have gaps once cleaned.
- **attributes**: bits 0-2 the codec (none, gzip, snappy, lz4, zstd), bit 3 LOG_APPEND_TIME, bit 4
  transactional, bit 5 control, bit 6 delete horizon set.
- **delete horizon** (KIP-534): when bit 6 is set, the base timestamp field holds the time from which the
  batch's tombstones and markers may be removed; record timestamps stay as they were.
- **empty batch**: a header with no records (61 bytes) kept to preserve a producer's sequence or the log end
  (``DefaultRecordBatch.writeEmptyHeader``).
- **control batch**: one control record, a transaction marker whose key says commit or abort.

:mod:`~compaction.kafka.partitioner` is Kafka's default partitioner for keyed records (murmur2), which says
where a producer sent a key.

This package is a leaf: it imports only the standard library, numpy, pyarrow, the CRC and codec libraries
and ``compaction.errors``. Read failures raise ``CorruptBatchError`` (naming the object and the batch's base
offset); bad input to ``encode`` raises ``InvalidRecordsError``.
"""

from compaction.kafka.decode import decode
from compaction.kafka.encode import batch_table, encode
from compaction.kafka.layout import BATCH_SCHEMA, CODECS, HEADER_BYTES, Decoded
from compaction.schema import RECORD_SCHEMA

__all__ = ["BATCH_SCHEMA", "CODECS", "HEADER_BYTES", "RECORD_SCHEMA", "Decoded", "batch_table", "decode", "encode"]
