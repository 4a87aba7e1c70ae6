"""AppSettings: an App's configuration as one frozen value, validated once.

``App(dsn, **options)``'s keywords are declared once, in :class:`AppOptions` (names and
types; their defaults are AppSettings' fields, PoolSettings' and None for the
connections, which the environment fills in); App's signature is derived from it
(:func:`app_signature`). The keywords and the environment make the settings
(:meth:`AppSettings.resolve`); a Worker derives its own settings from them
(pgtasks/_worker/settings.py). Every rule that joins two options (a heartbeat shorter
than the lease) is checked here, once.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ForwardRef, Generic, Protocol, TypedDict, TypeVar, overload

from typing_extensions import Unpack

from .._errors import ConfigurationError
from .._operations import retention_seconds
from .._payload import DEFAULT_MAX_PAYLOAD_BYTES
from .._store.connecting import DatabaseSettings, PoolSettings
from .._text import DEFAULT_MAX_ERROR_BYTES
from .._validation import positive_seconds, whole_number
from .layout import DEFAULT_STORE, Store, StoreLayout

T = TypeVar("T")

#: Seconds options of AppSettings: each a finite number > 0.
_INTERVALS = (
    "lease_timeout",
    "heartbeat_interval",
    "rescue_interval",
    "poll_interval",
    "prune_interval",
    "heal_interval",
)


class AppOptions(TypedDict, total=False):
    """The keywords of ``App(dsn, ...)``, every one optional (see :class:`pgtasks.App`)."""

    #: The server itself behind a transaction pooler (LISTEN, locks, migrations).
    session_dsn: str | None
    #: A streaming replica for the dashboard, stats and metrics.
    replica_dsn: str | None
    #: Whether ``dsn`` is a transaction-mode pooler (PgBouncer ``pool_mode = transaction``).
    pooled: bool | None
    #: Whether connections to a pooled ``dsn`` may prepare statements.
    prepared_statements: bool | None
    #: The PostgreSQL schema of the tables (else PGTASKS_SCHEMA, else "pgtasks").
    schema: str | None
    #: Where the embedded server keeps its data (no DSN configured).
    embedded_dir: str | os.PathLike[str] | None
    #: The queue of tasks that name none.
    default_queue: str
    #: Attempts of a task that names none (the first run counts).
    default_max_attempts: int
    #: Largest arguments (and meta) of a job, in bytes of JSON.
    max_payload_bytes: int
    #: Largest result a worker stores (a larger one fails its job).
    max_result_bytes: int
    #: Longest error text a worker stores (cut with a marker).
    max_error_bytes: int
    #: Connections each pool keeps open.
    pool_min_size: int
    #: Most connections of each pool.
    pool_max_size: int
    #: Seconds to wait for a connection.
    connect_timeout: float
    #: Times an operation is tried on a broken connection.
    connect_attempts: int
    #: Seconds without a heartbeat before a worker's jobs are rescued.
    lease_timeout: float
    #: Seconds between a worker's heartbeats (shorter than the lease).
    heartbeat_interval: float
    #: Seconds between rescues of the jobs of lost workers.
    rescue_interval: float
    #: Seconds between a worker's claims when no notification comes.
    poll_interval: float
    #: Seconds a finished job is kept (None: never pruned).
    prune_done_after: float | None
    #: Seconds a failed job is kept (None: never pruned).
    prune_failed_after: float | None
    #: Seconds between prunes.
    prune_interval: float
    #: Seconds between the repairs of workflows and limits.
    heal_interval: float
    #: Seconds a due job waits per level its priority rises (None: no aging).
    priority_aging: float | None
    #: Run tasks inline on ``delay()`` (tests).
    eager: bool
    #: Several databases by name (``"default"`` first; docs/howto/scaling.md).
    stores: Mapping[str, str | Store] | None
    #: The store of each queue (unrouted queues: ``"default"``).
    routes: Mapping[str, str] | None
    #: Whether an enqueue NOTIFYs the workers (None: PGTASKS_NOTIFY_ENQUEUES, else yes).
    notify_enqueues: bool | None
    #: When an enqueue NOTIFYs the workers: "always", "off" or "auto" (None: PGTASKS_NOTIFY,
    #: else "always"; docs/performance.md).
    notify: str | None
    #: notify="auto": the least seconds between two notifications of a queue (None:
    #: PGTASKS_NOTIFY_INTERVAL, else 0.2; docs/performance.md).
    notify_interval: float | None


#: The keywords of AppOptions that are PoolSettings' fields (by field name).
_POOLS = {
    "pool_min_size": "min_size",
    "pool_max_size": "max_size",
    "connect_timeout": "connect_timeout",
    "connect_attempts": "connect_attempts",
}
#: The keywords that make the store layout.
_LAYOUT = ("stores", "routes")


@dataclasses.dataclass(frozen=True)
class AppSettings:
    """What an App is configured with (see :class:`pgtasks.App` for each option).

    ``database``: where its store's connections go (an App of several stores: the
    default one; an App of one of them, ``app.for_store(name)``: that one); ``layout``:
    its stores and the routes of its queues (None: ``database`` alone; ``store_layout``
    is the one in force either way); ``pools``: its connection pools. The worker timings
    (lease, heartbeat, rescue, poll) are the defaults of its workers; retention of
    finished jobs is in seconds (None: never pruned).
    """

    database: DatabaseSettings
    pools: PoolSettings = dataclasses.field(default_factory=PoolSettings)
    default_queue: str = "default"
    default_max_attempts: int = 5
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    max_result_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    max_error_bytes: int = DEFAULT_MAX_ERROR_BYTES
    lease_timeout: float = 30.0
    heartbeat_interval: float = 5.0
    rescue_interval: float = 5.0
    poll_interval: float = 1.0
    prune_done_after: float | None = 86400.0
    prune_failed_after: float | None = 7 * 86400.0
    prune_interval: float = 60.0
    heal_interval: float = 30.0
    #: Seconds a due job waits per level its priority rises in the claim (None: no aging).
    priority_aging: float | None = None
    eager: bool = False
    layout: StoreLayout | None = None
    #: The store an App of one of its stores serves (app.for_store(name)); None: all.
    store: str | None = None

    @property
    def store_layout(self) -> StoreLayout:
        """The stores and routes in force: ``layout``, or ``database`` alone."""
        if self.layout is not None:
            return self.layout
        return StoreLayout({DEFAULT_STORE: self.database})

    def __post_init__(self) -> None:
        if not isinstance(self.default_queue, str) or not self.default_queue:
            raise ConfigurationError(
                f"default_queue= must be a non-empty string, got {self.default_queue!r}"
            )
        whole_number("default_max_attempts=", self.default_max_attempts)
        whole_number("max_payload_bytes=", self.max_payload_bytes, minimum=64)
        # Caps of what a worker stores: a larger result fails its job, a longer error
        # text (last_error: message and traceback) is cut with a marker.
        for name in ("max_result_bytes", "max_error_bytes"):
            cap = getattr(self, name)
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1024:
                raise ConfigurationError(f"{name}= must be an int >= 1024, got {cap!r}")
        for name in _INTERVALS:
            self._set(name, positive_seconds(f"{name}=", getattr(self, name)))
        if self.priority_aging is not None:
            self._set("priority_aging", positive_seconds("priority_aging=", self.priority_aging))
        for name in ("prune_done_after", "prune_failed_after"):
            self._set(name, retention_seconds(name, getattr(self, name)))
        if self.heartbeat_interval >= self.lease_timeout:
            raise ConfigurationError(
                f"heartbeat_interval ({self.heartbeat_interval:g} s) must be shorter than"
                f" lease_timeout ({self.lease_timeout:g} s), or live workers would be rescued"
            )

    def _set(self, name: str, value: object) -> None:
        """Store a field's checked form (a number of seconds as a float)."""
        object.__setattr__(self, name, value)

    @classmethod
    def resolve(
        cls,
        dsn: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        **options: Unpack[AppOptions],
    ) -> AppSettings:
        """The settings of ``App(...)``'s keywords: the fields of the same name, the
        pools', the connections (the environment filling in PGTASKS_DSN, …) and the
        stores (PGTASKS_STORES, PGTASKS_ROUTES; see layout.py)."""
        environ = os.environ if environ is None else environ
        given: dict[str, Any] = dict(options)
        pools = PoolSettings(
            **{field: given.pop(key) for key, field in _POOLS.items() if key in given}
        )
        stores, routes = (given.pop(key, None) for key in _LAYOUT)
        connection = {key: given.pop(key) for key in _CONNECTION if key in given}
        database = DatabaseSettings.resolve(
            dsn, schema=connection.pop("schema", None), environ=environ, **connection
        )
        layout = StoreLayout.resolve(database, stores, routes, dsn_given=bool(dsn), environ=environ)
        return cls(layout.stores[DEFAULT_STORE], pools, layout=layout, **given)


