"""The lines the product shows people: how sizes and durations are spelled (one spelling in every line), and where
a library call's lines go (:class:`Progress`, the caller's: the library itself writes none)."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Where a call's lines for people go, as the caller shows them (the command line's output: ``cli/output.py``).
    ``of``: the line is one of ``of`` counted lines (a pass's commits, which finish in any order and at once), which
    the receiver numbers in the order it shows them."""

    def __call__(self, line: str, /, *, of: int | None = None) -> None: ...


def quiet(line: str, /, *, of: int | None = None) -> None:
    """No output: the progress of a caller that asks for none."""


def human_bytes(n: float) -> str:
    """``512 B``, ``2.1 GB``: a size in bytes, in binary units."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def format_duration(ms: int) -> str:
    """``3h12m``, ``45s``, ``2d4h``: compact durations for plan reasons."""
    seconds = ms // 1000
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{value}{unit}" for value, unit in parts if value]
    return "".join(shown[:2]) if shown else f"{ms}ms"
