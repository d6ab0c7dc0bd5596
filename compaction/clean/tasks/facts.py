"""Stage 1's reading: the live records the verdicts need from a cleaned range, and the facts the rules give them.

Only the fact columns are read (key, offset, version inputs, delete horizons, transaction markers; never
values), with deletion vectors applied and nothing below the log start. The Spark SQL winner searches take the same
facts as rows (:func:`facts_rows`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction import rules
from compaction.clean.payloads import CleanTask, HandedRun, RunRead
from compaction.clean.tasks.key_ranges import in_key_ranges, key_range_counts, key_range_of
from compaction.clean.tasks.objects import object_id
from compaction.engine.phases import phase
from compaction.kafka.layout import CONTROL, TRANSACTIONAL
from compaction.store.erasure import erased_rows
from compaction.store.formats import LogSegment, SegmentFormat
from compaction.store.manifest import SegmentMeta
from compaction.store.segment import SEGMENT_SCHEMA
from compaction.winners import held_keys

T = TypeVar("T")
R = TypeVar("R")

#: The columns of the facts (what :func:`compaction.rules.classify` and the winner searches read).
FACT_COLUMNS = (
    "offset",
    "key",
    "version_valid",
    "version",
    "competes",
    "delete_horizon_ms",
    "is_control",
    "aborted",
    "marker_pending",
    "guarded",
    "erased",
)


def _column(table: pa.Table, name: str, default: Any = None) -> pa.Array:
    if name in table.column_names:
        return table.column(name).combine_chunks()
    type_ = SEGMENT_SCHEMA.field(name).type
    return pa.nulls(table.num_rows, type_) if default is None else pa.repeat(pa.scalar(default, type_), table.num_rows)


def _has_transactions(segment: SegmentMeta) -> bool:
    return bool(segment.transactional_count or segment.control_count)


def has_transactions(task: CleanTask) -> bool:
    """Whether the task's range or tail holds transactions: their facts need every row of the range in one
    task, so such a split partition cannot read each segment once and hand its rows over (:func:`hand_out`)."""
    return any(_has_transactions(s) for s in (*task.cleaned.segments, *task.cleaned.tail))


def _columns_for(task: CleanTask) -> list[str]:
    """Only what the verdicts need: never values (a data record with a delete horizon is a tombstone)."""
    return ["offset", "key", "delete_horizon_ms", *rules.strategy_columns(task.context.strategy)]


def row_positions(read_lengths: np.ndarray) -> np.ndarray:
    """Each row's index among its segment's rows, for segments of ``read_lengths`` rows one after another."""
    ends = np.cumsum(read_lengths)
    return cast(np.ndarray, np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - read_lengths, read_lengths))


@dataclass(frozen=True)
class Facts:
    """What the winner search reads of a task's rows (its key range of the cleaned range), in offset order."""

    table: pa.Table  # FACT_COLUMNS
    lengths: np.ndarray  # rows of each segment in ``table``, in segment order
    read_lengths: np.ndarray  # live rows of each segment as read (before the key range's filter)
    selected: np.ndarray | None  # which rows read are the key range's (None: all of them)
    records: dict[int, pa.Table] = field(default_factory=dict)  # whole records of segments read in full
    logs: dict[int, LogSegment] = field(default_factory=dict)  # and the batches of those that are .log
    # Per segment, the task's rows of it left out of ``table`` as surely kept (a unique clean section's rows that
    # nothing contests: see :func:`reads_clean_sparsely`); None: none left out.
    assumed_kept: np.ndarray | None = None
    # Per segment of ``records`` that holds only some of its live rows (a later record supersedes the others: see
    # :func:`supersedes_as_read`), their positions among its live rows.
    held_rows: dict[int, np.ndarray] = field(default_factory=dict)

    def segment_slices(self) -> list[slice]:
        """Each segment's rows in ``table``."""
        ends = np.cumsum(self.lengths)
        return [slice(int(end - length), int(end)) for end, length in zip(ends, self.lengths, strict=True)]

    def positions(self) -> np.ndarray:
        """Each row's index among its segment's live rows: of the rows read, less where its segment starts; worked
        out for the key range's rows only (a range keeps a few of the rows it read)."""
        if self.selected is None:
            return row_positions(self.read_lengths)
        starts = np.cumsum(self.read_lengths) - self.read_lengths
        return cast(np.ndarray, np.flatnonzero(self.selected) - np.repeat(starts, self.lengths))


