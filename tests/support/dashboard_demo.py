"""The small shop the dashboard's screenshots show (docs/howto/dashboard.md), and the
screenshots themselves: jobs across queues finished over the last hour, a failed charge
with its traceback, a running export reporting progress, workflows in every state,
limits of every kind with jobs running and held under them, a periodic schedule.

Used by ``scripts/dashboard-screenshots`` (which writes docs/img) and by the browser
test that takes them into a temporary directory, so that they keep working.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from pgtasks import App, chain, chord
from tests.support.inprocess import execute
from tests.support.population import insert_job, register
from tests.support.workflows import settle

Connection = psycopg.Connection[Any]

#: The pages photographed: (path, with the scene's ids; file name; what to wait for).
SHOTS = (
    ("/", "overview", "#queues"),
    ("/jobs", "jobs", "#jobs"),
    ("/jobs/{failed}", "job", "#last-error"),
    ("/jobs/{running}", "job-running", "#progress"),
    ("/workflows", "workflows", "#workflows"),
    ("/workflows/{workflow}", "workflow", "#graph"),
    ("/limits", "limits", "#limits"),
    ("/workers", "workers", "#workers"),
    ("/schedules", "schedules", "#schedules"),
)
#: The browser window the screenshots are taken in.
VIEWPORT = {"width": 1440, "height": 860}


def demo_data(admin: Connection, app: App) -> int:
    """Jobs of a small shop across queues, finished over the last hour; the failed job's id."""
    for minute in range(60):
        for _ in range((minute * 7) % 11 + 1):
            insert_job(
                admin,
                app,
                status="done",
                queue="emails",
                task="shop.send_receipt",
                finished_ago=minute * 60 + 5,
            )
    for _ in range(4):
        insert_job(admin, app, queue="emails", task="shop.send_receipt", args='["a@example.com"]')
    for _ in range(2):
        insert_job(admin, app, queue="reports", task="shop.nightly_report", run_in=3600)
    insert_job(admin, app, status="cancelled", queue="reports", finished_ago=900)
    failed = insert_job(
        admin,
        app,
        status="failed",
        queue="default",
        task="shop.charge_card",
        attempts=3,
        finished_ago=120,
        args='[{"order": 1042, "amount_cents": 1999}]',
        last_error=(
            "Traceback (most recent call last):\n"
            '  File "shop/tasks.py", line 31, in charge_card\n'
            "    gateway.charge(order, amount_cents)\n"
            '  File "shop/gateway.py", line 88, in charge\n'
            '    raise GatewayTimeout(f"no answer in {timeout} s")\n'
            "shop.gateway.GatewayTimeout: no answer in 10 s"
        ),
    )
    # A coherent timeline: created and due before its last attempt ended.
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET created_at = now() - interval '9 minutes',"
        " run_at = now() - interval '3 minutes', updated_at = finished_at WHERE id = %s",
        [failed],
    )
    return failed


def demo_workflows(admin: Connection, app: App, worker: int) -> int:
    """Workflows of a small shop in every state; the id of a running one to draw: an
    order's chain whose chord fetches 40 prices (some done, some running) then totals
    them, and ships."""

    @app.task(name="shop.reserve_stock", queue="default")
    def reserve_stock(order: int) -> int: ...

    @app.task(name="shop.fetch_price", queue="default")
    def fetch_price(order: int, item: int) -> int: ...

    @app.task(name="shop.total", queue="default")
    def total(prices: list[int]) -> int: ...

    @app.task(name="shop.ship", queue="default")
    def ship(total: int) -> str: ...

    def order(number: int, items: int) -> int:
        flow = chain(
            reserve_stock.s(number),
            chord([fetch_price.si(number, item) for item in range(items)], total.s()),
            ship.s(),
        ).delay()
        return flow.id

    def settle_steps(workflow_id: int, outcomes: dict[str, Any]) -> None:
        jobs = {job["workflow_step"]: job["id"] for job in app.get_workflow(workflow_id)["jobs"]}
        settle(app, {jobs[step]: value for step, value in outcomes.items()})

    for number in (1041, 1042):
        done = order(number, 3)
        settle_steps(done, {"0": number})
        settle_steps(done, {f"1.0.{item}": 100 + item for item in range(3)})
        settle_steps(done, {"1.1": 303})
        settle_steps(done, {"2": "shipped"})
    failed = order(1043, 3)
    settle_steps(failed, {"0": 1043})
    settle_steps(failed, {"1.0.0": 100, "1.0.1": RuntimeError("price service: 503"), "1.0.2": 102})
    running = order(1044, 40)
    settle_steps(running, {"0": 1044})
    settle_steps(running, {f"1.0.{item}": 100 + item for item in range(26)})
    jobs = {job["workflow_step"]: job["id"] for job in app.get_workflow(running)["jobs"]}
    # Three prices being fetched now, by the registered worker.
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET status = 'running', locked_by = %s, attempts = 1,"
        " locked_at = now() - interval '1 second', started_at = now() - interval '1 second'"
        " WHERE id = ANY(%s)",
        [worker, [jobs[f"1.0.{item}"] for item in range(26, 29)]],
    )
    order(1045, 2)  # just enqueued
    return running


