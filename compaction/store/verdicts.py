"""The verdicts object format: what one stage of a pass hands to the next, beside the segments it speaks of.

A pass that decides a partition in one stage and writes its new objects in another hands the verdicts over through
the store, not through the driver (SPEC §5: nothing per record reaches it): a stage writes one verdicts object,
with a row group per segment it decided rows of, listing rows of that segment by their position among its live
rows (and, of those, the kept markers to stamp). The object lives in the partition's ``segments/`` folder, named
``_<20-digit base offset>-<unique id>.verdicts.parquet``, so that the next stage finds it where it reads the
segments. No manifest ever names one: the pass deletes its verdicts when it ends, and gc removes any left behind
(a task attempt whose result was not taken, a pass that crashed) after its grace period, as it removes every other
object no manifest names. A verdicts object holds positions only, never a key or a value.
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


def verdicts_name(base_offset: int, unique_id: str) -> str:
    return f"{SEGMENT_DIR}/_{base_offset:020d}-{unique_id}.verdicts.parquet"


def write_verdicts(storage: Storage, tp: TopicPartition, base_offset: int, parts: Sequence[pa.Table | None],
                   object_id: str | None = None) -> tuple[str, tuple[int | None, ...]]:
    """Write one verdicts object holding ``parts`` (one per segment, :data:`VERDICTS_SCHEMA`; None or empty: no
    rows); returns its path and, per part, the row group that holds it (None for a part with no rows)."""
    sink = pa.BufferOutputStream()
    groups: list[int | None] = []
    with pq.ParquetWriter(sink, VERDICTS_SCHEMA, compression="zstd", use_dictionary=False,
                          column_encoding={"position": "DELTA_BINARY_PACKED"}) as writer:
        for part in parts:
            if part is None or part.num_rows == 0:
                groups.append(None)
                continue
            groups.append(sum(g is not None for g in groups))
            writer.write_table(part.cast(VERDICTS_SCHEMA), row_group_size=part.num_rows)
    rel = verdicts_name(base_offset, object_id or uuid.uuid4().hex)
    storage.write_bytes(f"{tp.prefix}/{rel}", memoryview(sink.getvalue()))
    return rel, tuple(groups)


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


def delete_verdicts(storage: Storage, tp: TopicPartition, paths: Sequence[str]) -> None:
    """Delete a pass's verdicts objects (those it took; others wait for gc)."""
    for rel in paths:
        if VERDICTS_NAME.match(rel):
            storage.delete(f"{tp.prefix}/{rel}")
