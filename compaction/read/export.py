"""Writing a scan out: JSON Lines, CSV or Parquet streams, and snapshots (a self-contained Parquet dataset).

Every writer takes the scan's batches one at a time, so memory holds a batch whatever the topic's size.
A snapshot is the hand-off to engines that do not run this project: one folder per partition
(``partition=<n>/``, Hive's layout) of plain Parquet files holding exactly the records the scan reads, and
a ``_snapshot.json`` written last (named so that readers skipping ``_`` files skip it) that says which
versions they came from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import IO, Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from compaction.errors import InvalidArgumentError
from compaction.read.scan import Scan
from compaction.store.jsonl import to_lines
from compaction.store.storage import Storage

FORMATS = ("jsonl", "csv", "parquet")
SNAPSHOT_MARKER = "_snapshot.json"
#: Rows per file of a snapshot: large enough for engines to read efficiently, small enough to split work.
SNAPSHOT_FILE_ROWS = 5_000_000
PARQUET_COMPRESSION = "zstd"


def write_jsonl(batches: Iterable[pa.RecordBatch], stream: IO[str]) -> int:
    """Records as JSON Lines (the form ``append`` reads back); flushed after each batch, so a reader on
    the other end of a pipe sees them as they come."""
    count = 0
    for batch in batches:
        stream.write("".join(line + "\n" for line in to_lines(batch)))
        stream.flush()
        count += batch.num_rows
    return count


def _text(column: pa.Array) -> pa.Array:
    try:
        return column.cast(pa.string())
    except pa.ArrowInvalid:  # bytes that are not UTF-8: shown with replacement characters
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in column.to_pylist()], pa.string())


def _headers_json(column: pa.Array) -> pa.Array:
    def one(headers: list[dict[str, Any]] | None) -> str | None:
        if headers is None:
            return None
        return json.dumps(
            [
                {"key": h["key"], "value": None if h["value"] is None else h["value"].decode("utf-8", "replace")}
                for h in headers
            ],
            separators=(",", ":"),
        )

    return pa.array([one(v) for v in column.to_pylist()], pa.string())


def csv_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch as CSV can hold it: keys and values as UTF-8 text, headers as a JSON list."""
    columns = []
    for column in batch.columns:
        if pa.types.is_binary(column.type):
            column = _text(column)
        elif pa.types.is_list(column.type):
            column = _headers_json(column)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def write_csv(batches: Iterable[pa.RecordBatch], schema: pa.Schema, sink: Any) -> int:
    """Records as CSV with a header line. Keys and values are text: bytes that are not UTF-8 become U+FFFD
    (use JSON Lines or Parquet for exact bytes); tombstones have an empty value."""
    empty = csv_batch(pa.RecordBatch.from_pylist([], schema=schema))
    count = 0
    with pacsv.CSVWriter(sink, empty.schema) as writer:
        for batch in batches:
            writer.write_batch(csv_batch(batch))
            count += batch.num_rows
    return count


def write_parquet(batches: Iterable[pa.RecordBatch], schema: pa.Schema, sink: Any) -> int:
    count = 0
    with pq.ParquetWriter(sink, schema, compression=PARQUET_COMPRESSION) as writer:
        for batch in batches:
            writer.write_batch(batch)
            count += batch.num_rows
    return count


@dataclass(frozen=True)
class SnapshotResult:
    """What a snapshot wrote: per partition its version, records and files (relative to ``dest``)."""

    dest: str
    topic: str
    latest: bool
    partitions: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(p["records"] for p in self.partitions.values())

    def to_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result["partitions"] = {str(k): v for k, v in self.partitions.items()}
        return result


def snapshot(
    scan: Scan,
    dest: str,
    storage_options: Mapping[str, Any] | None = None,
    *,
    file_rows: int = SNAPSHOT_FILE_ROWS,
    written_ms: int | None = None,
) -> SnapshotResult:
    """Write the scan's records under ``dest`` (a new or empty folder, any fsspec URL) as a Hive-partitioned
    Parquet dataset: ``partition=<n>/part-<i>.parquet``, every partition with at least one file (so an
    empty one still carries the schema), then ``_snapshot.json``."""
    target = Storage.from_url(dest, storage_options)
    if any(not entry.name.startswith(".") for entry in target.list_dir("", detail=False)):
        raise InvalidArgumentError(
            f"snapshot destination {target.describe('')} is not empty: a snapshot is written into a new or empty folder"
        )
    plain = scan.select(list(scan.columns))  # the partition lives in the folder name
    result = SnapshotResult(target.describe(""), scan.topic, scan.latest)
    for task in plain.tasks():
        part = task.part.tp.partition
        files: list[str] = []
        records = 0
        writer: pq.ParquetWriter | None = None
        sink: Any = None
        rows_in_file = 0
        try:
            for batch in task.batches():
                if writer is None or rows_in_file >= file_rows:
                    if writer is not None:
                        writer.close()
                        sink.close()
                    files.append(f"partition={part}/part-{len(files):05d}.parquet")
                    sink = target.open_output(files[-1])
                    writer = pq.ParquetWriter(sink, plain.schema, compression=PARQUET_COMPRESSION)
                    rows_in_file = 0
                writer.write_batch(batch)
                rows_in_file += batch.num_rows
                records += batch.num_rows
            if writer is None:
                files.append(f"partition={part}/part-00000.parquet")
                sink = target.open_output(files[-1])
                writer = pq.ParquetWriter(sink, plain.schema, compression=PARQUET_COMPRESSION)
        finally:
            if writer is not None:
                writer.close()
                sink.close()
        result.partitions[part] = {
            "version": task.part.version,
            "log_start_offset": task.part.log_start_offset,
            "log_end_offset": task.part.log_end_offset,
            "records": records,
            "files": files,
        }
    marker = {
        **result.to_dict(),
        "store": scan.store.url,
        "columns": list(plain.columns),
        "strategy": scan.strategy.value if scan.latest else None,
        "written_ms": written_ms,
    }
    target.write_bytes(SNAPSHOT_MARKER, json.dumps(marker, indent=1).encode())
    return result
