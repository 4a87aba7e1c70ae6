"""What runs where on the workers page, with a real worker: each running job with its
task, arguments (cut, escaped), attempt, runtime and host; each live worker's last jobs;
a summary per host."""

from __future__ import annotations

import socket
import threading

from pgtasks import App, JobStatus
from tests.support.inprocess import finished, running_worker
from tests.support.waiting import wait_until
from tests.support.web import Client


def test_the_workers_page_says_what_runs_where_and_what_each_worker_ran(
    app: App, web: Client
) -> None:
    release = threading.Event()

    @app.task(name="ops.hold", max_attempts=3)
    def hold(label: str, padding: str) -> None:
        release.wait(30)

    @app.task(name="ops.quick")
    def quick() -> str:
        return "ok"

    try:
        with running_worker(app) as worker:
            done = finished(quick.delay())
            held = hold.delay("\x1b[31m<b>red</b>", "x" * 500)
            wait_until(lambda: held.status() is JobStatus.RUNNING, message="the job to run")
            html = web.get("/workers").text
            release.set()
            finished(held)
    finally:
        release.set()

    running = html[html.index('id="running"') : html.index('id="last-jobs"')]
    row = running[running.index(f'data-job="{held.id}"') :].split("</tr>", 1)[0]
    assert f'<a href="/jobs/{held.id}">{held.id}</a>' in row
    assert "ops.hold" in row and "1/3" in row
    assert f"{socket.gethostname()}:" in row
    assert "\\u001b[31m&lt;b&gt;red&lt;/b&gt;" in row
    assert "<b>red" not in row and "\x1b" not in row
    assert "…" in row, "a long argument is cut"
    assert row.count("x") < 300
    hosts = html[html.index('id="hosts"') : html.index('id="running"')]
    assert f'data-host="{socket.gethostname()}"' in hosts
    last = html[html.index(f'data-worker="{worker.worker_id}"') :].split("</table>", 1)[0]
    assert f'<a href="/jobs/{done.id}">{done.id}</a>' in last
    assert "ops.quick" in last and "done" in last


def test_pausing_a_host_stops_its_workers_claiming_until_resumed(app: App, web: Client) -> None:
    """The workers page's Pause of one host: its workers read the pause (a row of the
    paused queues no queue name can take) and claim nothing; queues stay unpaused."""

    @app.task(name="ops.after_pause")
    def after_pause() -> str:
        return "ran"

    host = socket.gethostname()
    with running_worker(app) as worker:
        hosts = web.get("/workers").text
        assert f'name="hostname" value="{host}"' in hosts and 'action="/hosts/pause"' in hosts
        response = web.post("/hosts/pause", {"hostname": host})
        assert (response.status_code, response.headers["location"]) == (
            303,
            "/workers?done=host-paused",
        )
        wait_until(lambda: "" in worker.paused_queues, message="the worker to read the pause")
        assert worker._exchanges.claim_filter() is None, "a paused host's worker claims nothing"
        assert app.paused_queues() == [], "no queue is paused"
        job = after_pause.delay()
        row = web.get("/workers").text.split(f'data-host="{host}"', 1)[1].split("</tr>", 1)[0]
        assert "paused" in row and 'action="/hosts/resume"' in row
        assert job.status() is JobStatus.PENDING
        assert web.post("/hosts/resume", {"hostname": host}).status_code == 303
        assert finished(job).result == "ran"
    assert web.post("/hosts/pause", {"hostname": host}, csrf=False).status_code == 403
    assert web.post("/hosts/pause", {"hostname": ""}).status_code == 400
    assert web.post("/hosts/stop", {"hostname": host}).status_code == 404
