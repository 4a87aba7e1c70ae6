"""A workflow's graph as its page draws it: inline SVG laid out here (no JavaScript, no
inline styles: the CSP allows neither), for any shape the rows describe.

Steps are placed in rows by rank (a step's row is one below its lowest predecessor's:
the longest path from a first step), top to bottom, in step order within a row (then
below their predecessors). Edges run between neighbouring rows; an edge that skips rows
passes through a thin waypoint in each, so that it never crosses a step's box. Wide and
deep workflows stay legible:

- a row of more than MAX_ROW steps (a wide group, a chord's header) is one block: a dot
  per step (its state's colour, a link to its job, its step and state in a tooltip; at
  most MAX_DOTS dots, then a count), under a line counting its steps by state;
- a run of more than MAX_RUN steps one after the other (a deep chain) keeps its first and
  last RUN_KEEP steps and shows the ones between as such a block.

The rows are hostile: links to jobs outside the workflow are ignored, a cycle (a
hand-edited row) is drawn as a last row without its back edges, and every text is cut
here and escaped by the template.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from .._workflows_text import WorkflowStep
from .graph_shapes import (
    BLOCK_CHARS,
    BLOCK_HEADER,
    BLOCK_MIN_W,
    BLOCK_PAD,
    DOT,
    DOT_GAP,
    H_GAP,
    MARGIN,
    NODE_CHARS,
    NODE_H,
    NODE_W,
    STATES,
    TASK_CHARS,
    V_GAP,
    WAYPOINT_W,
    Block,
    Dot,
    Edge,
    Graph,
    Node,
    brief,
    describe,
    one_line,
    took,
)
from .graph_shapes import (
    dots_markup as dots_markup,
)
from .graph_shapes import (
    format_took as format_took,
)

#: Steps of one row drawn one by one; a row with more is a block of dots.
MAX_ROW = 8
#: A chain longer than this keeps RUN_KEEP steps at each end and a block between.
MAX_RUN = 12
RUN_KEEP = 4
#: Dots one block draws at most (then "+N more"), and per line.
MAX_DOTS = 400
BLOCK_COLUMNS = 40
#: Edges that skip rows get a waypoint in each: at most this many in all (past it, an
#: edge is drawn straight, and may cross a step).
MAX_WAYPOINTS = 600

_step_id = operator.attrgetter("id")
#: Each step's predecessors (or successors), by job id.
Links = Mapping[int, Sequence[int]]


# -- layout ---------------------------------------------------------------------------------------
@dataclasses.dataclass(eq=False)
class _Item:
    """A box of the layout: one step, a block of steps, or an edge's waypoint."""

    kind: str  # "node", "block" or "waypoint"
    steps: list[WorkflowStep]
    key: tuple[object, ...]
    row: int = 0
    width: float = 0.0
    height: float = 0.0
    x: float = 0.0
    y: float = 0.0
    #: Items in the row above this one links from (for ordering).
    above: list[_Item] = dataclasses.field(default_factory=list)
    label: str = ""

    @property
    def center(self) -> float:
        return self.x + self.width / 2


def _ranks(steps: Sequence[WorkflowStep], preds: Links, succs: Links) -> dict[int, int]:
    """Each step's rank: 0 without predecessors, else one more than its predecessors'
    highest; steps on a cycle (hand-edited links) get the rank after every other."""
    waiting = {step.id: len(preds[step.id]) for step in steps}
    ready = deque(step.id for step in steps if not preds[step.id])
    rank: dict[int, int] = {}
    lowest: dict[int, int] = defaultdict(int)  # the rank a step is at least
    while ready:
        current = ready.popleft()
        rank[current] = here = lowest[current]
        for succ in succs.get(current, ()):
            if lowest[succ] <= here:
                lowest[succ] = here + 1
            waiting[succ] -= 1
            if waiting[succ] == 0:
                ready.append(succ)
    last = max(rank.values(), default=-1) + 1
    for step in steps:
        rank.setdefault(step.id, last)
    return rank


def _block(items: list[WorkflowStep], label: str, order: dict[int, int]) -> _Item:
    return _Item("block", items, (order[items[0].id],), label=label)