#: The keywords of AppOptions that are AppSettings' own fields.
_FIELDS = {field.name for field in dataclasses.fields(AppSettings)} & set(
    AppOptions.__annotations__
)
#: The keywords of the connections (DatabaseSettings.resolve's): the others.
_CONNECTION = tuple(
    name for name in AppOptions.__annotations__ if name not in {*_FIELDS, *_POOLS, *_LAYOUT}
)


def option_defaults() -> dict[str, Any]:
    """The default of each keyword of AppOptions (None: the environment's, or none)."""
    fields = {field.name: field.default for field in dataclasses.fields(AppSettings)}
    pools = {field.name: field.default for field in dataclasses.fields(PoolSettings)}
    return {
        name: fields[name] if name in _FIELDS else pools[_POOLS[name]] if name in _POOLS else None
        for name in AppOptions.__annotations__
    }


def app_signature() -> inspect.Signature:
    """``App.__init__``'s signature as ``inspect`` shows it: ``self``, ``dsn``, then every
    keyword of AppOptions with its type and default."""
    keyword, positional = inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD
    defaults = option_defaults()
    return inspect.Signature(
        [
            inspect.Parameter("self", positional),
            inspect.Parameter("dsn", positional, default=None, annotation="str | None"),
            *(
                inspect.Parameter(name, keyword, default=defaults[name], annotation=_text(kind))
                for name, kind in AppOptions.__annotations__.items()
            ),
        ],
        return_annotation="None",
    )


