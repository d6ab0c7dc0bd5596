"""The winner search: each key's greatest competing record, found with Arrow group-bys in one process.

The cleaner runs it inside one task per partition (or key range: keys never cross a topic partition, so a
partition's records need not be shuffled), and the read path's table view runs it over a partition's live log.
Everything but the search for each key's greatest record in :data:`compaction.rules.SURVIVAL_ORDER` is
:func:`compaction.rules.classify`'s.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction import rules


def one_width(keys: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray | None:
    """``keys`` seen as fixed-size binary, without a copy, when every one is there and all are of one width, not 0
    (a topic's keys often are: ids, UUIDs); else None.

    Arrow hashes and gathers those faster than variable-width binary: a group-by of 5M keys of 14 bytes takes
    0.74 s against 1.04 s, reordering them 0.13 s against 0.25 s (one thread).
    """
    width = 0
    views = []
    for chunk in keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]:
        wide = chunk.type == pa.large_binary()
        if not (wide or chunk.type == pa.binary()) or chunk.null_count:
            return None
        if not len(chunk):
            continue
        offsets = np.frombuffer(chunk.buffers()[1], np.int64 if wide else np.int32)
        offsets = offsets[chunk.offset : chunk.offset + len(chunk) + 1]
        lengths = np.diff(offsets)
        if not lengths[0] or (width and lengths[0] != width) or (lengths != lengths[0]).any():
            return None
        width = int(lengths[0])
        data = chunk.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        views.append(pa.Array.from_buffers(pa.binary(width), len(chunk), [None, data]))
    return pa.chunked_array(views, pa.binary(width)) if width else None


def held_keys(keys: pa.ChunkedArray, held: pa.Array) -> np.ndarray:
    """Which of ``keys`` ``held`` holds (a null key never), as a mask: Arrow's hash semi join on one thread, which
    takes about 0.6x ``pc.is_in``'s time on a clean run of S9 (4.6M keys against 1M dirty ones: 0.51 s against
    0.87-1.01 s, the same columns in one process; DuckDB's semi join 0.42-0.48 s). Keys of one width, on both sides,
    are joined as fixed-size binary (:func:`compaction.winners.one_width`: 0.75 s against 1.11 s for those columns;
    ``pc.is_in`` is slower so)."""
    view, held_view = one_width(keys), one_width(held)
    if view is not None and held_view is not None and view.type == held_view.type:
        keys, held = view, held_view
    rows = pa.table({"row": pa.array(np.arange(len(keys), dtype=np.int64)), "key": keys})
    found = rows.join(pa.table({"key": held}), "key", join_type="left semi", use_threads=False)
    hit = np.zeros(len(keys), dtype=bool)
    hit[found.column("row").to_numpy()] = True
    return hit


def _grouped(keys: pa.ChunkedArray) -> pa.ChunkedArray:
    """``keys`` as the winner search groups them: :func:`one_width`'s view where it has one."""
    view = one_width(keys)
    return keys if view is None else view


def _greatest(keys: pa.ChunkedArray, rows: np.ndarray, fields: list[np.ndarray]) -> np.ndarray:
    """The row of each key (among ``rows``, ascending row numbers in offset order) greatest in ``fields``
    and then in offset.

    Field by field, each key keeps only its rows holding the field's maximum; the highest row number of
    a key among what remains is its highest offset. A field with one value throughout decides nothing and
    is skipped. One thread: executors already run one task per core.
    """
    for values in fields:
        current = values[rows]
        if not len(rows) or current.min() == current.max():
            continue
        table = pa.table({"key": _grouped(keys.take(pa.array(rows))), "value": current, "row": rows})
        best = table.group_by("key", use_threads=False).aggregate([("value", "max")])
        kept = table.join(best, "key", use_threads=False).filter(pc.equal(pc.field("value"), pc.field("value_max")))
        rows = np.sort(kept.column("row").to_numpy())
    if not len(rows):
        return rows
    table = pa.table({"key": _grouped(keys.take(pa.array(rows)) if len(rows) < len(keys) else keys), "row": rows})
    won = table.group_by("key", use_threads=False).aggregate([("row", "max")]).column("row_max").to_numpy()
    return cast(np.ndarray, won)


def winners(facts: pa.Table, unique_before: int | None = None) -> np.ndarray:
    """True for the greatest competing record of each key (rows of ``facts`` in offset order).

    ``unique_before``: below this offset no two competing records share a key (the manifest's
    ``clean_keys_unique``), so a record there that no later record of its key contests wins outright, and
    only the keys that also occur from it onwards need grouping, as Kafka's cleaner maps only the dirty keys.
    """
    n = facts.num_rows
    result = np.zeros(n, dtype=bool)
    competing = facts.column("competes").to_numpy(zero_copy_only=False).astype(bool)
    if not competing.any():
        return result
    keys = facts.column("key")  # as read, one chunk per segment: not copied into one
    offsets = facts.column("offset").to_numpy()
    valid = facts.column("version_valid").to_numpy()
    version = facts.column("version").to_numpy()
    if unique_before is not None:
        late = competing & (offsets >= unique_before)
        early = competing & ~late
        contested = (
            early
            & pc.fill_null(pc.is_in(keys, value_set=keys.filter(pa.array(late))), False).to_numpy(zero_copy_only=False)
            if late.any() and early.any()  # a run of dirty segments alone has no early row to contest
            else np.zeros(n, dtype=bool)
        )
        result |= early & ~contested
        competing = late | contested
    rows = np.flatnonzero(competing)
    # Under the offset strategy the version is the offset itself: grouping by it again is wasted work.
    fields = [valid] if np.array_equal(version[rows], offsets[rows]) else [valid, version]
    result[_greatest(keys, rows, fields)] = True
    return result


def decide(
    facts: pa.Table,
    *,
    now_ms: int,
    keyless_drop: bool,
    unique_before: int | None = None,
    beaten: np.ndarray | None = None,
) -> rules.RowVerdicts:
    """The rules' verdicts on a partition's (or key range's) facts, rows in offset order; ``beaten``: the rows a
    greater competing record of their key beyond ``facts`` beats (a clean section's rows whose keys the dirty
    section holds, under the offset strategy)."""
    won = winners(facts, unique_before)
    if beaten is not None:
        won &= ~beaten
    return rules.classify(facts, won, now_ms=now_ms, keyless_drop=keyless_drop)
