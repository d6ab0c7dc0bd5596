"""Records written as a Parquet segment from pieces: small pieces share a row group, a large one has its own."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compaction.store import segment
from compaction.store.segment import encode_parquet_pieces, records
from tests.helpers.builders import rec


def pieces(*sizes: int) -> list[pa.Table]:
    start = 0
    out = []
    for size in sizes:
        out.append(records([rec(f"k{i}", "v" * 20, i) for i in range(start, start + size)]))
        start += size
    return out


def test_small_pieces_make_one_row_group_and_keep_every_record_in_order() -> None:
    parts = pieces(3, 0, 5, 2)
    encoded = encode_parquet_pieces(parts)
    assert encoded is not None
    data, summary = encoded
    file = pq.ParquetFile(pa.BufferReader(data))
    assert file.metadata.num_row_groups == 1
    assert file.read().to_pylist() == pa.concat_tables(parts).to_pylist()
    assert summary.column("offset").to_pylist() == list(range(10))


def test_pieces_past_the_row_group_bytes_are_written_as_they_come(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = pieces(4, 4, 1, 4)
    monkeypatch.setattr(segment, "ROW_GROUP_BYTES", parts[0].nbytes + 1)
    encoded = encode_parquet_pieces(parts)
    assert encoded is not None
    file = pq.ParquetFile(pa.BufferReader(encoded[0]))
    assert [file.metadata.row_group(g).num_rows for g in range(file.metadata.num_row_groups)] == [8, 5]
    assert file.read().column("offset").to_pylist() == list(range(13))


def test_no_record_makes_no_object() -> None:
    assert encode_parquet_pieces(pieces(0, 0)) is None