def demo_limits(admin: Connection, app: App, worker: int) -> int:
    """Limits of every kind, stored as a worker stores them, with jobs running under them
    (held by the registered worker) and jobs they hold back; the id of a running export
    (unique for a day, under its queue's limit) reporting progress."""
    app.queue("exports", concurrency=2)

    @app.task(
        name="shop.sync_stock", concurrency_key=lambda warehouse, sku: warehouse, concurrency=2
    )
    def sync_stock(warehouse: str, sku: int) -> None: ...

    @app.task(name="shop.notify_courier", rate_limit="3/m")
    def notify_courier(order: int) -> None: ...

    @app.task(name="shop.refund", concurrency=3)
    def refund(order: int) -> None: ...

    @app.task(
        name="shop.export_orders",
        queue="exports",
        unique_for=timedelta(days=1),
        unique_key=lambda month: f"export:2026-{month:02}",
    )
    def export_orders(month: int) -> None: ...

    with app.connection() as conn:
        app.queries.upsert_limits(conn, app.limit_definitions())
    stock = {
        warehouse: [sync_stock.delay(warehouse, sku).id for sku in range(count)]
        for warehouse, count in (("berlin", 6), ("lisbon", 3), ("osaka", 2), ("austin", 1))
    }
    notify_courier.delay_many([{"order": order} for order in range(1050, 1062)])
    refunds = [refund.delay(order).id for order in range(1001, 1006)]
    exports = [export_orders.delay(month).id for month in range(1, 6)]
    running = (
        stock["berlin"][:2] + stock["lisbon"][:2] + stock["osaka"][:1] + refunds[:3] + exports[:2]
    )
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET status = 'running', locked_by = %s, attempts = 1,"
        " locked_at = now() - interval '4 seconds', started_at = now() - interval '4 seconds'"
        " WHERE id = ANY(%s)",
        [worker, running],
    )
    # The courier rate's bucket: spent a moment ago, refilling.
    execute(
        admin,
        app,
        "UPDATE {schema}.limits SET tokens = 0.1, refilled_at = now() WHERE name = %s",
        [f"task:{notify_courier.name}"],
    )
    execute(
        admin,
        app,
        "UPDATE {schema}.jobs SET locked_at = now() - interval '42 seconds',"
        " created_at = now() - interval '50 seconds', run_at = now() - interval '50 seconds',"
        " started_at = now() - interval '42 seconds',"
        " meta = jsonb_build_object('pgtasks.progress', jsonb_build_object('current', 640,"
        " 'total', 1000, 'message', 'rows exported',"
        " 'updated_at', to_jsonb(now() - interval '2 seconds'))) WHERE id = %s",
        [exports[0]],
    )
    return exports[0]


def build_scene(admin: Connection, app: App) -> dict[str, int]:
    """Populate the app's schema with the shop; the ids the pages of SHOTS name."""

    @app.task(name="shop.charge_card", queue="default")
    def charge_card(order: dict[str, Any]) -> str:
        return "charged"

    @app.task(name="shop.nightly_report", queue="reports")
    def nightly_report() -> None: ...

    app.add_periodic(nightly_report, cron="0 3 * * *", tz="Europe/Berlin", name="nightly-report")
    failed = demo_data(admin, app)
    worker = register(admin, app)
    execute(admin, app, "UPDATE {schema}.workers SET concurrency = 16 WHERE id = %s", [worker])
    workflow = demo_workflows(admin, app, worker)
    running = demo_limits(admin, app, worker)
    demo_logs(admin, app, failed, running)
    return {"failed": failed, "running": running, "workflow": workflow}


def demo_logs(admin: Connection, app: App, failed: int, running: int) -> None:
    """Log lines of the failed charge's attempts and of the running export so far."""
    at = time.time() - 90.0  # lines of the last minutes
    charge = {
        "1": {
            "lines": [
                [at, "INFO", "shop.payments", "charging order 1042: 19.99 EUR"],
                [at + 10.0, "WARNING", "shop.payments", "gateway slow: no answer in 10 s"],
            ],
            "dropped": 0,
        }
    }
    export = {
        "1": {
            "lines": [
                [at + 60.0, "INFO", "shop.export", "export started: 80 pages of orders"],
                [at + 61.5, "INFO", "shop.export", "page 20 of 80 written"],
                [at + 63.0, "INFO", "shop.export", "page 40 of 80 written"],
            ],
            "dropped": 0,
        }
    }
    for job, logs in ((failed, charge), (running, export)):
        for table in ("jobs", "jobs_history"):  # a finished job is in jobs_history
            execute(
                admin,
                app,
                f"UPDATE {{schema}}.{table} SET meta = meta"
                " || jsonb_build_object('pgtasks.logs', %s::jsonb) WHERE id = %s",
                [json.dumps(logs), job],
            )


def take_screenshots(page: Any, url: str, ids: dict[str, int], directory: Path) -> list[Path]:
    """Photograph every page of SHOTS (served at ``url``) with Playwright's ``page``, once
    each is ready and live; the files written."""
    from playwright.sync_api import expect

    directory.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size(VIEWPORT)
    written = []
    for where, name, ready in SHOTS:
        path = where.format(**ids)
        page.goto(url + path)
        expect(page.locator(ready)).to_be_visible()
        if path != "/schedules":
            expect(page.locator("#live-status")).to_have_text("live")
        target = directory / f"dashboard-{name}.png"
        page.screenshot(path=str(target), full_page=name != "jobs")
        written.append(target)
    return written