def _rows(
    steps: Sequence[WorkflowStep], preds: Links, succs: Links, rank: dict[int, int]
) -> tuple[list[list[_Item]], dict[int, _Item]]:
    """The rows of items (steps, blocks) and the item each step is drawn in; ``steps``
    in step order (an item's place in it orders the rows)."""
    order = {step.id: index for index, step in enumerate(steps)}
    by_rank: dict[int, list[WorkflowStep]] = defaultdict(list)
    for step in steps:  # steps are in step order
        by_rank[rank[step.id]].append(step)
    ranks = [by_rank[index] for index in sorted(by_rank)]

    def chained(previous: list[WorkflowStep], current: list[WorkflowStep]) -> bool:
        if len(previous) != 1 or len(current) != 1:
            return False
        before, after = previous[0].id, current[0].id
        return preds[after] == (before,) and list(succs.get(before, ())) == [after]

    rows: list[list[_Item]] = []
    index = 0
    while index < len(ranks):
        # A run of ranks of one step each, each the only successor of the one before.
        end = index + 1
        while end < len(ranks) and chained(ranks[end - 1], ranks[end]):
            end += 1
        rows += _run_rows(ranks[index:end], order)
        index = end
    item_of: dict[int, _Item] = {}
    for number, row in enumerate(rows):
        for item in row:
            item.row = number
            for step in item.steps:
                item_of[step.id] = item
    return rows, item_of


def _run_rows(run: list[list[WorkflowStep]], order: dict[int, int]) -> list[list[_Item]]:
    """The rows of consecutive ranks: a long chain's middle as a block, a wide rank as a
    block, anything else a box per step."""
    if len(run) > MAX_RUN:
        middle = [members[0] for members in run[RUN_KEEP:-RUN_KEEP]]
        first, last = middle[0].step or "?", middle[-1].step or "?"
        label = f"{len(middle):,} steps in a chain, {first} to {last} · {_tasks(middle)}"
        return [
            *([_node(members[0], order)] for members in run[:RUN_KEEP]),
            [_block(middle, label, order)],
            *([_node(members[0], order)] for members in run[-RUN_KEEP:]),
        ]
    rows = []
    for members in run:
        if len(members) <= MAX_ROW:
            rows.append([_node(step, order) for step in members])
            continue
        label = f"{len(members):,} steps in parallel · {_tasks(members)}"
        rows.append([_block(members, label, order)])
    return rows


def _tasks(steps: list[WorkflowStep]) -> str:
    """What a block's steps run: their task, or how many tasks."""
    tasks = {step.task_name for step in steps}
    if len(tasks) == 1:
        return one_line(next(iter(tasks)), 40, keep_end=True)
    return f"{len(tasks):,} tasks"


def _node(step: WorkflowStep, order: dict[int, int]) -> _Item:
    return _Item("node", [step], (order.get(step.id, -1),))


def _links(
    steps: Sequence[WorkflowStep], preds: Links, item_of: dict[int, _Item]
) -> tuple[list[tuple[_Item, _Item]], int]:
    """The edges between items (one per pair), and how many links go up or sideways."""
    seen: dict[tuple[int, int], tuple[_Item, _Item]] = {}
    undrawn = 0
    for step in steps:
        target = last = item_of[step.id]
        for pred in preds[step.id]:
            source = item_of[pred]
            if source is last or source is target:
                continue  # within a block, or the edge just added (a chord's members)
            if source.row >= target.row:
                undrawn += 1
                continue
            last = source
            seen.setdefault((id(source), id(target)), (source, target))
    return list(seen.values()), undrawn


def _waypoints(rows: list[list[_Item]], links: list[tuple[_Item, _Item]]) -> list[list[_Item]]:
    """Each link as the chain of items it passes (a waypoint in each row it skips)."""
    paths = []
    budget = MAX_WAYPOINTS
    for source, target in links:
        path = [source]
        skipped = target.row - source.row - 1
        if 0 < skipped <= budget:
            budget -= skipped
            for row in range(source.row + 1, target.row):
                waypoint = _Item("waypoint", [], source.key + target.key, row=row)
                rows[row].append(waypoint)
                path.append(waypoint)
        path.append(target)
        for before, after in itertools.pairwise(path):
            if after.row == before.row + 1:
                after.above.append(before)
        paths.append(path)
    return paths


