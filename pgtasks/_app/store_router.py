"""StoreRouter: routes to the stores of an App: the Database of each, their identities
and the routes of queues and ids.

Each store owns one Database (its pools and its schema's statements). ``pgtasks migrate``
gives each store a number and a uid; a job or workflow id
names its store (``id >> 48``), so an App routes ``get_job(id)`` and ``cancel(id)`` by the
id alone. Two stores of one App with the same number or uid are refused, naming both.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
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
        """Each store's identity (read once; a store that cannot be read: its error),
        checked: two stores with one number or one uid are a ConfigurationError."""
        with self._lock:
            missing = [n for n in self.names if refresh or n not in self._identities]
        read = self.each(self._read_identity, missing) if missing else {}
        with self._lock:
            for name, identity in read.items():
                if isinstance(identity, StoreIdentity):
                    self._identities[name] = identity
            known: dict[str, StoreIdentity | BaseException] = dict(read)
            known.update(self._identities)
        self._check_distinct({n: i for n, i in known.items() if isinstance(i, StoreIdentity)})
        return {name: known[name] for name in self.names}

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
        did; the error of a store that cannot be read when it may be that one)."""
        if self.single:
            return DEFAULT_STORE
        number = store_number_of(object_id)
        for attempt in (False, True):
            identities = self.identities(refresh=attempt)
            for name, identity in identities.items():
                if isinstance(identity, StoreIdentity) and identity.number == number:
                    return name
            errors = [error for error in identities.values() if isinstance(error, BaseException)]
            if errors and attempt:
                raise errors[0]
        known = ", ".join(
            f"{name}={identity.number}" for name, identity in self._identities.items()
        )
        raise JobNotFoundError(
            f"id {object_id} was issued by store number {number}, which is not a store of"
            f" this app (stores: {known})"
        )

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
