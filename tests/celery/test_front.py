"""pgtasks.celery against a real database and an in-process worker: results and states,
update_state, revoke, callbacks, expires, time limits, control and inspect, eager mode,
and bad input refused or warned about by name."""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from pgtasks import App, JobNotFoundError, TaskFailed
from pgtasks.celery import Celery, CeleryCompatibilityWarning, Task, chain, group, states
from pgtasks.celery import _state as celery_state
from pgtasks.celery.exceptions import (
    ImproperlyConfigured,
    MaxRetriesExceededError,
    SoftTimeLimitExceeded,
    TaskRevokedError,
    TimeLimitExceeded,
    TimeoutError,
)
from pgtasks.celery.result import AsyncResult
from pgtasks.celery.schedules import solar
from tests.support.inprocess import running_worker, select
from tests.support.waiting import wait_until


@pytest.fixture
def capp(make_app: Callable[..., App]) -> Iterator[Celery]:
    """A Celery app on a fresh migrated schema of the test server."""
    native = make_app()
    app = Celery("front", broker=native.dsn)
    app.conf.update(pgtasks_schema=native.schema, pgtasks_connect_timeout=3.0)
    yield app
    for made in celery_state.reset():
        made.close()


def test_states_results_and_progress_of_a_job(capp: Celery) -> None:
    gate = threading.Event()
    seen: list[Any] = []

    @capp.task(bind=True)
    def report(self: Any, total: int) -> int:
        self.update_state(state="PROGRESS", meta={"current": 1, "total": total})
        seen.append((self.request.id, self.request.retries, self.request.args))
        seen.append(self.request.delivery_info["routing_key"])
        gate.wait(10)
        return total

    result = report.delay(3)
    assert result.state == states.PENDING and not result.ready()
    with running_worker(capp.native):
        wait_until(lambda: result.state == "PROGRESS", message="the task's own state")
        assert result.info == {"current": 1, "total": 3}
        job = capp.native.get_job(int(result.id)).refresh()
        assert job.progress is not None and job.progress.current == 1
        gate.set()
        assert result.get(timeout=10) == 3
    assert result.state == states.SUCCESS and result.successful() and result.result == 3
    assert seen == [(result.id, 0, [3]), "celery"]
    assert capp.AsyncResult(result.id).get(timeout=1) == 3
    assert AsyncResult("no-such-id", app=capp).state == states.PENDING
    assert AsyncResult("9" * 40, app=capp).state == states.PENDING
    # A task_id= of the caller's names the job (its idempotency key), as in Celery.
    chosen = report.apply_async((1,), task_id="report-2026-12-06")
    assert AsyncResult("report-2026-12-06", app=capp).state == states.PENDING
    assert report.apply_async((1,), task_id="report-2026-12-06").id == chosen.id
    capp.control.revoke("report-2026-12-06")
    assert AsyncResult("report-2026-12-06", app=capp).state == states.REVOKED
    with pytest.raises(TimeoutError):
        AsyncResult("123456789", app=capp).get(timeout=0.2)


def test_failures_propagate_as_the_tasks_exception_and_revoke_cancels(capp: Celery) -> None:
    @capp.task
    def fail(value: int) -> None:
        raise ValueError(f"bad {value}")

    @capp.task
    def later() -> str:
        return "never"

    failed = fail.delay(7)
    revoked = later.apply_async(countdown=3600)
    revoked.revoke()
    with running_worker(capp.native), pytest.raises(ValueError, match="bad 7"):
        failed.get(timeout=10)
    assert failed.state == states.FAILURE and failed.failed()
    assert isinstance(failed.result, ValueError)
    assert "ValueError: bad 7" in (failed.traceback or "")
    assert isinstance(failed.get(propagate=False), ValueError)
    assert revoked.state == states.REVOKED
    with pytest.raises(TaskRevokedError):
        revoked.get(timeout=5)


