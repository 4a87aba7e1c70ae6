"""``app.conf``: Celery's settings, each honoured, accepted with a note, or warned about.

Every setting is checked when it is set (``app.conf.update``, ``config_from_object``,
attribute or item assignment): one that pgtasks honours is kept and applied when the
app is built; one that has no meaning here (a broker's or a result backend's) is kept
too, with a CeleryCompatibilityWarning naming it; one that would change what a task
receives (a non-JSON serializer) is refused with ImproperlyConfigured.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from .exceptions import ImproperlyConfigured


class CeleryCompatibilityWarning(UserWarning):
    """A Celery setting or option that has no meaning on pgtasks (named in the message)."""


#: Settings pgtasks honours, with their defaults (Celery's names).
DEFAULTS: dict[str, Any] = {
    "broker_url": None,
    "task_routes": None,
    "task_default_queue": "celery",
    "task_default_priority": None,
    "task_acks_late": False,
    "task_time_limit": None,
    "task_soft_time_limit": None,
    "task_default_rate_limit": None,
    "task_ignore_result": False,
    "task_track_started": True,
    "task_always_eager": False,
    "task_eager_propagates": False,
    "task_store_eager_result": False,
    "task_serializer": "json",
    "result_serializer": "json",
    "accept_content": ["json"],
    "result_accept_content": None,
    "worker_concurrency": None,
    "worker_prefetch_multiplier": 4,
    "worker_max_tasks_per_child": None,
    "worker_max_memory_per_child": None,
    "beat_schedule": {},
    "timezone": None,
    "enable_utc": True,
    "result_expires": timedelta(days=1),
    "imports": (),
    "include": (),
    "task_create_missing_queues": True,
    "worker_hijack_root_logger": True,
    "broker_connection_retry_on_startup": None,
}

#: Accepted with no effect because pgtasks always behaves that way (said in the docs).
ALWAYS = {
    "task_acks_late": "leases make every task at-least-once with fencing",
    "task_track_started": "a job's running state is always recorded",
    "task_create_missing_queues": "a queue exists as soon as a job names it",
    "enable_utc": "pgtasks stores times in UTC",
    "worker_hijack_root_logger": "the worker configures logging with -l",
    "task_ignore_result": "results are kept in the job row (pruned after result_expires)",
    "broker_connection_retry_on_startup": "a worker retries its connection at startup",
}

#: Prefixes and names of settings that mean nothing here: warned about by name.
MEANINGLESS_PREFIXES = (
    "broker_",
    "result_backend",
    "redis_",
    "cache_",
    "cassandra_",
    "s3_",
    "azureblockblob_",
    "elasticsearch_",
    "mongodb_",
    "couchbase_",
    "arangodb_",
    "database_",
    "event_",
    "security_",
    "control_",
    "riak_",
    "filesystem_",
)
MEANINGLESS = {
    "result_backend",
    "result_persistent",
    "result_extended",
    "result_compression",
    "result_chord_join_timeout",
    "result_chord_retry_interval",
    "result_cache_max",
    "result_exchange",
    "result_exchange_type",
    "task_queues",
    "task_default_exchange",
    "task_default_exchange_type",
    "task_default_routing_key",
    "task_default_delivery_mode",
    "task_compression",
    "task_protocol",
    "task_publish_retry",
    "task_publish_retry_policy",
    "task_send_sent_event",
    "task_reject_on_worker_lost",
    "task_acks_on_failure_or_timeout",
    "task_remote_tracebacks",
    "task_annotations",
    "task_inherit_parent_priority",
    "task_queue_max_priority",
    "worker_send_task_events",
    "worker_direct",
    "worker_pool",
    "worker_pool_restarts",
    "worker_autoscaler",
    "worker_consumer",
    "worker_timer",
    "worker_timer_precision",
    "worker_enable_remote_control",
    "worker_lost_wait",
    "worker_disable_rate_limits",
    "worker_state_db",
    "worker_cancel_long_running_tasks_on_connection_loss",
    "worker_redirect_stdouts",
    "worker_redirect_stdouts_level",
    "worker_log_format",
    "worker_task_log_format",
    "worker_log_color",
    "worker_proc_alive_timeout",
    "worker_deduplicate_successful_tasks",
    "beat_scheduler",
    "beat_schedule_filename",
    "beat_sync_every",
    "beat_max_loop_interval",
}
#: Settings whose other values pgtasks cannot honour: refused, naming the fix.
JSON_ONLY = ("task_serializer", "result_serializer", "accept_content", "result_accept_content")


def _check_json(name: str, value: Any) -> None:
    values = [value] if isinstance(value, str) else list(value or ())
    others = [item for item in values if item not in ("json", "application/json")]
    if others:
        raise ImproperlyConfigured(
            f"{name}={value!r}: pgtasks stores arguments and results as JSON only (job rows"
            " are readable by every tool and language); pass JSON values and use 'json'"
        )


def check_setting(name: str, value: Any) -> None:
    """Refuse, warn about or accept one setting (see the module's docstring)."""
    if name in JSON_ONLY:
        _check_json(name, value)
        return
    if name in DEFAULTS:
        if name == "broker_url" and value and not str(value).startswith(("postgres", "pgtasks")):
            warnings.warn(
                f"broker_url={_redacted(value)!r} is not a PostgreSQL DSN: pgtasks needs no"
                " broker; the app uses PGTASKS_DSN / DATABASE_URL, else the embedded server",
                CeleryCompatibilityWarning,
                stacklevel=4,
            )
        return
    if name in MEANINGLESS or name.startswith(MEANINGLESS_PREFIXES):
        warnings.warn(
            f"Celery setting {name!r} has no meaning on pgtasks and is ignored: there is no"
            " broker or result backend to configure (jobs, results and events live in"
            " PostgreSQL; see docs/howto/coming-from-celery.md)",
            CeleryCompatibilityWarning,
            stacklevel=4,
        )
        return
    if name.startswith("pgtasks_"):
        return  # pgtasks' own App options (pgtasks_schema=..., see Celery.native)
    warnings.warn(
        f"unknown setting {name!r} is ignored (not a Celery setting pgtasks knows)",
        CeleryCompatibilityWarning,
        stacklevel=4,
    )


def _redacted(value: Any) -> str:
    text = str(value)
    scheme, separator, rest = text.partition("://")
    if separator and "@" in rest:
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return text


class Settings(dict[str, Any]):
    """``app.conf``: a dict whose keys are also attributes; unset keys read as Celery's
    defaults. Every key set is checked (``check_setting``)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self:
            return self[name]
        if name in DEFAULTS:
            return DEFAULTS[name]
        raise AttributeError(f"no setting {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __setitem__(self, name: str, value: Any) -> None:
        check_setting(name, value)
        super().__setitem__(name, value)

    def get(self, name: str, default: Any = None) -> Any:
        if name in self:
            return self[name]
        return DEFAULTS.get(name, default)

    def update(self, *others: Any, **values: Any) -> None:
        for other in others:
            items = other.items() if isinstance(other, Mapping) else other
            for name, value in items:
                self[name] = value
        for name, value in values.items():
            self[name] = value

    def setdefault(self, name: str, value: Any = None) -> Any:
        if name not in self:
            self[name] = value
        return self[name]


def _celery_name(name: str) -> str:
    """A Celery 3 uppercase name (BROKER_URL, CELERY_TASK_ROUTES, CELERYBEAT_SCHEDULE) as
    the lowercase name it became."""
    old = {
        "CELERYBEAT_SCHEDULE": "beat_schedule",
        "CELERY_TIMEZONE": "timezone",
        "CELERY_ROUTES": "task_routes",
        "CELERY_ALWAYS_EAGER": "task_always_eager",
        "CELERY_EAGER_PROPAGATES_EXCEPTIONS": "task_eager_propagates",
        "CELERY_RESULT_BACKEND": "result_backend",
        "CELERYD_CONCURRENCY": "worker_concurrency",
        "CELERYD_PREFETCH_MULTIPLIER": "worker_prefetch_multiplier",
        "CELERY_DEFAULT_QUEUE": "task_default_queue",
    }
    return old.get(name, name.lower())


def settings_of(source: Any, namespace: str | None) -> dict[str, Any]:
    """The settings an object (or a module, or "module:attribute" / "module.path") holds:
    its public lowercase names, or with ``namespace="CELERY"`` its ``CELERY_*`` names."""
    if isinstance(source, str):
        source = _import_object(source)
    names: Iterable[str] = dir(source)
    found: dict[str, Any] = {}
    for name in names:
        if name.startswith("_"):
            continue
        if namespace:
            prefix = f"{namespace}_"
            if not name.startswith(prefix):
                continue
            key = name[len(prefix) :].lower()
        elif name.isupper():
            key = _celery_name(name)
        elif name.islower():
            key = name
        else:
            continue
        value = getattr(source, name)
        if callable(value) and not isinstance(value, type) and key not in DEFAULTS:
            continue  # functions and imported modules' helpers are not settings
        if type(value).__name__ == "module":
            continue
        found[key] = value
    return found


def _import_object(path: str) -> Any:
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ImproperlyConfigured(f"config_from_object({path!r}): {error}") from error
    return getattr(module, attribute) if attribute else module
