"""The one settings builder: the configuration a test states, and nothing from this machine's environment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from compaction.config import Settings


def settings_with(
    overrides: Mapping[str, Any] | None = None, *, conf: str | Path | None = None, flags: Sequence[str] = ()
) -> Settings:
    """Kafka's defaults < ``conf`` (a file) < ``overrides`` (shaped like the TOML file) < ``flags`` (``--set``)."""
    return Settings.load(conf, overrides=overrides, environ={}, flags=flags)
