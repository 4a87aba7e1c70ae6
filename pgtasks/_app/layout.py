"""StoreLayout: an App's stores and the routes of its queues, as part of its settings.

A *store* is a (DSN, schema) pair: a complete pgtasks install. ``App(stores=..., routes=...)``
(or ``PGTASKS_STORES`` / ``PGTASKS_ROUTES``) names several; a queue goes to the store its
route names, an unrouted queue to ``"default"``. Routes are explicit: a queue's store is
a pure function of its name, so uniqueness, limits and beat ticks stay exact per store and
adding a store moves no live job. ``App(dsn)`` is one store named ``"default"``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._errors import ConfigurationError
from .._payload import check_name
from .._store.connecting import DatabaseSettings

#: The store unrouted queues go to (and the only store of ``App(dsn)``).
DEFAULT_STORE = "default"
#: Store numbers a schema may hold (the ``instance.store_no`` check of migration
#: store_identity).
MAX_STORE_NUMBER = 32766
#: The stores (JSON text, or the path of a .json or .toml file) and routes (JSON) of an
#: App given neither ``dsn=`` nor ``stores=``.
STORES_ENVIRONMENT = "PGTASKS_STORES"
ROUTES_ENVIRONMENT = "PGTASKS_ROUTES"


@dataclasses.dataclass(frozen=True)
class Store:
    """One store of an App: where its connections go and the schema of its tables.

    ``App(stores={"default": dsn, "bulk": Store(dsn2, schema="pgtasks")})``; a plain DSN
    string is ``Store(dsn)``. ``schema`` None: the App's schema (``schema=`` or
    PGTASKS_SCHEMA, default "pgtasks"). ``session_dsn``, ``replica_dsn``, ``pooled`` and
    ``prepared_statements`` as for :class:`pgtasks.App`. ``number``: the store's number
    (its ids start at ``number << 48``); None lets ``pgtasks migrate`` pick the lowest
    free one. A store that issued ids keeps its number.
    """

    dsn: str | None = None
    schema: str | None = None
    session_dsn: str | None = None
    replica_dsn: str | None = None
    pooled: bool | None = None
    prepared_statements: bool | None = None
    number: int | None = None

    def __post_init__(self) -> None:
        number = self.number
        if number is not None and (
            isinstance(number, bool)
            or not isinstance(number, int)
            or not 0 <= number <= MAX_STORE_NUMBER
        ):
            raise ConfigurationError(
                f"Store(number=) must be an int in 0..{MAX_STORE_NUMBER}, got {number!r}"
            )


@dataclasses.dataclass(frozen=True)
class StoreLayout:
    """The stores of an App by name (``"default"`` first) and its routes (queue → store
    name); ``numbers``: the store numbers given explicitly."""

    stores: Mapping[str, DatabaseSettings]
    routes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    numbers: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if DEFAULT_STORE not in self.stores:
            known = ", ".join(self.stores) or "none"
            raise ConfigurationError(
                f"stores= needs a store named {DEFAULT_STORE!r} (where unrouted queues go);"
                f" got {known}"
            )
        for name in self.stores:
            _check_store_name(name)
        for queue, store in self.routes.items():
            try:
                check_name("queue", queue)
            except (ValueError, TypeError) as error:
                raise ConfigurationError(f"routes=: {error}") from None
            if store not in self.stores:
                raise ConfigurationError(
                    f"routes= sends queue {queue!r} to store {store!r}, which stores= does"
                    f" not name (stores: {', '.join(self.stores)})"
                )
        places: dict[tuple[str | None, str], str] = {}
        for name, where in self.stores.items():
            key = (where.dsn, where.schema)
            if key in places:
                raise ConfigurationError(
                    f"stores {places[key]!r} and {name!r} are the same database and schema"
                    f" ({where.schema}): each store needs a schema of its own"
                )
            places[key] = name

    @property
    def single(self) -> bool:
        return len(self.stores) == 1

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.stores)

    def store_of_queue(self, queue: str) -> str:
        """The store ``queue`` routes to."""
        return self.routes.get(queue, DEFAULT_STORE)

    def check_store(self, name: str) -> str:
        if name not in self.stores:
            raise ConfigurationError(f"no store named {name!r} (stores: {', '.join(self.stores)})")
        return name

    def store_of_queues(self, store: str | None, queues: Sequence[str] | None) -> str:
        """The one store a worker of ``queues`` serves (``store``: the one asked for):
        a ConfigurationError naming the stores when the queues span several, or when an
        App of several stores is given neither."""
        if store is not None:
            self.check_store(store)
            others = [queue for queue in queues or () if self.store_of_queue(queue) != store]
            if others:
                raise ConfigurationError(
                    f"queues {', '.join(others)} do not route to store {store!r}"
                    f" ({self._describe(others)}): a worker serves one store"
                )
            return store
        if queues:
            stores = {self.store_of_queue(queue) for queue in queues}
            if len(stores) > 1:
                raise ConfigurationError(
                    f"the queues span stores {', '.join(sorted(stores))}"
                    f" ({self._describe(queues)}): a worker serves one store; run one"
                    " worker per store (pgtasks worker --store NAME)"
                )
            return stores.pop()
        if self.single:
            return DEFAULT_STORE
        raise ConfigurationError(
            f"this app has stores {', '.join(self.stores)}: a worker serves one; name it"
            " (Worker(app, store=...), pgtasks worker --store NAME) or give queues that"
            " route to one store"
        )

    def _describe(self, queues: Sequence[str]) -> str:
        return ", ".join(f"{queue} → {self.store_of_queue(queue)}" for queue in queues)

    @classmethod
    def resolve(
        cls,
        default: DatabaseSettings,
        stores: Mapping[str, str | Store] | None,
        routes: Mapping[str, str] | None,
        *,
        dsn_given: bool,
        environ: Mapping[str, str],
    ) -> StoreLayout:
        """The layout of ``App(stores=, routes=)``, else of PGTASKS_STORES /
        PGTASKS_ROUTES (only when no dsn is given), else the one store ``default``."""
        if stores is None and not dsn_given and environ.get(STORES_ENVIRONMENT):
            stores, file_routes = parse_stores(environ[STORES_ENVIRONMENT])
            if routes is None:
                routes = file_routes
        if routes is None and environ.get(ROUTES_ENVIRONMENT):
            routes = _json_mapping(ROUTES_ENVIRONMENT, environ[ROUTES_ENVIRONMENT])
        if stores is None:
            if routes:
                raise ConfigurationError("routes= needs stores= (the stores it routes to)")
            return cls({DEFAULT_STORE: default})
        if dsn_given:
            raise ConfigurationError("give dsn= or stores=, not both")
        if not isinstance(stores, Mapping) or not stores:
            raise ConfigurationError("stores= must be a non-empty mapping of name to DSN or Store")
        if routes is not None and not isinstance(routes, Mapping):
            raise ConfigurationError("routes= must be a mapping of queue name to store name")
        settings: dict[str, DatabaseSettings] = {}
        numbers: dict[str, int] = {}
        for name, entry in _default_first(stores).items():
            store = _store_entry(name, entry)
            if store.dsn is None and name != DEFAULT_STORE:
                raise ConfigurationError(f"store {name!r} needs a dsn")
            settings[name] = dataclasses.replace(
                default,
                dsn=store.dsn,
                schema=store.schema if store.schema is not None else default.schema,
                session_dsn=store.session_dsn,
                replica_dsn=store.replica_dsn,
                pooled=store.pooled,
                prepared_statements=store.prepared_statements,
            )
            if store.number is not None:
                numbers[name] = store.number
        return cls(settings, dict(routes or {}), numbers)


def _check_store_name(name: object) -> None:
    plain = isinstance(name, str) and name.replace("_", "").replace("-", "").isalnum()
    if not plain:
        raise ConfigurationError(f"a store name is letters, digits, '-' and '_', got {name!r}")


def _default_first(stores: Mapping[str, Any]) -> dict[str, Any]:
    ordered = {DEFAULT_STORE: stores[DEFAULT_STORE]} if DEFAULT_STORE in stores else {}
    ordered.update(stores)
    return ordered


def _store_entry(name: str, entry: object) -> Store:
    if isinstance(entry, Store):
        return entry
    if isinstance(entry, str):
        return Store(entry)
    if isinstance(entry, Mapping):
        fields = {field.name for field in dataclasses.fields(Store)}
        unknown = sorted(set(entry) - fields)
        if unknown:
            raise ConfigurationError(
                f"store {name!r}: unknown option(s) {', '.join(unknown)}"
                f" (known: {', '.join(sorted(fields))})"
            )
        return Store(**entry)
    raise ConfigurationError(
        f"store {name!r} must be a DSN string or a Store, got {type(entry).__name__}"
    )


def _json_mapping(what: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ConfigurationError(f"{what} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{what} must be a JSON object")
    return value


def _toml(path: Path, raw: str) -> dict[str, Any]:
    if sys.version_info < (3, 11):
        raise ConfigurationError(f"{path}: a .toml stores file needs Python 3.11; use .json")
    import tomllib  # type: ignore[import-not-found,unused-ignore]  # Python >= 3.11

    try:
        return tomllib.loads(raw)
    except tomllib.TOMLDecodeError as error:
        raise ConfigurationError(f"{path}: {error}") from None


def parse_stores(value: str) -> tuple[dict[str, Any], dict[str, str] | None]:
    """The stores and routes of PGTASKS_STORES: JSON text (``{"default": dsn, "bulk":
    {"dsn": ..., "schema": ...}}``) or the path of a .json or .toml file holding
    ``stores`` and ``routes`` tables."""
    text = value.strip()
    if text.startswith("{"):
        document: dict[str, Any] = _json_mapping(STORES_ENVIRONMENT, text)
    else:
        path = Path(os.path.expanduser(text))
        try:
            raw = path.read_text("utf-8")
        except OSError as error:
            raise ConfigurationError(
                f"{STORES_ENVIRONMENT}={text!r}: cannot read it ({error.strerror}); give"
                " JSON text or the path of a .json or .toml file"
            ) from None
        toml = path.suffix == ".toml"
        document = _toml(path, raw) if toml else _json_mapping(str(path), raw)
    if "stores" not in document:
        return document, None
    stores, routes = document["stores"], document.get("routes")
    if not isinstance(stores, dict) or (routes is not None and not isinstance(routes, dict)):
        raise ConfigurationError(f"{STORES_ENVIRONMENT}: stores and routes must be tables")
    return stores, routes
