"""The dashboard's limits page (``/limits``): every concurrency and rate limit, by kind (a
tab each), one of them by name (``?name=``), the busiest keys of the per-key ones
(``?keys=``, up to MAX_TOP_KEYS), and its live part (``/events/limits?…``).

What it reads is in limit_reads.py; the Dashboard (app.py) renders the page and routes
here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from .controls import audit_rows
from .limit_reads import KINDS, LIMIT_ROWS, MAX_TOP_KEYS, TOP_KEYS, limits_page
from .reads import DashboardDatabase
from .requests import live_url, message, query_string

if TYPE_CHECKING:
    from .app import Dashboard

#: The longest limit name ``?name=`` takes (names are task and queue names, with a prefix).
MAX_NAME_CHARS = 1000


def _shown(value: str) -> str:
    """A request value as an error message may quote it (printable, cut)."""
    return repr(value[:40]) + ("…" if len(value) > 40 else "")


@dataclasses.dataclass(frozen=True)
class LimitsQuery:
    """What the limits page shows: the limits of one kind (or all), the one named, and how
    many keys of each per-key limit."""

    kind: str | None = None
    name: str | None = None
    keys: int = TOP_KEYS

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> LimitsQuery:
        """The query of a request; a 400 naming the field for a bad value."""
        kind = params.get("kind", "").strip() or None
        if kind is not None and kind not in KINDS:
            raise HTTPException(
                400, f"bad filter: kind: {_shown(kind)} is not one of {', '.join(KINDS)}"
            )
        name = params.get("name") or None
        if name is not None and len(name) > MAX_NAME_CHARS:
            raise HTTPException(
                400, f"bad filter: name: a limit name has at most {MAX_NAME_CHARS} characters"
            )
        text = params.get("keys", "").strip()
        keys = TOP_KEYS
        if text:
            digits = text.isascii() and text.isdigit() and len(text) <= 6
            if not digits or not 1 <= int(text) <= MAX_TOP_KEYS:
                raise HTTPException(
                    400,
                    f"bad filter: keys must be a number of keys from 1 to {MAX_TOP_KEYS},"
                    f" got {_shown(text)}",
                )
            keys = int(text)
        return cls(kind, name, keys)

    def as_query(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "keys": self.keys if self.keys != TOP_KEYS else None,
        }

    def kind_links(self) -> dict[str, str]:
        """The query string of each kind tab (the keys kept, the name dropped)."""
        keys = self.as_query()["keys"]
        return {"": query_string({"keys": keys})} | {
            kind: query_string({"kind": kind, "keys": keys}) for kind in KINDS
        }

    def more_keys(self) -> str | None:
        """The query string that lists more keys of each per-key limit (None: at most)."""
        if self.keys >= MAX_TOP_KEYS:
            return None
        wider = min(MAX_TOP_KEYS, max(50, self.keys * 5))
        return query_string({**self.as_query(), "keys": wider})


class LimitPages:
    """The limits page of one dashboard: what it shows (run in a thread), the page and
    its live part."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.app = dashboard.app

    def limits_context(
        self, query: LimitsQuery, db: DashboardDatabase | None = None
    ) -> dict[str, Any]:
        data = limits_page(
            self.app,
            db or self.dashboard.db,
            kind=query.kind,
            name=query.name,
            top_keys=query.keys,
        )
        return {
            "now": data.now,
            "page": data,
            "query": query,
            "kinds": KINDS,
            "kind_links": query.kind_links(),
            "more_keys": query.more_keys(),
            "limit_rows": LIMIT_ROWS,
            "max_keys": MAX_TOP_KEYS,
        }

    async def limits(self, request: Request) -> Response:
        query = LimitsQuery.from_params(request.query_params)
        dashboard = self.dashboard
        context = await run_in_threadpool(self.limits_context, query, dashboard.reads(request))
        audit = await run_in_threadpool(audit_rows, dashboard, query.name)
        chosen = next(
            (view.state for view in context["page"].limits if view.state.name == query.name),
            None,
        )
        return dashboard.page(
            request,
            "limits.html",
            live=live_url(request, "/limits", query_string(query.as_query())),
            message=message(request),
            audit=audit,
            chosen=chosen,
            **context,
        )

    def live_view(self, request: Request, base: str) -> tuple[tuple[Any, ...], Callable[[], str]]:
        """The key and renderer of the page's live part."""
        query = LimitsQuery.from_params(request.query_params)
        fragment = self.dashboard.fragment
        return ("limits", base, query_string(query.as_query())), lambda: fragment(
            "_limits_live.html", base, **self.limits_context(query)
        )
