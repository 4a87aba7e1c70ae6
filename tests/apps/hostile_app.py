"""The app of the hostile-input fault tests (tests/faults/test_hostile.py).

The fault app's tasks plus tasks whose exceptions, results and inputs are hostile: an
undecodable file name in the message (thread, process and async executors), the
connection password in the message, a result over the cap, a huge error text. Built from
the environment like ``tests.apps.fault_app``; workers run it with ``-A`` (the process
pool's spawned children import it too).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from psycopg import conninfo

from pgtasks import App
from tests.apps import lazy_app
from tests.apps._environment import environment_app
from tests.apps.fault_app import register_fault_tasks

APP_PATH = "tests.apps.hostile_app:app"
#: The result cap of the workers of this app (the smallest App allows).
MAX_RESULT_BYTES = 4096
MAX_ERROR_BYTES = 4096


def undecodable_name(raw_hex: str) -> str:
    """A file name as os.listdir returns it for bytes that are not UTF-8 (lone surrogates)."""
    return os.fsdecode(bytes.fromhex(raw_hex))


def register_hostile_tasks(app: App) -> dict[str, Any]:
    """Register the hostile tasks (build_app adds the fault app's tasks too)."""

    @app.task(name="hostile.raise_name", max_attempts=1)
    def raise_name(raw_hex: str) -> None:
        raise RuntimeError(f"cannot process {undecodable_name(raw_hex)}")

    @app.task(name="hostile.raise_name_process", max_attempts=1, executor="process")
    def raise_name_process(raw_hex: str) -> None:
        raise RuntimeError(f"cannot process {undecodable_name(raw_hex)}")

    @app.task(name="hostile.raise_name_async", max_attempts=1)
    async def raise_name_async(raw_hex: str) -> None:
        raise RuntimeError(f"cannot process {undecodable_name(raw_hex)}")

    @app.task(name="hostile.raise_dsn", max_attempts=1)
    def raise_dsn() -> None:
        """A task that puts its connection string in its error (as careless code does)."""
        password = str(conninfo.conninfo_to_dict(app.dsn).get("password"))
        url = f"postgresql://postgres:{quote(password, safe='')}@db.example/app"
        raise RuntimeError(f"cannot connect with {app.dsn} or {url} (password: {password})")

    @app.task(name="hostile.return_bytes", max_attempts=1)
    def return_bytes(size: int) -> str:
        return "x" * size

    @app.task(name="hostile.raise_long", max_attempts=1)
    def raise_long(size: int) -> None:
        raise ValueError("y" * size + " the end")

    @app.task(name="hostile.wait_async", max_attempts=1)
    async def wait_async(path: str, timeout: float = 30.0) -> str:
        for _ in range(int(timeout / 0.02)):
            if Path(path).exists():
                return "released"
            await asyncio.sleep(0.02)
        return "timed out"

    @app.task(name="hostile.show_args", max_attempts=1)
    def show_args(*args: Any, **kwargs: Any) -> list[Any]:
        return [list(args), kwargs]

    return {
        "raise_name": raise_name,
        "raise_name_process": raise_name_process,
        "raise_name_async": raise_name_async,
        "raise_dsn": raise_dsn,
        "return_bytes": return_bytes,
        "raise_long": raise_long,
        "show_args": show_args,
        "wait_async": wait_async,
        **register_deep_tasks(app),
    }


def register_deep_tasks(app: App) -> dict[str, Any]:
    """Tasks of the deep-payload tests (tests/faults/test_deep_payloads.py)."""

    @app.task(name="hostile.deep_result", max_attempts=3)
    def deep_result(depth: int) -> list[Any]:
        """A list nested ``depth`` levels deep (results are bounded: MAX_JSON_DEPTH)."""
        value: list[Any] = []
        for _ in range(depth - 1):
            value = [value]
        return value

    @app.task(name="hostile.depth_of", max_attempts=1)
    def depth_of(value: Any) -> int:
        """How deep ``value`` nests lists (first items only), counted without recursion."""
        depth = 0
        while isinstance(value, list):
            depth, value = depth + 1, value[0] if value else None
        return depth

    return {"deep_result": deep_result, "depth_of": depth_of}


def build_app() -> App:
    app = environment_app(
        connect_timeout=2.0,
        pool_max_size=4,
        max_result_bytes=MAX_RESULT_BYTES,
        max_error_bytes=MAX_ERROR_BYTES,
    )
    register_fault_tasks(app)
    register_hostile_tasks(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
