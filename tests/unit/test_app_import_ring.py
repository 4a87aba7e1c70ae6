"""The import ring of pgtasks._app: which of its modules import each other in a cycle.

Every import counts (TYPE_CHECKING ones and those inside functions too: a module that
imports App back to annotate a parameter is as tied to it as one that calls it). The
services App holds are built from what they need and never import App back; the one
cycle kept on purpose is ``app`` <-> ``tasks`` (a Task belongs to its App, App registers
Tasks). ``python -m tests.unit.test_app_import_ring`` prints the figures.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.environment import ROOT

PACKAGE = "pgtasks._app"
FOLDER = ROOT / "pgtasks" / "_app"

#: The modules of the ring and the most import edges inside it (ratchets: lower them
#: when a change shrinks the ring, never raise them).
RING_MODULES = 10
RING_EDGES = 28


def imports_of(path: Path) -> set[str]:
    """The pgtasks._app modules ``path`` imports (``from . import x`` counts as ``x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found.update(alias.name for alias in node.names)
            else:
                found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            found.add(str(node.module).removeprefix(PACKAGE + ".").split(".")[0])
    return found


def graph() -> dict[str, set[str]]:
    modules = {path.stem: path for path in FOLDER.glob("*.py") if path.stem != "__init__"}
    return {name: imports_of(path) & set(modules) - {name} for name, path in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def figures() -> tuple[int, int, list[set[str]]]:
    edges = graph()
    rings = cycles(edges)
    members = set().union(*rings) if rings else set()
    inside = sum(len(edges[name] & members) for name in members)
    return len(members), inside, rings


def test_the_cycle_finder_sees_a_ring_and_no_more() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(edges) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import routing\n"
        "from .tasks import Task\n"
        "from pgtasks._app.app import App\n"
        "from .. import _errors\n"
        "if TYPE_CHECKING:\n    from .handle import JobHandle\n"
        "def f():\n    from .limits import x\n"
    )
    assert imports_of(module) == {"routing", "tasks", "app", "handle", "limits"}


def test_the_app_import_ring_does_not_grow() -> None:
    modules, inside, rings = figures()
    assert modules <= RING_MODULES and inside <= RING_EDGES, (
        f"the pgtasks._app import ring grew to {modules} modules and {inside} edges (at"
        f" most {RING_MODULES} and {RING_EDGES}): {sorted(map(sorted, rings))}; have the"
        " new module take what it needs (a service, a Protocol) instead of importing App"
    )


if __name__ == "__main__":
    count, edge_count, found = figures()
    print(f"pgtasks._app import ring: {count} modules, {edge_count} edges inside it")
    for ring in found:
        print("  ", " ".join(sorted(ring)))
