"""The dashboard's Jinja2 environment: its templates (pgtasks/web/templates), escaped
by default with control characters shown as escapes, and the filters and globals they
use."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from .. import _text
from .._operations import STATUSES, format_duration
from .._workflows_text import WORKFLOW_STATES
from .graph import dots_markup, format_took
from .reads import WORKFLOW_STEPS_CAP, format_bytes
from .requests import TAB_STATUSES


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(Path(__file__).resolve().parent / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_visible,
    )
    env.filters["duration"] = format_duration
    env.filters["took"] = format_took
    env.filters["timestamp"] = _timestamp
    env.filters["isoformat"] = _isoformat
    env.filters["number"] = "{:,}".format
    env.filters["bytes"] = format_bytes
    env.filters["printable"] = printable
    env.filters["fixed"] = fixed
    env.globals["ago"] = _ago
    env.globals["STATUSES"] = STATUSES
    env.globals["TAB_STATUSES"] = TAB_STATUSES
    env.globals["WORKFLOW_STATES"] = WORKFLOW_STATES
    env.globals["WORKFLOW_STEPS_CAP"] = WORKFLOW_STEPS_CAP
    env.globals["dots_markup"] = dots_markup
    return env


def _visible(value: object) -> object:
    """What every ``{{ … }}`` shows: text with its control characters (ANSI escapes, bells,
    C1 controls, bidirectional overrides) as escapes (``\\x1b``), tabs and newlines kept
    (a traceback). Any row may hold them (a task name, a queue, a host name, an error
    written with SQL): a page copied into a terminal, or fetched with curl, must not act
    on them. Markup (already escaped HTML) is left as is."""
    if type(value) is str:
        return _text.printable(value, multiline=True)
    return value


def _timestamp(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _isoformat(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(timezone.utc).isoformat()


def _ago(now: datetime, value: datetime | None) -> str:
    if value is None:
        return "-"
    delta = (now - value).total_seconds()
    return f"{format_duration(delta)} ago" if delta >= 0 else f"in {format_duration(-delta)}"


#: Characters of a name (a limit's, a key) a page shows at most.
NAME_CHARS = 200


def printable(value: str | None, limit: int = NAME_CHARS) -> str:
    """``value`` with each character that does not print (controls, the separator of a
    per-key limit's instance) as an escape (``\\x1f``), cut at ``limit`` characters."""
    if value is None:
        return "-"
    cut = value[:limit]
    shown = "".join(char if char.isprintable() else ascii(char)[1:-1] for char in cut)
    return shown + ("…" if len(value) > limit else "")


def fixed(value: float | None, digits: int = 2) -> str:
    """A number with ``digits`` decimals and thousands separators; "-" for None, and
    what a value that is not finite is (a row written by hand)."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "NaN (not a number)"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return f"{value:,.{digits}f}"
