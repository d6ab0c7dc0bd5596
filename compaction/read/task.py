"""A unit of reading that runs the same in this process and in a Spark task."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pyarrow as pa

from compaction.read.files import PartitionFiles
from compaction.read.filters import RecordFilter
from compaction.read.latest import winner_offsets
from compaction.read.stream import partition_batches
from compaction.store import Store
from compaction.store.segment import BATCH_ROWS


@dataclass(frozen=True)
class ReadTask:
    """A pinned partition (or some of its live files), what to read of it and how.

    It pickles (the store re-opens its filesystem where it lands), so a Spark task runs exactly the code a
    local read runs. With ``latest`` it reads the whole partition and keeps each key's winner.
    """

    store: Store
    part: PartitionFiles
    columns: tuple[str, ...]
    record_filter: RecordFilter = field(default_factory=RecordFilter)
    with_partition: bool = False
    latest: bool = False
    strategy: str = "offset"
    strategy_header: str = ""
    batch_rows: int = BATCH_ROWS

    def split(self) -> list[ReadTask]:
        """One task per live file that may match (a plain read's unit of parallelism); a latest read, which
        compares a key's records across files, stays whole."""
        if self.latest:
            return [self]
        return [
            replace(self, part=replace(self.part, files=(f,)))
            for f in self.part.files
            if self.record_filter.may_match(f.segment)
        ]

    def batches(self) -> Iterator[pa.RecordBatch]:
        if not self.latest:
            yield from partition_batches(
                self.store,
                self.part,
                columns=self.columns,
                record_filter=self.record_filter,
                with_partition=self.with_partition,
                batch_rows=self.batch_rows,
            )
            return
        winners = winner_offsets(self.store, self.part, self.strategy, self.strategy_header, self.record_filter)
        yield from partition_batches(
            self.store,
            self.part,
            columns=self.columns,
            record_filter=RecordFilter(),
            with_partition=self.with_partition,
            only=winners,
            skip_null_values=True,
            batch_rows=self.batch_rows,
        )
