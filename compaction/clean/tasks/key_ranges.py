"""A split partition's key ranges (buckets): their bounds sampled once by the driver, and each row's range.

All of a key's records fall in one range, so each range is decided on its own (stage 1 of a split partition).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.clean.payloads import CleanTask
from compaction.store.formats import SegmentFormat
from compaction.store.manifest import SegmentMeta

#: About how many keys a split partition's key range bounds are computed from: enough for even ranges.
SAMPLE_ROWS = 65_536
#: At most this many segments, spread over the cleaned range, give the sample.
SAMPLE_SEGMENTS = 8


def key_range_bounds(keys: pa.Array | pa.ChunkedArray, buckets: int) -> tuple[bytes, ...]:
    """The ``buckets - 1`` keys that split ``keys`` into ranges of about equal numbers of rows: quantiles of
    an evenly strided sample of the rows (about ``SAMPLE_ROWS`` of them, taken by position)."""
    n = len(keys)
    stride = max(1, n // SAMPLE_ROWS)
    chunks = keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]
    parts, start = [], 0
    for chunk in chunks:
        parts.append(chunk.take(pa.array(np.arange((-start) % stride, len(chunk), stride))))
        start += len(chunk)
    sample = pc.drop_null(pa.concat_arrays(parts)) if parts else pa.array([], pa.binary())
    if buckets <= 1 or len(sample) == 0:
        return ()
    sample = sample.take(pc.sort_indices(sample))
    return tuple(sample[len(sample) * i // buckets].as_py() for i in range(1, buckets))


def sample_bounds(task: CleanTask) -> tuple[bytes, ...]:
    """A split partition's key range bounds (run by the driver, before stage 1), from the keys of up to
    ``SAMPLE_SEGMENTS`` segments spread over the task's range.

    Every task of the partition gets the same bounds, so all of a key's records fall in one bucket however
    well the sample stands for the range; a poor sample only makes the buckets uneven.
    """
    segments = task.segments
    count = min(SAMPLE_SEGMENTS, len(segments))
    picked = sorted({round(i * (len(segments) - 1) / max(1, count - 1)) for i in range(count)})

    def keys(segment: SegmentMeta) -> pa.ChunkedArray:
        if segment.format == SegmentFormat.KAFKA:
            return task.store.objects.read_log_segment(task.tp, segment).records.column("key")
        return task.store.objects.read_segment(task.tp, segment, ["key"], start=task.log_start_offset).column("key")

    with ThreadPoolExecutor(max_workers=4) as pool:
        columns = list(pool.map(keys, [segments[i] for i in picked]))
    chunks = [chunk for column in columns for chunk in column.chunks]
    return key_range_bounds(pa.chunked_array(chunks, pa.binary()), task.buckets) if chunks else ()


def key_bucket(keys: pa.Array | pa.ChunkedArray, bounds: tuple[bytes, ...]) -> np.ndarray:
    """Each row's key bucket: how many of the ascending ``bounds`` its key is not below (keyless rows: 0).

    All of a key's records share a bucket. Arrow's comparison kernels do the work: one pass over the keys
    per bound, no hashing of their bytes.
    """
    bucket = np.zeros(len(keys), dtype=np.int32)
    for bound in bounds:
        bucket += pc.fill_null(pc.greater_equal(keys, pa.scalar(bound, keys.type)), False).to_numpy(
            zero_copy_only=False)
    return bucket


def bucket_counts(bucket: np.ndarray, read_lengths: np.ndarray, buckets: int) -> np.ndarray:
    """Per segment (rows, ``read_lengths`` of them, one after another) and key bucket, how many rows
    ``bucket`` puts there: a (segments, buckets) array."""
    segment = np.repeat(np.arange(len(read_lengths), dtype=np.int64), read_lengths)
    return np.bincount(segment * buckets + bucket, minlength=len(read_lengths) * buckets).reshape(-1, buckets)
