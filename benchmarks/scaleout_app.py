"""The app of ``--scaleout``: its stores from PGTASKS_STORES, one no-op task per store
(``scaleout.noop<i>`` on queue ``q<i>``, routed to store ``s<i>``; store 0 is "default")."""

from __future__ import annotations

from typing import Any

from pgtasks import App

STORES = 3


def build() -> App:
    app = App()
    for index in range(STORES):
        app.task(name=f"scaleout.noop{index}", queue=f"q{index}")(noop)
    return app


def noop(n: int) -> None:
    return None


def store_name(index: int) -> str:
    return "default" if index == 0 else f"s{index}"


def __getattr__(name: str) -> Any:
    if name == "app":
        global app
        app = build()
        return app
    raise AttributeError(name)
