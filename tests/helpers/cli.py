"""The one CLI runner: ``compaction ARGV`` in this process, its exit code and what it printed."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from typing import NamedTuple

import pytest

from compaction.cli import main


class Ran(NamedTuple):
    code: int
    out: str
    err: str


def invoke(capsys: pytest.CaptureFixture[str], *argv: str) -> Ran:
    """Run the command: its exit code (argparse's own too: --version, a bad flag) and its stdout and stderr."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    printed = capsys.readouterr()
    return Ran(code, printed.out, printed.err)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run the command: its exit code and all it printed (stdout, then stderr)."""
    ran = invoke(capsys, *argv)
    return ran.code, ran.out + ran.err


def call(*argv: str) -> Ran:
    """Run the command with its output captured here, for a test that has no capsys (Hypothesis runs many examples
    in one test call)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return Ran(code, out.getvalue(), err.getvalue())
