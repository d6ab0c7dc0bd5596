"""The Parquet segment format: its columns, the schema check on read, encoding and per-segment statistics."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

import crc32c
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compaction.errors import CorruptSegmentError, InvalidRecordsError, SegmentSchemaError
from compaction.schema import LONG_MAX, LONG_MIN, RECORD_SCHEMA

#: The Parquet segment's columns are the record's (one row per record, in offset order).
SEGMENT_SCHEMA = RECORD_SCHEMA
COLUMNS = tuple(SEGMENT_SCHEMA.names)
CONTROL_TYPES = ("commit", "abort")
NO_PRODUCER = -1

#: Kafka's range for each integer column: Longs, and a Short epoch. Input numbers (JSON and Python integers are
#: unbounded, Parquet columns may be wider or unsigned) are checked against it, naming the record and field.
INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "offset": (LONG_MIN, LONG_MAX),
    "timestamp": (LONG_MIN, LONG_MAX),
    "producer_id": (LONG_MIN, LONG_MAX),
    "producer_epoch": (-(2**15), 2**15 - 1),
    "delete_horizon_ms": (LONG_MIN, LONG_MAX),
}

#: Defaults for the columns an appended file may leave out.
_DEFAULTS: dict[str, Any] = {
    "timestamp": None,
    "key": None,
    "value": None,
    "headers": None,
    "producer_id": NO_PRODUCER,
    "producer_epoch": -1,
    "is_transactional": False,
    "is_control": False,
    "control_type": None,
    "delete_horizon_ms": None,
}

PARQUET_COMPRESSION = "zstd"


def check_schema(schema: pa.Schema, where: str) -> None:
    """Raise SegmentSchemaError naming ``where`` and the first column that is missing, extra or mistyped."""
    for field in SEGMENT_SCHEMA:
        index = schema.get_field_index(field.name)
        if index < 0:
            raise SegmentSchemaError(f"segment {where} has no column {field.name!r} ({field.type} expected)")
        actual = schema.field(index).type
        if actual != field.type:
            raise SegmentSchemaError(
                f"segment {where}: column {field.name!r} has type {actual}, but the segment format "
                f"requires {field.type}"
            )
    extra = [name for name in schema.names if name not in COLUMNS]
    if extra:
        raise SegmentSchemaError(f"segment {where} has unexpected column(s) {extra}; expected {list(COLUMNS)}")


def conform(table: pa.Table, where: str) -> pa.Table:
    """Return ``table`` in the segment schema: missing optional columns get their defaults, types are cast.

    Used for records coming from users (append input); stored segments are checked, never conformed.
    """
    unknown = [name for name in table.column_names if name not in COLUMNS]
    if unknown:
        raise InvalidRecordsError(f"{where}: unknown column(s) {unknown}; the segment columns are {list(COLUMNS)}")
    n = table.num_rows
    columns = []
    for field in SEGMENT_SCHEMA:
        if field.name in table.column_names:
            column = _cast(table, field, where)
        elif field.name == "offset":
            column = pa.chunked_array([pa.nulls(n, pa.int64())])
        else:
            column = pa.chunked_array([pa.array([_DEFAULTS[field.name]] * n, field.type)])
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=SEGMENT_SCHEMA)


def _cast(table: pa.Table, field: pa.Field, where: str) -> pa.ChunkedArray:
    """``table``'s column of ``field`` as ``field.type``; a value that does not fit is an error naming its row."""
    column = table.column(field.name)
    if pa.types.is_timestamp(column.type):
        # A Parquet timestamp counts its own unit; the format's timestamps are epoch milliseconds.
        column = _cast_values(table, column, pa.timestamp("ms"), field.name, where)
    return _cast_values(table, column, field.type, field.name, where)


