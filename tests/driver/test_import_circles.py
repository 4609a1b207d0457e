"""No import circles inside `driver/`: the modules' top-level imports (those under
`if TYPE_CHECKING:` included) form no cycle, so each room can be read, tested and moved
on its own. Imports inside functions (a lazy import of a heavy or optional part) are not
counted."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(tree: ast.Module, known: set[str]) -> set[str]:
    """The known modules a module's top level imports (`from pkg import mod` counts mod)."""
    out: set[str] = set()
    nodes = [n for n in tree.body]
    nodes += [inner for n in tree.body if isinstance(n, ast.If) for inner in n.body]
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                out |= {child} if child in known else {node.module} & known
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while (w := stack.pop()) != v:
                part.append(w)
            if part:
                found.append(sorted([v, *part]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_inside_the_driver():
    paths = sorted((ROOT / "driver").rglob("*.py"))
    known = {module_name(p) for p in paths}
    graph = {module_name(p): top_level_imports(ast.parse(p.read_text()), known) for p in paths}
    assert cycles(graph) == []