def _order(rows: list[list[_Item]]) -> None:
    """Order each row: step order first, then (below the first row) by the mean position
    of what links to each item from the row above (the barycenter)."""
    rows[0].sort(key=lambda item: item.key)
    for index in range(1, len(rows)):
        above = {
            id(item): (position + 0.5) / len(rows[index - 1])
            for position, item in enumerate(rows[index - 1])
        }
        row = sorted(rows[index], key=lambda item: item.key)
        fallback = {id(item): (position + 0.5) / len(row) for position, item in enumerate(row)}

        def center(
            item: _Item, above: dict[int, float] = above, fallback: dict[int, float] = fallback
        ) -> tuple[float, tuple[object, ...]]:
            linked = [above[id(parent)] for parent in item.above if id(parent) in above]
            return (sum(linked) / len(linked) if linked else fallback[id(item)], item.key)

        rows[index] = sorted(row, key=center)


def _size(item: _Item) -> None:
    if item.kind == "node":
        item.width, item.height = NODE_W, NODE_H
    elif item.kind == "waypoint":
        item.width, item.height = WAYPOINT_W, 0
    else:
        shown = min(len(item.steps), MAX_DOTS)
        columns = max(1, min(BLOCK_COLUMNS, shown))
        lines = -(-shown // columns)
        item.width = max(BLOCK_MIN_W, columns * (DOT + DOT_GAP) - DOT_GAP + 2 * BLOCK_PAD)
        extra = 14 if len(item.steps) > MAX_DOTS else 0
        item.height = BLOCK_HEADER + lines * (DOT + DOT_GAP) - DOT_GAP + BLOCK_PAD + extra


def _place(rows: list[list[_Item]]) -> tuple[float, float, list[float]]:
    """Coordinates of every item: each row in its order, each item as close to below what
    links to it as the items before it in its row allow (so a chain runs straight down),
    the row shifted to balance the displacements. The graph's size and each row's height.
    """
    for row in rows:
        for item in row:
            _size(item)
    heights = [max((item.height for item in row), default=0) for row in rows]
    y = 0.0
    for row, height in zip(rows, heights, strict=True):
        wanted: list[float | None] = []
        for item in row:
            parents = [parent.center for parent in item.above]
            wanted.append(sum(parents) / len(parents) if parents else None)
        if all(center is None for center in wanted):
            total = sum(item.width for item in row) + H_GAP * (len(row) - 1)
            x = -total / 2
            for item in row:
                item.x = x
                x += item.width + H_GAP
        else:
            right = float("-inf")
            for item, center in zip(row, wanted, strict=True):
                x = right + H_GAP if center is None else center - item.width / 2
                item.x = max(x, right + H_GAP)
                right = item.x + item.width
            moved = [
                item.center - center
                for item, center in zip(row, wanted, strict=True)
                if center is not None
            ]
            shift = (max(moved) + min(moved)) / 2
            for item in row:
                item.x -= shift
        for item in row:
            item.y = y
        y += height + V_GAP
    left = min((item.x for row in rows for item in row), default=0.0)
    right = max((item.x + item.width for row in rows for item in row), default=0.0)
    for row in rows:
        for item in row:
            item.x += MARGIN - left
            item.y += MARGIN
    return right - left + 2 * MARGIN, y - V_GAP + 2 * MARGIN, heights


def _path(points: list[_Item], heights: list[float]) -> str:
    """An edge through ``points`` (source, waypoints, target): curves between rows,
    straight down through each waypoint's row."""
    first = points[0]
    x, y = first.center, first.y + first.height
    parts = [f"M{x:.1f},{y:.1f}"]
    for point in points[1:]:
        top = point.y
        middle = (y + top) / 2
        cx = point.center
        parts.append(f"C{x:.1f},{middle:.1f} {cx:.1f},{middle:.1f} {cx:.1f},{top:.1f}")
        x, y = cx, top
        if point.kind == "waypoint":
            y = top + heights[point.row]
            parts.append(f"L{x:.1f},{y:.1f}")
    return " ".join(parts)


def _node_lines(step: WorkflowStep, now: datetime) -> tuple[str, ...]:
    seconds = took(step, now)
    second = f"step {one_line(step.step, 10) or '?'}"
    if seconds is not None:
        second += f" · {format_took(seconds)}"
    if step.attempts > 1 or step.status == "failed":
        second += f" · {step.attempts}/{step.max_attempts}"
    if step.status == "failed" and step.error_line:
        third = one_line(step.error_line, NODE_CHARS)
    elif step.status == "done" and step.result_text is not None:
        third = one_line("→ " + step.result_text, NODE_CHARS)
    elif step.status == "done" and step.result_cut:
        third = f"→ [{step.result_size:,} bytes]"
    elif step.status == "waiting" and step.waiting_for:
        third = f"waits for {step.waiting_for}"
    else:
        third = step.status
    return (second, third)


def _drawn_node(item: _Item, now: datetime, *, handler: bool = False) -> Node:
    step = item.steps[0]
    return Node(
        id=step.id,
        x=round(item.x, 1),
        y=round(item.y, 1),
        status=step.status if step.status in STATES else "unknown",
        task=one_line(step.task_name, TASK_CHARS, keep_end=True),
        lines=(("on error handler", step.status) if handler else _node_lines(step, now)),
        title=describe(step, now),
        handler=handler,
    )


def _drawn_block(item: _Item, now: datetime) -> Block:
    counts = Counter(step.status for step in item.steps)
    ordered = tuple((state, counts[state]) for state in STATES if state in counts) + tuple(
        (state, count) for state, count in sorted(counts.items()) if state not in STATES
    )
    shown = item.steps[:MAX_DOTS]
    columns = max(1, min(BLOCK_COLUMNS, len(shown)))
    inner = columns * (DOT + DOT_GAP) - DOT_GAP
    left = item.x + (item.width - inner) / 2
    dots = tuple(
        Dot(
            id=step.id,
            x=round(left + (position % columns) * (DOT + DOT_GAP), 1),
            y=round(item.y + BLOCK_HEADER + (position // columns) * (DOT + DOT_GAP), 1),
            status=step.status if step.status in STATES else "unknown",
            title=brief(step, now),
        )
        for position, step in enumerate(shown)
    )
    return Block(
        x=round(item.x, 1),
        y=round(item.y, 1),
        width=round(item.width),
        height=round(item.height),
        label=one_line(item.label, BLOCK_CHARS),
        counts=ordered,
        dots=dots,
        hidden=len(item.steps) - len(shown),
        status="done" if set(counts) == {"done"} else "open",
    )


def layout(steps: Iterable[WorkflowStep], now: datetime) -> Graph:
    """The graph of a workflow's ``steps`` (its jobs; ``on_error`` drawn apart)."""
    everything = list(steps)
    handlers = [step for step in everything if step.step == "on_error"]
    # In id order, which is step order: a workflow's ids are reserved in the order its
    # steps are planned (depth first: 0, 1.0, 1.0.0, …, 1.1, 2).
    main = sorted((step for step in everything if step.step != "on_error"), key=_step_id)
    known = {step.id for step in main}
    preds = {
        step.id: tuple(
            pred for pred in dict.fromkeys(step.prev_ids) if pred in known and pred != step.id
        )
        if step.prev_ids
        else ()
        for step in main
    }
    rows: list[list[_Item]] = []
    paths: list[list[_Item]] = []
    undrawn = 0
    if main:
        succs: dict[int, list[int]] = defaultdict(list)  # once: a chord's members have one
        for step in main:
            for pred in preds[step.id]:
                succs[pred].append(step.id)
        rank = _ranks(main, preds, succs)
        rows, item_of = _rows(main, preds, succs, rank)
        links, undrawn = _links(main, preds, item_of)
        paths = _waypoints(rows, links)
        _order(rows)
    if handlers:
        rows.append([_node(step, {}) for step in handlers])
        for item in rows[-1]:
            item.row = len(rows) - 1
    if not rows:
        return Graph(0, 0, (), (), (), 0)
    width, height, heights = _place(rows)
    nodes, blocks = [], []
    for row in rows:
        for item in row:
            if item.kind == "node":
                nodes.append(_drawn_node(item, now, handler=item.steps[0].step == "on_error"))
            elif item.kind == "block":
                blocks.append(_drawn_block(item, now))
    edges = []
    for path in paths:
        source = path[0]
        taken = all(step.status == "done" for step in source.steps)
        edges.append(Edge(_path(path, heights), "done" if taken else "open"))
    return Graph(
        width=round(width),
        height=round(height),
        nodes=tuple(nodes),
        blocks=tuple(blocks),
        edges=tuple(edges),
        steps=len(everything),
        undrawn_edges=undrawn,
    )
