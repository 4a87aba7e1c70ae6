"""Ports: what each consumer of the SQL catalog may run, one Protocol per consumer.

``Queries`` (``queries.py``) has every named statement, one method each; each consumer
holds the catalog through the port below that names what it runs, so ``mypy --strict``
refuses a statement outside it (the model: pgqueuer's ``ports/``, Oban's ``Engine``).
``Queries`` satisfies every port (checked by mypy below, and tests/unit/test_ports.py
compares the signatures and scans the consumers).

- WorkerPort: the worker's claim loop (``_worker/``);
- StepPort: a running attempt's durable steps (the executors, ``_execution/``);
- EnqueuePort: the enqueue path (``_app/enqueue.py``, ``_app/workflows.py``);
- OperatorsPort: what both of the next two run;
- AdminPort: the operators' functions of App (``_app/admin.py`` and its kin);
- DashboardPort: the dashboard (``web/``).

Each method keeps the catalog's own name, parameters and result; its documentation is
the catalog's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import psycopg

from .._job_filter import JobFilter
from .._jobs import InsertedJob, JobSpec, StepJob
from .._leases import ClaimedJob, ClaimRequest, Finish, RoundTrip
from .base import Row
from .claims import AttemptLogs
from .durable import StepRecord

T = TypeVar("T")


class WorkerPort(Protocol):
    """The worker's claim loop: claims, finishes, releases, its registration and heartbeat, the
    pool bounds it applies, the cancellation requests it reads (``_worker/``: exchange,
    batches, registration, pool, shutdown, stuck, cancellations)."""

    def finish_and_claim_jobs(
        self, conn: psycopg.Connection[Any], finishes: Sequence[Finish], claim: ClaimRequest | None
    ) -> RoundTrip: ...

    def claim_jobs(
        self, conn: psycopg.Connection[Any], claim: ClaimRequest, *, announced: bool = False
    ) -> list[ClaimedJob]: ...

    def finish_jobs(
        self, conn: psycopg.Connection[Any], finishes: Sequence[Finish]
    ) -> dict[int, str]: ...

    def update_job_logs(
        self, conn: psycopg.Connection[Any], worker_id: int, logs: Sequence[AttemptLogs]
    ) -> None: ...

    def release_jobs(
        self, conn: psycopg.Connection[Any], jobs: Sequence[ClaimedJob]
    ) -> set[int]: ...

    def release_orphaned_jobs(
        self, conn: psycopg.Connection[Any], *, worker_id: int, known_ids: Sequence[int]
    ) -> set[int]: ...

    def release_orphaned_batch_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        worker_id: int,
        task_names: Sequence[str],
        known_ids: Sequence[int],
    ) -> set[int]: ...

    def register_worker(
        self,
        conn: psycopg.Connection[Any],
        *,
        hostname: str,
        pid: int,
        queues: Sequence[str] | None,
        concurrency: int,
        task_names: Sequence[str] | None = None,
    ) -> int: ...

    def heartbeat_worker(self, conn: psycopg.Connection[Any], worker_id: int) -> bool: ...

    def deregister_worker(self, conn: psycopg.Connection[Any], worker_id: int) -> None: ...

    def set_worker_pool_bounds(
        self, conn: psycopg.Connection[Any], worker_id: int, low: int, high: int
    ) -> None: ...

    def get_worker_pool_wanted(
        self, conn: psycopg.Connection[Any], worker_id: int
    ) -> int | None: ...

    def applied_worker_pool(
        self, conn: psycopg.Connection[Any], worker_id: int, size: int
    ) -> None: ...

    def get_cancel_requests(
        self, conn: psycopg.Connection[Any], worker_id: int
    ) -> dict[int, int | None]: ...


class StepPort(Protocol):
    """A running attempt's durable steps, waits and events (the executors:
    ``_execution/steps.py``, ``step_transactions.py``); every write fenced by the attempt's
    lease."""

    def hold_job(
        self, conn: psycopg.Connection[Any], *, job_id: int, worker_id: int, attempt: int
    ) -> Row | None: ...

    async def ahold_job(
        self, conn: psycopg.AsyncConnection[Any], *, job_id: int, worker_id: int, attempt: int
    ) -> Row | None: ...

    def record_job_step(self, conn: psycopg.Connection[Any], step: StepRecord) -> Row: ...

    async def arecord_job_step(
        self, conn: psycopg.AsyncConnection[Any], step: StepRecord
    ) -> Row: ...

    def load_job_steps(self, conn: psycopg.Connection[Any], job_id: int) -> list[Row]: ...

    def park_job(
        self,
        conn: psycopg.Connection[Any],
        *,
        job_id: int,
        worker_id: int,
        attempt: int,
        marker_json: str,
        delay: float | None = None,
        until: datetime | str | None = None,
        step: tuple[str, int, int] | None = None,
    ) -> Row: ...

    def unpark_job(
        self, conn: psycopg.Connection[Any], *, job_id: int, worker_id: int, attempt: int
    ) -> None: ...

    def lock_event_key(self, conn: psycopg.Connection[Any], key: str) -> None: ...

    def find_event(
        self, conn: psycopg.Connection[Any], *, key: str, after_id: int
    ) -> Row | None: ...

    def start_wait(
        self,
        conn: psycopg.Connection[Any],
        *,
        job_id: int,
        key: str,
        after_id: int,
        timeout: float | None,
    ) -> Row: ...

    def end_wait(self, conn: psycopg.Connection[Any], job_id: int) -> None: ...


class EnqueuePort(Protocol):
    """The enqueue path: one job, many jobs in chunks, a workflow's rows (``_app/enqueue.py``,
    ``_app/workflows.py``, App's ``delay_many``)."""

    def insert_job(self, conn: psycopg.Connection[Any], spec: JobSpec) -> InsertedJob: ...

    async def ainsert_job(
        self, conn: psycopg.AsyncConnection[Any], spec: JobSpec
    ) -> InsertedJob: ...

    def insert_jobs_in_chunks(
        self, conn: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]: ...

    async def ainsert_jobs_in_chunks(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[InsertedJob]: ...

    def insert_workflow(
        self,
        conn: psycopg.Connection[Any],
        *,
        kind: str,
        on_error: str | None,
        shape: str | None = None,
    ) -> int: ...

    async def ainsert_workflow(
        self,
        conn: psycopg.AsyncConnection[Any],
        *,
        kind: str,
        on_error: str | None,
        shape: str | None = None,
    ) -> int: ...

    def reserve_job_ids(self, conn: psycopg.Connection[Any], count: int) -> list[int]: ...

    async def areserve_job_ids(
        self, conn: psycopg.AsyncConnection[Any], count: int
    ) -> list[int]: ...

    def insert_workflow_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        workflow_id: int,
        ids: Sequence[int],
        steps: Sequence[StepJob],
    ) -> None: ...

    async def ainsert_workflow_jobs(
        self,
        conn: psycopg.AsyncConnection[Any],
        *,
        workflow_id: int,
        ids: Sequence[int],
        steps: Sequence[StepJob],
    ) -> None: ...

    def schedule_workflow_job(
        self,
        conn: psycopg.Connection[Any],
        job_id: int,
        *,
        run_at: datetime | None,
        delay: float | None,
    ) -> None: ...


