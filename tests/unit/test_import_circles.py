"""No import circle in `functions/sluice`: none between its folders, and none among the
modules of one folder, counting imports made inside functions (an import deferred to keep a
heavy library out of a Lambda's start is fine; one deferred to dodge a circle is not).
Imports under `if TYPE_CHECKING:` are annotations only and do not count."""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from tests.conftest import REPO

if TYPE_CHECKING:
    from collections.abc import Iterator

SOURCE = REPO / "functions"


@cache
def _modules() -> dict[str, Path]:
    modules = {}
    for path in (SOURCE / "sluice").rglob("*.py"):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of `body`, and those nested in it (in functions, classes, branches,
    loops, handlers, cases), but none under `if TYPE_CHECKING:` (nor its `else`). An import is a
    statement: the expressions around them need no walk."""
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            nested = getattr(node, field, None)
            if isinstance(nested, list):
                for part in nested:  # an except handler or a match case holds statements in turn
                    yield from _statements(part.body if isinstance(part, ast.excepthandler | ast.match_case) else [part])


@cache
def _imports() -> frozenset[tuple[str, str]]:
    """(importer, imported) between the modules of `functions/sluice`, parsed once for the tests."""
    modules = _modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = set()
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in _statements(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            edges |= {(name, t) for t in map(owner, targets) if t and t != name and t.startswith("sluice.")}
    return frozenset(edges)


def _circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
        graph[b]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def _folder(name: str, modules: dict[str, Path]) -> str:
    return str(modules[name].parent.relative_to(SOURCE))


def test_no_two_folders_import_each_other() -> None:
    modules = _modules()
    top = {name: ".".join(name.split(".")[:2]) for name in modules}  # sluice.batch, sluice.wiring …
    edges = {(top[a], top[b]) for a, b in _imports() if top[a] != top[b]}
    assert _circles(edges) == []


def test_no_modules_of_one_folder_import_each_other() -> None:
    modules = _modules()
    edges = {(a, b) for a, b in _imports() if _folder(a, modules) == _folder(b, modules)}
    assert _circles(edges) == []


def test_a_circle_is_found_where_there_is_one() -> None:
    assert _circles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]
    assert _circles({("a", "b"), ("b", "c")}) == []