def _tail_versions(task: CleanTask) -> pa.Table:
    """``key``, ``version_valid``, ``version`` of the keyed data records beyond the cleaned range."""
    parts = []
    for segment in task.cleaned.tail:
        columns = ["offset", "key", *rules.strategy_columns(task.context.strategy)]
        table = task.context.store.objects.read_segment(
            task.tp,
            segment,
            [*columns, "is_control"] if segment.control_count else columns,
            start=task.cleaned.log_start_offset,
        )
        data = pc.is_valid(table.column("key"))
        if segment.control_count:
            data = pc.and_(data, pc.invert(pc.fill_null(table.column("is_control"), False)))
        table = table.filter(data)
        valid, version = rules.versions(table, task.context.strategy, task.context.strategy_header)
        parts.append(
            pa.table({"key": table.column("key"), "version_valid": pa.array(valid), "version": pa.array(version)})
        )
    return (
        pa.concat_tables(parts)
        if parts
        else pa.table(
            {
                "key": pa.array([], pa.binary()),
                "version_valid": pa.array([], pa.int8()),
                "version": pa.array([], pa.int64()),
            }
        )
    )


def empty_transactional_batches(log: LogSegment, start: int) -> pa.Table:
    """The empty transactional data batches of a ``.log`` segment, as rows of the transaction columns (at their last
    offset): they have no record, but still belong to their transaction."""
    batches = log.batches
    attributes = batches.column("attributes").to_numpy()
    last = batches.column("base_offset").to_numpy() + batches.column("last_offset_delta").to_numpy().astype(np.int64)
    rows = (
        (batches.column("record_count").to_numpy() == 0)
        & ((attributes & TRANSACTIONAL) != 0)
        & ((attributes & CONTROL) == 0)
        & (last >= start)
    )
    n = int(rows.sum())
    return pa.table(
        {
            "offset": pa.array(last[rows], pa.int64()),
            "producer_id": batches.column("producer_id").filter(pa.array(rows)),
            "is_transactional": pa.array(np.ones(n, dtype=bool)),
            "is_control": pa.array(np.zeros(n, dtype=bool)),
            "control_type": pa.nulls(n, pa.string()),
        }
    )


def reads_clean_sparsely(task: CleanTask) -> bool:
    """Whether a task keeps of its clean section only the rows whose verdict is in doubt: below the checkpoint no two
    competing records share a key (the manifest's ``clean_keys_unique``), so a clean record that no dirty record's
    key contests, that carries no delete horizon and has a key, wins and is kept whatever the strategy; only the
    others need the winner search. Kafka's cleaner, likewise, maps the dirty section's keys and scans the clean
    segments against them. Not with transactions (a record's facts then depend on every row before it) nor with
    erasure requests (their records go whatever their key's winner)."""
    return (
        task.cleaned.clean_keys_unique
        and not task.erasures
        and not has_transactions(task)
        and any(s.next_offset <= task.cleaned.first_dirty_offset for s in task.cleaned.segments)
    )


def supersedes_as_read(task: CleanTask) -> bool:
    """Whether a record of the task's range is surely superseded once a later segment of the range holds its key:
    under the offset strategy every later keyed record competes and wins, without transactions (no control or
    aborted records) and without erasure requests (an erased record does not compete). A task that holds segments'
    records for their rewrite then drops those records as it reads on (:func:`_drop_superseded`)."""
    return (
        task.context.strategy is rules.Strategy.OFFSET
        and not task.erasures
        and not has_transactions(task)
        and task.split.key_ranges == 1
    )


