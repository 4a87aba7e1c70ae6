"""Enqueuer: the insert path of an App (``App.enqueue``, ``enqueue_many``, their async
twins and ``insert_specs``): the store the jobs go to, the schema check of a caller's
connection, the insert (traced when the App is instrumented), the deduplicated enqueues
counted. Each App holds one (``app.enqueuer``), built from its routing, its counters and
a reader of its instrumentation; it never imports App. App keeps eager mode and makes
the handles of what was inserted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import psycopg

from .._counters import ENQUEUES_DEDUPLICATED, Tally
from .._instrumentation import Instrumentation
from .._jobs import DebouncedJobSpec, InsertedJob, JobSpec
from .._store.ports import EnqueuePort
from .routing import Routing, StoreView

V = TypeVar("V", bound=StoreView)


def enqueuer(app: StoreView) -> EnqueuePort:
    """The statements of the enqueue path: ``app``'s catalog seen through its port."""
    return app.queries


class Enqueuer(Generic[V]):
    """The insert path of one App: ``routing`` finds the App of the jobs' store (V, any
    :class:`StoreView`), ``counters`` count the deduplicated enqueues, ``instrumentation()``
    gives the tracing hooks in force (None: none)."""

    def __init__(
        self,
        routing: Routing[V],
        counters: Tally,
        instrumentation: Callable[[], Instrumentation | None],
    ) -> None:
        self.routing = routing
        self.counters = counters
        self.instrumentation = instrumentation

    # -- the insert every enqueue and beat share --
    def insert_specs(
        self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec], owner: V | None = None
    ) -> list[InsertedJob]:
        """Insert specs on ``conn`` (into ``owner``'s store; default this App's); the
        instrumentation, when set, wraps it."""
        insert = enqueuer(self.routing.here if owner is None else owner).insert_jobs_in_chunks
        hooks = self.instrumentation()
        if hooks is None:
            return insert(conn, specs)
        return hooks.insert(specs, lambda traced: insert(conn, traced))

    async def ainsert_specs(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec], owner: V | None = None
    ) -> list[InsertedJob]:
        insert = enqueuer(self.routing.here if owner is None else owner).ainsert_jobs_in_chunks
        hooks = self.instrumentation()
        if hooks is None:
            return await insert(conn, specs)
        return await hooks.ainsert(specs, lambda traced: insert(conn, traced))

    # -- enqueues: the App of the jobs' store and what was inserted --
    def _owner(self, specs: Sequence[JobSpec], connection: psycopg.Connection[Any] | None) -> V:
        routing = self.routing
        if routing.stores.single:
            return routing.here
        return routing.for_specs(specs, connection)  # their queues' one store, or an error

    async def _aowner(
        self, specs: Sequence[JobSpec], connection: psycopg.AsyncConnection[Any] | None
    ) -> V:
        routing = self.routing
        if routing.stores.single:
            return routing.here
        return await routing.afor_specs(specs, connection)

    def enqueue_many(
        self, specs: Sequence[JobSpec], connection: psycopg.Connection[Any] | None
    ) -> tuple[V, list[InsertedJob]]:
        owner = self._owner(specs, connection)
        if connection is not None:
            owner.database.check_schema(connection)
            inserted = self.insert_specs(connection, specs, owner)
        else:
            inserted = owner.database.run(lambda conn: self.insert_specs(conn, specs, owner))
        return owner, self._counted(inserted, specs)

    def enqueue(
        self, spec: JobSpec, connection: psycopg.Connection[Any] | None
    ) -> tuple[V, InsertedJob]:
        if self.instrumentation() is not None:
            owner, inserted = self.enqueue_many([spec], connection)
            return owner, inserted[0]
        owner = self._owner([spec], connection)
        if connection is not None:
            owner.database.check_schema(connection)
            job = enqueuer(owner).insert_job(connection, spec)
        else:
            job = owner.database.run(lambda conn: enqueuer(owner).insert_job(conn, spec))
        return owner, self._counted([job], [spec])[0]

    async def aenqueue_many(
        self, specs: Sequence[JobSpec], connection: psycopg.AsyncConnection[Any] | None
    ) -> tuple[V, list[InsertedJob]]:
        owner = await self._aowner(specs, connection)
        if connection is not None:
            await owner.database.acheck_schema(connection)
            inserted = await self.ainsert_specs(connection, specs, owner)
        else:
            inserted = await owner.database.arun(
                lambda conn: self.ainsert_specs(conn, specs, owner)
            )
        return owner, self._counted(inserted, specs)

    async def aenqueue(
        self, spec: JobSpec, connection: psycopg.AsyncConnection[Any] | None
    ) -> tuple[V, InsertedJob]:
        if self.instrumentation() is not None:
            owner, inserted = await self.aenqueue_many([spec], connection)
            return owner, inserted[0]
        owner = await self._aowner([spec], connection)
        if connection is not None:
            await owner.database.acheck_schema(connection)
            job = await enqueuer(owner).ainsert_job(connection, spec)
        else:
            job = await owner.database.arun(lambda conn: enqueuer(owner).ainsert_job(conn, spec))
        return owner, self._counted([job], [spec])[0]

    def _counted(self, inserted: list[InsertedJob], specs: Sequence[JobSpec]) -> list[InsertedJob]:
        """Count the jobs an existing idempotency key answered (a debounced enqueue that
        replaced its key's job is counted by its statement, as enqueues_debounced)."""
        if any(isinstance(spec, DebouncedJobSpec) for spec in specs):
            debounced = {i for i, spec in enumerate(specs) if isinstance(spec, DebouncedJobSpec)}
            counted = [job for i, job in enumerate(inserted) if i not in debounced]
        else:
            counted = inserted
        deduplicated = sum(1 for _, existed in counted if existed)
        if deduplicated:
            self.counters.add(ENQUEUES_DEDUPLICATED, deduplicated, store=False)
        return inserted