def _cast_values(table: pa.Table, column: pa.ChunkedArray, to: pa.DataType, name: str, where: str) -> pa.ChunkedArray:
    try:
        return column.cast(to)
    except pa.ArrowNotImplementedError as err:
        raise InvalidRecordsError(
            f"{where}: column {name!r} has type {column.type}, which cannot be read as {to}"
        ) from err
    except pa.ArrowInvalid:
        pass
    # Some value does not fit: bisect for the first row that fails (log2(rows) casts), to name that record.
    low, high = 0, len(column)
    while high - low > 1:
        middle = (low + high) // 2
        try:
            column.slice(low, middle - low).cast(to)
            low = middle
        except pa.ArrowInvalid:
            high = middle
    value = column[low].as_py() if not pa.types.is_timestamp(column.type) else column.cast(pa.int64())[low].as_py()
    offset = table.column("offset")[low].as_py() if "offset" in table.column_names else None
    record = f"{where} row {low}" + (f" (offset {offset})" if isinstance(offset, int) else "")
    span = INTEGER_RANGES.get(name)
    number = isinstance(value, (int, float, Decimal)) and not isinstance(value, bool) and value == value  # not NaN
    if span and number and not span[0] <= value <= span[1]:
        raise InvalidRecordsError(f"{record}: {name} {value} is outside Kafka's range for it [{span[0]}, {span[1]}]")
    raise InvalidRecordsError(f"{record}: {name} {value!r} (type {column.type}) cannot be read as {to}")


def first_set(column: pa.Array | pa.ChunkedArray) -> int | None:
    """The row of the first non-null value of ``column`` (None: every value is null)."""
    return None if column.null_count == len(column) else int(pc.index(pc.is_valid(column), True).as_py())


def check_records(table: pa.Table, where: str) -> None:
    """Check records given to append against the format's per-row rules: offsets present, strictly increasing
    and inside Kafka's range, markers well formed, no field that only the cleaner sets."""
    offsets = table.column("offset")
    if offsets.null_count:
        raise InvalidRecordsError(f"{where}: {offsets.null_count} record(s) have no offset")
    if table.num_rows > 1:
        values = offsets.combine_chunks()
        increasing = pc.all(pc.greater(values[1:], values[:-1])).as_py()
        if not increasing:
            raise InvalidRecordsError(f"{where}: offsets are not strictly increasing")
    first, last = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
    if first < 0:
        raise InvalidRecordsError(f"{where}: offset {first} is negative: offsets start at 0")
    if last >= LONG_MAX:
        # The log end offset (the next offset) is a Long too, so the last offset must stay below Long.MAX.
        raise InvalidRecordsError(
            f"{where}: offset {last} leaves no log end offset below Kafka's Long.MAX "
            f"({LONG_MAX}): the last offset must be at most {LONG_MAX - 1}"
        )
    is_control = pc.fill_null(table.column("is_control"), False)
    control_type = table.column("control_type")
    bad_marker = pc.and_(is_control, pc.invert(pc.fill_null(pc.is_in(control_type, pa.array(CONTROL_TYPES)), False)))
    if pc.any(bad_marker).as_py():
        raise InvalidRecordsError(f"{where}: a control record has a control_type other than {CONTROL_TYPES}")
    typed_data = pc.and_(pc.invert(is_control), pc.is_valid(control_type))
    if pc.any(typed_data).as_py():
        raise InvalidRecordsError(f"{where}: a data record (is_control false) carries a control_type")
    # The cleaner stamps a delete horizon on the first pass that keeps a tombstone or marker; a preset one
    # would let an appended delete vanish at the first pass, before delete.retention.ms has run.
    horizons = table.column("delete_horizon_ms")
    row = first_set(horizons)
    if row is not None:
        raise InvalidRecordsError(
            f"{where}: the record at offset {offsets[row].as_py()} carries delete_horizon_ms "
            f"{horizons[row].as_py()}, which only the cleaner sets; appended records must leave it null"
        )


