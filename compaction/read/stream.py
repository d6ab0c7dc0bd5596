"""The reading core: stream a pinned partition's live records as Arrow record batches.

Each live segment is read through the store's one reader of live rows (``store.objects.live_batches``: the
object's size and page CRCs checked, its deletion vector and the log start applied) batch by batch, with only
the columns asked for (plus the few the filters test), skipping row groups whose statistics rule the filter
out; the filter then drops rows inside each batch. A stream holds a batch and the segment's deletion vector,
never a segment or a partition (:mod:`compaction.read.ahead` runs a few streams at once).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from compaction.errors import InvalidArgumentError, MissingObjectError
from compaction.read.files import PartitionFiles, version_gone
from compaction.read.filters import RecordFilter
from compaction.store import SegmentMeta, Store, TopicPartition
from compaction.store.deletes import members
from compaction.store.segment import BATCH_ROWS, SEGMENT_SCHEMA

COLUMNS = tuple(SEGMENT_SCHEMA.names)
PARTITION_FIELD = pa.field("partition", pa.int32())


def check_columns(columns: Sequence[str] | None) -> list[str]:
    """The asked segment columns in the order given (all of them by default); unknown names are refused."""
    if columns is None:
        return list(COLUMNS)
    wanted = list(dict.fromkeys(columns))
    unknown = [c for c in wanted if c not in COLUMNS]
    if unknown:
        raise InvalidArgumentError(f"unknown column(s) {unknown}: the record columns are {list(COLUMNS)}")
    return wanted


def output_schema(columns: Sequence[str], with_partition: bool) -> pa.Schema:
    fields = [SEGMENT_SCHEMA.field(c) for c in columns]
    return pa.schema([PARTITION_FIELD, *fields] if with_partition else fields)


def _within(sorted_offsets: np.ndarray, segment: SegmentMeta) -> np.ndarray:
    low, high = np.searchsorted(sorted_offsets, [segment.base_offset, segment.next_offset])
    return sorted_offsets[low:high]


def segment_batches(
    store: Store,
    tp: TopicPartition,
    segment: SegmentMeta,
    *,
    columns: Sequence[str],
    record_filter: RecordFilter,
    log_start_offset: int,
    only: np.ndarray | None = None,
    skip_null_values: bool = False,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The live records of one segment (``store.objects.live_batches``) that ``record_filter`` keeps, as batches of
    ``columns``, row groups its statistics rule out skipped.

    ``only`` (ascending offsets) keeps just those records; ``skip_null_values`` drops records whose value is
    null. Batches that end up empty are not yielded.
    """
    read = list(
        dict.fromkeys(
            [
                *columns,
                *(["offset"] if only is not None else []),
                *([] if record_filter.empty else record_filter.columns),
                *(["value"] if skip_null_values else []),
            ]
        )
    )
    for batch in store.objects.live_batches(
        tp, segment, read, start=log_start_offset, row_groups=record_filter.row_groups, batch_rows=batch_rows
    ):
        keep = _keep(batch, record_filter, only, skip_null_values)
        if keep is not None:
            batch = batch.filter(pa.array(keep))
        if batch.num_rows:
            yield batch.select(list(columns))


def _keep(
    batch: pa.RecordBatch, record_filter: RecordFilter, only: np.ndarray | None, skip_null_values: bool
) -> np.ndarray | None:
    """Which live rows of ``batch`` the read keeps (None: every row)."""
    keep: np.ndarray | None = None

    def both(test: np.ndarray) -> None:
        nonlocal keep
        keep = test if keep is None else keep & test

    if only is not None:
        both(members(batch.column("offset").to_numpy(), only))
    mask = record_filter.mask(batch)
    if mask is not None:
        both(mask.to_numpy(zero_copy_only=False))
    if skip_null_values:
        both(batch.column("value").is_valid().to_numpy(zero_copy_only=False))
    return None if keep is None or keep.all() else keep


def _with_partition(batch: pa.RecordBatch, partition: int) -> pa.RecordBatch:
    column = pa.array(np.full(batch.num_rows, partition, dtype=np.int32))
    return pa.RecordBatch.from_arrays([column, *batch.columns], schema=batch.schema.insert(0, PARTITION_FIELD))


def partition_batches(
    store: Store,
    part: PartitionFiles,
    *,
    columns: Sequence[str],
    record_filter: RecordFilter,
    with_partition: bool = False,
    only: np.ndarray | None = None,
    skip_null_values: bool = False,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """A pinned partition's live records in offset order (see :func:`segment_batches`).

    An object that vanished is reported as the version being gone when gc pruned it meanwhile.
    """
    for file in part.files:
        segment = file.segment
        if not record_filter.may_match(segment):
            continue
        mine = None if only is None else _within(only, segment)
        if mine is not None and not len(mine):
            continue
        try:
            for batch in segment_batches(
                store,
                part.tp,
                segment,
                columns=columns,
                record_filter=record_filter,
                log_start_offset=part.log_start_offset,
                only=mine,
                skip_null_values=skip_null_values,
                batch_rows=batch_rows,
            ):
                yield _with_partition(batch, part.tp.partition) if with_partition else batch
        except MissingObjectError as err:
            raise version_gone(store, part.tp, part.version, err) from err
