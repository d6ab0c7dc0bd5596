"""Rooms small enough to read: no function in compaction/ longer than 80 lines, no class with more than 20 methods."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT

MAX_FUNCTION_LINES = 80
MAX_CLASS_METHODS = 20


def oversized(package: Path) -> list[str]:
    """Each function (from its ``def`` line to its last) and each class (counting its own methods, properties and
    class methods, not those of nested classes) in the modules under ``package`` over the limits, as ``path:line
    name (size)``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package.parent)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
            elif isinstance(node, ast.ClassDef):
                methods = sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body)
                if methods > MAX_CLASS_METHODS:
                    found.append(f"{where}:{node.lineno} class {node.name} ({methods} methods)")
    return found


def test_the_walk_names_a_long_function_and_a_wide_class_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "big.py").write_text(
        "def long():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
        + "\n\ndef short():\n" + "    x = 1\n" * (MAX_FUNCTION_LINES - 1)
        + "\n\nclass Wide:\n" + "".join(f"    def m{i}(self): ...\n" for i in range(MAX_CLASS_METHODS + 1))
        + "\n\nclass Narrow:\n" + "".join(f"    def m{i}(self): ...\n" for i in range(MAX_CLASS_METHODS)))
    assert oversized(tmp_path / "pkg") == [f"pkg/big.py:1 long ({MAX_FUNCTION_LINES + 1} lines)",
                                           f"pkg/big.py:{2 * MAX_FUNCTION_LINES + 6} class Wide "
                                           f"({MAX_CLASS_METHODS + 1} methods)"]


# Nothing is exempt.
def test_no_function_over_80_lines_and_no_class_over_20_methods() -> None:
    assert oversized(ROOT / "compaction") == []
