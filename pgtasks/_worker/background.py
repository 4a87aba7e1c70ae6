"""A second finish-and-claim round trip in flight, on its own connection and thread.

The worker's loop writes outcomes and claims jobs in one round trip (see
``Queries.finish_and_claim_jobs``). While one round trip is on the server, the loop can
only wait; with a second connection it can start the next one meanwhile, so the server
works on two exchanges at once (one backend each) and the loop's own work overlaps
them. The loop thread keeps every piece of worker state: it prepares an
:class:`Exchange` (immutable inputs), this thread only runs it, and the loop applies the
result when it is done. Nothing here touches the worker's jobs.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from .connection import OwnConnection

if TYPE_CHECKING:
    from .exchange import Exchange


class BackgroundExchanger:
    """Runs one :class:`Exchange` at a time on its own connection, off the loop thread.

    A round trip is handed over through a C-level queue (no Python-level condition to
    notify, about 10 µs of the loop's GIL time per round trip); the state the loop reads
    (busy, the finished exchange) sits under a plain lock.
    """

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        run: Callable[[psycopg.Connection[Any], Exchange], None],
        on_done: Callable[[], None],
        *,
        name: str,
    ) -> None:
        self._run = run
        self._on_done = on_done
        self._connection = OwnConnection(connect)
        self._lock = threading.Lock()
        #: Submitted exchanges (None: close) for the thread.
        self._requests: queue.SimpleQueue[Exchange | None] = queue.SimpleQueue()
        self._request: Exchange | None = None
        self._done: Exchange | None = None
        #: Set while no exchange is in flight (wait()).
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """An exchange was submitted and its result not taken yet."""
        with self._lock:
            return self._request is not None or self._done is not None

    def submit(self, exchange: Exchange) -> None:
        with self._lock:
            if self._request is not None or self._done is not None:
                raise RuntimeError("the background exchange is busy")
            if self._closed:
                raise RuntimeError("the background exchange is closed")
            self._request = exchange
            self._idle.clear()
        self._requests.put(exchange)

    def take(self) -> Exchange | None:
        """The finished exchange, if there is one (it is then no longer busy)."""
        with self._lock:
            done, self._done = self._done, None
            return done

    def wait(self, timeout: float) -> bool:
        """Wait until the submitted exchange (if any) is done; False on timeout."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        """Stop the thread after its current exchange; close the connection."""
        with self._lock:
            self._closed = True
        self._requests.put(None)
        self._thread.join(1.0)
        if not self._thread.is_alive():
            self._connection.drop()

    def _serve(self) -> None:
        while True:
            exchange = self._requests.get()
            if exchange is None:
                return
            try:
                self._run(self._connection.get(), exchange)
            except psycopg.Error as error:
                exchange.failed(error, broken=self._connection.broken)
                if exchange.broken:
                    self._connection.drop()
            except BaseException as error:  # a bug: report it as a broken exchange
                failure = psycopg.InterfaceError(f"background exchange failed: {error!r}")
                exchange.failed(failure, broken=True)
                self._connection.drop()
            with self._lock:
                self._request = None
                self._done = exchange
                self._idle.set()
            self._on_done()
