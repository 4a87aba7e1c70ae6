"""Build-time parts of the documentation site (mkdocs.yml ``hooks`` and griffe extension).

- The command-line reference: ``docs/reference/cli.md`` holds the prose; the marker
  ``<!-- cli-reference -->`` in it is replaced, at build time, by every command of
  ``pgtasks.cli.main`` rendered from its click definition (usage, help, options with
  their defaults). A new command appears in the site with no edit of any page.
- ``SphinxRoles``: docstrings write ``:class:`~pgtasks.App``` as Sphinx does; the API
  reference (mkdocstrings) shows it as code (``App``) and ``name::`` as ``name:``.

``python scripts/mkdocs_hooks.py`` prints the generated command reference.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The line of docs/reference/cli.md that the generated reference replaces.
CLI_MARKER = "<!-- cli-reference -->"
CLI_PAGE = "reference/cli.md"
PROG = "pgtasks"


# -- the command-line reference -------------------------------------------------------------------
def walk(
    command: click.Command, ctx: click.Context
) -> Iterator[tuple[click.Command, click.Context]]:
    """``command`` and every command under it, depth first, in the order ``--help`` lists."""
    yield command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            child = command.get_command(ctx, name)
            if child is None or child.hidden:
                continue
            yield from walk(child, click.Context(child, info_name=name, parent=ctx))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help_text(command: click.Command) -> str:
    """The command's help as Markdown paragraphs (click's ``\\b`` blocks kept verbatim)."""
    text = (command.help or "").strip()
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.splitlines()
        if lines and lines[0].strip() == "\b":
            paragraphs.append("\n".join("    " + line for line in lines[1:]))
        else:
            paragraphs.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(p for p in paragraphs if p.strip())


def render_command(command: click.Command, ctx: click.Context) -> str:
    """One command: heading, usage, help, then its options and arguments as a table."""
    path = ctx.command_path
    depth = min(len(path.split()) + 1, 6)
    anchor = "-".join(path.split()[1:]) or PROG
    lines = [f"{'#' * depth} `{path}` {{#{anchor}}}", ""]
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines += [f"    {path} {usage}".rstrip(), ""]
    help_text = _help_text(command)
    if help_text:
        lines += [help_text, ""]
    rows = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, description = record
        # A pipe inside a code span does not split a table cell (and must not be escaped).
        rows.append(f"| `{' '.join(names.split())}` | {_cell(description)} |")
    if rows:
        lines += ["| Option | Description |", "|---|---|", *rows, ""]
    if isinstance(command, click.Group):
        listed = [
            (name, child)
            for name in command.list_commands(ctx)
            if (child := command.get_command(ctx, name)) is not None and not child.hidden
        ]
        if listed:
            lines += ["| Command | Does |", "|---|---|"]
            for name, child in listed:
                target = "-".join([*path.split()[1:], name])
                summary = _cell(child.get_short_help_str(limit=200))
                lines.append(f"| [`{name}`](#{target}) | {summary} |")
            lines.append("")
    return "\n".join(lines)


def cli_reference_markdown() -> str:
    """Every command of ``pgtasks`` rendered from its click definition."""
    from pgtasks.cli import main

    root = click.Context(main, info_name=PROG)
    sections = [render_command(command, ctx) for command, ctx in walk(main, root)]
    return "\n".join(sections)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != CLI_PAGE:
        return markdown
    if CLI_MARKER not in markdown:
        raise RuntimeError(f"docs/{CLI_PAGE} lost its {CLI_MARKER} line")
    return markdown.replace(CLI_MARKER, cli_reference_markdown())


# -- docstrings written for Sphinx ----------------------------------------------------------------
_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|exc|data|obj|const):`(~?)([^`]+)`")


def sphinx_to_markdown(text: str) -> str:
    """``:class:`~a.B``` -> ``B`` in code, linked to ``a.B``'s entry of the API reference
    when it has one (an optional cross-reference: plain code otherwise, no warning);
    ``:meth:`~App.close``` is looked up as ``pgtasks.App.close``. ``x::`` -> ``x:``."""

    def reference(match: re.Match[str]) -> str:
        target = match[2].strip()
        shown = target.rsplit(".", 1)[-1] if match[1] else target
        identifier = target if target.split(".", 1)[0] == "pgtasks" else f"pgtasks.{target}"
        return f'<autoref identifier="{identifier}" optional><code>{shown}</code></autoref>'

    text = _ROLE.sub(reference, text)
    return re.sub(r"(?m)(\S)::$", r"\1:", text)


try:
    import griffe
except ImportError:  # the hooks are imported by tests without the docs group
    pass
else:

    class SphinxRoles(griffe.Extension):  # type: ignore[misc]
        """Rewrite Sphinx roles in every docstring before mkdocstrings renders it."""

        def on_object(self, *, obj: Any, **kwargs: Any) -> None:
            docstring = getattr(obj, "docstring", None)
            if docstring is not None:
                docstring.value = sphinx_to_markdown(docstring.value)


if __name__ == "__main__":
    print(cli_reference_markdown())
