"""The hand-over objects: what one stage of a pass hands to the next through the store, beside the segments.

A pass whose work spans several Spark stages hands per-record data from one to the next through the store, not
through the driver (SPEC §5: nothing per record reaches it) and not through Spark's shuffle, which copies every row
into the JVM, sorts it and spills it once the JVM's memory is spent:

- **pieces** (``_<20-digit base offset>-<unique id>.pieces.arrow``): a split partition's run of segments, read
  once, as an Arrow IPC file with a record batch per key range holding that range's fact columns (offset, key,
  delete horizon, the version where the strategy is not the offset, and each row's position among its segment's
  live rows);
- **verdicts** (``_<20-digit base offset>-<unique id>.verdicts.parquet``): what a key range (or a Spark SQL plan)
  decided, with a row group per segment listing rows by their position among its live rows (the kept ones of a
  dirty segment, or the dropped ones of a clean one), and of those the kept markers to stamp.

They live in the partition's ``segments/`` folder, where the next stage reads the segments. No manifest ever names
one: the pass deletes them when it ends, and gc removes any left behind (a task attempt whose result was not taken,
a pass that crashed) after its grace period, as it removes every other object no manifest names. Verdicts hold
positions only; pieces hold keys (never values), so erasure's accounting counts a piece left behind as holding them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from compaction.errors import CorruptSegmentError
from compaction.store.manifest import SEGMENT_DIR
from compaction.store.names import TopicPartition
from compaction.store.segment import parquet_file
from compaction.store.storage import Storage

#: A row a stage lists: its position among its segment's live rows, whether the listing names it (the segment's
#: kept rows, or its dropped ones, as the stage and its reader agree), and whether it is a kept marker to stamp.
VERDICTS_SCHEMA = pa.schema([("position", pa.int32()), ("listed", pa.bool_()), ("stamp", pa.bool_())])
VERDICTS_NAME = re.compile(r"^segments/_([0-9]{20})-([0-9A-Za-z_-]{1,64})\.verdicts\.parquet\Z")
#: A key range's rows of a run: the columns of :data:`PIECES_COLUMNS`, and ``version_valid`` and ``version`` where
#: the strategy's version is not the offset.
PIECES_NAME = re.compile(r"^segments/_([0-9]{20})-([0-9A-Za-z_-]{1,64})\.pieces\.arrow\Z")
PIECES_COLUMNS = ("offset", "key", "delete_horizon_ms", "position")
#: What gc and erasure's accounting take for a hand-over object of the store's own.
HANDOVER_NAMES = (VERDICTS_NAME, PIECES_NAME)


def verdicts_name(base_offset: int, unique_id: str) -> str:
    return f"{SEGMENT_DIR}/_{base_offset:020d}-{unique_id}.verdicts.parquet"


def pieces_name(base_offset: int, unique_id: str) -> str:
    return f"{SEGMENT_DIR}/_{base_offset:020d}-{unique_id}.pieces.arrow"


def is_pieces(schema: pa.Schema) -> bool:
    """Whether an object's columns are a pieces object's."""
    return set(PIECES_COLUMNS) <= set(schema.names) and "value" not in schema.names


def _write_groups(
    storage: Storage,
    tp: TopicPartition,
    rel: str,
    schema: pa.Schema,
    parts: Sequence[pa.Table | None],
    compression: str,
    **options: object,
) -> tuple[int | None, ...]:
    """Write ``parts`` as the row groups of one Parquet object at ``rel``; per part, its row group (None: no rows)."""
    sink = pa.BufferOutputStream()
    groups: list[int | None] = []
    with pq.ParquetWriter(sink, schema, compression=compression, **options) as writer:
        for part in parts:
            if part is None or part.num_rows == 0:
                groups.append(None)
                continue
            groups.append(sum(g is not None for g in groups))
            writer.write_table(part.cast(schema), row_group_size=part.num_rows)
    storage.write_bytes(f"{tp.prefix}/{rel}", memoryview(sink.getvalue()), flush=False)  # no manifest names it
    return tuple(groups)


def write_verdicts(
    storage: Storage,
    tp: TopicPartition,
    base_offset: int,
    parts: Sequence[pa.Table | None],
    object_id: str | None = None,
) -> tuple[str, tuple[int | None, ...]]:
    """Write one verdicts object holding ``parts`` (one per segment, :data:`VERDICTS_SCHEMA`; None or empty: no
    rows); returns its path and, per part, the row group that holds it (None for a part with no rows)."""
    rel = verdicts_name(base_offset, object_id or uuid.uuid4().hex)
    return rel, _write_groups(
        storage,
        tp,
        rel,
        VERDICTS_SCHEMA,
        parts,
        "zstd",
        use_dictionary=False,
        column_encoding={"position": "DELTA_BINARY_PACKED"},
    )


def write_pieces(
    storage: Storage, tp: TopicPartition, base_offset: int, parts: Sequence[pa.Table], object_id: str | None = None
) -> tuple[str, tuple[int | None, ...]]:
    """Write one pieces object holding a run's ``parts`` (one per key range, all of one schema); returns its path
    and, per key range, its record batch (None: no rows). An Arrow IPC file, lz4 frames: written once and read once,
    soon, it is worth no encoding beyond Arrow's own (Parquet's took a tenth of the pass's time)."""
    rel = pieces_name(base_offset, object_id or uuid.uuid4().hex)
    sink = pa.BufferOutputStream()
    batches: list[int | None] = []
    with pa.ipc.new_file(sink, parts[0].schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        for part in parts:
            if part.num_rows == 0:
                batches.append(None)
                continue
            batches.append(sum(b is not None for b in batches))
            writer.write_batch(part.combine_chunks().to_batches()[0])
    storage.write_bytes(f"{tp.prefix}/{rel}", memoryview(sink.getvalue()), flush=False)  # no manifest names it
    return rel, tuple(batches)


def read_verdicts(storage: Storage, tp: TopicPartition, rel: str, row_groups: Sequence[int]) -> list[pa.Table]:
    """The row groups ``row_groups`` of a verdicts object, in that order."""
    if not VERDICTS_NAME.match(rel):
        raise CorruptSegmentError(f"{rel!r} is not a verdicts object's name")
    where = storage.describe(f"{tp.prefix}/{rel}")
    # Read whole (memory-mapped on local disk; one request on an object store, whose round trips cost more than
    # the bytes of the row groups not needed).
    data = storage.read_buffer(f"{tp.prefix}/{rel}")
    try:
        file = parquet_file(pa.BufferReader(data))
        if not file.schema_arrow.equals(VERDICTS_SCHEMA):
            raise CorruptSegmentError(f"verdicts {where} has columns {file.schema_arrow}, expected {VERDICTS_SCHEMA}")
        return [file.read_row_group(group, use_threads=False) for group in row_groups]
    except (pa.ArrowException, OSError) as err:
        raise CorruptSegmentError(f"verdicts {where} is not a readable Parquet file: {err}") from err


def read_piece(storage: Storage, tp: TopicPartition, rel: str, batch: int) -> pa.Table:
    """One key range's record batch of a pieces object (read by range: the object holds every range's rows)."""
    if not PIECES_NAME.match(rel):
        raise CorruptSegmentError(f"{rel!r} is not a pieces object's name")
    where = storage.describe(f"{tp.prefix}/{rel}")
    source, _ = storage.open_input(f"{tp.prefix}/{rel}")
    try:
        reader = pa.ipc.open_file(source)
        if not is_pieces(reader.schema):
            raise CorruptSegmentError(
                f"pieces {where} has columns {reader.schema.names}, expected {list(PIECES_COLUMNS)}"
            )
        return pa.Table.from_batches([reader.get_batch(batch)])
    except (pa.ArrowException, OSError) as err:
        raise CorruptSegmentError(f"pieces {where} is not a readable Arrow IPC file: {err}") from err
    finally:
        source.close()


def read_all_pieces(data: pa.Buffer) -> pa.Table:
    """Every key range's rows of a pieces object's bytes (erasure's accounting reads its keys)."""
    return pa.ipc.open_file(pa.BufferReader(data)).read_all()


def delete_handed(storage: Storage, tp: TopicPartition, paths: Sequence[str]) -> None:
    """Delete a pass's hand-over objects (those it took; others wait for gc)."""
    for rel in paths:
        if any(name.match(rel) for name in HANDOVER_NAMES):
            storage.delete(f"{tp.prefix}/{rel}")
