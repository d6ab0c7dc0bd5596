"""Tiny builders for records, used by tests to state inputs inline."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from compaction.segment import records


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
