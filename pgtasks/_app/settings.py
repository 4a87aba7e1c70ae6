"""AppSettings: an App's configuration as one frozen value, validated once.

``App(...)``'s keywords and the environment make it (:meth:`AppSettings.resolve`); a
Worker derives its own settings from it (pgtasks/_worker/settings.py). Every rule that
joins two options (a heartbeat shorter than the lease) is checked here, once.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar, overload

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
        session_dsn: str | None = None,
        replica_dsn: str | None = None,
        pooled: bool | None = None,
        prepared_statements: bool | None = None,
        schema: str | None = None,
        embedded_dir: str | os.PathLike[str] | None = None,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        connect_timeout: float = 5.0,
        connect_attempts: int = 3,
        environ: Mapping[str, str] | None = None,
        stores: Mapping[str, str | Store] | None = None,
        routes: Mapping[str, str] | None = None,
        notify_enqueues: bool | None = None,
        notify: str | None = None,
        **options: Any,
    ) -> AppSettings:
        """The settings of ``App(...)``'s keywords (``options``: the fields of the same
        name), the environment filling in the connections (PGTASKS_DSN, …) and the
        stores (PGTASKS_STORES, PGTASKS_ROUTES; see layout.py)."""
        environ = os.environ if environ is None else environ
        database = DatabaseSettings.resolve(
            dsn,
            schema=schema,
            embedded_dir=embedded_dir,
            session_dsn=session_dsn,
            replica_dsn=replica_dsn,
            pooled=pooled,
            prepared_statements=prepared_statements,
            environ=environ,
            notify_enqueues=notify_enqueues,
            notify=notify,
        )
        pools = PoolSettings(pool_min_size, pool_max_size, connect_timeout, connect_attempts)
        layout = StoreLayout.resolve(database, stores, routes, dsn_given=bool(dsn), environ=environ)
        return cls(layout.stores[DEFAULT_STORE], pools, layout=layout, **options)


class _Configured(Protocol):
    settings: AppSettings


class FromSettings(Generic[T]):
    """A read-only App attribute that reads the field of the same name of
    ``app.settings`` (``pools``: of ``app.settings.pools``, named ``field``)."""

    def __init__(self, field: str = "", *, pools: bool = False) -> None:
        self.field = field
        self.pools = pools

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = self.field or name

    @overload
    def __get__(self, instance: None, owner: type) -> FromSettings[T]: ...

    @overload
    def __get__(self, instance: _Configured, owner: type) -> T: ...

    def __get__(self, instance: _Configured | None, owner: type) -> T | FromSettings[T]:
        if instance is None:
            return self
        settings = instance.settings
        value: T = getattr(settings.pools if self.pools else settings, self.field)
        return value


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
