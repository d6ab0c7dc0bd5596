"""Rooms small enough to read: no function in compaction/ longer than 90 lines (as ruff format lays it out), no
class with more than 20 methods; no module over 600 lines, no dataclass of the cleaner or the engine over 12 fields,
no function over 6 positional or required parameters, no class name used twice (a type alias's name counts), no
import cycle (function-level and type-checking imports count)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.helpers import ROOT

MAX_FUNCTION_LINES = 90  # the formatter's layout: the same statements take more lines than the hand-wrapped 80
MAX_CLASS_METHODS = 20
MAX_MODULE_LINES = 600
MAX_DATACLASS_FIELDS = 12  # in the cleaner and the engine: what a unit of work carries
MAX_PARAMETERS = 6  # positional, or required (self and cls not counted)


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
        "def long():\n"
        + "    x = 1\n" * MAX_FUNCTION_LINES
        + "\n\ndef short():\n"
        + "    x = 1\n" * (MAX_FUNCTION_LINES - 1)
        + "\n\nclass Wide:\n"
        + "".join(f"    def m{i}(self): ...\n" for i in range(MAX_CLASS_METHODS + 1))
        + "\n\nclass Narrow:\n"
        + "".join(f"    def m{i}(self): ...\n" for i in range(MAX_CLASS_METHODS))
    )
    assert oversized(tmp_path / "pkg") == [
        f"pkg/big.py:1 long ({MAX_FUNCTION_LINES + 1} lines)",
        f"pkg/big.py:{2 * MAX_FUNCTION_LINES + 6} class Wide ({MAX_CLASS_METHODS + 1} methods)",
    ]


# Nothing is exempt.
def test_no_function_over_90_lines_and_no_class_over_20_methods() -> None:
    assert oversized(ROOT / "compaction") == []


def _modules(package: Path) -> dict[str, Path]:
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(name: str, tree: ast.AST, modules: dict[str, Path]) -> set[str]:
    """The package's modules ``name`` imports, wherever the import stands (not its own packages)."""
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        found |= {t for t in targets if t in modules and t != name and not name.startswith(f"{t}.")}
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def _is_type_alias(node: ast.stmt) -> str | None:
    """The name a module-level statement gives a union of types (``Outcome = Ok | Failed``), or one annotated
    ``TypeAlias``: a class of values by another name."""
    match node:
        case ast.Assign(targets=[ast.Name(id=name)], value=ast.BinOp(op=ast.BitOr())):
            return name
        case ast.AnnAssign(target=ast.Name(id=name), annotation=annotation) if "TypeAlias" in ast.unparse(annotation):
            return name
    return None


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in node.decorator_list) or any(
        ast.unparse(b) == "NamedTuple" for b in node.bases
    )


def shape_offences(package: Path) -> list[str]:
    """What breaks the shape rules in the modules under ``package``, without line numbers (which move)."""
    found = []
    modules = _modules(package)
    classes: dict[str, list[str]] = defaultdict(list)
    graph = {}
    for name, path in modules.items():
        where = path.relative_to(package.parent).as_posix()
        text = path.read_text()
        tree = ast.parse(text, str(path))
        graph[name] = _imports(name, tree, modules)
        if text.count("\n") > MAX_MODULE_LINES:
            found.append(f"module {where} ({text.count(chr(10))} lines)")
        for statement in tree.body:
            alias = _is_type_alias(statement)
            if alias is not None:
                classes[alias].append(where)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name].append(where)
                fields = [
                    s for s in node.body if isinstance(s, ast.AnnAssign) and "ClassVar" not in ast.unparse(s.annotation)
                ]
                wing = where.split("/")[1] if where.count("/") > 1 else ""
                if _is_dataclass(node) and wing in ("clean", "engine") and len(fields) > MAX_DATACLASS_FIELDS:
                    found.append(f"dataclass {where} {node.name} ({len(fields)} fields)")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                positional = [*args.posonlyargs, *args.args]
                if positional and positional[0].arg in ("self", "cls"):
                    positional = positional[1:]
                required = len(positional) - len(args.defaults) + sum(d is None for d in args.kw_defaults)
                if max(len(positional), required) > MAX_PARAMETERS:
                    found.append(f"function {where} {node.name} ({len(positional)} positional, {required} required)")
    found += [f"class name {name} in {', '.join(paths)}" for name, paths in sorted(classes.items()) if len(paths) > 1]
    found += [f"import cycle {' <-> '.join(cycle)}" for cycle in _cycles(graph)]
    return found


def test_the_shape_rules_name_each_kind_of_offence_and_nothing_else(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "clean").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "clean" / "__init__.py").write_text("")
    fields = "".join(f"    f{i}: int\n" for i in range(MAX_DATACLASS_FIELDS + 1))
    (package / "clean" / "unit.py").write_text(
        "from dataclasses import dataclass\nfrom typing import ClassVar\n\nimport pkg.clean.other\n\n\n"
        f"@dataclass\nclass Wide:\n{fields}\n\n"
        f"@dataclass\nclass Fine:\n    kind: ClassVar[str] = 'x'\n{fields[: -len('    fN: int')]}\n\n"
        "def many(a, b, c, d, e, f, g=1): ...\n\n\ndef keyed(a, b, c, d, e, f, *, g=1, h=2): ...\n\n\n"
        "def required(a, b, c, d, e, *, f, g): ...\n\n\nclass Twice: ...\n\n\nEither = int | str\n"
    )
    (package / "clean" / "other.py").write_text(
        "def late():\n    from pkg.clean import unit\n\n\nclass Twice: ...\n\n\nclass Either: ...\n"
        + "\n" * MAX_MODULE_LINES
    )
    assert shape_offences(package) == [
        f"module pkg/clean/other.py ({MAX_MODULE_LINES + 8} lines)",
        f"dataclass pkg/clean/unit.py Wide ({MAX_DATACLASS_FIELDS + 1} fields)",
        "function pkg/clean/unit.py many (7 positional, 6 required)",
        "function pkg/clean/unit.py required (5 positional, 7 required)",
        "class name Either in pkg/clean/other.py, pkg/clean/unit.py",
        "class name Twice in pkg/clean/other.py, pkg/clean/unit.py",
        "import cycle pkg.clean.other <-> pkg.clean.unit",
    ]


# Nothing is exempt.
def test_the_package_keeps_its_shape() -> None:
    assert shape_offences(ROOT / "compaction") == []