def read_task_facts(task: CleanTask, whole: frozenset[int] = frozenset(), sparse: bool = False) -> Facts:
    """Read the live records the verdicts need (deletion vectors applied, nothing below the log start),
    compute their facts with :mod:`compaction.rules`, and keep the rows of the task's key range.

    Segments whose base offset is in ``whole`` are read with every column and kept in ``Facts.records``
    (a task that will rewrite them reads each object once), less the records a later segment supersedes where
    :func:`supersedes_as_read` holds (a task holds the records its rewrites can keep). With ``sparse``, where
    :func:`reads_clean_sparsely` holds, the clean section's rows that are surely kept are counted, not kept
    (``Facts.assumed_kept``).
    """
    transactional = has_transactions(task)
    plain = _columns_for(task)
    columns = [*plain, *rules.TRANSACTION_COLUMNS[1:]] if transactional else plain
    # A key range of a partition without transactions keeps only its rows of each segment as it reads: the task
    # holds its range's facts and one segment, not the whole range's keys.
    narrow = task.split.key_ranges > 1 and not transactional
    with phase("read"):
        read = _read_range(task, whole, columns, plain, narrow, sparse and reads_clean_sparsely(task))
    with phase("decide"):
        return _facts(task, read, columns, transactional)


#: Segments of a task read at once from an object store, in order: a task's requests overlap rather than wait in
#: turn (local disk: one at a time, memory-mapped).
REMOTE_READ_AHEAD = 4


def ahead(read: Callable[[T], R], items: Sequence[T], depth: int) -> Iterator[R]:
    """``read`` of each item, in order, with up to ``depth`` reads under way at once on threads."""
    if depth <= 1 or len(items) <= 1:
        yield from map(read, items)
        return
    with ThreadPoolExecutor(max_workers=depth, thread_name_prefix="read-ahead") as pool:
        pending: deque[Future[R]] = deque()
        for item in items:
            pending.append(pool.submit(read, item))
            if len(pending) >= depth:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


@dataclass
class RangeRead:
    """What :func:`_read_range` read of a task's segments, in segment order."""

    parts: list[pa.Table] = field(default_factory=list)  # the fact columns of the rows kept, per segment
    lengths: list[int] = field(default_factory=list)  # live rows read, per segment
    records: dict[int, pa.Table] = field(default_factory=dict)  # whole records of the segments read in full
    logs: dict[int, LogSegment] = field(default_factory=dict)
    empty: list[pa.Table] = field(default_factory=list)  # the empty transactional batches of .log segments
    selected: list[np.ndarray] = field(default_factory=list)  # per segment, which rows read ``parts`` holds
    assumed_kept: list[int] = field(default_factory=list)  # per segment, rows left out as surely kept
    held_rows: dict[int, np.ndarray] = field(default_factory=dict)  # see ``Facts.held_rows``
    stay: dict[int, np.ndarray] = field(default_factory=dict)  # of those, which rows of ``records`` stay, if not all


