"""The one record builder (``rec``: a record as a dict, in the order key, value, offset) and the tables, decision
facts and clean tasks tests build from records, to state their inputs inline."""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa

from compaction import rules
from compaction.clean.layout import ApplyPolicy
from compaction.clean.payloads import CleanedRange, CleanTask, PassContext
from compaction.store import SegmentMeta, Store, TopicPartition
from compaction.store.segment import records


def rec(key: str | None, value: str | None = "v", offset: int | None = None, **fields: Any) -> dict[str, Any]:
    """One record as a dict; ``value=None`` makes a tombstone."""
    row: dict[str, Any] = {"key": key, "value": value, **fields}
    if offset is not None:
        row["offset"] = offset
    return row


def table(*rows: dict[str, Any]) -> pa.Table:
    return records(rows)


def keyed(pairs: str, start: int | None = None) -> pa.Table:
    """``"a=1 b=2 a=-"``: records key=value in order (``-`` is a tombstone), offsets from ``start`` if given."""
    rows = []
    for i, item in enumerate(pairs.split()):
        key, _, value = item.partition("=")
        rows.append(rec(key, None if value == "-" else value, None if start is None else start + i))
    return records(rows)


def facts(*rows: dict[str, Any]) -> pa.Table:
    """Decision facts (:data:`compaction.rules.FACTS_SCHEMA`) from dicts with an ``offset`` and whatever else
    differs from a plain keyed record of the offset strategy (version = offset); ``competes`` is derived."""
    columns: dict[str, list[Any]] = {name: [] for name in rules.FACTS_SCHEMA.names}
    for row in rows:
        full = {
            "task": 0,
            "topic": "t",
            "partition": 0,
            "segment_base": 0,
            "position": row["offset"],
            "key": None,
            "version_valid": 1,
            "version": row["offset"],
            "delete_horizon_ms": None,
            "is_control": False,
            "aborted": False,
            "marker_pending": False,
            "guarded": False,
            "erased": False,
            **row,
        }
        full["key"] = full["key"].encode() if isinstance(full["key"], str) else full["key"]
        full["competes"] = (
            full["key"] is not None and not full["is_control"] and not full["aborted"] and not full["erased"]
        )
        for name in columns:
            columns[name].append(full[name])
    return pa.table(columns, schema=rules.FACTS_SCHEMA)


def clean_task(tp: TopicPartition, store: Store, segments: tuple[SegmentMeta, ...], **fields: Any) -> CleanTask:
    """A partition's clean task over ``segments`` under the offset strategy, with ``fields`` (of the task, its
    :class:`PassContext` or its :class:`CleanedRange`) changed."""
    context: dict[str, Any] = {
        "store": store,
        "pass_id": "pass",
        "now_ms": 0,
        "horizon_ms": 0,
        "segment_format": "parquet",
    }
    cleaned: dict[str, Any] = {"log_start_offset": 0, "first_dirty_offset": 0, "segments": segments}
    task: dict[str, Any] = {"policy": ApplyPolicy(1 << 30, 0), "batch_policy": None}
    for name, value in fields.items():
        group = next(
            g
            for g, kind in ((context, PassContext), (cleaned, CleanedRange), (task, CleanTask))
            if name in {f.name for f in dataclasses.fields(kind)}
        )
        group[name] = value
    return CleanTask(tp=tp, context=PassContext(**context), cleaned=CleanedRange(**cleaned), **task)
