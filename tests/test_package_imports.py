"""The package's shape: no import cycles in pgtasks/ (annotation-only imports aside).

import-linter (``python3 dev.py check``) keeps the layers; this test catches a cycle
inside one layer too, which the layers contract cannot see.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pgtasks"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


def runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """pgtasks modules ``path`` imports at run time (module level or in functions)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if is_type_checking_block(node):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {target for target in found if target in modules and target != name}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    return {module_name(path): runtime_imports(path, modules) for path in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_pgtasks_has_no_import_cycle() -> None:
    # The package root re-exports the public API: it imports everything, and nothing
    # inside the package may import it back at module level except for that API.
    graph = {module: targets - {"pgtasks"} for module, targets in import_graph().items()}

    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_importing_pgtasks_main_runs_nothing() -> None:
    """``import pgtasks.__main__`` (a documentation tool, a test collector) does not run
    the command line; ``python -m pgtasks`` does."""
    import subprocess
    import sys

    imported = subprocess.run(
        [sys.executable, "-c", "import pgtasks.__main__; print('imported')"],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (imported.returncode, imported.stdout) == (0, "imported\n"), imported.stderr
    assert "Usage" not in imported.stderr
    run = subprocess.run(
        [sys.executable, "-m", "pgtasks", "--help"],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and "Usage" in run.stdout


def test_the_command_line_imports_croniter_and_tenacity_on_first_use() -> None:
    """``pgtasks`` and its commands start without croniter (whose import runs the ``file``
    command) and tenacity; a cron expression and a retry's backoff import them."""
    import subprocess
    import sys

    probe = (
        "import sys, pgtasks.cli\n"
        "print(sorted(m for m in ('croniter', 'tenacity') if m in sys.modules))\n"
        "from pgtasks._cron import validate_cron\n"
        "from pgtasks._retry import RetryPolicy, backoff\n"
        "assert validate_cron('*/5 * * * *') == '*/5 * * * *'\n"
        "assert 1.0 <= backoff(2, RetryPolicy(base=1.0)) <= 2.0\n"
        "print(sorted(m for m in ('croniter', 'tenacity') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "['croniter', 'tenacity']"]