def _read_range(
    task: CleanTask,
    whole: frozenset[int],
    columns: list[str],
    plain: list[str],
    narrow: bool = False,
    sparse: bool = False,
) -> RangeRead:
    """The fact columns of the task's segments (and the whole records of those in ``whole``); ``narrow``:
    only the rows of the task's key range, with each segment's mask of them over its rows read; ``sparse``: the
    dirty segments read first, then of each clean segment only the rows their keys contest, those with a delete
    horizon and the keyless (:func:`reads_clean_sparsely`)."""
    found_read = RangeRead()
    segments = task.cleaned.segments

    def read(segment: SegmentMeta) -> pa.Table | LogSegment:
        if segment.format == SegmentFormat.KAFKA:  # read whole in any case: a batch's CRC covers all its records
            return task.context.store.objects.read_log_segment(task.tp, segment)
        if segment.base_offset in whole:
            return task.context.store.objects.read_segment(task.tp, segment, start=task.cleaned.log_start_offset)
        return task.context.store.objects.read_segment(
            task.tp, segment, columns if _has_transactions(segment) else plain, start=task.cleaned.log_start_offset
        )

    depth = 1 if task.context.store.storage.calls_fail_whole else REMOTE_READ_AHEAD
    prune = bool(whole) and supersedes_as_read(task)
    for segment, found in zip(segments, ahead(read, segments, depth), strict=True):
        if isinstance(found, LogSegment):
            live = task.context.store.objects.live_rows(
                task.tp, segment, found.records.column("offset"), task.cleaned.log_start_offset
            )
            table = found.records if live.all() else found.records.filter(pa.array(live))  # not a copy of each record
            found_read.empty.append(empty_transactional_batches(found, task.cleaned.log_start_offset))
            if segment.base_offset in whole:  # held for the rewrite without its bytes: a rewrite reads them again
                # if it copies a batch whole (a partition's held segments' bytes would double what the task holds);
                # and with its live records only (the others lose in any case), the same table as ``records``
                index = found.batch_index if live.all() else found.batch_index[live]
                found_read.logs[segment.base_offset] = replace(found, data=None, records=table, batch_index=index)
                found_read.records[segment.base_offset] = table
        else:
            table = found
            if segment.base_offset in whole:
                found_read.records[segment.base_offset] = table
        del found
        part = pa.table({name: _column(table, name) for name in columns})
        found_read.lengths.append(table.num_rows)
        del table
        if prune:
            _drop_superseded(found_read, part.column("key"))
            if segment.base_offset in whole and segment.next_offset > task.cleaned.first_dirty_offset:
                found_read.held_rows[segment.base_offset] = np.arange(part.num_rows)
        if narrow:
            mine = key_range_of(part.column("key"), task.split.key_ranges) == task.split.key_range
            part = part.filter(pa.array(mine))
            found_read.selected.append(mine)
        found_read.parts.append(part)
    for base in list(found_read.stay):
        _settle(found_read, base)
    # Only those that lost some: the others hold every live row.
    lengths = {s.base_offset: n for s, n in zip(segments, found_read.lengths, strict=True)}
    found_read.held_rows = {b: rows for b, rows in found_read.held_rows.items() if len(rows) < lengths[b]}
    found_read.assumed_kept = [0] * len(segments)
    if sparse:
        _keep_in_doubt(task, found_read)
    return found_read


def _drop_superseded(read: RangeRead, later: pa.ChunkedArray) -> None:
    """Drop from the held records of the dirty segments read so far (``read.held_rows``) those whose key the
    segment read next holds (its keys ``later``): under :func:`supersedes_as_read` they lose, so their rewrites never
    need them. A first run of a partition would otherwise hold every record it read until it rewrites. A segment's
    table is filtered once half its rows are lost (``read.stay`` marks them until then: a filter copies what stays),
    and at the end of the read (:func:`_settle`)."""
    held = [base for base, rows in read.held_rows.items() if len(rows)]
    value_set = pc.drop_null(later.combine_chunks())  # a keyless record supersedes nothing
    if not held or not len(value_set):
        return
    keys = pa.chunked_array([c for base in held for c in read.records[base].column("key").chunks], value_set.type)
    lost = held_keys(keys, value_set)
    start = 0
    for base in held:
        n = read.records[base].num_rows
        stay = ~lost[start : start + n] & read.stay.get(base, True)
        start += n
        if not stay.all():
            read.stay[base] = stay
            if 2 * int(stay.sum()) <= n:
                _settle(read, base)


def _settle(read: RangeRead, base: int) -> None:
    """Filter a held segment's records (and its ``.log`` records) to those ``read.stay`` marks."""
    stay = read.stay.pop(base)
    read.records[base] = table = read.records[base].filter(pa.array(stay))
    read.held_rows[base] = read.held_rows[base][stay]
    if base in read.logs:
        log = read.logs[base]
        read.logs[base] = replace(log, records=table, batch_index=log.batch_index[stay])