def test_get_inside_a_task_is_refused_as_celery_refuses_it(capp: Celery) -> None:
    @capp.task
    def inner() -> int:
        return 1

    @capp.task
    def outer() -> int:
        return int(inner.delay().get(timeout=5))

    with running_worker(capp.native):
        result = outer.delay()
        with pytest.raises(RuntimeError, match=r"Never call result\.get\(\) within a task"):
            result.get(timeout=10)


def test_expires_link_and_link_error_through_apply_async(
    capp: Celery, admin: psycopg.Connection[Any]
) -> None:
    calls: list[Any] = []

    @capp.task
    def add(x: int, y: int) -> int:
        return x + y

    @capp.task
    def record(*values: Any) -> None:
        calls.append(values)

    @capp.task
    def boom() -> None:
        raise KeyError("missing")

    expired = add.apply_async((1, 1), expires=datetime.now(timezone.utc) - timedelta(seconds=1))
    with running_worker(capp.native):
        linked = add.apply_async((2, 2), link=record.s("after"))
        assert linked.get(timeout=10) == 4
        failing = boom.apply_async(link_error=record.s())
        wait_until(lambda: len(calls) == 2, message="both callbacks")
        with pytest.raises(TaskRevokedError):
            expired.get(timeout=10)
    assert expired.state == states.REVOKED
    after, errback = sorted(calls, key=len)
    assert after == (4, "after")
    request, exc, traceback = errback
    assert request["id"] == failing.id and request["task"] == boom.name
    # Attributes too, as Celery's request object's (the Canvas guide's request.id).
    assert (request.id, request.args, request.kwargs) == (failing.id, [], {})
    assert request.retries == 0 and request.delivery_info["queue"] == "celery"
    assert exc == "KeyError: 'missing'"
    assert "Traceback" in traceback and traceback.rstrip().endswith("KeyError: 'missing'")
    # The error callback is the one job the failure started (no relay job between).
    names = select(admin, capp.native, "SELECT task_name FROM {schema}.all_jobs")
    assert sorted(name for (name,) in names) == sorted(
        [add.name, add.name, record.name, boom.name, record.name]
    )


def test_a_soft_time_limit_raises_inside_the_task(capp: Celery) -> None:
    @capp.task(soft_time_limit=0.2, time_limit=20)
    def slow() -> str:
        try:
            time.sleep(10)
        except SoftTimeLimitExceeded:
            return "cleaned up"
        return "finished"

    with running_worker(capp.native):
        assert slow.delay().get(timeout=15) == "cleaned up"
    native = capp.native.tasks[slow.name]
    assert (native.timeout, native.soft_timeout) == (20.0, 0.2)


def test_routes_defaults_and_options_reach_the_pgtasks_tasks(capp: Celery) -> None:
    capp.conf.update(
        task_routes={"front.reports.*": {"queue": "reports"}, "front.mail": "mail"},
        task_default_priority=3,
        task_time_limit=60,
        task_default_rate_limit="50/s",
    )

    @capp.task(name="front.reports.daily", max_retries=None)
    def daily() -> None: ...

    @capp.task(name="front.mail", rate_limit=10, priority=7, expires=30)
    def mail() -> None: ...

    @capp.task(name="front.other", max_retries=2)
    def other() -> None: ...

    tasks = capp.native.tasks
    assert (tasks["front.reports.daily"].queue, tasks["front.mail"].queue) == ("reports", "mail")
    assert tasks["front.other"].queue == "celery"
    assert tasks["front.other"].priority == 3 and tasks["front.mail"].priority == 7
    assert tasks["front.other"].max_attempts == 3
    assert tasks["front.reports.daily"].max_attempts == 2**31 - 1
    assert tasks["front.other"].timeout == 60.0
    limits = tasks["front.mail"].limits
    assert limits is not None and limits.rate is not None and limits.rate.count == 10
    assert tasks["front.mail"].expires == 30


