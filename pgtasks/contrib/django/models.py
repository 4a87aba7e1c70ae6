"""``Job``: pgtasks' jobs table as an unmanaged model (read by the admin; pgtasks owns it)."""

from __future__ import annotations

from django.db import models

from .config import pgtasks_settings


def jobs_table() -> str:
    """``schema"."all_jobs``: Django quotes it as ``"schema"."all_jobs"`` (the view of
    jobs and jobs_history together: finished jobs too)."""
    return f'{pgtasks_settings()["SCHEMA"]}"."all_jobs'


class JobStatus(models.TextChoices):  # type: ignore[misc]
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Job(models.Model):  # type: ignore[misc]
    id = models.BigAutoField(primary_key=True)
    task_name = models.TextField()
    queue = models.TextField()
    priority = models.IntegerField()
    args = models.JSONField()
    kwargs = models.JSONField()
    status = models.TextField(choices=JobStatus.choices)
    attempts = models.IntegerField()
    max_attempts = models.IntegerField()
    run_at = models.DateTimeField()
    locked_at = models.DateTimeField(null=True)
    locked_by = models.BigIntegerField(null=True)
    last_error = models.TextField(null=True)
    result = models.JSONField(null=True)
    idempotency_key = models.TextField(null=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)
    meta = models.JSONField(default=dict)
    started_at = models.DateTimeField(null=True)
    attempt_errors = models.JSONField(null=True)

    class Meta:
        managed = False
        db_table = jobs_table()
        ordering = ("-id",)
        verbose_name = "job"

    def __str__(self) -> str:
        return f"job {self.id} ({self.task_name}, {self.status})"