def _keep_in_doubt(task: CleanTask, read: RangeRead) -> None:
    """Narrow the clean segments' parts to their rows in doubt (:func:`_in_doubt`, the dirty parts' keys checked
    once for all of them), count the others as surely kept, and say which rows read each part holds."""
    clean = [i for i, s in enumerate(task.cleaned.segments) if s.next_offset <= task.cleaned.first_dirty_offset]
    dirty = [
        part.column("key")
        for part, s in zip(read.parts, task.cleaned.segments, strict=True)
        if s.next_offset > task.cleaned.first_dirty_offset
    ]
    contested = pc.drop_null(pa.chunked_array([c for column in dirty for c in column.chunks], pa.binary()))
    keys = pa.chunked_array([c for i in clean for c in read.parts[i].column("key").chunks], pa.binary())
    horizons = pa.chunked_array(
        [c for i in clean for c in read.parts[i].column("delete_horizon_ms").chunks], pa.int64()
    )
    doubt = _in_doubt(keys, horizons, contested.combine_chunks())
    if not read.selected:
        read.selected = [np.ones(n, dtype=bool) for n in read.lengths]
    start = 0
    for i in clean:
        part = read.parts[i]
        mine = doubt[start : start + part.num_rows]
        start += part.num_rows
        read.parts[i] = part.filter(pa.array(mine))
        read.assumed_kept[i] = len(mine) - int(mine.sum())
        selected = read.selected[i]
        selected[np.flatnonzero(selected)[~mine]] = False


def _in_doubt(keys: pa.ChunkedArray, horizons: pa.ChunkedArray, contested: pa.Array) -> np.ndarray:
    """Which rows of a unique clean section the winner search must see: those whose key the dirty section holds,
    those with a delete horizon (tombstones and markers, which may expire) and the keyless."""
    doubt = pc.or_(pc.or_(pc.is_in(keys, value_set=contested), pc.is_null(keys)), pc.is_valid(horizons))
    return doubt.to_numpy(zero_copy_only=False) if len(keys) else np.zeros(0, dtype=bool)


def _facts(task: CleanTask, read: RangeRead, columns: list[str], transactional: bool) -> Facts:
    """The facts of the rows read (see :func:`read_task_facts`); ``read.selected``: per segment, which
    of its rows read ``read.parts`` holds (its key range's, those in doubt), if the read kept only those."""
    parts, lengths, empty, selected = read.parts, read.lengths, read.empty, read.selected
    raw = pa.concat_tables(parts) if parts else SEGMENT_SCHEMA.empty_table().select(columns)
    n = raw.num_rows
    keyed = pc.is_valid(raw.column("key")).to_numpy(zero_copy_only=False)
    control = np.zeros(n, dtype=bool)
    aborted = np.zeros(n, dtype=bool)
    pending = np.zeros(n, dtype=bool)
    if transactional and n:
        control = pc.fill_null(raw.column("is_control"), False).to_numpy(zero_copy_only=False)
        later = [
            task.context.store.objects.read_segment(
                task.tp, s, rules.TRANSACTION_COLUMNS, start=task.cleaned.log_start_offset
            )
            for s in task.cleaned.tail
            if _has_transactions(s)
        ]
        involved = raw.select(rules.TRANSACTION_COLUMNS)
        # An empty batch of a transaction still belongs to it, as Kafka's cleaner sees it: its marker stays
        # while the batch does (a broker reading the log back must find the transaction ended).
        rank = np.arange(n)
        extra = [t for t in empty if t.num_rows]
        if extra:
            involved = pa.concat_tables([involved, *(t.cast(involved.schema) for t in extra)])
            order = np.argsort(involved.column("offset").to_numpy(), kind="stable")
            involved = involved.take(pa.array(order))
            rank = np.argsort(order)[:n]
        found = rules.transaction_facts(pa.concat_tables([involved, *(t.cast(involved.schema) for t in later)]))
        aborted, pending = found.aborted[rank], found.marker_pending[rank]
    read_lengths = counts = np.array(lengths, dtype=np.int64)
    mine = None
    if selected:  # narrowed as read
        mine = np.concatenate(selected)
        counts = np.array([part.num_rows for part in parts], dtype=np.int64)
    elif task.split.key_ranges > 1 and n:  # after the transaction facts, which need every row; before the rest
        key_range = key_range_of(raw.column("key"), task.split.key_ranges)
        mine = key_range == task.split.key_range
        counts = key_range_counts(key_range, read_lengths, task.split.key_ranges)[:, task.split.key_range]
        raw = raw.filter(pa.array(mine))
        keyed, control, aborted, pending = keyed[mine], control[mine], aborted[mine], pending[mine]
    valid, version = rules.versions(raw, task.context.strategy, task.context.strategy_header)
    table = facts_table(
        task,
        RowFacts(
            raw.column("offset"),
            raw.column("key"),
            valid,
            version,
            raw.column("delete_horizon_ms"),
            keyed,
            control,
            aborted,
            pending,
        ),
    )
    assumed = np.array(read.assumed_kept, dtype=np.int64) if any(read.assumed_kept) else None
    return Facts(table, counts, read_lengths, mine, read.records, read.logs, assumed, read.held_rows)


