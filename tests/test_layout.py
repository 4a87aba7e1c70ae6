"""The layout of the tree: no file of the package over 600 lines, a line for every
module in docs/explanation/architecture.md, and test modules that import test helpers from
tests.support (and task apps from tests.apps) only.

Helpers shared by several test files live in tests/support; a test module importing
another test module (or a conftest, or a harness next to it) would hide a helper where
the next test cannot find it. Fixtures come from conftest.py files, which pytest loads.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.environment import ROOT

ALLOWED = ("tests.support", "tests.apps")


def imported_test_modules(source: str, package: str) -> list[str]:
    """The ``tests.*`` modules a module of ``package`` imports, at any depth, relative
    imports resolved (``from tests import x`` counts as ``tests.x``).
    """
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*(parts if node.level else []), *filter(None, [node.module])])
            if node.module is None or base == "tests":
                found += [f"{base}.{alias.name}" for alias in node.names]
            else:
                found.append(base)
    return [name for name in found if name == "tests" or name.startswith("tests.")]


def allowed(module: str) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in ALLOWED)


def test_test_modules_import_helpers_from_tests_support_and_apps_only() -> None:
    modules = sorted((ROOT / "tests").rglob("test_*.py"))
    assert len(modules) > 40, "the test modules were not found"

    offending = {}
    for path in modules:
        package = ".".join(path.relative_to(ROOT).parent.parts)
        imported = imported_test_modules(path.read_text(), package)
        if bad := [name for name in imported if not allowed(name)]:
            offending[str(path.relative_to(ROOT))] = bad

    assert not offending, (
        "test modules may import from tests.support and tests.apps only (fixtures come"
        f" from conftest.py); move shared helpers to tests/support: {offending}"
    )


def test_the_check_sees_every_form_of_import() -> None:
    source = (
        "import tests.helpers\n"
        "from tests.conftest import ROOT\n"
        "from tests import conftest\n"
        "from . import worker_harness\n"
        "from ..faults.harness import Probe\n"
        "from tests.support.waiting import wait_until\n"
        "from tests.apps import user_app\n"
        "import pgtasks.testing\n"
        "def later() -> None:\n"
        "    from tests.integration.test_worker import running\n"
    )

    found = imported_test_modules(source, "tests.integration")

    assert found == [
        "tests.helpers",
        "tests.conftest",
        "tests.conftest",
        "tests.integration.worker_harness",
        "tests.faults.harness",
        "tests.support.waiting",
        "tests.apps",
        "tests.integration.test_worker",
    ]
    assert [name for name in found if not allowed(name)] == found[:5] + found[-1:]


#: The most lines a module (or SQL file) of the package may have: past it, split the file
#: by responsibility.
MAX_LINES = 600
#: Past this many lines a file is listed in the headroom report (printed, never failed).
HEADROOM = 550
ARCHITECTURE = ROOT / "docs" / "explanation" / "architecture.md"


def package_files(suffixes: tuple[str, ...]) -> list[Path]:
    return sorted(path for path in (ROOT / "pgtasks").rglob("*") if path.suffix in suffixes)


def near_the_cap(counts: dict[str, int]) -> str:
    """The headroom report: the files past HEADROOM lines, longest first ("" if none)."""
    near = sorted(
        ((count, name) for name, count in counts.items() if count > HEADROOM), reverse=True
    )
    if not near:
        return ""
    listed = "".join(f"\n  {count:4} {name}" for count, name in near)
    return (
        f"headroom: {len(near)} files of pgtasks/ are over {HEADROOM} lines (the cap is"
        f" {MAX_LINES}); split them by responsibility before they reach it:{listed}"
    )


def test_no_module_or_sql_file_of_the_package_is_over_600_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = package_files((".py", ".sql"))
    assert len(files) > 100, "the package's files were not found"
    counts = {
        str(path.relative_to(ROOT)): len(path.read_text("utf-8").splitlines()) for path in files
    }

    # A signal, not a failure: printed past pytest's capture on every run of this test.
    # Shipped migrations never change again: the cap holds them, the report leaves them out.
    editable = {name: count for name, count in counts.items() if "/sql/migrations/" not in name}
    if report := near_the_cap(editable):
        with capsys.disabled():
            print(f"\n{report}")

    over = {name: count for name, count in counts.items() if count > MAX_LINES}
    assert not over, f"split these by responsibility (at most {MAX_LINES} lines each): {over}"


def test_the_headroom_report_lists_the_files_near_the_cap_longest_first() -> None:
    report = near_the_cap({"pgtasks/a.py": 560, "pgtasks/b.py": 599, "pgtasks/c.py": 550})

    assert report.splitlines()[1:] == ["   599 pgtasks/b.py", "   560 pgtasks/a.py"]
    assert report.startswith(f"headroom: 2 files of pgtasks/ are over {HEADROOM} lines")
    assert near_the_cap({"pgtasks/c.py": HEADROOM}) == ""


def test_the_architecture_page_has_one_line_for_every_module() -> None:
    modules = {
        str(path.relative_to(ROOT / "pgtasks"))
        for path in package_files((".py",))
        if path.name != "__init__.py"
    }
    rows = re.findall(r"^\| `([\w/]+\.py)` \|", ARCHITECTURE.read_text("utf-8"), re.M)

    assert len(rows) == len(set(rows)), "a module has two lines"
    assert not modules - set(rows), (
        f"add a line for each of these to 'One line per module' in {ARCHITECTURE.name}:"
        f" {sorted(modules - set(rows))}"
    )
    assert not set(rows) - modules, f"these modules are gone: {sorted(set(rows) - modules)}"


def test_contributing_gives_the_layers_in_the_order_the_import_contract_enforces() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]
    layers = next(c for c in contracts["importlinter"]["contracts"] if c["type"] == "layers")
    names = [
        name.strip().removeprefix("pgtasks.")
        for layer in layers["layers"]
        for name in layer.split(":")
    ]
    text = (ROOT / "CONTRIBUTING.md").read_text("utf-8")
    layout = text[text.index("## Layout") :].split("\n## ")[0]

    missing = [name for name in names if f"`{name}`" not in layout]
    assert not missing, f"CONTRIBUTING.md's Layout does not name these layers: {missing}"
    positions = [layout.index(f"`{name}`") for name in names]
    assert positions == sorted(positions), (
        f"CONTRIBUTING.md's Layout gives the layers out of the contract's order: {names}"
    )


def test_the_reading_order_names_classes_methods_and_modules_that_exist() -> None:
    text = ARCHITECTURE.read_text("utf-8")
    section = text[text.index("## Reading order") :].split("\n## ")[0]
    methods: dict[str, set[str]] = {}
    for path in package_files((".py",)):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef):
                methods.setdefault(node.name, set()).update(
                    item.name
                    for item in node.body
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                )
    named = set(re.findall(r"`([A-Z]\w+)\.(\w+)", section))
    files = set(re.findall(r"`([\w/]+\.py)`", section))
    paths = [str(path.relative_to(ROOT / "pgtasks")) for path in package_files((".py",))]

    assert len(named) >= 5 and len(files) >= 10, "the reading order was not found"
    assert not {(c, m) for c, m in named if m not in methods.get(c, set())}, (
        f"the reading order names methods the code does not have: {sorted(named)}"
    )
    assert not {f for f in files if not any(p == f or p.endswith("/" + f) for p in paths)}
    for step in ("Worker._step", "exchanges", "executor", "ledger"):
        assert step.split(".")[-1] in section, step
