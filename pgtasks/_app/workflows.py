"""Workflows: signatures, ``chain``, ``group`` and ``chord``, and their handles.

A workflow is planned here (every job, its predecessors and successors, its input) and
inserted in one transaction with reserved ids so that rows can name each other. Its
progress is the database's: a trigger moves each successor to pending in the
transaction that finished its last predecessor (docs/reference/schema.md).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import psycopg

from .._errors import CrossStoreError, WorkflowError
from .._jobs import InsertedJob, JobSpec, StepJob
from .enqueue import enqueuer
from .handle import JobHandle
from .workflow_results import GroupResult as GroupResult
from .workflow_results import WorkflowResult as WorkflowResult
from .workflow_rows import encode_step, with_meta

if TYPE_CHECKING:
    from .app import App
    from .tasks import Task

#: Signature options (``sig.set(...)``) and what checks them.
SIGNATURE_OPTIONS = ("queue", "priority", "max_attempts")
#: How deeply chains, groups and chords may nest (a signature is depth 0; a chord of
#: signatures 1; a chord with that chord in its header 2, …): deeper is a WorkflowError
#: when it is built. Chains within chains are one chain and do not nest.
MAX_DEPTH = 64
#: Longest shape text kept for a workflow (`pgtasks workflows list`).
MAX_SHAPE_CHARS = 300
#: Group members a shape names before "+N more".
SHAPE_MEMBERS = 4
#: Counts equal members in a row of a group's shape (the multiplication sign).
TIMES = "\N{MULTIPLICATION SIGN}"


class Signature:
    """A task with its arguments, to run as a step of a workflow (``task.s()``).

    A mutable signature (``task.s(...)``) that follows another step receives that step's
    result as its first argument (a list of results after a group); an immutable one
    (``task.si(...)``) receives only its own arguments.
    """

    __slots__ = ("args", "immutable", "kwargs", "options", "task")

    #: Nesting depth (see MAX_DEPTH): a signature nests nothing.
    depth = 0
    #: What a mutable on_error signature receives first: "failure" (the dict describing
    #: the failure) or "request" (Celery's request, exception and traceback: three
    #: arguments, for pgtasks.celery's error callbacks).
    error_input = "failure"

    def __init__(
        self,
        task: Task[Any, Any],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        immutable: bool = False,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        # Duck-typed: tasks.py imports this module (Task.s), not the other way round.
        if not callable(getattr(task, "build_spec", None)) or not hasattr(task, "app"):
            raise WorkflowError(f"a signature needs a registered task, got {task!r}")
        if not isinstance(args, (list, tuple)):
            raise WorkflowError(f"signature args must be a list or tuple, got {args!r}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise WorkflowError(f"signature kwargs must be a mapping, got {kwargs!r}")
        self.task = task
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.immutable = immutable
        self.options: dict[str, Any] = {}
        if options:
            self._check_options(options)
            self.options.update(options)

    def __repr__(self) -> str:
        arguments = [repr(value) for value in self.args]
        arguments += [f"{name}={value!r}" for name, value in self.kwargs.items()]
        return f"{self.task.name}.{'si' if self.immutable else 's'}({', '.join(arguments)})"

    @staticmethod
    def _check_options(options: Mapping[str, Any]) -> None:
        unknown = set(options) - set(SIGNATURE_OPTIONS)
        if unknown:
            raise WorkflowError(
                f"unknown signature option(s) {', '.join(sorted(unknown))};"
                f" accepted: {', '.join(SIGNATURE_OPTIONS)}"
            )

    def set(self, **options: Any) -> Signature:
        """A copy with job options (queue, priority, max_attempts) changed."""
        return Signature(
            self.task,
            self.args,
            self.kwargs,
            immutable=self.immutable,
            options={**self.options, **options},
        )

    def __or__(self, other: Canvas) -> Chain:
        return Chain(self, other)

    def delay(self, *args: Any, **kwargs: Any) -> JobHandle[Any]:
        """Enqueue this signature alone as a plain job (extra arguments appended)."""
        return self.apply_async(args, kwargs)

    def apply_async(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        connection: psycopg.Connection[Any] | None = None,
    ) -> JobHandle[Any]:
        """Enqueue this signature alone as a plain job (``args`` appended)."""
        return self.task.apply_async(
            (*self.args, *args),
            {**self.kwargs, **(kwargs or {})},
            connection=connection,
            **self.options,
        )


class _Workflow:
    """What chain, group and chord share: enqueueing and ``|``."""

    kind = ""
    #: A signature enqueued once when a job of the workflow fails for good.
    on_error: Signature | None = None
    #: Nesting depth (see MAX_DEPTH), computed from the parts when built.
    depth = 1

    def _nest(self, parts: Iterable[Canvas]) -> None:
        """Set this workflow's depth from its parts (already built and checked)."""
        self.depth = 1 + max((part.depth for part in parts), default=0)
        if self.depth > MAX_DEPTH:
            raise WorkflowError(
                f"workflows nest at most {MAX_DEPTH} deep (a chain, group or chord inside"
                f" another); this {self.kind} would be {self.depth} deep: flatten it (a chain"
                " of chords runs them one after the other)"
            )

    def __or__(self, other: Canvas) -> Chain:
        return Chain(cast("Canvas", self), other)

    def delay(self) -> WorkflowResult:
        return self.apply_async()

    def apply_async(
        self,
        *,
        connection: psycopg.Connection[Any] | None = None,
        on_error: Signature | None = None,
    ) -> WorkflowResult:
        """Insert the workflow (all its jobs, in one transaction) and return its handle.

        With ``connection=`` the rows join the caller's transaction: visible on commit,
        gone on rollback. ``on_error``: a signature enqueued once when a job of the
        workflow fails for good (a mutable one receives a dict describing the failure).
        """
        return enqueue_workflow(
            cast("Canvas", self),
            connection=connection,
            on_error=on_error if on_error else self.on_error,
        )

    async def adelay(self) -> WorkflowResult:
        return await self.aapply_async()

    async def aapply_async(
        self,
        *,
        connection: psycopg.AsyncConnection[Any] | None = None,
        on_error: Signature | None = None,
    ) -> WorkflowResult:
        """The async twin of :meth:`apply_async`."""
        return await aenqueue_workflow(
            cast("Canvas", self),
            connection=connection,
            on_error=on_error if on_error else self.on_error,
        )