def test_control_and_inspect_answer_from_the_database(capp: Celery) -> None:
    gate = threading.Event()

    @capp.task(rate_limit="5/s")
    def held() -> None:
        gate.wait(10)

    @capp.task
    def plain() -> None: ...

    control = capp.control
    with running_worker(capp.native):
        running = held.delay()
        wait_until(lambda: running.state == states.STARTED, message="the job started")
        inspect = control.inspect()
        (worker_name,) = inspect.ping()
        [active] = inspect.active()[worker_name]
        assert active["id"] == running.id
        # What runs where: the host, pid, attempt and runtime of the attempt.
        assert (active["hostname"], active["attempt"]) == (socket.gethostname(), 1)
        assert active["worker_pid"] == os.getpid() and active["runtime"] >= 0
        assert (active["args"], active["argsrepr"]) == ([], "[]")
        assert held.name in inspect.registered()[worker_name]
        assert inspect.stats()[worker_name]["pool"]["max-concurrency"] == 2
        scheduled = plain.apply_async(countdown=3600)
        assert [item["request"]["id"] for item in inspect.scheduled()["pgtasks"]] == [scheduled.id]
        assert control.revoke(running.id, terminate=True) == {running.id: "running"}
        gate.set()
        wait_until(lambda: running.state == states.REVOKED, message="the running job revoked")
    assert control.cancel_consumer("celery") is True
    assert capp.native.paused_queues() == ["celery"]
    assert control.add_consumer("celery") is True
    assert "held 20/m" in control.rate_limit(held.name, "20/m")
    # Any task, declared with a rate or not: its waiting job now counts in the new limit.
    assert "10/s" in control.rate_limit(plain.name, "10/s")
    limits = {state.name: state for state in capp.native.admin.limits()}
    assert limits[f"task:{held.name}"].rate == "20/m"
    assert limits[f"task:{plain.name}"].rate == "10/s"
    assert limits[f"task:{plain.name}"].pending == 1  # the scheduled job carries it
    with pytest.raises(ImproperlyConfigured, match="must look like"):
        control.rate_limit(plain.name, "ten a second")
    control.rate_limit(plain.name, 0)  # no rate left: the limit is removed
    assert f"task:{plain.name}" not in {state.name for state in capp.native.admin.limits()}
    assert control.purge() == 1


