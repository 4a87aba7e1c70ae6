"""The App's side of durable execution: events, the steps of a job, forks and the count
of parked jobs (docs/howto/durable.md). The steps themselves run in the worker
(``pgtasks._execution.steps``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import psycopg

from .._durable import step_function
from .._durable_text import parked_by_queue
from .._errors import ConfigurationError, PayloadNotSerializableError, PayloadTooLargeError
from .._jobs import JobSpec

if TYPE_CHECKING:
    from .app import App
    from .handle import JobHandle

#: The longest event key (characters).
MAX_EVENT_KEY = 1000


def check_event_key(key: object) -> str:
    if not isinstance(key, str) or not key or "\x00" in key or len(key) > MAX_EVENT_KEY:
        raise ValueError(
            f"an event key must be a non-empty string of at most {MAX_EVENT_KEY} characters"
            f" without NUL, got {key!r:.80}"
        )
    return key


def encode_event_payload(app: App, key: str, payload: Any) -> str:
    try:
        text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise PayloadNotSerializableError(
            f"the payload of event {key!r} cannot be stored as JSON: {error}"
        ) from error
    size = len(text.encode())
    if size > app.max_payload_bytes:
        raise PayloadTooLargeError(
            f"the payload of event {key!r} encodes to {size} bytes of JSON, over the limit of"
            f" {app.max_payload_bytes} bytes (App(max_payload_bytes=...))"
        )
    return text


def event_stores(app: App, queue: str | None, joined: bool) -> list[App]:
    """The Apps of the stores an event goes to: the store of ``queue``, the one store
    of an App of one, else every store (one transaction each: not with connection=)."""
    if queue is not None:
        return [app.routing.for_queue(queue)]
    if app.store_router.single or app.settings.store is not None:
        return [app]
    if joined:
        raise ConfigurationError(
            "emit_event(connection=...) on an App of several stores: name the queue whose"
            " jobs wait for the event (queue=...), or emit on app.for_store(name); the"
            " event joins the transaction of a connection to that store"
        )
    return app.routing.serving()


def _emit(owner: App, conn: psycopg.Connection[Any], key: str, payload_json: str) -> int:
    return int(owner.queries.emit_event(conn, key=key, payload_json=payload_json)["id"])


def _emit_alone(owner: App, conn: psycopg.Connection[Any], *, key: str, payload: str) -> int:
    with conn.transaction():  # the key's lock lasts to the end of the transaction
        return _emit(owner, conn, key, payload)


class DurableApp:
    """App methods of durable execution (mixed into App)."""

    def step(
        self,
        function: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        retries: int = 0,
    ) -> Any:
        """Decorate a function as a durable step: called inside a job run by a worker it
        is ``ctx.step(name, function, *args, retries=retries, **kwargs)`` of that job
        (``name``: the function's ``__name__``; occurrences counted), its result
        checkpointed and replayed; called anywhere else (a script, a direct call of the
        task, eager mode) it runs plainly. ``async def`` functions become ``astep``."""
        if function is None:
            return lambda decorated: step_function(decorated, name=name, retries=retries)
        return step_function(function, name=name, retries=retries)

    def emit_event(
        self: Any,
        key: str,
        payload: Any = None,
        *,
        connection: psycopg.Connection[Any] | None = None,
        queue: str | None = None,
    ) -> int:
        """Record an event of ``key`` with a JSON ``payload`` and wake the jobs waiting for
        it (``ctx.wait_for_event``); its id. With ``connection`` it is written in that
        connection's transaction: visible, and waking anyone, only if it commits. A wait
        that starts later finds it (events are kept as long as finished jobs).

        Events live in the store of the jobs that wait for them: ``queue`` names it (the
        store that queue routes to), as does an App of one store
        (``app.for_store(name)``). On an App of several stores without ``queue`` the
        event is written to every store (each in a transaction of its own; the default
        store's id is returned); ``connection=`` then needs ``queue``."""
        app: App = self
        key = check_event_key(key)
        payload_json = encode_event_payload(app, key, payload)
        owners = event_stores(app, queue, connection is not None)
        if connection is not None:
            owner = owners[0]
            if not app.store_router.single:
                app.store_router.check_connection(connection, owner.store_name, queue or "-")
            if not connection.autocommit:  # the caller's transaction, which it commits or not
                return _emit(owner, connection, key, payload_json)
            with connection.transaction():  # the key's lock lasts to the end of one
                return _emit(owner, connection, key, payload_json)
        ids: list[int] = []
        for owner in owners:
            ids.append(
                owner.database.run(partial(_emit_alone, owner, key=key, payload=payload_json))
            )
        return ids[0]

    async def aemit_event(
        self: Any,
        key: str,
        payload: Any = None,
        *,
        connection: psycopg.AsyncConnection[Any] | None = None,
        queue: str | None = None,
    ) -> int:
        """:meth:`emit_event` for asyncio programs: with ``connection`` (an
        ``AsyncConnection``) in its transaction, else in one of its own per store."""
        app: App = self
        key = check_event_key(key)
        payload_json = encode_event_payload(app, key, payload)
        owners = event_stores(app, queue, connection is not None)

        async def emit(owner: App, conn: psycopg.AsyncConnection[Any]) -> int:
            if not conn.autocommit:
                row = await owner.queries.aemit_event(conn, key=key, payload_json=payload_json)
                return int(row["id"])
            async with conn.transaction():
                row = await owner.queries.aemit_event(conn, key=key, payload_json=payload_json)
                return int(row["id"])

        if connection is not None:
            owner = owners[0]
            if not app.store_router.single:
                await app.store_router.acheck_connection(connection, owner.store_name, queue or "-")
            return await emit(owner, connection)
        ids = []
        for owner in owners:
            ids.append(await owner.database.arun(partial(emit, owner)))
        return ids[0]

    def get_job_steps(self: Any, job_id: int) -> list[dict[str, Any]]:
        """A job's durable steps in the order its code reached them (position, name,
        occurrence, status, result, error, attempt, worker_id, started_at, finished_at);
        kept in its history row once it ended."""
        owner = self.routing.for_id(job_id)
        rows: list[dict[str, Any]] = owner.database.run(
            lambda conn: owner.queries.get_job_steps(conn, job_id)
        )
        return rows

    def fork_job(self: Any, job_id: int, *, from_step: str | None = None) -> JobHandle[Any]:
        """A new job of the same task and arguments that reuses ``job_id``'s checkpoints
        before the first occurrence of step ``from_step`` (None: all of them): it runs
        from that step on (after fixing a bug in it, say). ValueError when the job never
        reached that step."""
        app: App = self
        source = app.get_job(job_id).fetch()
        before: int | None = None
        if from_step is not None:
            positions = [
                row["position"]
                for row in app.get_job_steps(job_id)
                if row["name"] == from_step and row["occurrence"] == 1
            ]
            if not positions:
                raise ValueError(f"job {job_id} has no step {from_step!r} to fork from")
            before = positions[0]
        spec = JobSpec(
            task_name=source.task_name,
            queue=source.queue,
            priority=source.priority,
            args_json=json.dumps(source.args),
            kwargs_json=json.dumps(source.kwargs),
            max_attempts=source.max_attempts,
            meta_json=json.dumps({"pgtasks.forked_from": job_id}),
        )
        owner = app.routing.for_id(job_id)

        def fork(conn: psycopg.Connection[Any]) -> JobHandle[Any]:
            with conn.transaction():
                handle = owner.enqueue(spec, connection=conn)
                owner.queries.copy_job_steps(
                    conn, source_id=job_id, job_id=handle.id, before=before
                )
            return handle

        handle: JobHandle[Any] = owner.database.run(fork)
        return handle

    def count_parked_jobs(self: Any) -> dict[str, dict[str, int]]:
        """Pending jobs parked by a durable call, by queue: ``{queue: {"sleeping": n,
        "waiting": n, "snoozed": n}}``."""
        app: App = self
        return parked_by_queue(app.database.run(app.queries.count_parked_jobs))