class Chain(_Workflow):
    """Steps run one after the other, each receiving the previous step's result."""

    kind = "chain"

    def __init__(self, *steps: Canvas | Iterable[Canvas]) -> None:
        if len(steps) == 1 and not isinstance(steps[0], (Signature, _Workflow)):
            steps = tuple(steps[0])
        self.steps: list[Canvas] = []
        for step in steps:
            _check_canvas(step, "a chain step")
            # A chain within a chain is the same chain (as in Celery).
            self.steps.extend(step.steps if isinstance(step, Chain) else [step])  # type: ignore[list-item]
        if not self.steps:
            raise WorkflowError("a chain needs at least one step")
        self._nest(self.steps)

    def __repr__(self) -> str:
        return " | ".join(repr(step) for step in self.steps)


class Group(_Workflow):
    """Members run in parallel; the group's result is the list of theirs, in order."""

    kind = "group"

    def __init__(self, *members: Canvas | Iterable[Canvas]) -> None:
        if len(members) == 1 and not isinstance(members[0], (Signature, _Workflow)):
            members = tuple(members[0])
        for member in members:
            _check_canvas(member, "a group member")
        self.members: list[Canvas] = list(members)  # type: ignore[arg-type]
        if not self.members:
            raise WorkflowError("a group needs at least one member (got an empty group)")
        self._nest(self.members)

    def __repr__(self) -> str:
        return f"group({', '.join(repr(member) for member in self.members)})"


class Chord(_Workflow):
    """A group, then a callback that receives the list of the members' results."""

    kind = "chord"

    def __init__(
        self,
        header: Group | Iterable[Canvas],
        body: Canvas,
        *,
        on_error: Signature | None = None,
    ) -> None:
        self.header = header if isinstance(header, Group) else Group(list(header))
        _check_canvas(body, "a chord callback")
        self.body = body
        self.on_error = on_error
        self._nest([*self.header.members, body])

    def __repr__(self) -> str:
        return f"chord({self.header!r}, {self.body!r})"


Canvas = Signature | Chain | Group | Chord


def chain(*steps: Canvas | Iterable[Canvas]) -> Chain:
    """``chain(a.s(1), b.s(), c.s())``: each step after the previous one, with its result."""
    return Chain(*steps)


def group(*members: Canvas | Iterable[Canvas]) -> Group:
    """``group(a.s(1), a.s(2))`` (or ``group(generator)``): members run in parallel."""
    return Group(*members)


