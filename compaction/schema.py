"""The record, as every segment format holds it (SPEC §2), and Kafka's numeric ranges.

The bottom of the package with :mod:`compaction.errors`: the Parquet format (:mod:`compaction.store.segment`)
stores these columns as they are, and the Kafka codec (:mod:`compaction.kafka`) decodes record batches into
them and encodes them back.
"""

from __future__ import annotations

import pyarrow as pa

#: Kafka's Long range: offsets, timestamps and producer ids are Longs; sums of times saturate at LONG_MAX.
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

#: One row per record. Every column is nullable in Arrow terms; the rules on nulls (``offset`` never null,
#: ``value`` null only for tombstones) are checked on the data.
RECORD_SCHEMA = pa.schema(
    [
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADER_TYPE),
        ("producer_id", pa.int64()),
        ("producer_epoch", pa.int16()),
        ("is_transactional", pa.bool_()),
        ("is_control", pa.bool_()),
        ("control_type", pa.string()),
        ("delete_horizon_ms", pa.int64()),
    ]
)
