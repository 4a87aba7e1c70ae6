"""The package's shape: no import cycles in pgtasks/ (annotation-only imports aside).

import-linter (``python3 dev.py check``) keeps the layers; this test catches a cycle
inside one layer too, which the layers contract cannot see. Also what a command, a
started worker and ``import pgtasks`` import (and parse) at start.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from pgtasks import App
from tests.support.environment import ROOT, pgtasks_env

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


#: Libraries only some paths need: the dashboard, OpenTelemetry, Prometheus, the database
#: driver and pool (not ``pgtasks --help``), Django, croniter and tenacity.
HEAVY = (
    "jinja2",
    "starlette",
    "uvicorn",
    "opentelemetry",
    "prometheus_client",
    "django",
    "croniter",
    "tenacity",
    "psycopg",
    "psycopg_pool",
)


def imported_after(code: str) -> dict[str, list[str]]:
    """What a fresh process has imported after ``code``: pgtasks modules and HEAVY ones."""
    probe = (
        "import json, sys\n"
        f"{code}\n"
        f"heavy = {HEAVY!r}\n"
        "names = sorted(sys.modules)\n"
        "print(json.dumps({\n"
        "    'pgtasks': [m for m in names if m.split('.')[0] == 'pgtasks'],\n"
        "    'heavy': sorted({m.split('.')[0] for m in names} & set(heavy)),\n"
        "}))\n"
    )
    import json
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    found: dict[str, list[str]] = json.loads(result.stdout.splitlines()[-1])
    return found


def test_import_pgtasks_loads_a_public_name_s_module_on_first_use() -> None:
    assert imported_after("import pgtasks") == {"pgtasks": ["pgtasks"], "heavy": []}

    first_use = imported_after("from pgtasks import PgTasksError")
    assert first_use["pgtasks"] == ["pgtasks", "pgtasks._errors"]
    assert first_use["heavy"] == []


def test_pgtasks_help_imports_no_command_module() -> None:
    """``pgtasks --help`` lists the commands without importing them, nor psycopg."""
    found = imported_after(
        "from pgtasks.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
    )

    assert found["heavy"] == []
    assert [m for m in found["pgtasks"] if m.startswith("pgtasks.cli.")] == ["pgtasks.cli._common"]


def test_a_command_imports_its_own_module_only() -> None:
    found = imported_after(
        "from pgtasks.cli import main\n"
        "try:\n"
        "    main(['worker', '--help'])\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
    )
    commands = {m for m in found["pgtasks"] if m.startswith("pgtasks.cli.")}

    # The worker's options come from its helpers' modules, none from another command's.
    assert "pgtasks.cli.worker" in commands
    assert commands <= {
        "pgtasks.cli._common",
        "pgtasks.cli.worker",
        "pgtasks.cli.celery_ops",
        "pgtasks.cli.executors",
    }
    assert not {"jinja2", "starlette", "opentelemetry", "prometheus_client"} & set(found["heavy"])


def test_every_public_name_is_listed_where_it_lives() -> None:
    """``pgtasks._PUBLIC`` (where ``__getattr__`` finds a name) names the modules of the
    TYPE_CHECKING imports (what mypy and readers see), and ``__all__`` both."""
    import pgtasks

    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    checked = next(node for node in tree.body if is_type_checking_block(node))
    assert isinstance(checked, ast.If)
    imported = {
        alias.name: "." * node.level + (node.module or "")
        for node in checked.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }

    assert imported == pgtasks._PUBLIC
    assert set(pgtasks.__all__) == {*imported, "__version__"}
    for name in pgtasks.__all__:
        assert getattr(pgtasks, name) is not None, name
    assert set(pgtasks.__all__) <= set(dir(pgtasks))


#: What a worker, from exec to its start banner, and a plain CLI command never import:
#: the dashboard, the Celery front and its namesake, the framework integrations, the
#: optional libraries, croniter and tenacity (an app without cron schedules or backoff).
NOT_AT_START = (
    "pgtasks.web",
    "pgtasks.celery",
    "pgtasks.contrib",
    "celery",
    *(name for name in HEAVY if not name.startswith("psycopg")),
    "http.server",
)

#: Runs ``pgtasks <arguments>`` in this process; prints, as JSON, which NOT_AT_START
#: modules were imported and how many migration lists were parsed (load_migrations is
#: cached) once a worker logs its start banner (then stops it) or the command returned.
START_PROBE = """
import json, logging, os, signal, sys
from pgtasks.cli import main

def report():
    from pgtasks.sql import load_migrations
    names = [m for m in sys.modules if m in {names!r}
             or any(m.startswith(p + ".") for p in {names!r})]
    print(json.dumps({{"imported": sorted(names),
                       "migrations_parsed": load_migrations.cache_info().currsize}}),
          flush=True)

class Started(logging.Handler):
    def emit(self, record):
        if " started: " in record.getMessage():
            report()
            os.kill(os.getpid(), signal.SIGTERM)

logging.getLogger("pgtasks.worker").addHandler(Started())
try:
    main({arguments!r})
except SystemExit as exit:
    if exit.code:
        raise
report()
"""


def start_probe(app: App, *arguments: str) -> dict[str, Any]:
    """The first report of START_PROBE for ``pgtasks ARGUMENTS`` on ``app``'s schema."""
    import json
    import subprocess
    import sys

    code = START_PROBE.format(names=NOT_AT_START, arguments=list(arguments))
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=pgtasks_env(app.dsn, app.schema),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = next(line for line in result.stdout.splitlines() if line.startswith('{"imported"'))
    found: dict[str, Any] = json.loads(report)
    return found


@pytest.mark.acceptance
def test_a_worker_starts_without_the_web_celery_or_optional_parts_nor_parsing_migrations(
    app: App,
) -> None:
    started = start_probe(app, "worker", "-A", "tests.apps.basic:app", "--poll-interval=0.2")

    # The schema's version is checked against the migrations' file names alone.
    assert started == {"imported": [], "migrations_parsed": 0}


@pytest.mark.acceptance
def test_a_cli_command_runs_without_the_web_celery_or_optional_parts_nor_parsing_migrations(
    app: App,
) -> None:
    listed = start_probe(app, "jobs", "list", "-A", "tests.apps.basic:app")

    assert listed == {"imported": [], "migrations_parsed": 0}
