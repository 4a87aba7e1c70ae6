"""The dashboard's job page of a durable job: its steps (status, attempt, timing, result
or error, escaped and capped) and a parked job's state."""

from __future__ import annotations

from pgtasks import App, JobContext
from tests.support.inprocess import finished, running_worker
from tests.support.waiting import wait_until
from tests.support.web import Client


def test_the_job_page_lists_steps_and_the_parked_state(app: App, web: Client) -> None:
    @app.task(bind=True, name="durable.page")
    def page(ctx: JobContext, nap: float) -> str:
        ctx.step("<script>alert(1)</script>", lambda: "<b>bold</b>" * 200)
        ctx.step("second", lambda: {"n": 2})
        ctx.sleep(nap)
        return "ok"

    with running_worker(app):
        done = page.delay(0.0)
        finished(done)
        asleep = page.delay(3600.0)
        wait_until(lambda: "pgtasks.parked" in asleep.fetch().meta, message="asleep")
    html = web.get(f"/jobs/{done.id}").text
    assert "<script>alert(1)</script>" not in html and "<b>bold</b>" not in html
    steps = html[html.index('id="steps"') :]
    steps = steps[: steps.index("</table>")]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in steps
    assert 0 < steps.count("&lt;b&gt;bold&lt;/b&gt;") < 200  # capped
    assert "second" in steps and "pgtasks.sleep" in steps
    parked = web.get(f"/jobs/{asleep.id}").text
    assert 'id="parked">sleeping<' in parked
    assert 'id="parked-detail"' in parked and "until" in parked
