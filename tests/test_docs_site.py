"""The documentation site's sources (mkdocs.yml, docs/, README.md, pyproject.toml) agree.

`python3 dev.py docs` builds the site in strict mode (CI does too); these checks need no
mkdocs and say what to fix when a page is added without a place in the navigation.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import click
import pytest
import yaml

from tests.support.environment import ROOT

DOCS = ROOT / "docs"


def mkdocs_config() -> dict[str, Any]:
    # Only plain YAML in mkdocs.yml (no !!python tags), so safe_load reads it.
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert isinstance(config, dict)
    return config


def nav_pages(entries: Any) -> Iterator[str]:
    if isinstance(entries, str):
        yield entries
    elif isinstance(entries, list):
        for entry in entries:
            yield from nav_pages(entry)
    elif isinstance(entries, dict):
        for value in entries.values():
            yield from nav_pages(value)


def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts/mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    listed = list(nav_pages(mkdocs_config()["nav"]))

    missing = sorted(pages - set(listed))
    assert not missing, (
        "pages under docs/ that the site's navigation leaves out; add each to `nav` in"
        f" mkdocs.yml, in its section (How-to guides, Reference, ...): {missing}"
    )
    dangling = sorted(set(listed) - pages)
    assert not dangling, f"mkdocs.yml nav names pages that do not exist: {dangling}"
    assert len(listed) == len(set(listed)), "a page is listed twice in the nav"


def test_readme_links_to_the_docs_site_name_existing_pages() -> None:
    base = mkdocs_config()["site_url"]
    readme = (ROOT / "README.md").read_text()
    # Markdown links, and bare addresses (not inside a link; without the ** of bold).
    links = re.findall(r"\]\((https?://[^)\s]+)\)", readme)
    links += re.findall(r"(?<![(\[])(https://pgtasks\.readthedocs\.io[^\s)*]*)", readme)

    site_links = [link for link in links if link.startswith(base)]
    assert len(site_links) > 20
    for link in site_links:
        path = link[len(base) :].split("#")[0]
        page = DOCS / (path.rstrip("/") + ".md" if path else "index.md")
        assert page.is_file(), f"README.md links to {link}, but {page} does not exist"
    # Relative links would break on the package index, where the README is the
    # project's description.
    relative = [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", readme)
        if not target.startswith(("https://", "http://", "#"))
    ]
    assert not relative, f"README.md has relative links (use the docs site): {relative}"


def test_project_urls_point_at_the_docs_site() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = mkdocs_config()["site_url"]

    assert project["urls"]["Documentation"] == base
    assert project["urls"]["Changelog"] == base + "changelog/"
    assert (DOCS / "changelog.md").is_file()


def test_the_cli_reference_page_is_generated_from_every_command() -> None:
    module = hooks()
    from pgtasks.cli import main

    text = module.cli_reference_markdown()
    assert module.CLI_MARKER in (DOCS / module.CLI_PAGE).read_text()
    paths = [
        ctx.command_path for _, ctx in module.walk(main, click.Context(main, info_name="pgtasks"))
    ]
    assert len(paths) > 25
    for path in paths:
        assert re.search(rf"^#+ `{re.escape(path)}`", text, re.MULTILINE), path
    # Options with their defaults, as `--help` shows them.
    assert "| `-c, --concurrency N` |" in text
    assert "[default: 10" in text


def link(identifier: str, shown: str) -> str:
    """An optional cross-reference of mkdocs-autorefs: a link when the target is documented."""
    return f'<autoref identifier="{identifier}" optional><code>{shown}</code></autoref>'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":class:`~pgtasks.App` runs", f"{link('pgtasks.App', 'App')} runs"),
        (
            ":func:`pgtasks.testing.run_until_empty`",
            link("pgtasks.testing.run_until_empty", "pgtasks.testing.run_until_empty"),
        ),
        (
            ":meth:`~App.close` and :exc:`~pgtasks.TaskFailed`",
            f"{link('pgtasks.App.close', 'close')} and {link('pgtasks.TaskFailed', 'TaskFailed')}",
        ),
        ("mounted in your app::\n\n    code", "mounted in your app:\n\n    code"),
    ],
)
def test_sphinx_roles_in_docstrings_become_linked_code(text: str, expected: str) -> None:
    assert hooks().sphinx_to_markdown(text) == expected
