"""``app.control`` and the ``inspect`` views, answered from the database (the workers'
registrations and the job rows) instead of broadcast messages: every worker answers,
even one that is busy, and nothing is lost when one is down."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .._jobs import JobRow
from .._operations import WorkerInfo
from .._payload import check_name
from .._running import RunningJob
from .exceptions import ImproperlyConfigured
from .result import revoke

if TYPE_CHECKING:
    from .app import Celery


class Control:
    """``app.control``: revoke, rate_limit, cancel_consumer/add_consumer, purge, inspect."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def revoke(
        self,
        task_id: str | list[str],
        destination: Any = None,
        terminate: bool = False,
        signal: Any = None,
        **kwargs: Any,
    ) -> dict[str, str | None]:
        """Cancel jobs by id: not started, they never run; ``terminate``: running ones are
        cancelled too. Their status after, by id (None: no such job)."""
        ids = task_id if isinstance(task_id, (list, tuple)) else [task_id]
        return {str(one): revoke(self.app, str(one), terminate=terminate) for one in ids}

    def terminate(self, task_id: str, signal: Any = None, **kwargs: Any) -> dict[str, str | None]:
        return self.revoke(task_id, terminate=True)

    def rate_limit(
        self, task_name: str, rate_limit: str | int, destination: Any = None, **kwargs: Any
    ) -> str:
        """Change the rate of any task at runtime (``10/s``, ``100/m``; an int is per
        second; ``None`` or ``"0"`` removes the rate): stored in the database, so every
        worker obeys from its next claim, and kept until ``pgtasks limits reset
        task:<name>`` (a task declared with ``rate_limit=`` returns to it then)."""
        from .._app import controls
        from .._app.actors import actor_here
        from .._errors import LimitChangeError

        native = self.app.native
        text = str(rate_limit).strip()
        if isinstance(rate_limit, int) and not isinstance(rate_limit, bool):
            text = f"{rate_limit}/s"
        rate: Any = None if text in ("0", "0/s", "None", "none", "") else text
        try:
            check_name("task name", task_name)
            actor = actor_here("control")
            name = f"task:{task_name}"
            try:
                controls.set_limit(native, name, rate=rate, actor=actor)
            except LimitChangeError:
                if rate is not None:
                    raise
                controls.reset_limit(native, name, actor=actor)  # nothing else was limited
        except (LimitChangeError, ValueError) as error:
            raise ImproperlyConfigured(f"rate_limit {task_name!r}: {error}") from None
        return f"new rate limit set successfully: {task_name} {text}"

    def cancel_consumer(self, queue: str, destination: Any = None, **kwargs: Any) -> bool:
        """Pause the queue: no worker claims its jobs until ``add_consumer``."""
        return self.app.native.pause_queue(queue)

    def add_consumer(self, queue: str, destination: Any = None, **kwargs: Any) -> bool:
        """Resume a paused queue (a queue needs no declaring: any job may name one)."""
        return self.app.native.resume_queue(queue)

    def purge(self) -> int:
        """Delete every pending job (of every queue; workflow steps excepted); how many."""

        native = self.app.native
        count = native.admin.count_purgeable(None, None)
        return native.admin.purge_jobs(None, None, count.max_id) if count.jobs else 0

    def inspect(self, destination: Any = None, timeout: float = 1.0, **kwargs: Any) -> Inspect:
        return Inspect(self.app)

    def ping(self, destination: Any = None, timeout: float = 1.0, **kwargs: Any) -> list[Any]:
        return [{name: {"ok": "pong"}} for name in Inspect(self.app).ping()]


class Inspect:
    """``app.control.inspect()``: per live worker (``pgtasks@host:pid:id``), as Celery's."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def _workers(self) -> list[WorkerInfo]:

        native = self.app.native
        _, workers = native.database.run(lambda conn: native.admin.read_workers(conn, since=0.0))
        return [worker for worker in workers if worker.state == "live"]

    @staticmethod
    def _name(worker: WorkerInfo) -> str:
        return f"pgtasks@{worker.hostname}:{worker.pid}:{worker.id}"

    def ping(self) -> dict[str, dict[str, str]]:
        return {self._name(worker): {"ok": "pong"} for worker in self._workers()}

    def stats(self) -> dict[str, dict[str, Any]]:
        return {
            self._name(worker): {
                "pid": worker.pid,
                "hostname": worker.hostname,
                "pool": {"max-concurrency": worker.concurrency},
                "queues": worker.queues,
                "started_at": str(worker.started_at),
                "heartbeat_age": worker.heartbeat_age,
                "running": len(worker.running_job_ids),
            }
            for worker in self._workers()
        }

    def registered(self) -> dict[str, list[str]]:
        """The tasks of this app (each worker of it claims these)."""
        known = sorted(self.app.native.tasks)
        return {self._name(worker): known for worker in self._workers()}

    registered_tasks = registered

    def _jobs(self, status: str) -> list[JobRow]:
        native = self.app.native
        _, rows = native.database.run(
            lambda conn: native.queries.list_jobs(conn, status=status, limit=1000)
        )
        return rows

    def active(self) -> dict[str, list[dict[str, Any]]]:
        """The running jobs, by the worker holding them: what runs where (host, pid,
        attempt, runtime); ``argsrepr``/``kwargsrepr`` cut at 200 characters (escaped),
        ``args``/``kwargs`` the values when they fit (else None)."""

        workers = self._workers()
        found: dict[str, list[dict[str, Any]]] = {self._name(worker): [] for worker in workers}
        by_id = {worker.id: self._name(worker) for worker in workers}
        native = self.app.native
        for job in native.database.run(lambda conn: native.admin.read_running(conn)):
            name = by_id.get(job.worker_id or 0, f"pgtasks@?:{job.worker_id}")
            found.setdefault(name, []).append(running_info(job))
        return found

    def scheduled(self) -> dict[str, list[dict[str, Any]]]:
        """Pending jobs with a future run time (eta, countdown, a retry's delay), under
        "pgtasks": no worker holds them; any worker claims them when due."""
        now = datetime.now(timezone.utc)
        later = [job for job in self._jobs("pending") if job.run_at > now]
        return {
            "pgtasks": [{"eta": job.run_at.isoformat(), "request": task_info(job)} for job in later]
        }

    def reserved(self) -> dict[str, list[dict[str, Any]]]:
        """Pending jobs due now (workers claim jobs when they have room, none is held
        in advance)."""
        now = datetime.now(timezone.utc)
        return {"pgtasks": [task_info(job) for job in self._jobs("pending") if job.run_at <= now]}


def _value(shown: str) -> Any:
    """A JSON value shown whole (not cut), else None."""
    if shown.endswith("…"):
        return None
    try:
        return json.loads(shown)
    except ValueError:  # escaped control characters: the text is not the JSON any more
        return None


def running_info(job: RunningJob) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "name": job.task_name,
        "args": _value(job.args),
        "kwargs": _value(job.kwargs),
        "argsrepr": job.args,
        "kwargsrepr": job.kwargs,
        "hostname": job.hostname,
        "worker_pid": job.pid,
        "attempt": job.attempt,
        "runtime": job.runtime,
        "delivery_info": {"routing_key": job.queue},
        "time_start": job.locked_at.isoformat() if job.locked_at else None,
    }


def task_info(job: JobRow) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "name": job.task_name,
        "args": job.args,
        "kwargs": job.kwargs,
        "delivery_info": {"routing_key": job.queue, "priority": job.priority},
        "time_start": job.started_at.isoformat() if job.started_at else None,
    }
