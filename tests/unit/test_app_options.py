"""App's keywords: the signature ``inspect.signature(App)`` shows, the errors of an
unknown, misplaced or invalid keyword, and mypy --strict refusing a keyword of the wrong
type, all as they were when each keyword was spelled in ``App.__init__``."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest

from pgtasks import App, ConfigurationError
from tests.support.environment import ROOT

DSN = "postgresql://user:secret@db.invalid/app"

SIGNATURE = (
    "(dsn: 'str | None' = None, *, session_dsn: 'str | None' = None, replica_dsn: 'str |"
    " None' = None, pooled: 'bool | None' = None, prepared_statements: 'bool | None' = None,"
    " schema: 'str | None' = None, embedded_dir: 'str | os.PathLike[str] | None' = None,"
    " default_queue: 'str' = 'default', default_max_attempts: 'int' = 5, max_payload_bytes:"
    " 'int' = 1048576, max_result_bytes: 'int' = 1048576, max_error_bytes: 'int' = 65536,"
    " pool_min_size: 'int' = 1, pool_max_size: 'int' = 10, connect_timeout: 'float' = 5.0,"
    " connect_attempts: 'int' = 3, lease_timeout: 'float' = 30.0, heartbeat_interval:"
    " 'float' = 5.0, rescue_interval: 'float' = 5.0, poll_interval: 'float' = 1.0,"
    " prune_done_after: 'float | None' = 86400.0, prune_failed_after: 'float | None' ="
    " 604800.0, prune_interval: 'float' = 60.0, heal_interval: 'float' = 30.0,"
    " priority_aging: 'float | None' = None, eager: 'bool' = False, stores: 'Mapping[str,"
    " str | Store] | None' = None, routes: 'Mapping[str, str] | None' = None,"
    " notify_enqueues: 'bool | None' = None, notify: 'str | None' = None, notify_interval:"
    " 'float | None' = None) -> 'None'"
)


def test_the_signature_lists_every_keyword_with_its_type_and_default() -> None:
    assert str(inspect.signature(App)) == SIGNATURE


@pytest.mark.parametrize(
    ("args", "options", "error", "message"),
    [
        (
            (DSN,),
            {"bogus": 1},
            TypeError,
            "App.__init__() got an unexpected keyword argument 'bogus'",
        ),
        (
            (DSN,),
            {"eager": True, "second": 2, "first": 1},
            TypeError,
            "App.__init__() got an unexpected keyword argument 'second'",
        ),
        (
            (DSN, "other"),
            {},
            TypeError,
            "App.__init__() takes from 1 to 2 positional arguments but 3 were given",
        ),
        (
            (DSN,),
            {"default_queue": ""},
            ConfigurationError,
            "default_queue= must be a non-empty string, got ''",
        ),
        (
            (DSN,),
            {"pool_min_size": 11},
            ConfigurationError,
            "need 0 <= pool_min_size <= pool_max_size and pool_max_size >= 1",
        ),
    ],
)
def test_a_wrong_keyword_is_refused_with_the_same_words(
    args: tuple[str, ...], options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        App(*args, **options)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_every_keyword_given_reaches_the_settings() -> None:
    app = App(
        DSN,
        schema="mine",
        default_queue="q",
        pool_min_size=2,
        pool_max_size=4,
        lease_timeout=60,
        heartbeat_interval=6,
        priority_aging=2,
        eager=True,
        routes={},
    )
    assert (app.schema, app.default_queue, app.pool_min_size, app.pool_max_size) == (
        "mine",
        "q",
        2,
        4,
    )
    assert (app.lease_timeout, app.heartbeat_interval) == (60.0, 6.0)
    assert app.settings.priority_aging == 2.0 and app.is_eager


def test_mypy_refuses_a_keyword_of_the_wrong_type_or_name(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "typed_app.py"
    snippet.write_text(
        "from pgtasks import App\n"
        'App(pool_min_size="2")\n'
        "App(bogus=1)\n"
        'App("postgresql://x/y", default_queue="q", eager=True, prune_done_after=None)\n'
    )
    cache = ROOT / ".mypy_cache"
    stdout, _, status = api.run(
        ["--strict", "--cache-dir", os.fspath(cache), "--no-error-summary", os.fspath(snippet)]
    )
    lines = sorted({int(line.split(":")[1]) for line in stdout.splitlines() if ": error:" in line})
    assert status == 1 and lines == [2, 3], stdout


def test_the_options_and_the_settings_are_one_declaration() -> None:
    """Each keyword is a field of AppSettings or PoolSettings (same type) or a connection
    keyword; each field of theirs but the derived ones is a keyword."""
    import dataclasses

    from pgtasks._app.settings import AppOptions, AppSettings, option_defaults
    from pgtasks._store.connecting import PoolSettings

    keywords = {
        name: str(getattr(kind, "__forward_arg__", kind))
        for name, kind in AppOptions.__annotations__.items()
    }
    own = {field.name: str(field.type) for field in dataclasses.fields(AppSettings)}
    derived = {"database", "pools", "layout", "store"}
    assert {name: own[name] for name in own.keys() - derived} == {
        name: kind for name, kind in keywords.items() if name in own
    }
    pools = {
        f"pool_{field.name}" if "size" in field.name else field.name
        for field in dataclasses.fields(PoolSettings)
    }
    assert pools <= keywords.keys()
    assert option_defaults()["lease_timeout"] == AppSettings.lease_timeout