def check_keywords(options: Mapping[str, object]) -> None:
    """The TypeError Python raises for a keyword ``App.__init__`` does not take."""
    for name in options:
        if name not in AppOptions.__annotations__:
            raise TypeError(f"App.__init__() got an unexpected keyword argument {name!r}")


def _text(annotation: object) -> object:
    return annotation.__forward_arg__ if isinstance(annotation, ForwardRef) else annotation


class _Configured(Protocol):
    @property
    def settings(self) -> object: ...


class Setting(Generic[T]):
    """A read-only attribute of an App or a Worker that reads the field of the same name
    of its ``settings`` (or the one ``path`` names: ``"pools.min_size"``); ``convert``:
    what the attribute gives of it (a Worker's queues: a list, a copy each time)."""

    def __init__(self, convert: Callable[[Any], T] | None = None, *, path: str = "") -> None:
        self.name = self.field = path
        self.convert = convert

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.field = self.field or name

    @overload
    def __get__(self, instance: None, owner: type) -> Setting[T]: ...

    @overload
    def __get__(self, instance: _Configured, owner: type) -> T: ...

    def __get__(self, instance: _Configured | None, owner: type) -> T | Setting[T]:
        if instance is None:
            return self
        value: Any = instance.settings
        for name in self.field.split("."):
            value = getattr(value, name)
        if self.convert is not None:
            return self.convert(value)
        result: T = value
        return result

    def __set__(self, instance: object, value: object) -> None:
        # Read-only, as properties: the settings are one frozen value.
        raise AttributeError(
            f"property {self.name!r} of {type(instance).__name__!r} object has no setter"
        )


class DeprecatedAlias:
    """An attribute's former name: reading it warns (DeprecationWarning) and gives the
    attribute ``name`` of the same object."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.alias = ""

    def __set_name__(self, owner: type, alias: str) -> None:
        self.alias = alias

    def __get__(self, instance: object, owner: type) -> Any:
        if instance is None:
            return self
        where = owner.__name__
        message = f"{where}.{self.alias} is deprecated: use {where}.{self.name}"
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return getattr(instance, self.name)
