"""Routing: which store serves what, for one App: the App of one of its stores
(``app.for_store(name)``), the store of an enqueue (its queue's route) and of a job or
workflow (its id).

``app.for_store(name)`` is the App seen from one store: the same tasks, schedules and
options, whose ``database`` is that store's. Everything written for one database (a
Worker, Beat, the admin operations, a JobHandle) works on it unchanged; an App of one
store is its own and only one, so none of this costs it anything.

Each App holds a Routing (``app.routing``) built from its StoreRouter, itself, the store
it serves and a maker of store views; Routing never imports App (a view is any
:class:`StoreView`). Every caller asks ``app.routing`` (``app.routing.for_id(id)``...).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import psycopg

from .._errors import CrossStoreError
from .._jobs import JobSpec
from .._store.database import Database
from .._store.queries import Queries
from .layout import DEFAULT_STORE
from .limits import QueueLimits, TaskLimits
from .store_router import StoreRouter


class StoreView(Protocol):
    """What routing reads of the App of one store (and the base of every App Protocol of
    _app: its database and its statements)."""

    @property
    def database(self) -> Database: ...

    @property
    def queries(self) -> Queries: ...


class RoutedTask(Protocol):
    """What routing reads of a task: where its jobs and its limits live."""

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def limits(self) -> TaskLimits | None: ...


V = TypeVar("V", bound=StoreView)


class Routing(Generic[V]):
    """The routes of one App (``here``): ``store`` is the one store it serves (None: the
    App of every store, the root), ``make_view(name)`` builds the App of a store (the
    root's routing does, once per store: ``views``)."""

    def __init__(
        self,
        stores: StoreRouter,
        here: V,
        *,
        store: str | None,
        tasks: Mapping[str, RoutedTask],
        make_view: Callable[[str], V],
        root: Routing[V] | None = None,
    ) -> None:
        self.stores = stores
        self.here = here
        self.store = store
        self.tasks = tasks
        self._make_view = make_view
        self._root: Routing[V] = self if root is None else root
        #: The App of each store (``for_store``; one dict, the root's, shared).
        self.views: dict[str, V] = {} if root is None else root.views
        self._lock = threading.Lock()

    def after_fork(self) -> None:
        """In a forked child: another thread may have held the lock during the fork."""
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The name of the store ``here`` serves (an App of several: the default one)."""
        return self.store or DEFAULT_STORE

    @property
    def serves_one(self) -> bool:
        """Whether ``here`` serves one store (an App of one, or of one of several)."""
        return self.stores.single or self.store is not None

    def for_store(self, name: str) -> V:
        """The App of store ``name`` (made once per store, shared)."""
        if self.name == name and self.serves_one:
            return self.here  # (an App of several stores has an App of its default store too)
        root = self._root
        view = root.views.get(name)
        if view is None:
            self.stores.layout.check_store(name)
            with root._lock:
                view = root.views.get(name)
                if view is None:
                    view = root.views[name] = root._make_view(name)
        return view

    def for_specs(
        self, specs: Sequence[JobSpec], connection: psycopg.Connection[Any] | None = None
    ) -> V:
        """The App of the store these jobs go to (their queues' one store): CrossStoreError
        when they span stores, or a limited task goes to another store than its queue's."""
        name = self.store_of_specs(specs)
        if connection is not None:
            self.stores.check_connection(connection, name, specs[0].queue)
        return self.for_store(name)

    async def afor_specs(
        self, specs: Sequence[JobSpec], connection: psycopg.AsyncConnection[Any] | None
    ) -> V:
        name = self.store_of_specs(specs)
        if connection is not None:
            await self.stores.acheck_connection(connection, name, specs[0].queue)
        return self.for_store(name)

    def store_of_specs(self, specs: Sequence[JobSpec]) -> str:
        stores = self.stores
        if len(specs) == 1:  # delay(): one route to read
            spec = specs[0]
            name = stores.store_of_queue(spec.queue)
            self._check_limited(spec, name)
            return name
        names = {spec.queue: stores.store_of_queue(spec.queue) for spec in specs}
        if len(set(names.values())) > 1:
            routes = ", ".join(f"{queue} → {name}" for queue, name in sorted(names.items()))
            raise CrossStoreError(
                f"these jobs go to several stores ({routes}): one enqueue writes to one store"
                " (all or none); enqueue each store's jobs on their own"
            )
        name = next(iter(names.values()))
        for spec in specs:
            self._check_limited(spec, name)
        return name

    def _check_limited(self, spec: JobSpec, name: str) -> None:
        """A job of a task with limits goes to its task's queue's store (CrossStoreError)."""
        task = self.tasks.get(spec.task_name)
        if task is not None and task.limits is not None:
            home = self.stores.store_of_queue(task.queue)
            if home != name:
                raise CrossStoreError(
                    f"task {task.name!r} has limits, held in store {home!r} (its queue"
                    f" {task.queue!r}); queue {spec.queue!r} routes to store {name!r}: a"
                    " limit counts one store's jobs, so a limited task's jobs stay in its"
                    " queue's store"
                )

    def for_queue(self, queue: str) -> V:
        """The App of the store ``queue`` routes to (the App of one store: itself)."""
        if self.serves_one:
            return self.here
        return self.for_store(self.stores.store_of_queue(queue))

    def held(
        self, queue_limits: Mapping[str, QueueLimits]
    ) -> tuple[list[RoutedTask], list[QueueLimits]]:
        """The tasks and queue limits whose limits this App's store holds: a limit lives
        in the store of its queue (a task's: the task's queue), where its jobs are counted;
        every one for an App of one store or of several (the root)."""
        # Each task once (a renamed task is registered under its aliases too).
        tasks = [task for name, task in self.tasks.items() if name == task.name]
        queues = list(queue_limits.values())
        if self.stores.single or self.store is None:
            return tasks, queues
        here, route = self.store, self.stores.store_of_queue
        return (
            [task for task in tasks if route(task.queue) == here],
            [limits for limits in queues if route(limits.queue) == here],
        )

    def serving(self) -> list[V]:
        """The Apps of the stores this App serves: every store for an App of several,
        else its one."""
        if self.serves_one:
            return [self.here]
        return [self.for_store(name) for name in self.stores.names]

    def for_id(self, object_id: int) -> V:
        """The App of the store that issued this job or workflow id."""
        if self.stores.single:
            return self.here
        return self.for_store(self.stores.name_for_id(object_id))

    def paused_queues(self) -> list[str]:
        names: list[str] = []
        for owner in self.serving():
            rows = owner.database.run(owner.queries.get_paused_queues)
            names.extend(row["queue"] for row in rows)
        return sorted(names)


class RoutedApp(StoreView, Protocol):
    """The base of the App Protocols of _app's services (runtime controls, actions on
    pending jobs, workflow reads): an App's database, its statements and its routing."""

    @property
    def routing(self) -> Routing[Any]: ...