def chord(
    header: Group | Iterable[Canvas],
    body: Canvas | None = None,
    *,
    on_error: Signature | None = None,
) -> Chord:
    """``chord(group(...), callback.s())``: the callback runs once, after every member,
    with the list of their results. A failed member means no callback; ``on_error``
    (a signature) then runs once, with a dict describing the failure."""
    if body is None:
        raise WorkflowError("chord(header, body): the callback signature is missing")
    return Chord(header, body, on_error=on_error)


def _check_canvas(value: object, what: str) -> None:
    if not isinstance(value, (Signature, _Workflow)):
        raise WorkflowError(
            f"{what} must be a signature (task.s(...) or task.si(...)), a chain, a group"
            f" or a chord, got {value!r}"
        )


def shape(element: Canvas) -> str:
    """A workflow as one short line of text, ``a → [3 TIMES b] → c`` (TIMES, the sign) for
    ``chain(a.s(), chord([b.s(1), b.s(2), b.s(3)], c.s()))`` (a chord is its group, then its
    callback; equal members in a row are counted); cut to MAX_SHAPE_CHARS."""
    text = _shape(element, nested=False)
    return text if len(text) <= MAX_SHAPE_CHARS else text[: MAX_SHAPE_CHARS - 1] + "…"


def _shape(element: Canvas, *, nested: bool) -> str:
    """``nested``: a member of a group, where a sequence is put in parentheses."""
    if isinstance(element, Signature):
        return element.task.name
    if isinstance(element, Group):
        runs: list[list[Any]] = []
        for member in element.members:
            text = _shape(member, nested=True)
            if runs and runs[-1][0] == text:
                runs[-1][1] += 1
            else:
                runs.append([text, 1])
        shown = [text if count == 1 else f"{count}{TIMES}{text}" for text, count in runs]
        if len(shown) > SHAPE_MEMBERS:
            hidden = sum(count for _, count in runs[SHAPE_MEMBERS:])
            shown = [*shown[:SHAPE_MEMBERS], f"+{hidden} more"]
        return f"[{', '.join(shown)}]"
    if isinstance(element, Chain):
        parts = [_shape(step, nested=False) for step in element.steps]
    else:
        parts = [_shape(element.header, nested=False), _shape(element.body, nested=False)]
    text = " → ".join(parts)
    return f"({text})" if nested and len(parts) > 1 else text


# -- planning ---------------------------------------------------------------------------------
@dataclasses.dataclass
class _Node:
    signature: Signature
    step: str
    prev: list[int]
    input_mode: str | None
    next: list[int] = dataclasses.field(default_factory=list)


class _Plan:
    """The jobs of a workflow, their links and what its result is made of."""

    def __init__(self, root: Canvas) -> None:
        self.nodes: list[_Node] = []
        self.terminals, self.terminal_kind = self._build(root, [], None, "")

    def _build(
        self, element: Canvas, prev: list[int], kind: str | None, step: str
    ) -> tuple[list[int], str | None]:
        """Add ``element`` after ``prev`` (whose result is one value or a list: ``kind``);
        return its own last jobs and the kind of its result."""
        if step and isinstance(element, _Workflow) and element.on_error is not None:
            raise WorkflowError(
                f"on_error= applies to a whole workflow: pass it to the outermost one,"
                f" not to {element!r}"
            )
        if isinstance(element, Signature):
            mode = None if element.immutable or not prev else kind
            index = len(self.nodes)
            self.nodes.append(_Node(element, step or "0", list(prev), mode))
            for predecessor in prev:
                self.nodes[predecessor].next.append(index)
            return [index], "one"
        if isinstance(element, Chain):
            for position, child in enumerate(element.steps):
                prev, kind = self._build(child, prev, kind, _join(step, position))
            return prev, kind
        if isinstance(element, Group):
            terminals: list[int] = []
            for position, member in enumerate(element.members):
                ends, member_kind = self._build(member, prev, kind, _join(step, position))
                if member_kind != "one":
                    raise WorkflowError(
                        f"group member {member!r} ends in a group: a member must end in one"
                        " task (use a chord to gather a nested group)"
                    )
                terminals.extend(ends)
            return terminals, "list"
        # Chord: the header, then the body after all of it.
        ends, _ = self._build(element.header, prev, kind, _join(step, 0))
        return self._build(element.body, ends, "list", _join(step, 1))

    def steps(self, app: App) -> tuple[StepJob, ...]:
        """The jobs to insert, validated and encoded once (raises before writing)."""
        return tuple(
            StepJob(
                encode_step(app, node.signature, node.input_mode is not None, f"step {node.step}"),
                node.step,
                node.input_mode,
                tuple(node.prev),
                tuple(node.next),
            )
            for node in self.nodes
        )


