"""The reading core: stream a pinned partition's live records as Arrow record batches.

Each live segment is opened once and read batch by batch with only the columns asked for (plus the few
the filters test), skipping row groups whose statistics rule the filter out; the log start, the segment's
deletion vector and the filter then drop rows inside each batch. A stream holds a batch and the segment's
deletion vector, never a segment or a partition (:mod:`compaction.read.ahead` runs a few streams at once).
Pages are checked against their CRCs as they are read, and the object's size against the manifest, as a
column read of the cleaner is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from compaction.errors import CorruptSegmentError, InvalidArgumentError, MissingObjectError
from compaction.read.files import PartitionFiles, version_gone
from compaction.read.filters import RecordFilter
from compaction.store import SegmentMeta, Store, TopicPartition
from compaction.store.segment import SEGMENT_SCHEMA, check_schema

#: Rows per record batch: about 10 MB of 100-byte values, so a stream stays well under the cache sizes.
BATCH_ROWS = 65_536
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


def _members(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which ``values`` occur in ``sorted_set`` (ascending): a binary search, no hash set to build per batch."""
    if not len(sorted_set):
        return np.zeros(len(values), dtype=bool)
    at = np.searchsorted(sorted_set, values)
    at[at == len(sorted_set)] = 0
    return sorted_set[at] == values


def _within(sorted_offsets: np.ndarray, segment: SegmentMeta) -> np.ndarray:
    low, high = np.searchsorted(sorted_offsets, [segment.base_offset, segment.next_offset])
    return sorted_offsets[low:high]


def segment_batches(store: Store, tp: TopicPartition, segment: SegmentMeta, *, columns: Sequence[str],
                    record_filter: RecordFilter, log_start_offset: int, only: np.ndarray | None = None,
                    skip_null_values: bool = False, batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The live records of one segment that ``record_filter`` keeps, as batches of ``columns``.

    ``only`` (ascending offsets) keeps just those records; ``skip_null_values`` drops records whose value is
    null. Batches that end up empty are not yielded.
    """
    rel = f"{tp.prefix}/{segment.path}"
    where = store.storage.describe(rel)
    deleted = None
    if segment.deletes is not None:
        deleted = store.read_deletes(tp, segment.deletes).to_numpy(zero_copy_only=False)
    trim = segment.base_offset < log_start_offset
    needs_offsets = trim or deleted is not None or only is not None
    read = list(dict.fromkeys([*columns, *(["offset"] if needs_offsets else []),
                               *([] if record_filter.empty else record_filter.columns),
                               *(["value"] if skip_null_values else [])]))
    if segment.format == "kafka":  # record batches are read whole: each batch's CRC covers all its records
        records = store.read_log_segment(tp, segment).records
        for batch in records.select(read).to_batches(max_chunksize=batch_rows):
            keep = _keep(batch, record_filter, log_start_offset if trim else None, deleted, only, skip_null_values)
            if keep is not None:
                batch = batch.filter(pa.array(keep))
            if batch.num_rows:
                yield batch.select(list(columns))
        return
    source, size = store.storage.open_input(rel)
    try:
        if size != segment.size_bytes:
            raise CorruptSegmentError(f"segment {where} is {size} bytes, but the manifest records {segment.size_bytes}")
        try:
            file = pq.ParquetFile(source, page_checksum_verification=True)
        except (pa.ArrowException, OSError) as err:
            raise CorruptSegmentError(f"segment {where} is not a readable Parquet file: {err}") from err
        check_schema(file.schema_arrow, where)
        groups = record_filter.row_groups(file.metadata)
        if groups is not None and not groups:
            return
        # One thread: Arrow's pool threads can abort the interpreter at exit (apache/arrow#34314), and a
        # Spark executor already runs a task per core.
        batches = file.iter_batches(batch_size=batch_rows, row_groups=groups, columns=read, use_threads=False)
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
            keep = _keep(batch, record_filter, log_start_offset if trim else None, deleted, only, skip_null_values)
            if keep is not None:
                batch = batch.filter(pa.array(keep))
            if batch.num_rows:
                yield batch.select(list(columns))
    finally:
        source.close()


def _keep(batch: pa.RecordBatch, record_filter: RecordFilter, start: int | None, deleted: np.ndarray | None,
          only: np.ndarray | None, skip_null_values: bool) -> np.ndarray | None:
    """Which rows of ``batch`` a reader sees and the read keeps (None: every row)."""
    keep: np.ndarray | None = None

    def both(test: np.ndarray) -> None:
        nonlocal keep
        keep = test if keep is None else keep & test

    if start is not None or deleted is not None or only is not None:
        offsets = batch.column("offset").to_numpy()
        if start is not None:
            both(offsets >= start)
        if deleted is not None:
            both(~_members(offsets, deleted))
        if only is not None:
            both(_members(offsets, only))
    mask = record_filter.mask(batch)
    if mask is not None:
        both(mask.to_numpy(zero_copy_only=False))
    if skip_null_values:
        both(batch.column("value").is_valid().to_numpy(zero_copy_only=False))
    return None if keep is None or keep.all() else keep


def _with_partition(batch: pa.RecordBatch, partition: int) -> pa.RecordBatch:
    column = pa.array(np.full(batch.num_rows, partition, dtype=np.int32))
    return pa.RecordBatch.from_arrays([column, *batch.columns], schema=batch.schema.insert(0, PARTITION_FIELD))


def partition_batches(store: Store, part: PartitionFiles, *, columns: Sequence[str], record_filter: RecordFilter,
                      with_partition: bool = False, only: np.ndarray | None = None, skip_null_values: bool = False,
                      batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
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
            for batch in segment_batches(store, part.tp, segment, columns=columns, record_filter=record_filter,
                                         log_start_offset=part.log_start_offset, only=mine,
                                         skip_null_values=skip_null_values, batch_rows=batch_rows):
                yield _with_partition(batch, part.tp.partition) if with_partition else batch
        except MissingObjectError as err:
            raise version_gone(store, part.tp, part.version, err) from err
