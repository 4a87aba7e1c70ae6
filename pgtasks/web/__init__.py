"""The pgtasks dashboard: ``pgtasks web -A module:app``, or mounted in your ASGI app::

    from pgtasks.web import asgi, basic_auth

    dashboard = asgi(app, auth=basic_auth("ops", os.environ["DASHBOARD_PASSWORD"]))
    # Starlette: Mount("/tasks", app=dashboard); FastAPI: api.mount("/tasks", dashboard)

Needs the ``web`` extra (``pip install 'pgtasks[web]'``). See docs/howto/dashboard.md.
"""

from __future__ import annotations

from .app import asgi
from .gate import DashboardApp
from .security import AuthCallable, auth_from_env, basic_auth, is_loopback

__all__ = ["AuthCallable", "DashboardApp", "asgi", "auth_from_env", "basic_auth", "is_loopback"]
