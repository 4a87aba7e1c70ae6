"""What a workflow's graph draws (web/graph.py lays it out): the sizes of the drawing, the
nodes, blocks, dots and edges of the SVG, and the texts of a step (its name on one line,
what it took, its description)."""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime

from markupsafe import Markup, escape

from .._operations import format_duration
from .._workflows_text import WorkflowStep

#: Geometry in SVG units (CSS pixels).
NODE_W, NODE_H = 156, 58
H_GAP, V_GAP = 12, 34
WAYPOINT_W = 8
MARGIN = 10
DOT, DOT_GAP = 10, 3
BLOCK_PAD, BLOCK_HEADER = 8, 36
BLOCK_MIN_W = 260
#: Characters of a node's task name (bold 12px), of its lines (11px) and of a block's
#: label, in a NODE_W box.
TASK_CHARS = 19
NODE_CHARS = 22
BLOCK_CHARS = 70
#: Steps whose jobs have not ended (their edges are drawn as not yet taken).
UNFINISHED = ("waiting", "pending", "running")
STATES = ("waiting", "pending", "running", "done", "failed", "cancelled")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def one_line(text: str | None, limit: int, *, keep_end: bool = False) -> str:
    """``text`` on one line (control characters as spaces), cut to ``limit`` characters
    with an ellipsis (at the start when ``keep_end``: a task's name ends with its own)."""
    value = _CONTROL.sub(" ", text or "").strip()
    if len(value) <= limit:
        return value
    return "…" + value[-(limit - 1) :] if keep_end else value[: limit - 1] + "…"


def took(step: WorkflowStep, now: datetime) -> float | None:
    """Seconds the step ran (first start to end), or has been running."""
    if step.started_at is None:
        return None
    if step.finished_at is not None:
        return max(0.0, (step.finished_at - step.started_at).total_seconds())
    if step.status == "running":
        return max(0.0, (now - step.started_at).total_seconds())
    return None


def describe(step: WorkflowStep, now: datetime) -> str:
    """A step's tooltip: everything its box shows and more, on a few lines."""
    lines = [
        f"step {step.step or '?'} · job {step.id} · {step.status}",
        f"task {one_line(step.task_name, 200)} · queue {one_line(step.queue, 100)}",
        f"attempts {step.attempts} of {step.max_attempts}",
    ]
    seconds = took(step, now)
    if seconds is not None:
        ran = "running for " if step.finished_at is None else "took "
        lines.append(ran + format_took(seconds))
    if step.status == "waiting" and step.waiting_for:
        lines.append(f"waits for {step.waiting_for} earlier step(s)")
    if step.result_text is not None:
        lines.append(
            "result " + one_line(step.result_text, 300) + (" …" if step.result_cut else "")
        )
    elif step.result_cut:
        lines.append(f"result of {step.result_size:,} bytes (too large to show here)")
    if step.error_line:
        lines.append("error " + one_line(step.error_line, 300))
    return "\n".join(lines)


def brief(step: WorkflowStep, now: datetime) -> str:
    """A dot's tooltip: its step, job, state, time, and result or error, on one line."""
    text = f"step {step.step or '?'} · job {step.id} · {step.status}"
    seconds = took(step, now)
    if seconds is not None:
        text += f" · {format_took(seconds)}"
    if step.error_line and step.status != "done":
        text += " · " + one_line(step.error_line, 120)
    elif step.result_text is not None:
        text += " · → " + one_line(step.result_text, 60)
    return text


def format_took(seconds: float) -> str:
    """A duration, in milliseconds under a second (steps are often that quick)."""
    return format_duration(seconds) if seconds >= 1 else f"{seconds * 1000:.0f} ms"


@dataclasses.dataclass(frozen=True)
class Node:
    """A step drawn as a box: ``lines`` under its (cut) task name; a link to its job."""

    id: int
    x: float
    y: float
    status: str
    task: str
    lines: tuple[str, ...]
    title: str
    handler: bool = False
    width: int = NODE_W
    height: int = NODE_H


@dataclasses.dataclass(frozen=True, slots=True)
class Dot:
    id: int
    x: float
    y: float
    status: str
    title: str
    size: int = DOT


@dataclasses.dataclass(frozen=True)
class Block:
    """Steps drawn as dots: a wide row, or the middle of a deep chain."""

    x: float
    y: float
    width: int
    height: int
    label: str
    counts: tuple[tuple[str, int], ...]
    dots: tuple[Dot, ...]
    #: Steps not drawn as dots (past MAX_DOTS).
    hidden: int
    #: The status its edges are drawn with: done when every step of it is done.
    status: str

    @property
    def summary(self) -> str:
        return " · ".join(f"{count:,} {state}" for state, count in self.counts)


def dots_markup(block: Block, base: str) -> Markup:
    """A block's dots as SVG: a link to each step's job with its tooltip (escaped). Built
    here rather than in the template: a block draws hundreds of them on every render of a
    live page."""
    href = escape(base)  # once: the rest are numbers and each dot's title and state
    return Markup(  # noqa: S704 - every value below is escaped or a number
        "".join(
            f'<a href="{href}/jobs/{dot.id}" class="dot st-{escape(dot.status)}"'
            f' id="step-{dot.id}" data-job="{dot.id}" data-status="{escape(dot.status)}">'
            f'<title>{escape(dot.title)}</title><rect x="{dot.x}" y="{dot.y}"'
            f' width="{dot.size}" height="{dot.size}" rx="2"></rect></a>'
            for dot in block.dots
        )
    )


@dataclasses.dataclass(frozen=True)
class Edge:
    path: str
    #: "done" once its first step has ended done (the input went on), else "open".
    state: str


@dataclasses.dataclass(frozen=True)
class Graph:
    width: int
    height: int
    nodes: tuple[Node, ...]
    blocks: tuple[Block, ...]
    edges: tuple[Edge, ...]
    #: Steps drawn (boxes and dots) and steps shown only as a count.
    steps: int
    #: Links between steps left undrawn: a cycle of hand-edited rows.
    undrawn_edges: int = 0

    @property
    def empty(self) -> bool:
        return not self.nodes and not self.blocks