def _join(step: str, position: int) -> str:
    return f"{step}.{position}" if step else str(position)


def _on_error_job(app: App, on_error: Signature | None) -> StepJob | None:
    """The on_error job, validated and encoded (the workflow's failure inserts it)."""
    if on_error is None:
        return None
    if not isinstance(on_error, Signature):
        raise WorkflowError(
            f"on_error= must be a signature (task.s() or task.si()), got {on_error!r}"
        )
    inputs = 0 if on_error.immutable else 3 if on_error.error_input == "request" else 1
    spec = encode_step(app, on_error, inputs, "on_error")
    mode = None if on_error.immutable else "request" if inputs == 3 else "one"
    return StepJob(spec, "on_error", mode, (), ())


def _on_error_json(job: StepJob) -> str:
    """The on_error job as the workflows row keeps it (the trigger inserts it), its
    arguments spliced in as they were encoded."""
    spec = job.spec
    fields = {
        "task_name": spec.task_name,
        "queue": spec.queue,
        "priority": spec.priority,
        "max_attempts": spec.max_attempts,
        "input_mode": job.input_mode,
    }
    return f'{json.dumps(fields)[:-1]}, "args": {spec.args_json}, "kwargs": {spec.kwargs_json}}}'


@dataclasses.dataclass
class _Prepared:
    """A workflow planned, validated and encoded, ready to be written."""

    app: App
    kind: str
    plan: _Plan
    steps: tuple[StepJob, ...]
    on_error: str | None
    shape: str

    def handle(self, workflow_id: int, ids: Sequence[int]) -> WorkflowResult:
        # JobHandle, not JobHandle[Any]: a subscripted class costs a typing call per handle.
        app = self.app
        terminals: list[JobHandle[Any]] = [JobHandle(app, ids[i]) for i in self.plan.terminals]
        handle_type = GroupResult if self.plan.terminal_kind == "list" else WorkflowResult
        result = handle_type(self.app, workflow_id, terminals, kind=self.kind)
        result.job_ids = list(ids)
        return result


def _prepare(
    root: Canvas,
    on_error: Signature | None,
    first_meta: str | None = None,
) -> _Prepared:
    """Plan, validate and encode ``root`` (raises before anything is written);
    ``first_meta``: the meta (JSON text) of the first step's job."""
    if isinstance(root, Signature):
        root = Chain(root)
    plan = _Plan(root)
    app = plan.nodes[0].signature.task.app
    for node in plan.nodes:
        if node.signature.task.app is not app:
            raise WorkflowError("every task of a workflow must belong to the same app")
    if app.is_eager:
        raise WorkflowError(
            "workflows are not run in eager mode: run them against a database (a test"
            " can use a worker, see docs/howto/testing.md)"
        )
    steps = plan.steps(app)
    if first_meta is not None:
        first = steps[0]
        steps = (
            dataclasses.replace(first, spec=dataclasses.replace(first.spec, meta_json=first_meta)),
            *steps[1:],
        )
    on_error_job = _on_error_job(app, on_error)
    if not app.store_router.single:  # every step in one store: the triggers stay transactional
        queues = [(f"step {step.step}", step.spec.queue) for step in steps]
        if on_error_job is not None:
            queues.append(("on_error", on_error_job.spec.queue))
        app = app.for_store(_one_store(app, queues))
    on_error_json = None if on_error_job is None else _on_error_json(on_error_job)
    return _Prepared(app, root.kind, plan, steps, on_error_json, shape(root))


def _first_queue(plan: _Plan) -> str:
    signature = plan.nodes[0].signature
    return str(signature.options.get("queue") or signature.task.queue)


def _one_store(app: App, steps: list[tuple[str, str]]) -> str:
    """The one store of a workflow's steps (``(step, queue)``); CrossStoreError naming
    a step of each store otherwise."""
    first_step, first_queue = steps[0]
    home = app.store_of_queue(first_queue)
    for step, queue in steps[1:]:
        store = app.store_of_queue(queue)
        if store != home:
            raise CrossStoreError(
                f"a workflow's steps must route to one store: {first_step} (queue"
                f" {first_queue!r}) goes to store {home!r}, {step} (queue {queue!r}) to"
                f" store {store!r}. Route their queues to one store, or enqueue the"
                " other store's work from a task"
            )
    return home


