"""Canvas: Celery's ``signature``, ``chain``, ``group``, ``chord``, ``chunks`` and
``map``/``starmap``, enqueued as pgtasks' durable workflows (every job written in one
transaction; each step starts in the transaction that ends its predecessors, a chord's
callback exactly once — there is no ``chord_unlock`` polling). With task_always_eager
they run here, one after the other, as Celery runs them eagerly."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._app import workflows as native_workflows
from ._state import current_app
from .calling import error_callback
from .config import CeleryCompatibilityWarning
from .result import AsyncResult, EagerResult, GroupResult
from .task import register_native

if TYPE_CHECKING:
    from .app import Celery
    from .task import Task

#: Signature options that a workflow step keeps; the others are warned about by name.
STEP_OPTIONS = ("queue", "priority")


class Signature(dict[str, Any]):
    """A task with arguments and options (a dict, as Celery's is): ``task.s(...)``,
    ``task.si(...)``, ``signature("name", args=..., kwargs=...)``."""

    def __init__(
        self,
        task: Task | str | Mapping[str, Any] | None = None,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        type: Task | None = None,
        subtask_type: str | None = None,
        immutable: bool = False,
        app: Celery | None = None,
        **extra_options: Any,
    ) -> None:
        if isinstance(task, Mapping):  # a signature as a dict (a copy, or from JSON)
            fields = dict(task)
            task, args, kwargs = fields.get("task"), fields.get("args"), fields.get("kwargs")
            options, immutable = fields.get("options"), bool(fields.get("immutable"))
            subtask_type = fields.get("subtask_type")
        self._type: Task | None = (
            type if type is not None else (None if isinstance(task, str) or task is None else task)
        )
        name = task if isinstance(task, str) or task is None else task.name
        self._app = app if app is not None else (self._type.app if self._type else None)
        super().__init__(
            task=name,
            args=tuple(args or ()),
            kwargs=dict(kwargs or {}),
            options={**dict(options or {}), **extra_options},
            subtask_type=subtask_type,
            immutable=immutable,
        )

    # Celery's attribute view of the dict
    name = property(lambda self: self["task"])
    task = name
    args = property(lambda self: self["args"])
    kwargs = property(lambda self: self["kwargs"])
    options = property(lambda self: self["options"])
    immutable = property(lambda self: self["immutable"])
    subtask_type = property(lambda self: self["subtask_type"])

    @property
    def app(self) -> Celery:
        if self._app is None:
            self._app = current_app()
        return self._app

    @property
    def type(self) -> Task:
        if self._type is None:
            self._type = self.app.tasks[self.name]
        return self._type

    def __repr__(self) -> str:
        arguments = [repr(value) for value in self.args]
        arguments += [f"{key}={value!r}" for key, value in self.kwargs.items()]
        return f"{self.name}({', '.join(arguments)}){'!' if self.immutable else ''}"

    # -- building --
    def clone(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **opts: Any,
    ) -> Signature:
        """A copy; ``args`` go before its own (a partial's missing first arguments) unless
        it is immutable."""
        if self.immutable:
            args, kwargs = (), {}
        copy = type(self).__new__(type(self))
        dict.update(copy, self)
        copy.__dict__.update(self.__dict__)
        dict.__setitem__(copy, "args", tuple(args or ()) + tuple(self.args))
        dict.__setitem__(copy, "kwargs", {**self.kwargs, **dict(kwargs or {})})
        dict.__setitem__(copy, "options", {**self.options, **opts})
        return copy

    def set(self, immutable: bool | None = None, **options: Any) -> Signature:
        if immutable is not None:
            self["immutable"] = immutable
        self.options.update(options)
        return self

    def set_immutable(self, immutable: bool) -> None:
        self["immutable"] = immutable

    def link(self, callback: Signature) -> Signature:
        self.options.setdefault("link", []).append(callback)
        return callback

    def link_error(self, errback: Signature) -> Signature:
        self.options.setdefault("link_error", []).append(errback)
        return errback

    on_error = link_error

    def __or__(self, other: Any) -> Any:
        if isinstance(other, _chain):
            return _chain(self, *other.tasks)
        if isinstance(other, Signature):
            return _chain(self, other)
        return NotImplemented

    def __invert__(self) -> Any:
        """``~sig``: apply it and wait for its result (Celery's shortcut)."""
        return self.apply_async().get()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task's body here with the signature's arguments (and these first)."""
        partial = self.clone(args, kwargs)
        return self.type(*partial.args, **partial.kwargs)

    # -- running --
    def delay(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Any:
        partial = self.clone(args, kwargs, **options)
        opts = dict(partial.options)
        links, errbacks = opts.pop("link", None), opts.pop("link_error", None)
        return self.type.apply_async(
            partial.args, partial.kwargs, link=links, link_error=errbacks, **opts
        )

    def apply(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> EagerResult:
        partial = self.clone(args, kwargs)
        return self.type.apply(partial.args, partial.kwargs)


def signature(varies: Any, *args: Any, **kwargs: Any) -> Signature:
    """``signature("tasks.add", args=(2, 2), countdown=10)`` or a signature's copy."""
    if isinstance(varies, Signature):
        return varies.clone()
    return Signature(varies, *args, **kwargs)


subtask = signature
maybe_signature = signature


def _flatten(tasks: tuple[Any, ...]) -> list[Any]:
    if len(tasks) == 1 and not isinstance(tasks[0], Signature):
        return list(tasks[0])
    return list(tasks)


class _chain(Signature):
    """Steps one after the other, each receiving the previous result first."""

    def __init__(self, *tasks: Any, **options: Any) -> None:
        steps: list[Signature] = []
        for task in _flatten(tasks):
            steps.extend(task.tasks if isinstance(task, _chain) else [task])
        super().__init__("celery.chain", options=options, subtask_type="chain")
        self.tasks: list[Signature] = steps
        if steps:
            self._app = steps[0].app

    def __repr__(self) -> str:
        return " | ".join(repr(task) for task in self.tasks)

    def __or__(self, other: Any) -> Any:
        if isinstance(other, _chain):
            return _chain(*self.tasks, *other.tasks)
        if isinstance(other, Signature):
            return _chain(*self.tasks, other)
        return NotImplemented

    def clone(self, args: Sequence[Any] | None = None, kwargs: Any = None, **opts: Any) -> Any:
        first, *rest = self.tasks
        return _chain(first.clone(args, kwargs), *rest, **{**self.options, **opts})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        canvas = self.clone(args, kwargs) if args or kwargs else self
        return run_canvas(canvas, options)

    def apply(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        canvas = self.clone(args, kwargs) if args or kwargs else self
        return eager(canvas)


class group(Signature):
    """Members in parallel; the result is the list of theirs, in order."""

    def __init__(self, *tasks: Any, **options: Any) -> None:
        members = _flatten(tasks)
        super().__init__("celery.group", options=options, subtask_type="group")
        self.tasks = members
        if members:
            self._app = members[0].app

    def __repr__(self) -> str:
        return f"group([{', '.join(repr(task) for task in self.tasks)}])"

    def __or__(self, other: Any) -> Any:
        if isinstance(other, Signature) and not isinstance(other, (group, _chain)):
            return chord(self, other)  # as Celery upgrades group | task
        return _chain(self, other) if isinstance(other, Signature) else NotImplemented

    def clone(self, args: Sequence[Any] | None = None, kwargs: Any = None, **opts: Any) -> Any:
        return group([task.clone(args, kwargs) for task in self.tasks], **{**self.options, **opts})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        canvas = self.clone(args, kwargs) if args or kwargs else self
        return run_canvas(canvas, options)

    def apply(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        canvas = self.clone(args, kwargs) if args or kwargs else self
        return eager(canvas)


class chord(Signature):
    """A group, then a body that receives the list of the members' results, once."""

    def __init__(self, header: Any, body: Signature | None = None, **options: Any) -> None:
        members = header.tasks if isinstance(header, group) else _flatten((header,))
        super().__init__("celery.chord", options=options, subtask_type="chord")
        self.tasks = members
        self.body = body
        if members:
            self._app = members[0].app

    def __repr__(self) -> str:
        return f"chord([{', '.join(repr(task) for task in self.tasks)}], {self.body!r})"

    def clone(self, args: Sequence[Any] | None = None, kwargs: Any = None, **opts: Any) -> Any:
        members = [task.clone(args, kwargs) for task in self.tasks]
        return chord(members, self.body, **{**self.options, **opts})

    def __call__(self, body: Signature | None = None, **options: Any) -> Any:
        if body is not None:
            return chord(self.tasks, body, **self.options).apply_async(**options)
        return self.apply_async(**options)

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        if self.body is None:
            raise TypeError("chord(header)(body): the body (callback) is missing")
        canvas = self.clone(args, kwargs) if args or kwargs else self
        return run_canvas(canvas, options)

    def apply(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        canvas = self.clone(args, kwargs) if args or kwargs else self
        return eager(canvas)


def chain(*tasks: Any, **options: Any) -> Any:
    """``chain(a.s(1), b.s(), c.s())`` (a chain of one group and a task is a chord, as
    in Celery)."""
    steps = _flatten(tasks)
    return _chain(*steps, **options)


# -- map, starmap, chunks --------------------------------------------------------------------
def xmap(task: Task, it: Iterable[Any]) -> Signature:
    """One job that applies ``task``'s body to each item of ``it`` (Celery's ``map``)."""
    builtin = task.app.builtin("celery.map")
    return Signature(builtin, (task.name, [_plain(item) for item in it]), immutable=True)


def _plain(item: Any) -> Any:
    """An item as JSON can hold it: a range, tuple or set as a list."""
    if isinstance(item, (range, tuple, set, frozenset)):
        return list(item)
    return item


def xstarmap(task: Task, it: Iterable[Any]) -> Signature:
    """One job that applies ``task``'s body to each item's arguments (``starmap``)."""
    builtin = task.app.builtin("celery.starmap")
    return Signature(builtin, (task.name, [list(item) for item in it]), immutable=True)


class chunks(Signature):
    """``task.chunks(it, n)``: the items in parts of ``n``, each part one starmap job; the
    result is the list of the parts' lists."""

    def __init__(self, task: Task, it: Iterable[Any], n: int) -> None:
        super().__init__("celery.chunks", subtask_type="chunks", app=task.app)
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"chunks(it, n): n must be an int >= 1, got {n!r}")
        items = iter(it)
        self.parts = [list(part) for part in iter(lambda: list(itertools.islice(items, n)), [])]
        self.chunk_task = task

    def group(self) -> group:
        return group([xstarmap(self.chunk_task, part) for part in self.parts])

    def __call__(self, **options: Any) -> Any:
        return self.apply_async(**options)

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        return self.group().apply_async(**options)

    def apply(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        return self.group().apply()


# -- onto pgtasks --------------------------------------------------------------------------
def to_native(app: Celery, canvas: Any) -> Any:
    """The pgtasks canvas of a Celery one (tasks registered with the pgtasks App)."""
    if isinstance(canvas, chunks):
        return to_native(app, canvas.group())
    if isinstance(canvas, _chain):
        return native_workflows.Chain([to_native(app, step) for step in canvas.tasks])
    if isinstance(canvas, group):
        return native_workflows.Group([to_native(app, member) for member in canvas.tasks])
    if isinstance(canvas, chord):
        header = native_workflows.Group([to_native(app, member) for member in canvas.tasks])
        return native_workflows.Chord(header, to_native(app, canvas.body))
    if not isinstance(canvas, Signature):
        raise TypeError(f"expected a signature, chain, group or chord, got {canvas!r}")
    native_task = register_native(canvas.type)
    options = {name: canvas.options[name] for name in STEP_OPTIONS if name in canvas.options}
    dropped = sorted(set(canvas.options) - set(STEP_OPTIONS))
    for name in dropped:
        warnings.warn(
            f"signature option {name!r} of {canvas!r} has no effect on a workflow step"
            " (steps take queue= and priority=)",
            CeleryCompatibilityWarning,
            stacklevel=3,
        )
    return native_workflows.Signature(
        native_task, canvas.args, canvas.kwargs, immutable=canvas.immutable, options=options
    )


def run_canvas(canvas: Signature, options: Mapping[str, Any]) -> Any:
    """Enqueue a chain, group or chord as one workflow; Celery's result shape back: a
    chain's last result (with ``.parent``), a group's GroupResult, a chord's body's."""
    app = canvas.app
    if app.conf.task_always_eager:
        return eager(canvas)
    options = dict(options)
    errback = options.pop("link_error", None)
    for name in options:
        warnings.warn(
            f"option {name!r} of a workflow's apply_async has no effect on pgtasks",
            CeleryCompatibilityWarning,
            stacklevel=3,
        )
    native = to_native(app, canvas)
    on_error = error_callback(app, errback) if errback is not None else None
    if isinstance(native, native_workflows.Signature):
        native = native_workflows.Chain(native)
    handle = native.apply_async(on_error=on_error)
    ends = [AsyncResult(str(job.id), app=app) for job in handle.results]
    if isinstance(canvas, group) or (
        isinstance(canvas, _chain) and isinstance(canvas.tasks[-1], group)
    ):
        return GroupResult(str(handle.id), ends, app=app)
    if isinstance(canvas, chunks):
        return GroupResult(str(handle.id), ends, app=app)
    result = ends[-1]
    if isinstance(canvas, _chain) and all(_plain_step(step) for step in canvas.tasks):
        # A chain of tasks: each result's parent is the step before (res.parent.get()).
        results = [AsyncResult(str(job_id), app=app) for job_id in handle.job_ids]
        for parent, child in itertools.pairwise(results):
            child.parent = parent
        return results[-1]
    return result


def _plain_step(step: Any) -> bool:
    return isinstance(step, Signature) and not isinstance(step, (_chain, group, chord, chunks))


def eager(canvas: Any, args: Sequence[Any] = ()) -> Any:
    """Run a canvas here (task_always_eager): ``args``, the previous result, go first."""
    if isinstance(canvas, chunks):
        return eager(canvas.group(), args)
    if isinstance(canvas, _chain):
        result: Any = None
        for position, step in enumerate(canvas.tasks):
            given = args if position == 0 else (result.get(),)
            result = eager(step, given)
        return result
    if isinstance(canvas, group):
        members = [eager(member, args) for member in canvas.tasks]
        return GroupResult(None, members, app=canvas.app)
    if isinstance(canvas, chord):
        header = [eager(member, args) for member in canvas.tasks]
        return eager(canvas.body, ([result.get() for result in header],))
    return canvas.apply(args)
