"""A read-mostly admin of pgtasks jobs: lists, filters, and the retry and cancel actions
of ``pgtasks jobs retry`` / ``pgtasks jobs cancel`` (same operations, same rules)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from ..._app.repairs import RetryResult
from ..._errors import JobNotFoundError
from .config import get_app
from .models import Job


class TaskNameFilter(admin.SimpleListFilter):  # type: ignore[misc]
    title = "task"
    parameter_name = "task_name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = Job.objects.order_by().values_list("task_name", flat=True).distinct()[:200]
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(task_name=value) if value else queryset


class QueueFilter(TaskNameFilter):
    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = Job.objects.order_by().values_list("queue", flat=True).distinct()[:200]
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(queue=value) if value else queryset


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):  # type: ignore[misc]
    list_display = (
        "id",
        "task_name",
        "queue",
        "status",
        "priority",
        "attempts",
        "max_attempts",
        "run_at",
        "created_at",
        "started_at",
        "finished_at",
    )
    list_filter = ("status", QueueFilter, TaskNameFilter)
    search_fields = ("=id", "task_name", "idempotency_key")
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False
    actions = ("retry_jobs", "cancel_jobs")

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        return [field.name for field in Job._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # A job's page is read-only (saving it would write a stale row over the worker's);
        # the change permission is what the retry and cancel actions need.
        if obj is not None:
            return False
        return bool(super().has_change_permission(request, obj))

    def save_model(self, request: HttpRequest, obj: Job, form: Any, change: bool) -> None:
        """Never: pgtasks owns the rows (the actions go through its operations)."""

    @admin.action(  # type: ignore[untyped-decorator]
        description="Retry selected failed or cancelled jobs", permissions=["change"]
    )
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        app = get_app()
        retried: list[RetryResult] = []
        refused: list[RetryResult] = []
        for job_id in queryset.values_list("id", flat=True):
            try:
                outcome = app.admin.retry_job(job_id)
            except JobNotFoundError:
                continue
            (retried if outcome.retried else refused).append(outcome)
        if retried:
            ids = ", ".join(str(outcome.id) for outcome in retried)
            self.message_user(request, f"retried {len(retried)} job(s): {ids}", messages.SUCCESS)
        for outcome in refused:
            self.message_user(request, outcome.refusal, messages.WARNING)

    @admin.action(  # type: ignore[untyped-decorator]
        description="Cancel selected jobs", permissions=["change"]
    )
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        app = get_app()
        outcomes: dict[str, list[int]] = {}
        for job_id in queryset.values_list("id", flat=True):
            try:
                result = app.cancel(job_id)
            except JobNotFoundError:
                continue
            outcomes.setdefault(str(result.outcome), []).append(job_id)
        for outcome, ids in sorted(outcomes.items()):
            level = messages.WARNING if outcome == "already_finished" else messages.SUCCESS
            listed = ", ".join(map(str, ids))
            self.message_user(request, f"{outcome.replace('_', ' ')}: job(s) {listed}", level)