def enqueue_workflow(
    root: Canvas,
    *,
    connection: psycopg.Connection[Any] | None = None,
    on_error: Signature | None = None,
    first_meta: str | None = None,
    first_schedule: tuple[datetime | None, float | None] = (None, None),
) -> WorkflowResult:
    """Plan, validate and insert ``root``; see :meth:`_Workflow.apply_async`
    (``first_meta``: the meta, JSON text, of the first step's job; ``first_schedule``:
    its (run_at, delay), as :func:`pgtasks._validation.schedule_of` gives them; the first
    step must then be the only one without predecessors)."""
    prepared = _prepare(root, on_error, first_meta)
    app, plan, steps, store = prepared.app, prepared.plan, prepared.steps, enqueuer(prepared.app)

    def write(conn: psycopg.Connection[Any]) -> tuple[int, list[int]]:
        workflow_id = store.insert_workflow(
            conn, kind=prepared.kind, on_error=prepared.on_error, shape=prepared.shape
        )
        ids = store.reserve_job_ids(conn, len(steps))

        def insert_steps(specs: Sequence[JobSpec]) -> list[InsertedJob]:
            traced = with_meta(steps, specs)
            store.insert_workflow_jobs(conn, workflow_id=workflow_id, ids=ids, steps=traced)
            return [InsertedJob(job_id, False) for job_id in ids]

        if app.instrumentation is None:
            store.insert_workflow_jobs(conn, workflow_id=workflow_id, ids=ids, steps=steps)
        else:  # tracing: the steps' meta carries the context of their enqueue
            app.instrumentation.insert([step.spec for step in steps], insert_steps)
        if first_schedule != (None, None):
            run_at, delay = first_schedule
            store.schedule_workflow_job(conn, ids[0], run_at=run_at, delay=delay)
        return workflow_id, ids

    def insert(conn: psycopg.Connection[Any]) -> tuple[int, list[int]]:
        # A connection outside autocommit is in the caller's transaction already (the
        # rows commit or roll back with it); in autocommit, one transaction of our own.
        if not conn.autocommit:
            return write(conn)
        with conn.transaction():
            return write(conn)

    if connection is not None:
        if not app.store_router.single:
            app.store_router.check_connection(connection, app.store_name, _first_queue(plan))
        app.database.check_schema(connection)
        workflow_id, ids = insert(connection)
    else:
        workflow_id, ids = app.database.run(insert)
    return prepared.handle(workflow_id, ids)


async def aenqueue_workflow(
    root: Canvas,
    *,
    connection: psycopg.AsyncConnection[Any] | None = None,
    on_error: Signature | None = None,
) -> WorkflowResult:
    """The async twin of :func:`enqueue_workflow`."""
    prepared = _prepare(root, on_error)
    app, plan, steps, store = prepared.app, prepared.plan, prepared.steps, enqueuer(prepared.app)

    async def write(conn: psycopg.AsyncConnection[Any]) -> tuple[int, list[int]]:
        workflow_id = await store.ainsert_workflow(
            conn, kind=prepared.kind, on_error=prepared.on_error, shape=prepared.shape
        )
        ids = await store.areserve_job_ids(conn, len(steps))

        async def insert_steps(specs: Sequence[JobSpec]) -> list[InsertedJob]:
            traced = with_meta(steps, specs)
            await store.ainsert_workflow_jobs(conn, workflow_id=workflow_id, ids=ids, steps=traced)
            return [InsertedJob(job_id, False) for job_id in ids]

        if app.instrumentation is None:
            await store.ainsert_workflow_jobs(conn, workflow_id=workflow_id, ids=ids, steps=steps)
        else:
            await app.instrumentation.ainsert([step.spec for step in steps], insert_steps)
        return workflow_id, ids

    async def insert(conn: psycopg.AsyncConnection[Any]) -> tuple[int, list[int]]:
        if not conn.autocommit:
            return await write(conn)
        async with conn.transaction():
            return await write(conn)

    if connection is not None:
        if not app.store_router.single:
            await app.store_router.acheck_connection(connection, app.store_name, _first_queue(plan))
        await app.database.acheck_schema(connection)
        workflow_id, ids = await insert(connection)
    else:
        workflow_id, ids = await app.database.arun(insert)
    return prepared.handle(workflow_id, ids)
