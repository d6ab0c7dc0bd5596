"""JSON Lines form of records, for the append and read commands.

A line is an object with the segment columns. ``key`` and ``value`` are UTF-8 strings (``key_base64`` and
``value_base64`` carry arbitrary bytes); a null or absent ``value`` is a tombstone. Each header is
``{"key": name, "value": "text"}``, ``{"key": name, "value_base64": "..."}`` or ``{"key": name,
"value_long": 42}`` (an 8-byte big-endian long, what the header strategy reads).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from compaction.errors import InvalidRecordsError
from compaction.schema import LONG_MAX, LONG_MIN
from compaction.store.segment import COLUMNS, INTEGER_RANGES, records

_BINARY = ("key", "value")


def decode_utf8(data: bytes, source: str) -> str:
    """JSON Lines bytes as text; bytes that are not UTF-8 are an error naming the line and the byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        line_start = data.rfind(b"\n", 0, err.start) + 1
        raise InvalidRecordsError(
            f"{source} line {line} is not UTF-8: byte 0x{data[err.start]:02x} at "
            f"column {err.start - line_start + 1} (byte offset {err.start} in the file); JSON Lines are UTF-8 "
            "text, and key_base64 / value_base64 carry other bytes"
        ) from None


def _text(value: str, where: str, what: str, hint: str = "") -> bytes:
    try:
        return value.encode()
    except UnicodeEncodeError as err:  # a lone surrogate such as "\ud800", which JSON's escapes allow
        raise InvalidRecordsError(
            f"{where}: {what} is not Unicode text (a lone surrogate at character {err.start}){hint}"
        ) from None


def _check_integer(obj: dict[str, Any], name: str, where: str) -> None:
    value = obj.get(name)
    if value is None:
        return
    low, high = INTEGER_RANGES[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRecordsError(f"{where}: {name} must be an integer, not {json.dumps(value)}")
    if not low <= value <= high:
        raise InvalidRecordsError(f"{where}: {name} {value} is outside Kafka's range for it [{low}, {high}]")


def _decode_bytes(obj: dict[str, Any], name: str, where: str) -> bytes | None:
    if f"{name}_base64" in obj:
        try:
            return base64.b64decode(obj.pop(f"{name}_base64"), validate=True)
        except (ValueError, TypeError) as err:
            raise InvalidRecordsError(f"{where}: {name}_base64 is not valid base64") from err
    value = obj.pop(name, None)
    if value is None or isinstance(value, str):
        return _text(value, where, name, f"; use {name}_base64 for arbitrary bytes") if value is not None else None
    raise InvalidRecordsError(f"{where}: {name} must be a string or null, not {type(value).__name__}")


def _decode_header(header: Any, where: str) -> tuple[str, bytes | None]:
    if not isinstance(header, dict) or not isinstance(header.get("key"), str):
        raise InvalidRecordsError(f"{where}: each header must be an object with a string 'key'")
    _text(header["key"], where, f"header key {header['key']!r}")
    if "value_long" in header:
        number = header["value_long"]
        if not isinstance(number, int) or isinstance(number, bool):
            raise InvalidRecordsError(f"{where}: header {header['key']!r} value_long must be an integer")
        if not LONG_MIN <= number <= LONG_MAX:
            raise InvalidRecordsError(
                f"{where}: header {header['key']!r} value_long {number} is outside Kafka's "
                f"Long range [{LONG_MIN}, {LONG_MAX}] (the header holds an 8-byte long)"
            )
        return header["key"], number.to_bytes(8, "big", signed=True)
    return header["key"], _decode_bytes(dict(header), "value", where)


def parse_lines(lines: Iterable[str], source: str) -> pa.Table:
    """Parse JSON Lines into a table in the segment schema; errors name the source and the line."""
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise InvalidRecordsError(f"{where} is not valid JSON: {err.msg}") from err
        except RecursionError:
            raise InvalidRecordsError(f"{where} is nested too deeply to be a record") from None
        if not isinstance(obj, dict):
            raise InvalidRecordsError(f"{where} must be a JSON object")
        row: dict[str, Any] = {name: _decode_bytes(obj, name, where) for name in _BINARY}
        headers = obj.pop("headers", None)
        if headers is not None:
            if not isinstance(headers, list):
                raise InvalidRecordsError(f"{where}: headers must be a list")
            row["headers"] = [_decode_header(h, where) for h in headers]
        unknown = set(obj) - set(COLUMNS)
        if unknown:
            raise InvalidRecordsError(f"{where}: unknown field(s) {sorted(unknown)}")
        for name in INTEGER_RANGES:
            _check_integer(obj, name, where)
        if isinstance(obj.get("control_type"), str):
            _text(obj["control_type"], where, "control_type")
        row.update(obj)
        rows.append(row)
    return records(rows, source)


def _encode_bytes(out: dict[str, Any], name: str, value: bytes | None) -> None:
    if value is None:
        out[name] = None
        return
    try:
        text = value.decode()
        if text.isprintable():
            out[name] = text
            return
    except UnicodeDecodeError:
        pass
    out[f"{name}_base64"] = base64.b64encode(value).decode()


def to_lines(table: pa.Table) -> Iterator[str]:
    """Render records (any subset of the segment columns) as JSON Lines."""
    for row in table.to_pylist():
        out: dict[str, Any] = {}
        for name, value in row.items():
            if name in _BINARY:
                _encode_bytes(out, name, value)
            elif name == "headers" and value is not None:
                headers = []
                for header in value:
                    item: dict[str, Any] = {"key": header["key"]}
                    _encode_bytes(item, "value", header["value"])
                    headers.append(item)
                out[name] = headers
            else:
                out[name] = value
        yield json.dumps(out, separators=(",", ":"))
