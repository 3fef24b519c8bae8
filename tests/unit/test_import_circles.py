"""No import circle in `functions/sluice`: none between its folders, and none among the
modules of one folder, counting imports made inside functions (an import deferred to keep a
heavy library out of a Lambda's start is fine; one deferred to dodge a circle is not).
Imports under `if TYPE_CHECKING:` are annotations only and do not count."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO

SOURCE = REPO / "functions"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in (SOURCE / "sluice").rglob("*.py"):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(modules: dict[str, Path]) -> set[tuple[str, str]]:
    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = set()
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        tree = ast.parse(path.read_text())
        annotations = {
            id(node)
            for guard in ast.walk(tree)
            if isinstance(guard, ast.If) and "TYPE_CHECKING" in ast.unparse(guard.test)
            for node in ast.walk(guard)
        }
        for node in ast.walk(tree):
            if id(node) in annotations:
                continue
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
    return edges


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
    edges = {(top[a], top[b]) for a, b in _imports(modules) if top[a] != top[b]}
    assert _circles(edges) == []


def test_no_modules_of_one_folder_import_each_other() -> None:
    modules = _modules()
    edges = {(a, b) for a, b in _imports(modules) if _folder(a, modules) == _folder(b, modules)}
    assert _circles(edges) == []


def test_a_circle_is_found_where_there_is_one() -> None:
    assert _circles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]
    assert _circles({("a", "b"), ("b", "c")}) == []
