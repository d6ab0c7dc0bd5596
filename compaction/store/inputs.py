"""The record files ``append`` takes: a Parquet file of segment columns or JSON Lines, read into the segment schema.

(A Kafka ``.log`` file of record batches is appended as it is: :meth:`compaction.store.Store.append_file`.)
"""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compaction.errors import InvalidRecordsError
from compaction.store.jsonl import decode_utf8, parse_lines
from compaction.store.segment import conform


def read_records(path: Path) -> pa.Table:
    """The records of a ``.parquet`` file or (any other name) a JSON Lines file, in the segment schema; a file
    that cannot be read, or a value that does not fit its column, is an InvalidRecordsError naming the file."""
    if path.suffix == ".parquet":
        try:
            table = pq.read_table(path)
        except Exception as err:  # pyarrow raises several types for a bad file
            raise InvalidRecordsError(f"input file {path} is not a readable Parquet file: {err}") from err
    else:
        # Universal newlines, as a text-mode file reads them; the bytes are decoded first so that a byte that is
        # not UTF-8 is reported with its line.
        table = parse_lines(io.StringIO(decode_utf8(path.read_bytes(), str(path)), newline=None), str(path))
    return conform(table, str(path))  # every column in the segment's types, a value that does not fit named


def fill_timestamps(table: pa.Table, now_ms: int) -> pa.Table:
    """Records without a timestamp get ``now_ms`` (the append time, as a broker's LogAppendTime gives)."""
    filled = pc.fill_null(table.column("timestamp"), now_ms)
    return table.set_column(table.column_names.index("timestamp"), "timestamp", filled)
