"""Erasure in a task: the records an erasure request erases that no reader sees but the objects still hold, and
the digests of the keys a task's verdicts erase."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.clean.payloads import CleanTask
from compaction.store.erasure import erased_rows, key_digest


def hidden_erased(task: CleanTask) -> dict[int, frozenset[str]]:
    """Per segment of the task's range (by base offset), the keys (digests) of the records its deletion vector
    hides, or that lie below the log start, which an erasure request of the task erases. The object's bytes still
    hold them, so the segment must be rewritten. Only keys and offsets are read, of segments that hide rows."""
    if not task.erasures:
        return {}
    tombstones = dict(task.erasures)
    found = {}
    for segment in task.cleaned.segments:
        if segment.deletes is None and segment.base_offset >= task.cleaned.log_start_offset:
            continue
        hidden = task.context.store.objects.read_segment(
            task.tp, segment, ["offset", "key"], start=task.cleaned.log_start_offset, hidden=True
        )
        keys = erased_keys(
            hidden.column("key"), erased_rows(hidden.column("offset").to_numpy(), hidden.column("key"), tombstones)
        )
        if keys:
            found[segment.base_offset] = keys
    return found


def erased_keys(keys: pa.Array | pa.ChunkedArray, rows: np.ndarray) -> frozenset[str]:
    """The digests of the keys of ``rows`` (a bool per row)."""
    if not rows.any():
        return frozenset()
    return frozenset(key_digest(k) for k in pc.unique(keys.filter(pa.array(rows))).to_pylist())
