"""The cleaning rules, stated once: every winner search derives its verdicts from this module (SPEC §3).

What a pass decides for each record of a partition's cleaned range ``[log_start_offset,
first_uncleanable_offset)``, in this order (the first rule that matches decides):

0. **Erased**: a data record of a key an erasure request names, below the offset of the tombstone appended for
   the request (``erased``), goes, whatever its version: it does not compete either, so the request's tombstone
   is what its key keeps (unless a later record of the key beats it).
1. **Markers** (commit/abort control records) stay while any record of their transaction remains before
   them (``marker_pending``); after that the first pass that keeps one stamps its delete horizon, and a
   pass with ``now >= horizon`` removes it.
2. **Aborted** records (their transaction ended in an abort marker) go at the first pass that covers them.
3. **Keyless** records cannot compete: they are kept, or dropped and counted with ``keyless.records = drop``.
4. **Superseded**: per key, among the *competing* records (keyed data records that are not aborted), only
   the greatest in :data:`SURVIVAL_ORDER` survives: ``(version_valid, version, offset)`` with the
   strategy's version. Tombstones compete under the same rule. Nothing else keeps a record: in
   particular no record survives because it is the last of the range (a stale value at the end of the
   range would otherwise outlive its key's tombstone).
5. **Expired tombstones**: a surviving tombstone whose horizon has passed goes, unless a record of its
   key with a lower version waits beyond the cleaned range (``guarded``): purging the tombstone then
   would let that stale record bring the key back once it becomes cleanable.
6. Everything else is kept. A kept tombstone or marker without a horizon gets ``now + delete.retention.ms``
   (saturating at Kafka's Long.MAX) when its segment is written.

Records below ``log_start_offset`` are never read, never compete and are dropped when their segment is
rewritten. Which part of the log is cleanable (the uncleanable boundary) is :func:`first_uncleanable_offset`.

Winner searches differ only in how they find each key's greatest record (Arrow group-bys inside one task, or a
Spark SQL window or aggregate over a shuffle); the facts they read, the versions, what competes, and the
classification above are computed here for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.schema import LONG_MAX, LONG_MIN


class Strategy(StrEnum):
    """``compaction.strategy`` (KIP-280): what makes one version of a key newer than another."""

    OFFSET = "offset"  # the highest offset wins
    TIMESTAMP = "timestamp"  # the highest record timestamp; records without one (null or negative) lose
    HEADER = "header"  # the last occurrence of the named header as an 8-byte big-endian long; others lose


class WinnerSearch(StrEnum):
    """``dedupe.plan``: how each key's greatest record is found (the rules are the same for all)."""

    ARROW = "arrow"  # inside one Spark task per partition (or key range of a split partition)
    WINDOW = "window"  # Spark SQL: row_number() over the survival order
    AGGREGATE = "aggregate"  # Spark SQL: max(struct(survival order)) per key, joined back


class DropReason(StrEnum):
    """Why a pass drops a record (the report's ``dropped`` counters); a record's code is its index + 1."""

    SUPERSEDED = "superseded"
    TOMBSTONE_EXPIRED = "tombstone_expired"
    MARKER_EXPIRED = "marker_expired"
    ABORTED = "aborted"
    KEYLESS = "keyless"
    ERASED = "erased"  # an erasure request's key, below its tombstone

    @property
    def code(self) -> int:
        return list(DropReason).index(self) + 1


KEPT = 0  # the code of a record the pass keeps

#: The survival order: per key, the competing record greatest in this tuple wins.
SURVIVAL_ORDER = ("version_valid", "version", "offset")

#: What every winner search decides on, one row per record of the cleaned range (plus one ``error`` row for a
#: partition that failed to read). Spark's schema for it is derived from this one.
FACTS_SCHEMA = pa.schema(
    [
        ("task", pa.int32()),  # the stage's task the row comes from (one partition's cleaned range)
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("segment_base", pa.int64()),
        ("position", pa.int64()),  # the row's index among its segment's live rows
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("version_valid", pa.int8()),
        ("version", pa.int64()),
        ("competes", pa.bool_()),
        ("delete_horizon_ms", pa.int64()),
        ("is_control", pa.bool_()),
        ("aborted", pa.bool_()),
        ("marker_pending", pa.bool_()),
        ("guarded", pa.bool_()),
        ("erased", pa.bool_()),  # a record an erasure request erases (rule 0)
    ]
)


