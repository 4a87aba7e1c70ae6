"""The live pages' event streams (a real uvicorn server), and ``pgtasks web``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from pgtasks import App
from pgtasks.cli import main
from pgtasks.web import asgi
from tests.support.inprocess import Gates, running_worker
from tests.support.population import insert_job
from tests.support.waiting import wait_until
from tests.support.web import Served, free_port

Connection = psycopg.Connection[Any]


def overview_events(url: str, timeout: float = 15.0) -> Iterator[str]:
    """The HTML of each ``update`` event of the stream at ``url``, until the caller stops
    reading: an AssertionError at ``timeout``, or when the stream ends first (a test that
    waits for an event never passes for want of one)."""
    deadline = time.monotonic() + timeout
    with (
        httpx.Client(timeout=httpx.Timeout(timeout)) as client,
        client.stream("GET", url) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event, data = None, []
        for line in response.iter_lines():
            if time.monotonic() > deadline:
                raise AssertionError(f"no matching event within {timeout} s")
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
            elif line == "" and event is not None:
                if event == "update":
                    yield "\n".join(data)
                event, data = None, []
    raise AssertionError(f"the event stream of {url} ended before the awaited event")


def pending_of(html: str, queue: str) -> int | None:
    match = re.search(
        rf'<tr data-queue="{re.escape(queue)}">.*?data-stat="pending">(?:<a [^>]*>)?(\d+)<',
        html,
        re.S,
    )
    return int(match[1]) if match else None


def test_an_enqueue_updates_the_overview_stream_through_notify(
    app: App, serve: Callable[..., Served]
) -> None:
    dashboard = asgi(app, poll=60.0)  # long poll: only a notification can explain an update
    served = serve(dashboard)

    @app.task(queue="emails")
    def send(to: str) -> None:
        return None

    seen: list[int | None] = []
    for html in overview_events(f"{served.url}/events"):
        seen.append(pending_of(html, "emails"))
        if len(seen) == 1:
            assert seen == [None]  # the first render: no job yet
            send.delay("a@example.com")
        elif seen[-1] == 1:
            break
    hub = dashboard.dashboard.live  # type: ignore[attr-defined]
    assert hub.notifications >= 1
    wait_until(lambda: hub.stats()["subscribers"] == 0, message="the stream to unsubscribe")


def test_the_overview_stream_polls_for_changes_no_notification_announces(
    app: App, admin: Connection, serve: Callable[..., Served]
) -> None:
    served = serve(asgi(app, poll=0.2))
    for index, html in enumerate(overview_events(f"{served.url}/events")):
        if index == 0:
            # A running row written directly notifies nobody: the polling fallback finds it.
            insert_job(admin, app, status="running", queue="silent", locked_by=None)
        elif 'data-queue="silent"' in html:
            break


def running_of(html: str, queue: str) -> int | None:
    match = re.search(
        rf'<tr data-queue="{re.escape(queue)}">.*?data-stat="running">(?:<a [^>]*>)?(\d+)<',
        html,
        re.S,
    )
    return int(match[1]) if match else None


def test_a_claim_and_a_finish_update_the_overview_through_notify(
    app: App, serve: Callable[..., Served]
) -> None:
    """No poll (60 s): the claim's notification shows the job running, the finish's done."""
    dashboard = asgi(app, poll=60.0)
    served = serve(dashboard)
    gates = Gates()
    gate = gates()

    @app.task(queue="live")
    def hold() -> str:
        gate.wait(20)
        return "held"

    handle = hold.delay()
    try:
        with running_worker(app, queues=["live"], poll_interval=60.0):
            seen: list[int | None] = []
            for html in overview_events(f"{served.url}/events", timeout=20):
                seen.append(running_of(html, "live"))
                if seen[-1] == 1:
                    gate.set()  # seen running: let it finish
                elif 1 in seen and 'data-stat="done"><a href' in html and seen[-1] == 0:
                    break
            assert handle.get(timeout=10) == "held"
    finally:
        gates.open_all()
    assert seen[-1] == 0 and 1 in seen


def test_the_jobs_list_and_a_job_page_update_live_with_progress_and_meta(
    app: App, serve: Callable[..., Served]
) -> None:
    """The job page hears each progress report (meta write) and the list the claim."""
    served = serve(asgi(app, poll=60.0))
    gates = Gates()
    steps = [gates() for _ in range(3)]

    @app.task(queue="live", bind=True)
    def crunch(ctx: Any) -> None:
        for index, step in enumerate(steps):
            ctx.set_progress(index + 1, 3, f"step {index + 1}")
            ctx.update_meta(done=index + 1)
            step.wait(20)

    handle = crunch.delay()
    try:
        with running_worker(app, queues=["live"], poll_interval=60.0):
            listed = overview_events(f"{served.url}/events/jobs?status=running", timeout=20)
            for html in listed:
                if f'<tr data-job="{handle.id}">' in html:
                    assert "<progress" in html
                    break
            values = []
            for html in overview_events(f"{served.url}/events/jobs/{handle.id}", timeout=20):
                match = re.search(r'<progress max="1" value="([\d.]+)"', html)
                if match and (not values or values[-1] != match[1]):
                    values.append(match[1])
                    assert f"&#34;done&#34;: {len(values)}" in html or (
                        f"&quot;done&quot;: {len(values)}" in html
                    )
                    if len(values) <= 3:
                        steps[len(values) - 1].set()
                if 'id="job-status">done<' in html:
                    break
        assert [round(float(value), 2) for value in values] == [0.33, 0.67, 1.0]
    finally:
        gates.open_all()


def test_a_stream_ends_by_itself_after_its_age(app: App, serve: Callable[..., Served]) -> None:
    served = serve(asgi(app, stream_max_age=1.0))
    started = time.monotonic()
    with httpx.Client(timeout=10) as client, client.stream("GET", f"{served.url}/events") as stream:
        lines = list(stream.iter_lines())  # ends when the server ends the stream
    assert lines[0] == "retry: 1000"
    assert time.monotonic() - started < 8


def test_close_streams_ends_open_streams_and_refuses_new_ones(
    app: App, serve: Callable[..., Served]
) -> None:
    dashboard = asgi(app)
    served = serve(dashboard)
    with httpx.Client(timeout=10) as client, client.stream("GET", f"{served.url}/events") as stream:
        lines = stream.iter_lines()
        assert next(lines) == "retry: 1000"
        dashboard.close_streams()
        list(lines)  # ends
    with httpx.Client(timeout=10) as client:
        assert client.get(f"{served.url}/events").text == "retry: 1000\n\n"


def test_one_render_serves_every_browser_of_a_view(app: App, serve: Callable[..., Served]) -> None:
    dashboard = asgi(app, poll=0.3)
    served = serve(dashboard)
    hub = dashboard.dashboard.live  # type: ignore[attr-defined]
    streams: list[Iterator[str]] = [overview_events(f"{served.url}/events") for _ in range(4)]
    for stream in streams:
        next(stream)
    assert hub.stats()["views"] == 1 and hub.stats()["subscribers"] == 4
    renders = hub.renders
    wait_until(lambda: hub.renders >= renders + 3, message="three more polls")
    # Each poll rendered the one view once, not once per browser.
    assert hub.renders - renders < 8
    for stream in streams:
        stream.close()  # type: ignore[attr-defined]
    wait_until(lambda: hub.stats()["subscribers"] == 0, message="the streams to unsubscribe")


def test_an_event_stream_of_a_missing_page_or_a_bad_filter_is_a_4xx(
    make_client: Callable[..., Any],
) -> None:
    web = make_client()
    assert web.get("/events/nowhere").status_code == 404
    assert web.get("/events/jobs/abc").status_code == 404
    assert web.get("/events/jobs?status=exploded").status_code == 400


def test_the_stream_needs_authentication_like_every_page(
    make_app: Callable[..., App], serve: Callable[..., Served]
) -> None:
    from pgtasks.web import basic_auth

    served = serve(asgi(make_app(), auth=basic_auth("ops", "pw")))
    assert httpx.get(f"{served.url}/events", timeout=5).status_code == 401


# -- pgtasks web ----------------------------------------------------------------------------------
def run_cli(*arguments: str, env: dict[str, str] | None = None) -> Any:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PGTASKS_WEB_")}
    return CliRunner().invoke(main, list(arguments), env={**clean, **(env or {})})


def test_pgtasks_web_refuses_a_public_address_without_authentication() -> None:
    result = run_cli("web", "-A", "tests.apps.basic:app", "--host", "0.0.0.0")  # noqa: S104
    assert result.exit_code == 2
    assert "refusing to serve the dashboard on 0.0.0.0 without authentication" in result.output
    assert "PGTASKS_WEB_USER" in result.output


def test_pgtasks_web_needs_both_user_and_password() -> None:
    result = run_cli("web", "-A", "tests.apps.basic:app", env={"PGTASKS_WEB_USER": "ops"})
    assert result.exit_code == 2
    assert "set both PGTASKS_WEB_USER and PGTASKS_WEB_PASSWORD" in result.output


def test_pgtasks_web_help_lists_its_options() -> None:
    result = run_cli("web", "--help")
    assert result.exit_code == 0
    for option in ("--host", "--port", "--read-only", "--insecure-no-auth", "--allowed-host"):
        assert option in result.output


@pytest.mark.acceptance
def test_pgtasks_web_serves_the_dashboard_with_basic_auth(app: App) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PGTASKS_DSN": app.dsn,
        "PGTASKS_TEST_SCHEMA": app.schema,
        "PGTASKS_WEB_USER": "ops",
        "PGTASKS_WEB_PASSWORD": "pw",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "pgtasks", "web", "-A", "tests.apps.basic:app", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/"

        def answers() -> int | None:
            try:
                return httpx.get(url, timeout=1).status_code
            except httpx.TransportError:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                return None

        assert wait_until(answers, timeout=20, message="pgtasks web to answer") == 401
        response = httpx.get(url, auth=("ops", "pw"), timeout=5)
        assert response.status_code == 200
        assert "Overview" in response.text
        # Ctrl+C with a browser watching the overview: the stream ends, the server stops.
        with (
            httpx.Client(auth=("ops", "pw"), timeout=10) as client,
            client.stream("GET", url + "events") as stream,
        ):
            lines = stream.iter_lines()
            assert next(lines) == "retry: 1000"
            process.send_signal(signal.SIGINT)
            remaining = list(lines)  # ends when the server closes the stream
        assert all(line.startswith(("event:", "data:", ":")) or not line for line in remaining)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
        output, _ = process.communicate(timeout=10)
    assert f"http://127.0.0.1:{port}/ (basic auth)" in output
    password = psycopg.conninfo.conninfo_to_dict(app.dsn).get("password")
    if password:
        assert str(password) not in output
