"""Workflows: signatures, ``chain``, ``group`` and ``chord``, and their handles.

A workflow is planned here (every job, its predecessors and successors, its input) and
inserted in one transaction with reserved ids so that rows can name each other. Its
progress is the database's: the trigger of migration 0011 moves each successor to
pending in the transaction that finished its last predecessor (see the migration).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import psycopg

from .._errors import JobCancelled, WorkflowError, WorkflowNotFoundError
from .._jobs import InsertedJob, JobSpec
from .._payload import encode_arguments
from .handle import JobHandle
from .limits import job_limits

if TYPE_CHECKING:
    from .app import App
    from .tasks import Task

#: Signature options (``sig.set(...)``) and what checks them.
SIGNATURE_OPTIONS = ("queue", "priority", "max_attempts")


class Signature:
    """A task with its arguments, to run as a step of a workflow (``task.s()``).

    A mutable signature (``task.s(...)``) that follows another step receives that step's
    result as its first argument (a list of results after a group); an immutable one
    (``task.si(...)``) receives only its own arguments.
    """

    __slots__ = ("args", "immutable", "kwargs", "options", "task")

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

    def rows(self, app: App, ids: Sequence[int]) -> list[dict[str, Any]]:
        """Validated, encoded rows for ``insert_workflow_jobs`` (raises before writing)."""
        rows = []
        for node, job_id in zip(self.nodes, ids, strict=True):
            row = _encode(app, node.signature, node.input_mode is not None, f"step {node.step}")
            row.update(
                id=job_id,
                step=node.step,
                next=[ids[index] for index in node.next],
                prev=[ids[index] for index in node.prev],
                input_mode=node.input_mode,
            )
            rows.append(row)
        return rows


def _encode(app: App, signature: Signature, receives_input: bool, label: str) -> dict[str, Any]:
    """The job columns of a signature, validated and encoded (raises before writing)."""
    task = signature.task
    if app.tasks.get(task.name) is not task:
        raise WorkflowError(f"task {task.name!r} of {signature!r} is not registered with this app")
    # A step that receives an input gets it as its first positional argument.
    placeholder = (None,) if receives_input else ()
    try:
        task.signature.bind(*placeholder, *signature.args, **signature.kwargs)
    except TypeError as error:
        received = " (after the input it receives first)" if receives_input else ""
        raise WorkflowError(
            f"arguments of {label} {signature!r}{received} do not match task {task.name!r}: {error}"
        ) from None
    args_json, kwargs_json = encode_arguments(
        task.name,
        signature.args,
        signature.kwargs,
        max_bytes=app.max_payload_bytes,
        parameter_names=task.parameter_names[len(placeholder) :],
    )
    options = signature.options
    try:
        spec = (
            task.build_spec((*placeholder, *signature.args), signature.kwargs, **options)
            if options
            else None
        )
    except (TypeError, ValueError) as error:
        raise WorkflowError(f"options of {label} {signature!r}: {error}") from None
    queue = spec.queue if spec else task.queue
    limit_groups, limit_key = _limits(app, signature, queue, receives_input, label)
    return {
        "task_name": task.name,
        "queue": queue,
        "priority": spec.priority if spec else task.priority,
        "max_attempts": spec.max_attempts if spec else task.max_attempts,
        "args_json": args_json,
        "kwargs_json": kwargs_json,
        "limit_groups": limit_groups,
        "limit_key": limit_key,
    }


def _limits(
    app: App, signature: Signature, queue: str, receives_input: bool, label: str
) -> tuple[list[str] | None, str | None]:
    """The concurrency and rate limits a step counts in, as a plain enqueue computes them."""
    task_limits = signature.task.limits
    queue_limits = app.queue_limits.get(queue)
    if task_limits is None and queue_limits is None:
        return None, None
    if receives_input and task_limits is not None and task_limits.concurrency_key is not None:
        # The key is computed from the arguments when the workflow is written; the input
        # this step receives from the step before does not exist yet.
        raise WorkflowError(
            f"{label} {signature!r}: task {signature.task.name!r} has a concurrency_key=, which"
            " needs all of the job's arguments when the workflow is written; make the step"
            " immutable (.si()) so that it does not receive the previous result"
        )
    return job_limits(task_limits, queue_limits, signature.args, signature.kwargs)


def _join(step: str, position: int) -> str:
    return f"{step}.{position}" if step else str(position)


def _on_error_spec(app: App, on_error: Signature | None) -> str | None:
    """The on_error job as the workflows row keeps it (the trigger inserts it)."""
    if on_error is None:
        return None
    if not isinstance(on_error, Signature):
        raise WorkflowError(
            f"on_error= must be a signature (task.s() or task.si()), got {on_error!r}"
        )
    row = _encode(app, on_error, not on_error.immutable, "on_error")
    return json.dumps(
        {
            "task_name": row["task_name"],
            "queue": row["queue"],
            "priority": row["priority"],
            "max_attempts": row["max_attempts"],
            "args": json.loads(row["args_json"]),
            "kwargs": json.loads(row["kwargs_json"]),
            "input_mode": None if on_error.immutable else "one",
        }
    )


@dataclasses.dataclass
class _Prepared:
    """A workflow planned, validated and encoded, ready to be written."""

    app: App
    kind: str
    plan: _Plan
    on_error: str | None

    def handle(self, workflow_id: int, ids: Sequence[int]) -> WorkflowResult:
        terminals = [JobHandle[Any](self.app, ids[index]) for index in self.plan.terminals]
        handle_type = GroupResult if self.plan.terminal_kind == "list" else WorkflowResult
        return handle_type(self.app, workflow_id, terminals, kind=self.kind)


def _prepare(root: Canvas, on_error: Signature | None) -> _Prepared:
    """Plan, validate and encode ``root`` (raises before anything is written)."""
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
    plan.rows(app, list(range(len(plan.nodes))))
    return _Prepared(app, root.kind, plan, _on_error_spec(app, on_error))


def enqueue_workflow(
    root: Canvas,
    *,
    connection: psycopg.Connection[Any] | None = None,
    on_error: Signature | None = None,
) -> WorkflowResult:
    """Plan, validate and insert ``root``; see :meth:`_Workflow.apply_async`."""
    prepared = _prepare(root, on_error)
    app, plan, store = prepared.app, prepared.plan, prepared.app.store

    def write(conn: psycopg.Connection[Any]) -> tuple[int, list[int]]:
        workflow_id = store.insert_workflow(conn, kind=prepared.kind, on_error=prepared.on_error)
        ids = store.reserve_job_ids(conn, len(plan.nodes))
        rows = plan.rows(app, ids)

        def insert_rows(specs: Sequence[JobSpec]) -> list[InsertedJob]:
            _take_meta(rows, specs)
            store.insert_workflow_jobs(conn, workflow_id=workflow_id, jobs=rows)
            return [InsertedJob(job_id, False) for job_id in ids]

        if app.instrumentation is None:
            store.insert_workflow_jobs(conn, workflow_id=workflow_id, jobs=rows)
        else:  # tracing: the steps' meta carries the context of their enqueue
            app.instrumentation.insert(_specs(rows), insert_rows)
        return workflow_id, ids

    def insert(conn: psycopg.Connection[Any]) -> tuple[int, list[int]]:
        # A connection outside autocommit is in the caller's transaction already (the
        # rows commit or roll back with it); in autocommit, one transaction of our own.
        if not conn.autocommit:
            return write(conn)
        with conn.transaction():
            return write(conn)

    if connection is not None:
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
    app, plan, store = prepared.app, prepared.plan, prepared.app.store

    async def write(conn: psycopg.AsyncConnection[Any]) -> tuple[int, list[int]]:
        workflow_id = await store.ainsert_workflow(
            conn, kind=prepared.kind, on_error=prepared.on_error
        )
        ids = await store.areserve_job_ids(conn, len(plan.nodes))
        rows = plan.rows(app, ids)

        async def insert_rows(specs: Sequence[JobSpec]) -> list[InsertedJob]:
            _take_meta(rows, specs)
            await store.ainsert_workflow_jobs(conn, workflow_id=workflow_id, jobs=rows)
            return [InsertedJob(job_id, False) for job_id in ids]

        if app.instrumentation is None:
            await store.ainsert_workflow_jobs(conn, workflow_id=workflow_id, jobs=rows)
        else:
            await app.instrumentation.ainsert(_specs(rows), insert_rows)
        return workflow_id, ids

    async def insert(conn: psycopg.AsyncConnection[Any]) -> tuple[int, list[int]]:
        if not conn.autocommit:
            return await write(conn)
        async with conn.transaction():
            return await write(conn)

    if connection is not None:
        await app.database.acheck_schema(connection)
        workflow_id, ids = await insert(connection)
    else:
        workflow_id, ids = await app.database.arun(insert)
    return prepared.handle(workflow_id, ids)


def _specs(rows: Sequence[dict[str, Any]]) -> list[JobSpec]:
    """The steps as the jobs an instrumentation sees (tracing adds their meta)."""
    return [
        JobSpec(
            row["task_name"],
            row["queue"],
            row["priority"],
            row["args_json"],
            row["kwargs_json"],
            row["max_attempts"],
        )
        for row in rows
    ]


def _take_meta(rows: Sequence[dict[str, Any]], specs: Sequence[JobSpec]) -> None:
    if len(specs) != len(rows):
        raise RuntimeError("the instrumentation changed the number of workflow steps")
    for row, spec in zip(rows, specs, strict=True):
        row["meta_json"] = spec.meta_json


# -- handles ----------------------------------------------------------------------------------
class WorkflowResult:
    """A workflow by id; ``get()`` returns its result (the last step's; a list after a
    group), ``status`` reads its state, ``cancel()`` cancels what has not run."""

    def __init__(
        self, app: App, workflow_id: int, terminals: Sequence[JobHandle[Any]], *, kind: str
    ) -> None:
        self.app = app
        self.id = workflow_id
        self.kind = kind
        #: The jobs whose results make the workflow's result.
        self.results = list(terminals)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} id={self.id} kind={self.kind}>"

    def _wait(self, timeout: float | None) -> list[Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for job in self.results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                values.append(job.get(timeout=remaining))
            except JobCancelled as error:
                raise JobCancelled(job.id, job.refresh().last_error) from error
        return values

    async def _await(self, timeout: float | None) -> list[Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for job in self.results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                values.append(await job.aget(timeout=remaining))
            except JobCancelled as error:
                raise JobCancelled(job.id, (await job.arefresh()).last_error) from error
        return values

    async def aget(self, timeout: float | None = None) -> Any:
        """The async twin of :meth:`get`."""
        return (await self._await(timeout))[0]

    def get(self, timeout: float | None = None) -> Any:
        """Wait for the workflow's result. Raises TaskFailed for a failed last step,
        JobCancelled (with the reason, naming the step that ended the workflow) for a
        step that was not run, TimeoutError after ``timeout`` seconds."""
        return self._wait(timeout)[0]

    @property
    def status(self) -> str:
        """``running`` while a job is unfinished, then ``done``, ``failed`` or ``cancelled``."""
        return str(self.app.get_workflow(self.id)["status"])

    def cancel(self) -> int:
        """Cancel every job that has not run (running ones are asked to stop); returns how
        many jobs were cancelled or asked to stop."""
        return self.app.cancel_workflow(self.id)


class GroupResult(WorkflowResult):
    """A workflow ending in a group: ``get()`` returns the members' results in order."""

    def get(self, timeout: float | None = None) -> list[Any]:
        return self._wait(timeout)

    async def aget(self, timeout: float | None = None) -> list[Any]:
        return await self._await(timeout)


def describe_workflow(app: App, workflow_id: int) -> dict[str, Any]:
    """The workflow's row and its jobs (``app.get_workflow``)."""
    row = app.database.run(lambda conn: app.store.get_workflow(conn, workflow_id))
    if row is None:
        raise WorkflowNotFoundError(
            f"workflow {workflow_id} does not exist (its jobs may have been pruned)"
        )
    jobs = app.database.run(lambda conn: app.store.get_workflow_jobs(conn, workflow_id))
    return {**row, "jobs": jobs}
