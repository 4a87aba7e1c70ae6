"""A store whose server refuses connections shows as down within about a second (not
after connect_timeout), with one clear error and none of psycopg_pool's retry warnings; a
store that is slow to answer is waited for, never called down, and a server that refuses
for less than a second (a restart) is waited out."""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pgtasks import App, DatabaseUnavailableError
from pgtasks.web import asgi
from tests.support.environment import ROOT, pgtasks_command, pgtasks_env
from tests.support.proxy import SlowProxy
from tests.support.schemas import SchemaAdmin
from tests.support.web import Client

#: The connect_timeout of the stores that refuse: an hour, far past pytest's timeout of a
#: test (60 s) and the subprocesses' (120 s). A call that waited for it would never return
#: in the test; one that returns at all, with the refusal itself for its error (libpq's
#: "Connection refused", never the "within N s" of a wait that ran out), did not wait.
LONG_TIMEOUT = 3600.0


def refused_dsn() -> str:
    """A DSN of a local port nothing listens on: the connection is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://pgtasks@127.0.0.1:{port}/nowhere"


def test_a_refused_store_is_down_at_once_and_the_other_answers(
    make_stores_app: Callable[..., App], schema_admin: SchemaAdmin, caplog: Any
) -> None:
    app = make_stores_app(dsns={"bulk": refused_dsn()}, migrate=False, connect_timeout=LONG_TIMEOUT)
    schema_admin.create_migrated(app.schemas["default"])  # type: ignore[attr-defined]
    caplog.set_level(logging.DEBUG)
    answers = app.store_router.each(
        lambda name: app.for_store(name).database.run(lambda conn: conn.execute("SELECT 1"))
    )
    assert not isinstance(answers["default"], BaseException)
    down = answers["bulk"]
    assert isinstance(down, DatabaseUnavailableError)
    assert "Connection refused" in str(down) and "within" not in str(down)
    # psycopg_pool's own lines about the refused connection are kept at debug.
    pool_lines = [r for r in caplog.records if "error connecting in" in r.getMessage()]
    assert pool_lines and all(r.levelno == logging.DEBUG for r in pool_lines)

    dashboard = asgi(app)
    try:
        page = Client(dashboard).get("/stores")
        assert page.status_code == 200
        assert 'data-state="down"' in page.text and "Connection refused" in page.text
        assert f"within {LONG_TIMEOUT:g} s" not in page.text
    finally:
        dashboard.close()


@pytest.fixture
def slow_server(dsn: str) -> Iterator[SlowProxy]:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    host = str(params.get("host", ""))
    if not host.startswith("/"):
        pytest.skip("the slow proxy fronts the embedded server's Unix socket")
    proxy = SlowProxy(f"{host}/.s.PGSQL.{params.get('port', 5432)}", delay=1.5)
    proxy.start()
    yield proxy
    proxy.close()


def test_a_slow_store_is_waited_for_not_called_down(
    make_stores_app: Callable[..., App], schema_admin: SchemaAdmin, slow_server: SlowProxy
) -> None:
    slow = f"postgresql://postgres@127.0.0.1:{slow_server.port}/postgres?sslmode=disable"
    app = make_stores_app(dsns={"bulk": slow}, migrate=False, connect_timeout=5.0)
    for schema in app.schemas.values():  # type: ignore[attr-defined]
        schema_admin.create_migrated(schema)
    answers = app.store_router.each(
        lambda name: app.for_store(name).database.run(
            lambda conn: conn.execute("SELECT 1").fetchone()
        )
    )
    assert answers == {"default": (1,), "bulk": (1,)}, answers


@pytest.mark.parametrize("command", [("stats",), ("jobs", "list"), ("worker",)])
def test_a_refused_database_is_one_clear_line(
    dsn: str, tmp_path: Path, command: tuple[str, ...]
) -> None:
    env = pgtasks_env(refused_dsn(), "pgtasks")
    env["PGTASKS_TEST_CONNECT_TIMEOUT"] = str(LONG_TIMEOUT)
    result = subprocess.run(
        pgtasks_command(*command, "-A", "tests.apps.basic:app"),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: cannot reach PostgreSQL at 127.0.0.1:"), lines
    assert "Connection refused" in lines[0] and "is the server running" in lines[0]
    assert "within" not in lines[0], lines


def test_a_store_that_goes_down_after_its_pool_opened_is_down_at_once(
    make_stores_app: Callable[..., App], schema_admin: SchemaAdmin, dsn: str
) -> None:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    host = str(params.get("host", ""))
    if not host.startswith("/"):
        pytest.skip("the proxy fronts the embedded server's Unix socket")
    proxy = SlowProxy(f"{host}/.s.PGSQL.{params.get('port', 5432)}", delay=0.0)
    proxy.start()
    through = f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres?sslmode=disable"
    app = make_stores_app(dsns={"bulk": through}, migrate=False, connect_timeout=LONG_TIMEOUT)
    for schema in app.schemas.values():  # type: ignore[attr-defined]
        schema_admin.create_migrated(schema)

    def ask() -> dict[str, Any]:
        return app.store_router.each(
            lambda name: app.for_store(name).database.run(
                lambda conn: conn.execute("SELECT 1").fetchone()
            )
        )

    try:
        assert ask() == {"default": (1,), "bulk": (1,)}  # both pools open
        proxy.close()  # the server of store bulk goes away: its connections cut, refused
        answers = ask()
        assert answers["default"] == (1,)
        assert isinstance(answers["bulk"], DatabaseUnavailableError), answers
        assert "Connection refused" in str(answers["bulk"])
        assert "within" not in str(answers["bulk"])
    finally:
        proxy.close()


def test_a_server_that_refuses_for_less_than_a_second_is_waited_out(
    make_stores_app: Callable[..., App], schema_admin: SchemaAdmin, dsn: str
) -> None:
    from psycopg.conninfo import conninfo_to_dict

    from pgtasks._store.opening import DOWN_AFTER

    params = conninfo_to_dict(dsn)
    host = str(params.get("host", ""))
    if not host.startswith("/"):
        pytest.skip("the proxy fronts the embedded server's Unix socket")
    path = f"{host}/.s.PGSQL.{params.get('port', 5432)}"
    proxies = [SlowProxy(path, delay=0.0)]
    proxies[0].start()
    through = f"postgresql://postgres@127.0.0.1:{proxies[0].port}/postgres?sslmode=disable"
    app = make_stores_app(dsns={"bulk": through}, migrate=False, connect_timeout=LONG_TIMEOUT)
    for schema in app.schemas.values():  # type: ignore[attr-defined]
        schema_admin.create_migrated(schema)
    bulk = app.for_store("bulk").database

    def back() -> None:  # the server is back on its port before DOWN_AFTER
        time.sleep(DOWN_AFTER / 3)
        proxies.append(SlowProxy(path, delay=0.0, port=proxies[0].port))
        proxies[-1].start()

    try:
        assert bulk.run(lambda conn: conn.execute("SELECT 1").fetchone()) == (1,)
        proxies[0].close()  # refused from now on, the pool's connection cut
        restart = threading.Thread(target=back)
        restart.start()
        assert bulk.run(lambda conn: conn.execute("SELECT 2").fetchone()) == (2,)
        restart.join()
    finally:
        for proxy in proxies:
            proxy.close()
