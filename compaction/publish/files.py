"""A partition's live files as Iceberg files: each Parquet segment a data file as it is, and the records a reader
must skip in it (its deletion vector, and what lies below the log start) a v2 position delete file.

A position delete file (Iceberg spec, "Position Delete Files") is Parquet with two required columns, ``file_path``
(string, field id 2147483546) and ``pos`` (long, 2147483545): the data file's location and the 0-based row
positions deleted in it, sorted. One is written per data file, with ``file_path``'s lower and upper bounds both
that location, so engines apply it to that file alone (Polars' native reader needs exactly that).
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, StringType

from compaction.read.files import LiveFile
from compaction.store import Store, TopicPartition

FILE_PATH_ID = 2147483546
POS_ID = 2147483545
POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
    ]
)
DELETES_SUFFIX = "-deletes.parquet"


def location(store: Store, rel: str) -> str:
    """An object's location as Iceberg writes it: a full URI (``file:///...`` on local disk, ``s3://...``)."""
    name = store.storage.describe(rel).rstrip("/")
    return f"file://{name}" if store.storage.is_local else name


def data_file(store: Store, tp: TopicPartition, live: LiveFile, metadata: TableMetadata) -> DataFile:
    """The segment as a data file of partition ``tp.partition``, with the column metrics of its Parquet footer
    (matched to the table's fields by name: segments carry no field ids)."""
    rel = f"{tp.prefix}/{live.segment.path}"
    source, size = store.storage.open_input(rel)
    try:
        footer = pq.read_metadata(source)
    finally:
        source.close()
    schema = metadata.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=location(store, rel),
        file_format=FileFormat.PARQUET,
        partition=Record(tp.partition),
        file_size_in_bytes=size,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
    file.spec_id = metadata.default_spec_id
    return file


def deletes_key(live: LiveFile, log_start_offset: int) -> str:
    """What a data file's position deletes follow from: the segment, its deletion vector and (when it lies inside
    the segment) the log start. The key begins the delete file's name, so a later publish that finds a delete file
    of the same key in the table reuses it instead of reading the segment again."""
    segment = live.segment
    start = log_start_offset if segment.base_offset < log_start_offset else None
    text = f"{segment.path}|{segment.deletes.path if segment.deletes else ''}|{start}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def deleted_positions(store: Store, tp: TopicPartition, live: LiveFile, log_start_offset: int) -> np.ndarray:
    """The row positions of the segment a reader skips: offsets its deletion vector lists, and those below the log
    start. Empty when it hides nothing (then the segment is read without reading it here)."""
    segment = live.segment
    if segment.deletes is None and segment.base_offset >= log_start_offset:
        return np.empty(0, dtype=np.int64)
    # Every record's offset, in row order (a position is a row of the file), and the store's rule of live rows.
    offsets = pa.chunked_array(
        [b.column("offset") for b in store.objects.segment_rows(tp, segment, ["offset"])], pa.int64()
    )
    return np.flatnonzero(~store.objects.live_rows(tp, segment, offsets, log_start_offset)).astype(np.int64)


def position_delete_file(
    io: FileIO, folder: str, key: str, target: DataFile, positions: np.ndarray, spec_id: int
) -> DataFile:
    """Write the position delete file of ``target`` under ``folder`` (the table's data location) and describe it."""
    path = f"{folder}/{key}-{uuid.uuid4().hex}{DELETES_SUFFIX}"
    table = pa.table(
        {
            "file_path": pa.array([target.file_path] * len(positions), pa.string()),
            "pos": pa.array(positions, pa.int64()),
        },
        schema=POSITION_DELETE_SCHEMA,
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    data = sink.getvalue().to_pybytes()
    with io.new_output(path).create(overwrite=False) as stream:
        stream.write(data)
    path_bytes = to_bytes(StringType(), target.file_path)
    bounds: dict[str, Any] = {
        "lower_bounds": {FILE_PATH_ID: path_bytes, POS_ID: to_bytes(LongType(), int(positions[0]))},
        "upper_bounds": {FILE_PATH_ID: path_bytes, POS_ID: to_bytes(LongType(), int(positions[-1]))},
    }
    file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=target.partition,
        record_count=len(positions),
        file_size_in_bytes=len(data),
        value_counts={FILE_PATH_ID: len(positions), POS_ID: len(positions)},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **bounds,
    )
    file.spec_id = spec_id
    return file