def test_eager_mode_runs_here_and_hooks_see_the_outcome(capp: Celery) -> None:
    outcomes: list[Any] = []

    class Hooked(Task):
        def on_success(self, retval: Any, task_id: str, args: Any, kwargs: Any) -> None:
            outcomes.append(("success", retval))

        def on_failure(self, exc: Any, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
            outcomes.append(("failure", type(exc).__name__))

    capp.conf.task_always_eager = True

    @capp.task(base=Hooked)
    def half(value: int) -> float:
        return 1 / value

    assert half.delay(2).get() == 0.5
    result = half.delay(0)
    assert result.state == states.FAILURE and isinstance(result.result, ZeroDivisionError)
    assert (chain(half.s(4), half.s()) | half.s()).apply_async().get() == 0.25
    assert group(half.s(n) for n in (1, 2)).apply_async().get() == [1.0, 0.5]
    assert outcomes[:2] == [("success", 0.5), ("failure", "ZeroDivisionError")]
    capp.conf.task_eager_propagates = True
    with pytest.raises(ZeroDivisionError):
        half.delay(0)


def test_options_pgtasks_cannot_honour_are_refused_or_warned_by_name(capp: Celery) -> None:
    with pytest.raises(ImproperlyConfigured, match="JSON only"):
        capp.conf.task_serializer = "pickle"
    with pytest.raises(ImproperlyConfigured, match="not Celery task options"):

        @capp.task(bogus=1)
        def bad() -> None: ...

    with pytest.raises(ImproperlyConfigured, match="pydantic=True is not supported"):

        @capp.task(pydantic=True)
        def validated() -> None: ...

    with pytest.warns(CeleryCompatibilityWarning, match="typing=False"):

        @capp.task(typing=False)
        def untyped() -> None: ...

    with pytest.raises(ImproperlyConfigured, match="solar"):
        solar("sunset", -37.81, 144.96)

    @capp.task
    def fine(x: int) -> int:
        return x

    with pytest.warns(CeleryCompatibilityWarning, match="'routing_key'"):
        fine.apply_async((1,), routing_key="x")
    with pytest.raises(TypeError, match="unknown option"):
        fine.apply_async((1,), bogus=True)
    with pytest.raises(TypeError, match="arguments do not match"):
        fine.delay(1, 2)
    with pytest.raises(ValueError, match="idempotency_key cannot be combined with link="):
        fine.apply_async((1,), task_id="mine", link=fine.s())
    # countdown/eta with link=: the job is due later, its callback follows it.
    later = fine.apply_async((1,), countdown=3600, link=fine.s())
    assert later.state == states.PENDING
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = capp.send_task("elsewhere.task", args=[1], queue="other")
    row = capp.native.get_job(int(result.id)).fetch()
    assert (row.task_name, row.queue, row.args) == ("elsewhere.task", "other", [1])


def test_forget_deletes_the_stored_result_and_leaves_unfinished_jobs_to_run(
    capp: Celery,
) -> None:
    @capp.task
    def add(x: int, y: int) -> int:
        return x + y

    @capp.task
    def fails() -> None:
        raise ValueError("no")

    with running_worker(capp.native):
        done = add.apply_async((1, 2), task_id="sum-1")
        failed = fails.delay()
        assert done.get(timeout=10) == 3
        with pytest.raises(ValueError):
            failed.get(timeout=10)
        job_id = int(AsyncResult("sum-1", app=capp)._job_id() or 0)

        done.forget()
        failed.forget()
        for forgotten in (done, failed, AsyncResult("sum-1", app=capp)):
            assert forgotten.state == states.PENDING
            assert forgotten.result is None and forgotten.traceback is None
        with pytest.raises(JobNotFoundError):
            capp.native.get_job(job_id).fetch()
        # The task_id is free again: a new call with it makes a new job.
        again = add.apply_async((2, 3), task_id="sum-1")
        assert again.get(timeout=10) == 5 and again.id != str(job_id)
        done.forget()  # forgetting what is already forgotten changes nothing

    # A job not finished has no result to forget: it still runs.
    pending = add.delay(4, 4)
    pending.forget()
    with running_worker(capp.native):
        assert pending.get(timeout=10) == 8


def test_a_hard_time_limit_fails_the_task_like_celery_and_native_timeouts_still_retry(
    capp: Celery,
) -> None:
    release = threading.Event()

    @capp.task(time_limit=0.3, max_retries=3)
    def stuck() -> str:
        release.wait(30)
        return "late"

    @capp.native.task(name="native_stuck", timeout=0.3, max_attempts=2, retry_backoff=0.01)
    def native_stuck() -> str:
        release.wait(30)
        return "late"

    try:
        with running_worker(capp.native, concurrency=4):
            result = stuck.delay()
            with pytest.raises(TimeLimitExceeded):
                result.get(timeout=15)
            assert result.state == states.FAILURE
            native = native_stuck.delay()
            with pytest.raises(TaskFailed):
                native.get(timeout=15)
    finally:
        release.set()
    row = capp.native.get_job(int(result.id)).fetch()
    assert (row.status, row.attempts) == ("failed", 1)  # no retry, max_retries=3 or not
    assert native.fetch().attempts == 2  # the native timeout= retries as documented


def test_a_per_call_max_retries_above_the_task_s_limit_is_honoured(capp: Celery) -> None:
    @capp.task(bind=True, max_retries=1)
    def flaky(self: Task) -> int:
        if self.request.retries < 3:
            raise self.retry(countdown=0, max_retries=3)
        return int(self.request.retries)

    @capp.task(bind=True, max_retries=1)
    def bounded(self: Task) -> int:
        raise self.retry(countdown=0, max_retries=2)

    with running_worker(capp.native):
        assert flaky.delay().get(timeout=15) == 3
        result = bounded.delay()
        with pytest.raises(MaxRetriesExceededError):
            result.get(timeout=15)
    # Two retries, as the call said (the task's max_retries=1 would have stopped at one).
    assert capp.native.get_job(int(result.id)).fetch().attempts == 3