class OperatorsPort(Protocol):
    """What both operators' surfaces run, App's admin functions and the dashboard: the flow
    reads (fair keys, sequences, debounced keys, the counters of exercised guarantees:
    ``_app/keyed_admin.py``, ``_app/flow_stats.py``), the unfinished jobs per queue, paused
    queues and hosts, limits, workflows, and the audit row of an operator's action."""

    def get_database_time(self, conn: psycopg.Connection[Any]) -> datetime: ...

    def get_fair_keys(self, conn: psycopg.Connection[Any], limit: int = 10) -> list[Row]: ...

    def get_sequences(self, conn: psycopg.Connection[Any], limit: int = 50) -> list[Row]: ...

    def debounce_stats(self, conn: psycopg.Connection[Any]) -> list[Row]: ...

    def get_counters(self, conn: psycopg.Connection[Any]) -> dict[str, int]: ...

    def get_unfinished_stats(self, conn: psycopg.Connection[Any]) -> list[Row]: ...

    def count_parked_jobs(self, conn: psycopg.Connection[Any]) -> list[Row]: ...

    def get_paused_queues(
        self, conn: psycopg.Connection[Any], hostname: str | None = None
    ) -> list[Row]: ...

    def get_paused_hosts(self, conn: psycopg.Connection[Any]) -> list[Row]: ...

    def get_limits(self, conn: psycopg.Connection[Any]) -> list[Row]: ...

    def list_workflows(
        self,
        conn: psycopg.Connection[Any],
        *,
        status: str | None = None,
        workflow_id: int | None = None,
        before: int | None = None,
        limit: int = 50,
        steps_cap: int | None = None,
    ) -> list[Row]: ...

    def insert_audit(
        self,
        conn: psycopg.Connection[Any],
        *,
        actor: str,
        action: str,
        target: str,
        before: Any,
        after: Any,
    ) -> int: ...


