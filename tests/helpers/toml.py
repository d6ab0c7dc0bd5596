"""A configuration file's text from the dict a test states it as (the shape ``settings_with`` takes)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for the text tests use
    raise TypeError(f"no TOML form for {value!r} here")


def dumps(settings: Mapping[str, Any], table: tuple[str, ...] = ()) -> str:
    """TOML for ``settings``: values first, then a table per nested mapping (keys quoted: Kafka's names have dots)."""
    lines = [
        f"{json.dumps(key)} = {_value(value)}" for key, value in settings.items() if not isinstance(value, Mapping)
    ]
    for key, value in settings.items():
        if isinstance(value, Mapping):
            name = (*table, key)
            if any(not isinstance(v, Mapping) for v in value.values()):  # a table of tables needs no header
                lines += ["", "[" + ".".join(json.dumps(part) for part in name) + "]"]
            lines.append(dumps(value, name))
    return "\n".join(lines) + "\n" if not table else "\n".join(lines)