@dataclass(frozen=True)
class RowFacts:
    """What the rules need of rows read, in offset order (arrays of one length): their offsets and keys, versions
    under the strategy, delete horizons, and which are keyed, control records, aborted, or markers still pending."""

    offset: Any  # an Arrow or NumPy array
    key: Any
    valid: np.ndarray
    version: np.ndarray
    delete_horizon_ms: Any
    keyed: np.ndarray
    control: np.ndarray
    aborted: np.ndarray
    pending: np.ndarray

    @classmethod
    def without_transactions(
        cls, offset: Any, key: Any, valid: np.ndarray, version: np.ndarray, delete_horizon_ms: Any
    ) -> RowFacts:
        """Rows of a range without control records or aborted transactions."""
        none = np.zeros(len(valid), dtype=bool)
        return cls(
            offset,
            key,
            valid,
            version,
            delete_horizon_ms,
            pc.is_valid(key).to_numpy(zero_copy_only=False),
            none,
            none,
            none,
        )


def facts_table(task: CleanTask, rows: RowFacts) -> pa.Table:
    """The decision facts (:data:`FACT_COLUMNS`) of ``rows``, with the tail guard applied and the rows the task's
    erasure requests erase marked."""
    offset, key, valid, version = rows.offset, rows.key, rows.valid, rows.version
    delete_horizon_ms, keyed, control, aborted, pending = (
        rows.delete_horizon_ms,
        rows.keyed,
        rows.control,
        rows.aborted,
        rows.pending,
    )
    erased = np.zeros(len(keyed), dtype=bool)
    if task.erasures:
        offsets = offset.to_numpy() if isinstance(offset, (pa.Array, pa.ChunkedArray)) else np.asarray(offset)
        erased = erased_rows(offsets, key, dict(task.erasures)) & ~control
    facts = pa.table(
        {
            "offset": offset,
            "key": key,
            "version_valid": pa.array(valid, pa.int8()),
            "version": pa.array(version, pa.int64()),
            "competes": pa.array(rules.competes(keyed, control, aborted, erased)),
            "delete_horizon_ms": delete_horizon_ms,
            "is_control": pa.array(control),
            "aborted": pa.array(aborted),
            "marker_pending": pa.array(pending),
            "guarded": pa.array(np.zeros(len(keyed), dtype=bool)),
            "erased": pa.array(erased),
        }
    )
    # A tombstone whose horizon passed may be guarded by a stale record of its key beyond the range; under
    # the offset strategy every record beyond has a higher version, so none is.
    candidates = facts.column("competes").to_numpy(zero_copy_only=False) & rules.expiring(facts, task.context.now_ms)
    if task.context.strategy is not rules.Strategy.OFFSET and candidates.any() and task.cleaned.tail:
        guarded = rules.guarded_by_tail(facts, candidates, _tail_versions(task))
        facts = facts.set_column(facts.column_names.index("guarded"), "guarded", pa.array(guarded))
    return facts


