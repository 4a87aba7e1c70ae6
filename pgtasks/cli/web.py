"""``pgtasks web``: serve the dashboard (``pgtasks.web``) with uvicorn.

Binds 127.0.0.1 by default. On any other address it refuses to start without
authentication (PGTASKS_WEB_USER / PGTASKS_WEB_PASSWORD) unless --insecure-no-auth.
"""

from __future__ import annotations

import contextlib
from types import FrameType

import click

from ._common import (
    app_option,
    configure_logging,
    load_app,
    log_format_option,
    log_level_option,
)


@click.command("web")
@app_option
@click.option(
    "--host", default="127.0.0.1", show_default=True, metavar="ADDRESS", help="Address to bind."
)
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    metavar="PORT",
    help="Port to bind (0: a free one).",
)
@click.option("--read-only", is_flag=True, help="Hide every action and refuse its POST (403).")
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    help="Serve any client without authentication, even on a non-loopback address or"
    " through a proxy (something in front must authenticate).",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A Host name to serve (repeatable; .example.com: the domain and its subdomains)."
    " Without authentication only localhost and loopback addresses are served besides"
    " these; with authentication, only these when any is given.",
)
@log_level_option
@log_format_option
def web(
    app_path: str,
    host: str,
    port: int,
    read_only: bool,
    insecure_no_auth: bool,
    allowed_hosts: tuple[str, ...],
    log_level: str,
    log_format: str,
) -> None:
    """Serve the dashboard: queues, jobs (retry, cancel, delete), workers, schedules.

    Authentication: HTTP basic auth with PGTASKS_WEB_USER and PGTASKS_WEB_PASSWORD.
    Without them only loopback clients asking for localhost (or an --allowed-host) are
    served, never through a proxy, and a non-loopback --host is refused unless
    --insecure-no-auth. Needs the web extra: pip install 'pgtasks[web]'.
    """
    try:
        import uvicorn

        from ..web import asgi, auth_from_env, is_loopback
    except ImportError as error:  # the web extra is not installed
        raise click.UsageError(
            f"pgtasks web needs the web extra ({error.name} is missing): pip install 'pgtasks[web]'"
        ) from None
    try:
        auth = auth_from_env()
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    if auth is None and not insecure_no_auth and not is_loopback(host):
        raise click.UsageError(
            f"refusing to serve the dashboard on {host} without authentication: set"
            " PGTASKS_WEB_USER and PGTASKS_WEB_PASSWORD, bind 127.0.0.1, or pass"
            " --insecure-no-auth"
        )
    configure_logging(log_level, log_format)
    app = load_app(app_path)
    dashboard = asgi(
        app,
        auth=auth,
        read_only=read_only,
        insecure_no_auth=insecure_no_auth,
        allowed_hosts=allowed_hosts or None,
    )
    shown = f"[{host}]" if ":" in host else host
    mode = ", read-only" if read_only else ""
    protection = "basic auth" if auth is not None else "no authentication"
    click.echo(
        f"pgtasks web: http://{shown}:{port}/ ({protection}{mode});"
        f" database {app.describe_database()}, schema {app.schema}",
        err=True,
    )
    config = uvicorn.Config(
        dashboard,
        host=host,
        port=port,
        log_level=log_level.lower(),
        proxy_headers=False,
        server_header=False,
        # Event streams end when told (below); anything else gets 5 s to finish.
        timeout_graceful_shutdown=5,
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # Open event streams never end by themselves: end them, so that the server
            # stops at once instead of waiting for browsers to leave.
            dashboard.close_streams()
            super().handle_exit(sig, frame)

    with app, contextlib.closing(dashboard), contextlib.suppress(KeyboardInterrupt):
        # uvicorn re-raises the SIGINT it handled once it has stopped (as uvicorn.run).
        Server(config).run()
