"""The survivor decision computed with Arrow inside one Spark task per partition (or key bucket).

The same rules as :mod:`compaction.strategies` and :mod:`compaction.dedupe` (which state them as Spark
transforms), evaluated on the Arrow table of a partition's facts: keys never cross a topic partition, so
a partition's records need not be shuffled. Both are checked by the same tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.dedupe import REASONS

KEEP = 0
#: Reason codes: index into :data:`compaction.dedupe.REASONS` plus one (0 = kept).
CODES = {reason: i + 1 for i, reason in enumerate(REASONS)}


def _bools(array: pa.Array | pa.ChunkedArray, default: bool = False) -> np.ndarray:
    return pc.fill_null(array, default).to_numpy(zero_copy_only=False).astype(bool)


def versions(facts: pa.Table, strategy: str, header: str) -> tuple[np.ndarray, np.ndarray]:
    """``(version_valid, version)`` per row, as :func:`compaction.strategies.version_columns` defines them."""
    n = facts.num_rows
    offsets = facts.column("offset").to_numpy()
    if strategy == "offset":
        return np.ones(n, dtype=np.int8), offsets
    if strategy == "timestamp":
        stamps = facts.column("timestamp")
        valid = _bools(pc.greater_equal(stamps, 0))
        values = pc.fill_null(stamps, -1).to_numpy(zero_copy_only=False)
        return valid.astype(np.int8), np.where(valid, values, -1)
    if strategy == "header":
        return _header_versions(facts.column("headers").combine_chunks(), header, n)
    raise ValueError(f"unknown compaction strategy {strategy!r}")


def _header_versions(headers: pa.ListArray, name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    valid = np.zeros(n, dtype=np.int8)
    version = np.full(n, -1, dtype=np.int64)
    if headers.null_count == n:
        return valid, version
    flat = pc.list_flatten(headers)
    parents = pc.list_parent_indices(headers).to_numpy()
    matches = np.flatnonzero(_bools(pc.equal(flat.field("key"), name)))
    if not len(matches):
        return valid, version
    # The last occurrence per record: the last match of each parent in flattened (record) order.
    matched_parents = parents[matches]
    last = np.flatnonzero(np.append(matched_parents[1:] != matched_parents[:-1], True))
    rows, picks = matched_parents[last], matches[last]
    values = flat.field("value").take(pa.array(picks))
    ok = _bools(pc.equal(pc.binary_length(values), 8))
    good = values.filter(pa.array(ok))
    if len(good):
        data = pa.concat_arrays([good]).buffers()[2]
        start = good.offset * 8 if good.offset else 0
        decoded = np.frombuffer(data, dtype=">i8", count=len(good), offset=start).astype(np.int64)
        version[rows[ok]] = decoded
        valid[rows[ok]] = 1
    return valid, version


def winners(keys: pa.Array, competes: np.ndarray, valid: np.ndarray, version: np.ndarray,
            offsets: np.ndarray) -> np.ndarray:
    """True for the row of each key that is greatest in (version_valid, version, offset) among competitors.

    Field by field, each key keeps only its rows holding the field's maximum; the highest offset among
    what remains wins. A field with one value throughout (every version under the offset strategy, where
    the version is the offset itself) decides nothing and is skipped.
    """
    result = np.zeros(len(offsets), dtype=bool)
    rows = np.flatnonzero(competes)
    if not len(rows):
        return result
    fields = [valid] if version is offsets else [valid, version]
    for values in fields:
        current = values[rows]
        if current.min() == current.max():
            continue
        table = pa.table({"key": keys.take(pa.array(rows)), "value": current, "row": rows})
        best = table.group_by("key", use_threads=False).aggregate([("value", "max")])
        kept = table.join(best, "key").filter(pc.equal(pc.field("value"), pc.field("value_max")))
        rows = np.sort(kept.column("row").to_numpy())
    # Rows are in offset order, so the highest row index of a key is its highest offset. One thread:
    # executors already run one task per core.
    table = pa.table({"key": keys.take(pa.array(rows)) if len(rows) < len(keys) else keys, "row": rows})
    result[table.group_by("key", use_threads=False).aggregate([("row", "max")]).column("row_max").to_numpy()] = True
    return result


@dataclass(frozen=True)
class Decisions:
    """Per row: ``code`` (0 kept, else a reason code) and ``stamp`` (a kept marker needing its horizon)."""

    code: np.ndarray
    stamp: np.ndarray


def decide(facts: pa.Table, *, strategy: str, header: str, now_ms: int, keyless_drop: bool,
           range_last_offset: int, unique_before: int | None = None) -> Decisions:
    """Kafka's record rules for a partition's facts (rows in offset order), as :func:`compaction.dedupe.decide`.

    ``unique_before`` (offset strategy only): below this offset no two competing records share a key (the
    manifest's ``clean_keys_unique``), so a record there loses only to a later record of its key, and only
    the keys that also occur from it onwards need grouping, as Kafka's cleaner maps only the dirty keys.
    """
    offsets = facts.column("offset").to_numpy()
    keys = facts.column("key").combine_chunks()
    keyed = _bools(pc.is_valid(keys))
    control = _bools(facts.column("is_control"))
    aborted = _bools(facts.column("aborted"))
    pending = _bools(facts.column("marker_pending"))
    horizon_col = facts.column("delete_horizon_ms")
    has_horizon = _bools(pc.is_valid(horizon_col))
    passed = has_horizon & (now_ms >= pc.fill_null(horizon_col, 0).to_numpy(zero_copy_only=False))
    competes = keyed & ~control & ~aborted
    valid, version = versions(facts, strategy, header)
    if unique_before is not None and strategy == "offset":
        late = competes & (offsets >= unique_before)
        early = competes & ~late
        contested = early & _bools(pc.is_in(keys, value_set=keys.filter(pa.array(late)))) if late.any() else \
            np.zeros(len(offsets), dtype=bool)
        winner = winners(keys, late | contested, valid, offsets, offsets) | (early & ~contested)
    else:
        winner = winners(keys, competes, valid, offsets if strategy == "offset" else version, offsets)
    log_end = (offsets == range_last_offset) if strategy != "offset" else np.zeros(len(offsets), dtype=bool)

    code = np.zeros(len(offsets), dtype=np.int8)
    data = ~control
    # The first matching rule decides, exactly as the Spark transform's CASE WHEN chain.
    code[control & ~pending & passed] = CODES["marker_expired"]
    code[data & aborted] = CODES["aborted"]
    open_data = data & ~aborted
    if keyless_drop:
        code[open_data & ~keyed] = CODES["keyless"]
    keyed_data = open_data & keyed
    code[keyed_data & ~winner & ~log_end] = CODES["superseded"]
    code[keyed_data & winner & passed] = CODES["tombstone_expired"]
    stamp = control & ~pending & ~has_horizon
    return Decisions(code, stamp)
