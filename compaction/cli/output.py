"""What commands print: lines and aligned tables for people, or (``--json``) one JSON document for programs."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Iterable, Sequence
from typing import Any

#: Every thread of the process writes to the same two streams: a line is written whole, in one write under this lock,
#: so that lines from threads that finish at once (a run's commits) never run together, and a counted line takes its
#: number under it, so that the numbers run in the order the lines are written.
_WRITING = threading.Lock()


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain aligned columns (numbers right-aligned) for terminal output."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], (int, float)) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        padded = (v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True))
        return "  ".join(padded).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)])


class Output:
    """A command's output: text, or the JSON document that stands for all of it when ``--json`` is given."""

    def __init__(self, as_json: bool = False) -> None:
        self.as_json = as_json
        self.counted = 0  # the counted lines written (a run's commits: the command's one pass)

    @classmethod
    def of(cls, args: argparse.Namespace) -> Output:
        return cls(bool(getattr(args, "json", False)))

    def line(self, text: str = "", *, aside: bool = False, of: int | None = None) -> None:
        """A line for people, whole on its own line whatever other threads print; ``aside`` sends it to stderr,
        beside data written to stdout; ``of``: one of ``of`` counted lines, numbered ``[n/of]`` in the order written
        (a :class:`compaction.display.Progress`)."""
        stream = sys.stderr if aside else sys.stdout
        with _WRITING:
            if of is not None:
                self.counted += 1
                text = f"[{self.counted}/{of}] {text}"
            stream.write(f"{text}\n")
            stream.flush()

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.line(format_table(headers, rows))

    def result(
        self,
        document: Any,
        headers: Sequence[str] | None = None,
        rows: Sequence[Sequence[Any]] = (),
        notes: Iterable[str] = (),
    ) -> None:
        """``document`` as JSON; or the table of ``headers`` and ``rows`` (when given), then the ``notes``."""
        if self.as_json:
            self.line(json.dumps(document, indent=1))
            return
        if headers is not None:
            self.table(headers, rows)
        for note in notes:
            self.line(note)
