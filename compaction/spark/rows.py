"""Records as Spark's Kafka source lays them out, and back: the columns a read returns and a write takes.

A read returns ``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``, ``timestampType`` (and
``headers`` with ``includeHeaders``), as the Kafka source does; ``includeStoreColumns`` adds what the store keeps
besides (producer, transaction and horizon columns). A record without a timestamp (the store's null, Kafka's -1)
reads as a null ``timestamp``. A write takes the Kafka sink's columns (``topic``, ``partition``, ``key``,
``value``, ``headers``) and the source's ``offset`` and ``timestamp``, so a frame read from Kafka or from the store
is written as it is.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.errors import InvalidArgumentError
from compaction.schema import HEADER_TYPE, RECORD_SCHEMA

#: The Kafka source's columns, in its order (``timestampType``: 0 CreateTime, as every record the store keeps).
KAFKA_FIELDS = (
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
)
HEADERS_FIELD = pa.field("headers", HEADER_TYPE)
#: What the store keeps of a record besides the Kafka source's columns (with ``includeStoreColumns``).
STORE_COLUMNS = ("producer_id", "producer_epoch", "is_transactional", "is_control", "control_type", "delete_horizon_ms")
CREATE_TIME = 0


def timestamp_type() -> pa.DataType:
    """The Arrow type of a read's ``timestamp`` (Spark's TimestampType): Spark takes it in µs at UTC; Sail, which runs
    a data source in its own server process, takes it without a zone and refuses a zoned one."""
    return pa.timestamp("us") if "pysail" in sys.modules else pa.timestamp("us", tz="UTC")


def read_schema(include_headers: bool, include_store_columns: bool) -> pa.Schema:
    """The columns a read returns."""
    fields = [
        *KAFKA_FIELDS[:5],
        pa.field("timestamp", timestamp_type()),
        KAFKA_FIELDS[6],
        *([HEADERS_FIELD] if include_headers else []),
        *([RECORD_SCHEMA.field(c) for c in STORE_COLUMNS] if include_store_columns else []),
    ]
    return pa.schema(fields)


#: Each column's type in Spark's DDL, for the schema a read declares.
_DDL = {
    "key": "binary",
    "value": "binary",
    "topic": "string",
    "partition": "int",
    "offset": "bigint",
    "timestamp": "timestamp",
    "timestampType": "int",
    "headers": "array<struct<key:string,value:binary>>",
    "producer_id": "bigint",
    "producer_epoch": "smallint",
    "is_transactional": "boolean",
    "is_control": "boolean",
    "control_type": "string",
    "delete_horizon_ms": "bigint",
}


def read_ddl(schema: pa.Schema) -> str:
    """``schema`` as Spark's DDL (what every engine parses the same way)."""
    return ", ".join(f"`{name}` {_DDL[name]}" for name in schema.names)


def record_columns(schema: pa.Schema) -> list[str]:
    """The segment columns a read of ``schema`` needs."""
    return ["offset", "timestamp", "key", "value", *[n for n in schema.names if n in ("headers", *STORE_COLUMNS)]]


def _constant(value: object, type_: pa.DataType, rows: int) -> pa.Array:
    return pa.array([value], type_).take(pa.array(np.zeros(rows, dtype=np.int32)))


def timestamps_of(ms: pa.Array | pa.ChunkedArray, type_: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """Store timestamps (ms) as Spark's: a negative one (Kafka's -1, no timestamp) is null."""
    valid = pc.greater_equal(ms, 0)
    micros = pc.multiply(pc.if_else(valid, ms, pa.scalar(None, pa.int64())), 1000)
    return micros.cast(type_)


def to_kafka(batch: pa.RecordBatch, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """A batch of segment columns (:func:`record_columns`) as ``schema``'s Kafka-shaped rows of ``topic-partition``."""
    rows = batch.num_rows
    columns = {
        "key": batch.column("key"),
        "value": batch.column("value"),
        "topic": _constant(topic, pa.string(), rows),
        "partition": _constant(partition, pa.int32(), rows),
        "offset": batch.column("offset"),
        "timestamp": timestamps_of(batch.column("timestamp"), schema.field("timestamp").type),
        "timestampType": _constant(CREATE_TIME, pa.int32(), rows),
    }
    arrays = [columns[name] if name in columns else batch.column(name) for name in schema.names]
    return pa.RecordBatch.from_arrays(
        [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, schema, strict=True)], schema=schema
    )


# Writing -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """A column a write takes: the Spark types accepted (by name) and whether it must be there."""

    name: str
    types: tuple[str, ...]
    required: bool = False


#: The columns a write takes; ``timestampType`` is accepted (a frame read from Kafka has it) and not kept.
WRITE_COLUMNS = (
    Column("topic", ("string",)),
    Column("partition", ("int", "smallint", "tinyint", "bigint")),
    Column("key", ("binary", "string")),
    Column("value", ("binary", "string"), required=True),
    Column("headers", ("array<struct<key:string,value:binary>>",)),
    Column("offset", ("bigint", "int")),
    Column("timestamp", ("timestamp", "timestamp_ntz")),
    Column("timestampType", ("int",)),
    Column("producer_id", ("bigint",)),
    Column("producer_epoch", ("smallint",)),
    Column("is_transactional", ("boolean",)),
    Column("is_control", ("boolean",)),
    Column("control_type", ("string",)),
)


def check_write_schema(fields: Sequence[tuple[str, str]], topic_option: bool) -> None:
    """Refuse a frame a write cannot take, naming the column: ``fields`` are its ``(name, simpleString type)``."""
    accepted = {c.name: c for c in WRITE_COLUMNS}
    names = [name for name, _ in fields]
    for name, type_ in fields:
        column = accepted.get(name)
        if column is None:
            raise InvalidArgumentError(
                f"column {name!r} is not one a write to format compaction takes: the columns are "
                f"{', '.join(accepted)} (value required; topic unless the topic option is set)"
            )
        if type_.replace(" ", "").lower() not in column.types:
            raise InvalidArgumentError(f"column {name} is {type_}: a write takes {' or '.join(column.types)}")
    missing = [c.name for c in WRITE_COLUMNS if c.required and c.name not in names]
    if "topic" not in names and not topic_option:
        missing.insert(0, "topic")
    if missing:
        raise InvalidArgumentError(
            f"a write to format compaction needs the column(s) {', '.join(missing)}"
            + (" (or the topic option)" if "topic" in missing else "")
        )
