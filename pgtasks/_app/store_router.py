"""StoreRouter: routes to the stores of an App: the Database of each, their identities
and the routes of queues and ids.

Each store owns one Database (its pools and its schema's statements). ``pgtasks migrate``
gives each store a number and a uid; a job or workflow id
names its store (``id >> 48``), so an App routes ``get_job(id)`` and ``cancel(id)`` by the
id alone. Two stores of one App with the same number or uid are refused, naming both.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import psycopg

from .._errors import ConfigurationError, CrossStoreError, DatabaseError, JobNotFoundError
from .._store.connecting import PoolSettings
from .._store.database import Database
from .._store.identity import ID_BITS, StoreIdentity
from ..sql import Migration
from .layout import DEFAULT_STORE, MAX_STORE_NUMBER, StoreLayout

T = TypeVar("T")

logger = logging.getLogger("pgtasks")


def store_number_of(object_id: int) -> int:
    """The number of the store that issued this job or workflow id."""
    return object_id >> ID_BITS


#: A store whose identity could not be read is not read again for this long (seconds),
#: then twice as long after each failure in a row, up to the second figure.
RETRY_IDENTITY_AFTER = (1.0, 30.0)
#: How long a lookup whose store answered waits for the other stores being read (one
#: with the same number is a ConfigurationError), before it answers without them.
OTHERS_GRACE = 1.0


@dataclass
class Backoff:
    """The failures in a row of one store's identity read: its last error, remembered
    until ``until`` (a monotonic time), and the interval the next failure doubles."""

    error: BaseException
    until: float
    interval: float

    @classmethod
    def after(
        cls, error: BaseException, previous: Backoff | None, now: float, limits: tuple[float, float]
    ) -> Backoff:
        first, longest = limits
        interval = first if previous is None else min(previous.interval * 2, longest)
        return cls(error, now + interval, interval)

    def active(self, now: float) -> bool:
        return now < self.until


class StoreRouter:
    """The stores of an App: a Database each (``databases``, by name, ``"default"``
    first), the ``layout`` (routes), and their identities read once."""

    def __init__(self, layout: StoreLayout, pools: PoolSettings, default: Database) -> None:
        self.layout = layout
        self.databases: dict[str, Database] = {DEFAULT_STORE: default}
        for name, settings in layout.stores.items():
            if name != DEFAULT_STORE:
                self.databases[name] = Database(
                    settings, pools, name=f"pgtasks-{name}-{settings.schema}"
                )
        self._lock = threading.Lock()
        self._identities: dict[str, StoreIdentity] = {}
        #: Stores whose last identity read failed: not read again before its ``until``.
        self._failures: dict[str, Backoff] = {}
        #: Identity reads under way (each in a thread of its own), and their process.
        self._reading: dict[str, Future[StoreIdentity | BaseException]] = {}
        self._reading_pid = os.getpid()
        self.retry_identity_after = RETRY_IDENTITY_AFTER
        #: Two stores found with one number or uid (raised by every lookup after).
        self._conflict: ConfigurationError | None = None
        #: Caller connections checked to belong to a store (by store name).
        self._checked: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

    @property
    def single(self) -> bool:
        return self.layout.single

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.databases)

    def store_of_queue(self, queue: str) -> str:
        return self.layout.routes.get(queue, DEFAULT_STORE)

    # -- fan-out --
    def each(
        self, operation: Callable[[str], T], names: Iterable[str] | None = None
    ) -> dict[str, T | BaseException]:
        """``operation(name)`` for every store (or ``names``) concurrently: its result, or
        the exception it raised (a store that is down is its own error, the others answer)."""
        chosen = list(self.names if names is None else names)
        if len(chosen) == 1:
            return {chosen[0]: _attempt(operation, chosen[0])}
        with ThreadPoolExecutor(len(chosen), thread_name_prefix="pgtasks-stores") as pool:
            futures = {name: pool.submit(_attempt, operation, name) for name in chosen}
            return {name: future.result() for name, future in futures.items()}

    # -- identities --
    def identities(self, *, refresh: bool = False) -> dict[str, StoreIdentity | BaseException]:
        """Each store's identity (read once; a store that cannot be read: its error, which
        is remembered for a short, growing interval before the store is read again;
        ``refresh``: read every store now), checked: two stores with one number or one
        uid are a ConfigurationError."""
        futures = self._start_reads(None if refresh else self._wanted())
        for future in futures.values():
            future.result()
        return self._known()

    def _wanted(self) -> list[str]:
        """The stores whose identity is neither known nor remembered as unreadable."""
        now = time.monotonic()
        with self._lock:
            return [
                name
                for name in self.names
                if name not in self._identities
                and not (name in self._failures and self._failures[name].active(now))
            ]

    def _known(self) -> dict[str, StoreIdentity | BaseException]:
        """Each store's identity, else its remembered error, in the stores' order."""
        missing = DatabaseError("the store's identity was not read yet")
        with self._lock:
            known: dict[str, StoreIdentity | BaseException] = {
                name: self._identities.get(name)
                or (self._failures[name].error if name in self._failures else missing)
                for name in self.names
            }
        self._check_distinct({n: i for n, i in known.items() if isinstance(i, StoreIdentity)})
        return known

    def _start_reads(
        self, names: Iterable[str] | None
    ) -> dict[str, Future[StoreIdentity | BaseException]]:
        """A read of each store's identity (``names``, else all), each in a thread of its
        own (a read under way is joined, not doubled)."""
        chosen = list(self.names if names is None else names)
        futures: dict[str, Future[StoreIdentity | BaseException]] = {}
        with self._lock:
            if self._reading_pid != os.getpid():  # forked: the reading threads stayed behind
                self._reading, self._reading_pid = {}, os.getpid()
            for name in chosen:
                future = self._reading.get(name)
                if future is None:
                    future = Future()
                    self._reading[name] = future
                    threading.Thread(
                        target=self._read_into,
                        args=(name, future),
                        name=f"pgtasks-identity-{name}",
                        daemon=True,
                    ).start()
                futures[name] = future
        return futures

    def _read_into(self, name: str, future: Future[StoreIdentity | BaseException]) -> None:
        try:
            outcome = _attempt(self._read_identity, name)
        except BaseException as error:  # not a store's failure: raised to the callers
            with self._lock:
                if self._reading.get(name) is future:
                    del self._reading[name]
            future.set_exception(error)
            return
        with self._lock:
            if isinstance(outcome, StoreIdentity):
                self._identities[name] = outcome
                self._failures.pop(name, None)
                try:
                    self._check_distinct(dict(self._identities))
                except ConfigurationError as error:
                    self._conflict = error
            else:
                self._failures[name] = Backoff.after(
                    outcome, self._failures.get(name), time.monotonic(), self.retry_identity_after
                )
            if self._reading.get(name) is future:
                del self._reading[name]
        future.set_result(outcome)

    def _read_identity(self, name: str) -> StoreIdentity:
        database = self.databases[name]
        return database.run(database.queries.get_store_identity)

    def check(self) -> dict[str, StoreIdentity | BaseException]:
        """Refuse to start on duplicate stores (see :meth:`identities`); nothing to read for
        an App of one store."""
        return {} if self.single else self.identities()

    def _check_distinct(self, identities: dict[str, StoreIdentity]) -> None:
        numbers: dict[int, str] = {}
        uids: dict[str, str] = {}
        for name, identity in identities.items():
            if identity.uid in uids:
                other = uids[identity.uid]
                raise ConfigurationError(
                    f"stores {other!r} and {name!r} are one store (uid {identity.uid}):"
                    " point each store at a database and schema of its own"
                )
            if identity.number in numbers:
                other = numbers[identity.number]
                raise ConfigurationError(
                    f"stores {other!r} and {name!r} both have store number"
                    f" {identity.number}: their ids would collide. Run `pgtasks migrate`"
                    " (it renumbers a store that issued no id yet) or give one of them"
                    " Store(number=N) before its first job"
                )
            uids[identity.uid] = name
            numbers[identity.number] = name

    def name_for_id(self, object_id: int) -> str:
        """The store that issued ``object_id`` (JobNotFoundError when none of this App's
        did; the error of a store that cannot be read when it may be that one).

        Known identities are matched first: a store that is down costs nothing to the
        ids of the others. Unknown ones are read concurrently and the first that matches
        answers (the others waited for OTHERS_GRACE at most: a store slow to connect is not
        waited for; two stores of one number are refused once both are known); a store
        whose read failed is not read again before its back-off ends (its remembered
        error stands for it)."""
        if self.single:
            return DEFAULT_STORE
        if self._conflict is not None:
            raise self._conflict
        number = store_number_of(object_id)
        found = self._cached_name(number)
        if found is not None:
            return found
        for refresh in (False, True):
            futures = self._start_reads(self._readable() if refresh else self._wanted())
            pending = set(futures.values())
            while pending:
                _, pending = wait(pending, return_when=FIRST_COMPLETED)
                found = self._cached_name(number)
                if found is not None:
                    wait(pending, timeout=OTHERS_GRACE)
                    self._known()  # two stores of one number or uid: refused
                    return found
            for future in futures.values():
                future.result()  # an error that is not the store's: raised
            identities = self._known()
            errors = [error for error in identities.values() if isinstance(error, BaseException)]
            if errors and refresh:
                raise errors[0]
        known = ", ".join(
            f"{name}={identity.number}" for name, identity in self._identities.items()
        )
        raise JobNotFoundError(
            f"id {object_id} was issued by store number {number}, which is not a store of"
            f" this app (stores: {known})"
        )

    def _cached_name(self, number: int) -> str | None:
        with self._lock:
            for name, identity in self._identities.items():
                if identity.number == number:
                    return name
        return None

    def _readable(self) -> list[str]:
        """Every store but those whose read failed lately (known ones are read again:
        a store renumbered by ``pgtasks migrate`` since)."""
        now = time.monotonic()
        with self._lock:
            return [
                name
                for name in self.names
                if not (name in self._failures and self._failures[name].active(now))
            ]

    def group_ids(self, ids: Sequence[int]) -> dict[str, list[int]]:
        """``ids`` by the store that issued them."""
        grouped: dict[str, list[int]] = {}
        for object_id in ids:
            grouped.setdefault(self.name_for_id(object_id), []).append(object_id)
        return grouped

    # -- migrate --
    def migrate(self, **options: float) -> list[Migration]:
        """Migrate every store (in order), then number those that need it."""
        applied: list[Migration] = []
        for database in self.databases.values():
            applied.extend(database.migrate(**options))
        if not self.single:
            self.number_stores()
        return applied

    def number_stores(self) -> dict[str, int]:
        """Give each store its number: a store that issued ids keeps its own; one that did
        not takes ``Store(number=)``, else keeps its number when free, else the lowest
        free one. Two stores that issued ids under one number: ConfigurationError."""
        identities: dict[str, StoreIdentity] = {}
        for name, database in self.databases.items():
            identities[name] = database.run(database.queries.get_store_identity)
        explicit = dict(self.layout.numbers)
        used: dict[int, str] = {}
        for name, identity in identities.items():
            reserved = {i.number for n, i in identities.items() if i.issued_ids and n != name}
            reserved.update(number for n, number in explicit.items() if n != name)
            if identity.issued_ids:
                wanted = identity.number
                if name in explicit and explicit[name] != wanted:
                    raise ConfigurationError(
                        f"store {name!r} issued ids as store number {wanted}: it cannot"
                        f" become number {explicit[name]} (remove Store(number=))"
                    )
            elif name in explicit:
                wanted = explicit[name]
            elif identity.number not in used and identity.number not in reserved:
                wanted = identity.number
            else:
                wanted = next(
                    n for n in range(MAX_STORE_NUMBER + 1) if n not in used and n not in reserved
                )
            if wanted in used:
                raise ConfigurationError(
                    f"stores {used[wanted]!r} and {name!r} both have store number {wanted}"
                    " and issued ids under it: their ids collide; they cannot serve one app"
                )
            if wanted != identity.number:
                changed = self._renumber(name, wanted)
                if not changed:
                    raise ConfigurationError(
                        f"store {name!r} issued an id while being renumbered: run migrate again"
                    )
                logger.info("store %s is store number %d", name, wanted)
            used[wanted] = name
        with self._lock:
            self._identities.clear()
            self._failures.clear()
            self._conflict = None
        return {name: number for number, name in used.items()}

    def _renumber(self, name: str, number: int) -> bool:
        database = self.databases[name]
        return database.run(lambda conn: database.queries.renumber_store(conn, number))

    # -- a caller's connection --
    def check_connection(self, conn: psycopg.Connection[Any], name: str, queue: str) -> None:
        """Refuse ``connection=`` that is not a connection to store ``name`` (checked once
        per connection, by the store's uid)."""
        if name in self._checked.get(conn, ()):
            return
        database = self.databases[name]
        seen = database.queries.get_connection_store_uid(conn)
        self._accept(conn, name, queue, seen)

    async def acheck_connection(
        self, conn: psycopg.AsyncConnection[Any], name: str, queue: str
    ) -> None:
        if name in self._checked.get(conn, ()):
            return
        database = self.databases[name]
        seen = await database.queries.aget_connection_store_uid(conn)
        self._accept(conn, name, queue, seen)

    def _accept(self, conn: Any, name: str, queue: str, seen: str | None) -> None:
        identity = self.identities()[name]
        if isinstance(identity, BaseException):
            raise identity
        if seen != identity.uid:
            where = self.databases[name]
            found = (
                f"has no schema {where.queries.schema!r}"
                if seen is None
                else f"holds another store (uid {seen}, not {identity.uid})"
            )
            raise CrossStoreError(
                f"connection= is not a connection to store {name!r}, where queue {queue!r}"
                f" routes: its database {found}. A job joins the transaction of a"
                f" connection to its own store ({where.describe()}); enqueue without"
                " connection= or route the queue to the business database's store"
            )
        self._checked.setdefault(conn, set()).add(name)

    # -- lifetime --
    def use(self, name: str, database: Database) -> StoreLayout:
        """Make ``database`` store ``name``'s (``App.restore_database``); the new layout."""
        self.databases[name] = database
        self.layout = replace(self.layout, stores={**self.layout.stores, name: database.settings})
        return self.layout

    def close(self) -> None:
        for database in self.databases.values():
            database.close()

    async def aclose(self) -> None:
        for database in self.databases.values():
            await database.aclose()


def _attempt(operation: Callable[[str], T], name: str) -> T | BaseException:
    try:
        return operation(name)
    except (DatabaseError, ConfigurationError, psycopg.Error, OSError) as error:
        return error