#: How segments are written. Keys, values and offsets are nearly unique: dictionary pages cost time to write
#: and to read (2x). Page CRCs let a read of a few columns check the pages it reads (the object's checksum
#: covers it all).
PARQUET_WRITE_OPTIONS: dict[str, Any] = {
    "write_statistics": ["offset", "timestamp"],
    "use_dictionary": ["control_type"],
    "write_page_checksum": True,
}


def encode_parquet(table: pa.Table, compression: str = PARQUET_COMPRESSION) -> bytes:
    """Serialise records (already in the segment schema) as one Parquet object."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=compression, **PARQUET_WRITE_OPTIONS)
    return cast(bytes, sink.getvalue().to_pybytes())


#: Small pieces are held until they make this many bytes (in memory) or the object ends, then written as one row
#: group: a row group has a fixed cost to write and to read, and a small partition's rewrite comes as a small piece
#: from each of its sources. A larger piece is written as it comes.
ROW_GROUP_BYTES = 8 << 20


def encode_parquet_pieces(
    pieces: Iterable[pa.Table], compression: str = PARQUET_COMPRESSION
) -> tuple[pa.Buffer, pa.Table] | None:
    """Serialise records that come in pieces (each in the segment schema, in offset order) as one Parquet
    object, encoded as they come (small pieces together, in row groups of about :data:`ROW_GROUP_BYTES`): only the
    encoded bytes and one row group's records are held. Returns the object and :func:`summary_columns` of its
    records; None when no piece has a record."""
    sink = pa.BufferOutputStream()
    writer = None
    held: list[pa.Table] = []
    held_bytes = 0
    summaries: list[pa.Table] = []

    def flush() -> None:
        nonlocal held_bytes
        group = held[0] if len(held) == 1 else pa.concat_tables(held)
        held.clear()
        held_bytes = 0
        assert writer is not None
        writer.write_table(group)
        summaries.append(summary_columns(group))

    for piece in pieces:
        if not piece.num_rows:
            continue
        if writer is None:
            writer = pq.ParquetWriter(sink, piece.schema, compression=compression, **PARQUET_WRITE_OPTIONS)
        held.append(piece)
        held_bytes += piece.nbytes
        if held_bytes >= ROW_GROUP_BYTES:
            flush()
    if writer is None:
        return None
    if held:
        flush()
    writer.close()
    return sink.getvalue(), pa.concat_tables(summaries)


def summary_columns(table: pa.Table) -> pa.Table:
    """Records without their key and value bytes, which become booleans that are null where the key or value
    is: all :func:`segment_stats` and the producer summaries read, at a few bytes a record."""
    return pa.table(
        {
            name: (pc.if_else(pc.is_valid(column), True, None) if name in ("key", "value") else column)
            for name, column in zip(table.column_names, table.columns, strict=True)
        }
    )


def parquet_file(source: Any, checked: bool = True) -> pq.ParquetFile:
    """A Parquet object opened for reading, each page's CRC checked (unless not ``checked``).

    A Python file object (an object store's, through fsspec) is read on the calling thread only: Arrow's
    pre-buffering reads it from Arrow's IO threads, which then call into Python, and such a call still under
    way as the interpreter exits aborts it ("terminate called without an active exception", exit code -6).
    Arrow's own files (memory maps, buffers) keep it."""
    return pq.ParquetFile(source, page_checksum_verification=checked, pre_buffer=isinstance(source, pa.NativeFile))


def decode_parquet(
    source: Any, where: str, columns: Sequence[str] | None = None, *, pages_checked: bool = True
) -> pa.Table:
    """Read a Parquet segment (bytes or a file object), check its schema, and return the asked columns.

    Bytes already held to the object's checksum need no page CRCs checked again (``pages_checked`` False): on a
    segment of 100-byte values that check is 40% of the decode (137 ms of 318 for 42 MB, one thread)."""
    if isinstance(source, (bytes, bytearray, memoryview, pa.Buffer)):
        source = pa.BufferReader(source)
    try:
        file = parquet_file(source, pages_checked)
        check_schema(file.schema_arrow, where)
        # One thread: Spark runs a task per core, and Arrow's pool threads can abort the interpreter at
        # exit (apache/arrow#34314), turning a finished command into exit code -6.
        table = file.read(columns=list(columns) if columns is not None else None, use_threads=False)
    except SegmentSchemaError:
        raise
    except (pa.ArrowException, OSError, ValueError) as err:
        raise CorruptSegmentError(f"segment {where} is not a readable Parquet file: {err}") from err
    if columns is None and not table.schema.equals(SEGMENT_SCHEMA):
        table = table.cast(SEGMENT_SCHEMA)
    return table


#: Rows per batch of a streamed read: about 10 MB of 100-byte values, so a stream stays well under the cache sizes.
BATCH_ROWS = 65_536
#: Picks the row groups of a Parquet segment worth reading from its footer (None: all of them).
RowGroups = Callable[[pq.FileMetaData], "list[int] | None"]


def parquet_batches(
    source: Any, where: str, columns: Sequence[str], row_groups: RowGroups | None, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Stream the asked columns of a Parquet segment (a file object) in batches of ``batch_rows``, checking its
    schema and each page's CRC; a damaged object is a CorruptSegmentError naming ``where``."""
    try:
        file = parquet_file(source)
    except (pa.ArrowException, OSError) as err:
        raise CorruptSegmentError(f"segment {where} is not a readable Parquet file: {err}") from err
    check_schema(file.schema_arrow, where)
    groups = row_groups(file.metadata) if row_groups is not None else None
    if groups is not None and not groups:
        return
    # One thread: Arrow's pool threads can abort the interpreter at exit (apache/arrow#34314), and a Spark
    # executor already runs a task per core.
    batches = file.iter_batches(batch_size=batch_rows, row_groups=groups, columns=list(columns), use_threads=False)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except pa.ArrowException as err:
            raise CorruptSegmentError(f"segment {where} cannot be read: {err}") from err
        except OSError as err:
            if type(err) is not OSError:
                raise  # the storage client's own error (a timeout, a denial), not the object's bytes
            raise CorruptSegmentError(f"segment {where} cannot be read: {err}") from err  # a page CRC
        yield batch


def checksum(data: Any) -> str:
    """The checksum recorded in manifests for an object's bytes (any buffer): CRC-32C, which hardware
    computes at memory speed, so every read of a whole object can afford to check it."""
    return f"crc32c:{crc32c.crc32c(data):08x}"


def checksum_matches(data: Any, recorded: str) -> bool:
    """Whether ``data`` has the checksum a manifest recorded (``crc32c:`` or, from older writers, ``sha256:``)."""
    algorithm, _, _ = recorded.partition(":")
    if algorithm == "sha256":
        return "sha256:" + hashlib.sha256(data).hexdigest() == recorded
    return checksum(data) == recorded


def check_size(kind: str, where: str, actual: int, recorded: int) -> None:
    """Refuse an object whose size is not the one its manifest recorded (truncated, or rewritten since)."""
    if actual != recorded:
        raise CorruptSegmentError(f"{kind} {where} is {actual} bytes, but the manifest records {recorded}")


def check_committed(data: Any, kind: str, where: str, size: int, recorded: str) -> None:
    """Refuse an object's bytes unless they have the size and checksum its manifest recorded: bytes that
    changed since the commit are never decoded, rewritten or given a fresh checksum."""
    check_size(kind, where, len(data), size)
    if not checksum_matches(data, recorded):
        raise CorruptSegmentError(
            f"{kind} {where} does not match the checksum the manifest records "
            f"({recorded}): its bytes changed after it was committed"
        )


@dataclass(frozen=True)
class SegmentStats:
    """What a manifest records about a segment's records."""

    record_count: int
    first_timestamp: int | None
    max_timestamp: int | None
    tombstone_count: int
    keyless_count: int
    transactional_count: int
    control_count: int
    min_delete_horizon_ms: int | None


def _scalar(value: Any) -> Any:
    return value.as_py() if value is not None else None


def timestamp_stats(timestamps: pa.Array | pa.ChunkedArray) -> tuple[int | None, int | None]:
    """``(first, max)`` of records' timestamps: the first record's, and the largest; None where a record has
    no timestamp (null or negative) or none has one."""
    if not len(timestamps):
        return None, None
    first = _scalar(timestamps[0])
    valid = pc.filter(timestamps, pc.fill_null(pc.greater_equal(timestamps, 0), False))
    return (first if first is not None and first >= 0 else None), (pc.max(valid).as_py() if len(valid) else None)


def segment_stats(table: pa.Table) -> SegmentStats:
    """Compute a segment's statistics from its records (in the segment schema)."""
    n = table.num_rows
    if n == 0:
        return SegmentStats(0, None, None, 0, 0, 0, 0, None)
    first, max_ts = timestamp_stats(table.column("timestamp"))
    is_control = pc.fill_null(table.column("is_control"), False)
    data = pc.invert(is_control)
    keyed = pc.is_valid(table.column("key"))
    tombstones = pc.and_(pc.and_(data, keyed), pc.is_null(table.column("value")))
    keyless = pc.and_(data, pc.invert(keyed))
    transactional = pc.and_(data, pc.fill_null(table.column("is_transactional"), False))
    horizon = pc.min(table.column("delete_horizon_ms")).as_py()
    return SegmentStats(
        record_count=n,
        first_timestamp=first,
        max_timestamp=max_ts,
        tombstone_count=int(pc.sum(tombstones).as_py() or 0),
        keyless_count=int(pc.sum(keyless).as_py() or 0),
        transactional_count=int(pc.sum(transactional).as_py() or 0),
        control_count=int(pc.sum(is_control).as_py() or 0),
        min_delete_horizon_ms=horizon,
    )


def _to_bytes(value: Any, where: str, name: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool):
        raise InvalidRecordsError(f"{where}: {name} must be bytes, a string or an integer, not a boolean")
    if isinstance(value, int):
        if not LONG_MIN <= value <= LONG_MAX:
            raise InvalidRecordsError(
                f"{where}: {name} {value} is outside Kafka's Long range [{LONG_MIN}, "
                f"{LONG_MAX}] (an integer header value is an 8-byte long)"
            )
        return value.to_bytes(8, "big", signed=True)
    raise InvalidRecordsError(f"{where}: {name} must be bytes, a string or an integer, not {type(value).__name__}")


def records(rows: Iterable[Mapping[str, Any]], where: str = "records") -> pa.Table:
    """Build a table in the segment schema from dicts; str becomes UTF-8, an int header value a big-endian long.

    The small builder tests and users' scripts use; missing columns take the format's defaults.
    """
    data: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for index, row in enumerate(rows):
        record = f"{where} record {index}"
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise InvalidRecordsError(f"{record}: unknown field(s) {sorted(unknown)}")
        for name in COLUMNS:
            value = row.get(name, _DEFAULTS.get(name))
            if name in ("key", "value"):
                value = _to_bytes(value, record, name)
            elif name == "headers" and value is not None:
                pairs = value.items() if isinstance(value, Mapping) else value
                value = [
                    {"key": k, "value": _to_bytes(v, record, f"header {k!r}")}
                    for k, v in (p if isinstance(p, tuple) else (p["key"], p["value"]) for p in pairs)
                ]
            elif name in INTEGER_RANGES and isinstance(value, int) and not isinstance(value, bool):
                low, high = INTEGER_RANGES[name]
                if not low <= value <= high:
                    raise InvalidRecordsError(
                        f"{record}: {name} {value} is outside Kafka's range for it [{low}, {high}]"
                    )
            data[name].append(value)
    try:
        return pa.Table.from_pydict(data, schema=SEGMENT_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as err:
        raise InvalidRecordsError(f"{where}: a field has the wrong type: {err}") from err