class AdminPort(OperatorsPort, Protocol):
    """The operators' functions of App (``_app/admin.py``, ``bulk_edits.py``,
    ``keyed_admin.py``, ``workflow_admin.py``): jobs retried, cancelled, purged, edited;
    queues and hosts paused; the reads that ``pgtasks stats|workers`` and ``app.inspect()``
    show."""

    def list_workers(self, conn: psycopg.Connection[Any], *, since: float) -> list[Row]: ...

    def list_running_jobs(
        self, conn: psycopg.Connection[Any], *, limit: int, chars: int
    ) -> list[Row]: ...

    def list_recent_worker_jobs(
        self,
        conn: psycopg.Connection[Any],
        worker_ids: Sequence[int],
        *,
        per_worker: int,
    ) -> list[Row]: ...

    def get_queue_stats(self, conn: psycopg.Connection[Any]) -> list[Row]: ...

    def get_unknown_task_jobs(
        self, conn: psycopg.Connection[Any], *, lease_timeout: float
    ) -> list[Row]: ...

    def count_keyed(self, conn: psycopg.Connection[Any]) -> dict[str, int]: ...

    def count_stranded_jobs(self, conn: psycopg.Connection[Any]) -> list[Row]: ...

    def pause_host(self, conn: psycopg.Connection[Any], hostname: str) -> bool: ...

    def resume_host(self, conn: psycopg.Connection[Any], hostname: str) -> bool: ...

    def get_limit_usage(self, conn: psycopg.Connection[Any]) -> list[Row]: ...

    def get_limit_top_keys(
        self, conn: psycopg.Connection[Any], per_limit: int = 10
    ) -> list[Row]: ...

    def retry_job(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None: ...

    def restore_job_steps(self, conn: psycopg.Connection[Any], job_id: int) -> int: ...

    def retry_workflow_step(self, conn: psycopg.Connection[Any], job_id: int) -> Row: ...

    def notify_queue(self, conn: psycopg.Connection[Any], queue: str) -> None: ...

    def get_active_key_holder(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None: ...

    def retry_failed_jobs(
        self, conn: psycopg.Connection[Any], *, task_name: str | None, limit: int
    ) -> list[Row]: ...

    def retry_filtered_jobs(
        self, conn: psycopg.Connection[Any], job_filter: JobFilter, *, limit: int
    ) -> list[Row]: ...

    def retry_filtered_steps(
        self, conn: psycopg.Connection[Any], job_filter: JobFilter, *, after: int, limit: int
    ) -> list[Row]: ...

    def cancel_filtered_jobs(
        self, conn: psycopg.Connection[Any], job_filter: JobFilter, *, limit: int
    ) -> list[Row]: ...

    def delete_finished_job(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None: ...

    def count_purgeable_jobs(
        self, conn: psycopg.Connection[Any], *, queue: str | None, task_name: str | None
    ) -> Row: ...

    def purge_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        queue: str | None,
        task_name: str | None,
        max_id: int,
        limit: int,
    ) -> list[Row]: ...

    def lock_pending_job(self, conn: psycopg.Connection[Any], job_id: int) -> Row | None: ...

    def edit_job_arguments(
        self,
        conn: psycopg.Connection[Any],
        job_id: int,
        *,
        args_json: str,
        kwargs_json: str,
        limit_groups: list[str] | None,
        limit_key: str | None,
    ) -> bool: ...

    def advance_sequence(self, conn: psycopg.Connection[Any], key: str) -> int | None: ...

    def release_sequence_hold(self, conn: psycopg.Connection[Any], key: str) -> int | None: ...

    def get_workflow(self, conn: psycopg.Connection[Any], workflow_id: int) -> Row | None: ...

    def get_workflow_jobs(
        self, conn: psycopg.Connection[Any], workflow_id: int, *, limit: int | None = None
    ) -> list[Row]: ...

    def count_workflow_jobs(
        self, conn: psycopg.Connection[Any], workflow_id: int
    ) -> dict[str, int]: ...

    def get_workflow_steps(
        self,
        conn: psycopg.Connection[Any],
        workflow_id: int,
        make: Callable[[Sequence[Any]], T],
        *,
        max_result: int,
        max_result_bytes: int = 65536,
        limit: int | None = None,
    ) -> list[T]: ...

    def list_workflow_incidents(
        self,
        conn: psycopg.Connection[Any],
        *,
        workflow_id: int | None = None,
        kind: str | None = None,
        limit: int = 50,
    ) -> list[Row]: ...


class DashboardPort(OperatorsPort, Protocol):
    """The dashboard's reads (``web/``): pages of jobs, workflows and limits, the overview's
    counts, a job's page and steps, the audit log it shows and writes, the activity it
    listens to."""

    #: The channels the live pages listen on (enqueues, finishes, activity).
    channel: str
    done_channel: str
    activity_channel: str

    def begin_read_committed(self, conn: psycopg.Connection[Any]) -> None: ...

    def limit_statement_time(self, conn: psycopg.Connection[Any], seconds: float) -> None: ...

    def get_jobs_table_size(self, conn: psycopg.Connection[Any]) -> float: ...

    def get_finished_counts(self, conn: psycopg.Connection[Any]) -> list[Row]: ...

    def get_finished_estimates(self, conn: psycopg.Connection[Any]) -> list[Row]: ...

    def get_finished_minutes(self, conn: psycopg.Connection[Any], *, cap: int) -> list[Row]: ...

    def get_scan_floor(
        self, conn: psycopg.Connection[Any], *, before: int | None, scan: int
    ) -> tuple[int | None, int]: ...

    def count_filtered_jobs(
        self, conn: psycopg.Connection[Any], job_filter: JobFilter, *, cap: int
    ) -> Row: ...

    def list_jobs_page(
        self,
        conn: psycopg.Connection[Any],
        job_filter: JobFilter,
        *,
        before: int | None,
        limit: int,
        args_bytes: int,
        args_chars: int,
        error_chars: int,
    ) -> list[Row]: ...

    def list_jobs_scan(
        self,
        conn: psycopg.Connection[Any],
        job_filter: JobFilter,
        *,
        before: int | None,
        limit: int,
        scan: int,
        args_bytes: int,
        args_chars: int,
        error_chars: int,
    ) -> list[Row]: ...

    def get_job_page(
        self,
        conn: psycopg.Connection[Any],
        job_id: int,
        *,
        json_chars: int,
        error_chars: int,
        neighbours: int = 20,
        instances: int = 20,
    ) -> Row | None: ...

    def get_job_steps(self, conn: psycopg.Connection[Any], job_id: int) -> list[Row]: ...

    def get_workflow_neighbours(
        self, conn: psycopg.Connection[Any], workflow_id: int, job_ids: list[int]
    ) -> list[Row]: ...

    def get_limit_instances(self, conn: psycopg.Connection[Any], *, cap: int) -> list[Row]: ...

    def get_limit_bad_values(self, conn: psycopg.Connection[Any]) -> list[str]: ...

    def list_workflows_scan(
        self,
        conn: psycopg.Connection[Any],
        *,
        status: str,
        before: int | None = None,
        limit: int = 50,
        scan: int,
        steps_cap: int | None = None,
    ) -> tuple[list[Row], int | None, int]: ...

    def count_workflows(self, conn: psycopg.Connection[Any], *, cap: int) -> Row: ...

    def get_audit(
        self,
        conn: psycopg.Connection[Any],
        *,
        targets: Sequence[str] | None = None,
        prefix: str | None = None,
        limit: int = 50,
    ) -> list[Row]: ...

    def listen(self, conn: psycopg.Connection[Any], *channels: str) -> None: ...


if TYPE_CHECKING:
    from .queries import Queries

    def _queries_satisfy_every_port(queries: Queries) -> None:
        """mypy checks that the catalog has each port's methods, signatures compatible."""
        ports: tuple[WorkerPort, StepPort, EnqueuePort, OperatorsPort, AdminPort, DashboardPort]
        ports = (queries, queries, queries, queries, queries, queries)
        del ports