def read_facts(task: CleanTask, index: int) -> pa.Table:
    """The Spark SQL plans' facts table for the stage's task ``index``: the decision facts with where each row
    lives."""
    facts = read_task_facts(task)
    table = facts.table
    n = table.num_rows
    bases = np.repeat(np.array([s.base_offset for s in task.cleaned.segments], dtype=np.int64), facts.lengths)
    return pa.table(
        {
            "task": pa.repeat(pa.scalar(index, pa.int32()), n),
            "topic": pa.repeat(pa.scalar(task.tp.topic), n),
            "partition": pa.repeat(pa.scalar(task.tp.partition, pa.int32()), n),
            "segment_base": pa.array(bases, pa.int64()),
            "position": pa.array(facts.positions(), pa.int64()),
            **{name: table.column(name) for name in FACT_COLUMNS},
        },
        schema=rules.FACTS_SCHEMA,
    )


# A split partition without transactions: each run of segments read once, its rows handed to the key ranges -------


def hand_out(run: RunRead) -> HandedRun:
    """Read a run of segments of a split partition once and hand each key range its rows through the store: one
    pieces object per run, a row group per range (the rows sorted by range, once, rather than filtered once per
    range).

    Only for ranges without transactions: whether a record is aborted depends on every row before it, so those
    partitions' range tasks read the whole range instead (:func:`read_task_facts`).
    """
    task = run.task
    columns = _columns_for(task)
    with phase("read"):
        read = _read_range(task, frozenset(), columns, columns)
    with phase("decide"):
        raw = pa.concat_tables(read.parts) if read.parts else SEGMENT_SCHEMA.empty_table().select(columns)
        read_lengths = np.array(read.lengths, dtype=np.int64)
        rows = pa.table(
            {
                "offset": raw.column("offset"),
                "key": raw.column("key"),
                "delete_horizon_ms": raw.column("delete_horizon_ms"),
                "position": pa.array(row_positions(read_lengths).astype(np.int32)),
            }
        )
        if task.context.strategy is not rules.Strategy.OFFSET:  # under it the version is the offset: rebuilt, not sent
            valid, version = rules.versions(raw, task.context.strategy, task.context.strategy_header)
            rows = rows.append_column("version_valid", pa.array(valid, pa.int8())).append_column(
                "version", pa.array(version, pa.int64())
            )
        key_range = key_range_of(raw.column("key"), task.split.key_ranges)
        del raw, read
        counts = key_range_counts(key_range, read_lengths, task.split.key_ranges)
        # A stable sort keeps each range's rows in offset order; a small integer type sorts by radix.
        order = np.argsort(key_range.astype(np.uint16 if task.split.key_ranges < 1 << 16 else np.int64), kind="stable")
        rows = in_key_ranges(rows, order)
        ends = np.cumsum(counts.sum(axis=0))
    with phase("write"):
        path, groups = task.context.store.objects.write_pieces(
            task.tp,
            task.cleaned.segments[0].base_offset,
            [rows.slice(int(end - size), int(size)) for end, size in zip(ends, counts.sum(axis=0), strict=True)],
            f"{object_id(task.context.pass_id)}-{task.cleaned.segments[0].base_offset}",
        )
    return HandedRun(
        first_segment=task.cleaned.segments[0].base_offset,
        path=path,
        batches=groups,
        read_lengths=tuple(int(n) for n in read_lengths),
        lengths=tuple(tuple(int(n) for n in counts[:, b]) for b in range(task.split.key_ranges)),
    )
