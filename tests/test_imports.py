"""The package's import graph has no cycle (read from the source with ``ast``).

Every import of a steerable module counts, lazy ones inside functions too; only imports
under ``if TYPE_CHECKING:`` do not (they never run). A package's ``__init__`` re-exporting
its modules is not counted as an edge into it: importing ``steerable.errors`` runs
``steerable/__init__``, which imports everything, so every module would be in one cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import steerable

ROOT = Path(steerable.__file__).parent


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(name: str, source: str, *, is_package: bool = False) -> set[str]:
    """The steerable module names module ``name`` (its ``source``) imports when it runs."""
    tree = ast.parse(source)
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    package = name.split(".") if is_package else name.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {t for t in targets if t == "steerable" or t.startswith("steerable.")}


def graph() -> dict[str, set[str]]:
    found = modules()

    def resolve(target: str) -> str | None:
        while target and target not in found:
            target = target.rpartition(".")[0]
        return target or None

    edges: dict[str, set[str]] = {}
    for name, path in found.items():
        edges[name] = set()
        is_package = path.name == "__init__.py"
        for target in imported(name, path.read_text(), is_package=is_package):
            module = resolve(target)
            if module and module != name and found[module].name != "__init__.py":
                edges[name].add(module)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_the_checker_sees_a_cycle_and_a_lazy_import() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import errors\n"
        "if TYPE_CHECKING:\n"
        "    from steerable.runner import Run\n"
        "def later():\n"
        "    from steerable.loop import ReAct\n"
    )
    found = imported("steerable.spec", source)
    assert {"steerable.errors", "steerable.loop"} <= found
    assert "steerable.runner" not in found


def test_the_loop_is_below_its_front() -> None:
    edges = graph()
    below = {"steerable.loop", "steerable._control", "steerable.spec", "steerable.events"}
    for name in below:
        assert "steerable.runner" not in edges[name], name
    assert "steerable.loop" not in edges["steerable._control"]
