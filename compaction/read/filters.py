"""The record filter a read pushes down: keys, an offset range and a timestamp range.

It is applied at three depths, each skipping what the next would otherwise read: whole segments by their
manifest figures, row groups by the Parquet statistics segments are written with (``offset`` and
``timestamp``), and rows inside the batches that remain.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compaction.errors import InvalidArgumentError
from compaction.store import SegmentMeta


def as_key(key: bytes | str) -> bytes:
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, bytes):
        return key
    raise InvalidArgumentError(f"key {key!r} is neither bytes nor a string")


@dataclass(frozen=True)
class RecordFilter:
    """Which records a read keeps; every bound given must hold.

    ``keys``: records with one of these keys (keyless records never match). ``start_offset`` /
    ``end_offset``: offsets in ``[start_offset, end_offset)``. ``since_ms`` / ``until_ms``: timestamps in
    ``[since_ms, until_ms)``; a record without a timestamp (null or negative) never matches a time bound.
    """

    keys: tuple[bytes, ...] | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    @classmethod
    def of(
        cls,
        keys: Iterable[bytes | str] | None = None,
        offsets: tuple[int | None, int | None] | None = None,
        timestamps: tuple[int | None, int | None] | None = None,
    ) -> RecordFilter:
        start, end = offsets or (None, None)
        since, until = timestamps or (None, None)
        return cls(None if keys is None else tuple(dict.fromkeys(as_key(k) for k in keys)), start, end, since, until)

    @property
    def timed(self) -> bool:
        return self.since_ms is not None or self.until_ms is not None

    @property
    def empty(self) -> bool:
        """True when it keeps every record."""
        return self.keys is None and self.start_offset is None and self.end_offset is None and not self.timed

    @property
    def columns(self) -> list[str]:
        """The record columns the row test reads."""
        names = []
        if self.start_offset is not None or self.end_offset is not None:
            names.append("offset")
        if self.keys is not None:
            names.append("key")
        if self.timed:
            names.append("timestamp")
        return names

    def may_match(self, segment: SegmentMeta) -> bool:
        """False when no record of ``segment`` can match (its offset range, its largest timestamp)."""
        if self.keys is not None and not self.keys:
            return False
        if self.start_offset is not None and segment.next_offset <= self.start_offset:
            return False
        if self.end_offset is not None and segment.base_offset >= self.end_offset:
            return False
        if self.timed:
            since = max(self.since_ms or 0, 0)
            # max_timestamp covers every stored record, deleted ones too: still an upper bound.
            if segment.max_timestamp is None or segment.max_timestamp < since:
                return False
        return True

    def row_groups(self, metadata: pq.FileMetaData) -> list[int] | None:
        """The row groups whose statistics allow a match (None: all of them)."""
        if self.start_offset is None and self.end_offset is None and not self.timed:
            return None
        index = (
            {metadata.row_group(0).column(j).path_in_schema: j for j in range(metadata.num_columns)}
            if metadata.num_row_groups
            else {}
        )
        since = None if not self.timed else max(self.since_ms or 0, 0)
        bounds = {"offset": (self.start_offset, self.end_offset), "timestamp": (since, self.until_ms)}
        kept = []
        for i in range(metadata.num_row_groups):
            group = metadata.row_group(i)
            possible = True
            for name, (low, high) in bounds.items():
                if name not in index or (low is None and high is None):
                    continue
                stats = group.column(index[name]).statistics
                if stats is None or not stats.has_min_max:
                    if name == "timestamp" and stats is not None and stats.null_count == group.num_rows:
                        possible = False  # only records without a timestamp
                    continue
                if (low is not None and stats.max < low) or (high is not None and stats.min >= high):
                    possible = False
            if possible:
                kept.append(i)
        return kept

    def mask(self, batch: pa.RecordBatch | pa.Table) -> pa.Array | pa.ChunkedArray | None:
        """Which rows of ``batch`` match (None: all of them)."""
        tests = []
        if self.keys is not None:
            tests.append(pc.is_in(batch.column("key"), value_set=pa.array(self.keys, pa.binary())))
        if self.start_offset is not None:
            tests.append(pc.greater_equal(batch.column("offset"), self.start_offset))
        if self.end_offset is not None:
            tests.append(pc.less(batch.column("offset"), self.end_offset))
        if self.timed:
            stamps = batch.column("timestamp")
            tests.append(pc.greater_equal(stamps, max(self.since_ms or 0, 0)))
            if self.until_ms is not None:
                tests.append(pc.less(stamps, self.until_ms))
        if not tests:
            return None
        result = tests[0]
        for test in tests[1:]:
            result = pc.and_kleene(result, test)
        return pc.fill_null(result, False)
