"""The worker's services wired to it: Heartbeat, Rescuer (which runs the Healer),
Listener, Pruner and the batch services (batches.py), each given only what it uses of
the Worker (worker.py)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .._counters import EXPIRED
from .batches import batch_services
from .connection import connector
from .healer import Healer
from .pruner import Pruner
from .services import Heartbeat, Listener, ListenerCalls, Rescuer, Service

if TYPE_CHECKING:
    from .worker import Worker


def worker_services(worker: Worker) -> list[Service]:
    """Heartbeat, rescuer (which runs the healer), listener, pruner and batch services of
    ``worker``.

    The listener and the pruner's session lock need a server session of their own: the
    session DSN. A pooled dsn without one: the listener polls, the pruner runs without its
    lock (docs/howto/deployment.md). The healer runs on the rescuer's connection: through
    a pooler, without its session lock."""
    app, settings, owner, connect = worker.app, worker.settings, worker.name, worker._connect
    store, registration = app.queries, worker.registration
    reporter, exchanges = worker._reporter, worker._exchanges
    sessions = app.database.has_session
    session = connector(app.database, owner=owner, session=True) if sessions else connect
    # A healing pass stops between steps when the worker does.
    stopping = threading.Event()
    healer = Healer(
        owner,
        settings.heal_interval,
        store=store,
        use_lock=not app.database.pooled,
        stopping=stopping,
    )
    calls = ListenerCalls(
        wake=lambda: worker.wake(notified=True),
        cancel=worker.cancel_jobs,
        paused=worker._set_paused,
        poll_cancellations=worker.poll_cancel_requests,
        limits_freed=worker._limits_freed,
        limits_stored=lambda: exchanges.limits_stored(),
    )
    return [
        Heartbeat(
            connect,
            settings,
            registration,
            poll_cancellations=worker.poll_cancel_requests,
            store_counters=worker.store_counters,
        ),
        Rescuer(
            connect,
            settings,
            registration,
            store,
            on_rescued=worker._rescued,
            on_expired=lambda count: reporter.exercised(EXPIRED, count, store=False),
            maintain=healer.run_if_due,
            stopping=stopping,
        ),
        Listener(owner, session, settings, store, calls, listen=sessions),
        Pruner(owner, session, settings, store=store, use_lock=sessions),
        *batch_services(app, connect, settings, worker._parts(), exchanges, worker._secrets),
    ]