def saturating_add(time_ms: int, duration_ms: int) -> int:
    """``time + duration`` clamped to Kafka's long range, as Kafka's time arithmetic saturates."""
    return max(LONG_MIN, min(LONG_MAX, time_ms + duration_ms))


def delete_horizon(now_ms: int, delete_retention_ms: int) -> int:
    """The horizon a pass stamps on a tombstone or marker it keeps for the first time."""
    return saturating_add(now_ms, delete_retention_ms)


# Versions ---------------------------------------------------------------------------------------------------


def _bools(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean column as a mask, null read as false."""
    mask: np.ndarray = pc.fill_null(array, False).to_numpy(zero_copy_only=False).astype(bool)
    return mask


def strategy_columns(strategy: Strategy) -> list[str]:
    """The record columns a strategy's version is read from (besides ``offset``)."""
    return {Strategy.OFFSET: [], Strategy.TIMESTAMP: ["timestamp"], Strategy.HEADER: ["headers"]}[strategy]


def versions(records: pa.Table, strategy: Strategy, header: str) -> tuple[np.ndarray, np.ndarray]:
    """``(version_valid, version)`` per record: int8 0/1 and int64 (-1 where not valid)."""
    n = records.num_rows
    if strategy is Strategy.OFFSET:
        return np.ones(n, dtype=np.int8), records.column("offset").to_numpy().astype(np.int64)
    if strategy is Strategy.TIMESTAMP:
        stamps = records.column("timestamp")
        valid = _bools(pc.greater_equal(stamps, 0))
        values = pc.fill_null(stamps, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        return valid.astype(np.int8), np.where(valid, values, -1)
    return _header_versions(records.column("headers").combine_chunks(), header, n)


#: KIP-280: a header version is a Kafka long, 8 bytes big-endian; a value of another length is not valid.
HEADER_VERSION_BYTES = 8


def _header_versions(headers: pa.ListArray, name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The last header called ``name`` read as an 8-byte big-endian long; missing or malformed: not valid."""
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
    ok = _bools(pc.equal(pc.binary_length(values), HEADER_VERSION_BYTES))
    good = pa.concat_arrays([values.filter(pa.array(ok))])
    if len(good):
        _, positions, data = good.buffers()
        start = int(np.frombuffer(positions, dtype=np.int32, count=1, offset=good.offset * 4)[0])
        decoded = np.frombuffer(data, dtype=">i8", count=len(good), offset=start).astype(np.int64)
        version[rows[ok]] = decoded
        valid[rows[ok]] = 1
    return valid, version


# Transactions -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransactionFacts:
    """Per row: ``aborted`` (a data record whose transaction ended in an abort marker) and
    ``marker_pending`` (a marker whose transaction still has records before it)."""

    aborted: np.ndarray
    marker_pending: np.ndarray


TRANSACTION_COLUMNS = ["offset", "producer_id", "is_transactional", "is_control", "control_type"]


def transaction_facts(records: pa.Table) -> TransactionFacts:
    """Facts for records in offset order (Kafka reference §3.9).

    A producer's transaction runs from its first transactional record after its previous marker to its
    next marker; one whose marker is not among ``records`` is still open (not aborted).
    """
    n = records.num_rows
    aborted = np.zeros(n, dtype=bool)
    pending = np.zeros(n, dtype=bool)
    is_control = pc.fill_null(records.column("is_control"), False)
    involved = pc.or_(is_control, pc.fill_null(records.column("is_transactional"), False))
    rows = np.flatnonzero(involved.to_numpy(zero_copy_only=False))
    if not len(rows):
        return TransactionFacts(aborted, pending)
    producers = records.column("producer_id").to_numpy(zero_copy_only=False)[rows]
    controls = is_control.to_numpy(zero_copy_only=False)[rows]
    types = records.column("control_type").take(pa.array(rows)).to_pylist()
    current: dict[int, int] = {}  # producer id -> index of its open transaction
    members: list[list[int]] = []  # transaction index -> rows of its data records
    for row, producer, control, kind in zip(rows.tolist(), producers.tolist(), controls.tolist(), types, strict=True):
        if control:
            txn = current.pop(producer, None)
            found = members[txn] if txn is not None else []
            pending[row] = bool(found)
            if kind == "abort" and found:
                aborted[found] = True
        else:
            txn = current.setdefault(producer, len(members))
            if txn == len(members):
                members.append([])
            members[txn].append(row)
    return TransactionFacts(aborted, pending)


# Facts ------------------------------------------------------------------------------------------------------


def competes(keyed: np.ndarray, is_control: np.ndarray, aborted: np.ndarray, erased: np.ndarray) -> np.ndarray:
    """Records that compete for their key: keyed data records that are neither aborted nor erased."""
    return cast(np.ndarray, keyed & ~is_control & ~aborted & ~erased)


def expiring(facts: pa.Table, now_ms: int) -> np.ndarray:
    """Rows whose delete horizon has passed (``now >= horizon``)."""
    horizon = facts.column("delete_horizon_ms")
    return _bools(pc.less_equal(horizon, now_ms))


def guarded_by_tail(facts: pa.Table, candidates: np.ndarray, tail: pa.Table) -> np.ndarray:
    """Which ``candidates`` (rows of ``facts``) have a record of their key with a lower version in ``tail``.

    ``tail`` holds ``key``, ``version_valid`` and ``version`` of the keyed data records beyond the cleaned
    range. They all have higher offsets, so a tail record is lower exactly when its ``(version_valid,
    version)`` is.
    """
    result = np.zeros(facts.num_rows, dtype=bool)
    rows = np.flatnonzero(candidates)
    lowest = tail.group_by("key", use_threads=False).aggregate([("version_valid", "min"), ("version", "min")])
    # Invalid versions are all -1, so the minimum version over a key is the lowest valid one unless an
    # invalid record exists (then version_valid_min is 0, which is lower than any valid record).
    mine = pa.table(
        {
            "key": facts.column("key").take(pa.array(rows)),
            "row": pa.array(rows),
            "valid": facts.column("version_valid").take(pa.array(rows)),
            "version": facts.column("version").take(pa.array(rows)),
        }
    )
    joined = mine.join(lowest, "key", join_type="inner", use_threads=False)
    valid = joined.column("valid").to_numpy().astype(bool)
    lower = valid & (
        (joined.column("version_valid_min").to_numpy() == 0)
        | (joined.column("version_min").to_numpy() < joined.column("version").to_numpy())
    )
    result[joined.column("row").to_numpy()[lower]] = True
    return result


# The verdicts -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowVerdicts:
    """Per row: ``code`` (:data:`KEPT` or a :class:`DropReason` code) and ``stamp`` (a kept marker that gets its
    first delete horizon)."""

    code: np.ndarray
    stamp: np.ndarray


def classify(facts: pa.Table, winner: np.ndarray, *, now_ms: int, keyless_drop: bool) -> RowVerdicts:
    """Rules 0-6 of this module for rows of :data:`FACTS_SCHEMA` (any subset of rows, any order), given
    which rows are the greatest competing record of their key (``winner``, from the winner search)."""
    n = facts.num_rows
    keyed = _bools(pc.is_valid(facts.column("key")))
    control = _bools(facts.column("is_control"))
    aborted = _bools(facts.column("aborted"))
    pending = _bools(facts.column("marker_pending"))
    guarded = _bools(facts.column("guarded"))
    erased = _bools(facts.column("erased"))
    has_horizon = _bools(pc.is_valid(facts.column("delete_horizon_ms")))
    passed = expiring(facts, now_ms)

    code = np.zeros(n, dtype=np.int8)
    data = ~control
    live = data & ~aborted
    keyed_live = live & keyed
    # Assigned in reverse order of precedence, so where rules overlap the earlier rule's code stays.
    code[keyed_live & winner & passed & ~guarded] = DropReason.TOMBSTONE_EXPIRED.code
    code[keyed_live & ~winner] = DropReason.SUPERSEDED.code
    if keyless_drop:
        code[live & ~keyed] = DropReason.KEYLESS.code
    code[data & aborted] = DropReason.ABORTED.code
    code[data & erased] = DropReason.ERASED.code
    code[control & ~pending & passed] = DropReason.MARKER_EXPIRED.code
    return RowVerdicts(code, control & ~pending & ~has_horizon)


def needs_horizon(records: pa.Table, marker_offsets: np.ndarray) -> pa.Array:
    """Which kept records get their first delete horizon when written: tombstones (keyed data records
    without a value) and the markers the verdicts named, that carry none yet."""
    data = pc.invert(pc.fill_null(records.column("is_control"), False))
    tombstone = pc.and_(pc.and_(data, pc.is_valid(records.column("key"))), pc.is_null(records.column("value")))
    named = pc.is_in(records.column("offset"), pa.array(marker_offsets))  # an offset is never null: nor is this
    return pc.and_(pc.is_null(records.column("delete_horizon_ms")), pc.or_(tombstone, named))


def upcoming_horizons(facts: pa.Table, code: np.ndarray, now_ms: int) -> np.ndarray:
    """Per row, the delete horizon of a kept record that has not passed yet; LONG_MAX for every other row.
    Their minimum is when the next purge is due."""
    horizons = pc.fill_null(facts.column("delete_horizon_ms"), LONG_MAX).to_numpy(zero_copy_only=False)
    return np.where((code == KEPT) & (horizons > now_ms), horizons, LONG_MAX)


def reason_counts(code: np.ndarray) -> dict[str, int]:
    """``{reason: records}`` for the records the verdicts drop."""
    counts = np.bincount(code.astype(np.int64), minlength=len(DropReason) + 1)
    return {reason.value: int(counts[reason.code]) for reason in DropReason if counts[reason.code]}


# The uncleanable boundary ------------------------------------------------------------------------------------


class UncleanableBound(StrEnum):
    """Which of Kafka's bounds set the uncleanable offset (``cleanableOffsets``): the smallest of them."""

    ACTIVE_SEGMENT = "active segment"
    LAST_STABLE_OFFSET = "last stable offset"
    MIN_COMPACTION_LAG = "min.compaction.lag.ms"


def uncleanable_offset(
    *, first_dirty_offset: int, active_base: int, last_stable_offset: int, lag_bound: int | None
) -> tuple[int, UncleanableBound]:
    """Where cleaning must stop and which bound decided it (Kafka's ``cleanableOffsets``): ``max(first dirty,
    min(last stable offset, active segment's base, base of the first dirty segment newer than
    min.compaction.lag.ms))``, the last given as ``lag_bound``."""
    name, bound = UncleanableBound.ACTIVE_SEGMENT, active_base
    if last_stable_offset < bound:
        name, bound = UncleanableBound.LAST_STABLE_OFFSET, last_stable_offset
    if lag_bound is not None and lag_bound < bound:
        name, bound = UncleanableBound.MIN_COMPACTION_LAG, lag_bound
    return max(first_dirty_offset, bound), name


def first_uncleanable_offset(offset: int, bases: Sequence[int], nexts: Sequence[int], active_base: int) -> int:
    """:func:`uncleanable_offset` rounded down to a segment boundary among the non-active segments
    ``[bases[i], nexts[i])``: an offset inside a segment makes the whole segment uncleanable; one in a gap
    between segments stops at the next segment (the gap holds no record)."""
    if offset >= active_base:
        return active_base
    for base, next_offset in zip(bases, nexts, strict=True):
        if offset < next_offset:
            return base
    return active_base
