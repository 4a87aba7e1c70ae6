"""Durations, retention options and the rendering of operations output (no database)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from pgtasks import ConfigurationError, JobRow, JobStatus
from pgtasks._operations import (
    DURATION_FORMS,
    PruneResult,
    QueueStats,
    Stats,
    format_duration,
    format_job,
    format_jobs,
    format_prune,
    format_stats,
    format_table,
    job_as_json,
    parse_duration,
    retention_seconds,
    to_json,
    total_stats,
    worker_state,
)
from pgtasks._store.base import ADVISORY_LOCK_CLASS_BEAT, ADVISORY_LOCK_CLASS_MIGRATE
from pgtasks._store.operations import ADVISORY_LOCK_CLASS_PRUNE

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("1.5", 1.5),
        ("0", 0.0),
        ("30s", 30.0),
        ("15m", 900.0),
        ("12h", 43200.0),
        ("1d", 86400.0),
        ("2w", 1209600.0),
        (" 3 h ", 10800.0),
        ("0.5d", 43200.0),
    ],
)
def test_parse_duration_accepts_seconds_and_the_documented_units(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1y", "d", "-1d", "1d2h", "1 day", "1e3", "1,5h", "inf"])
def test_parse_duration_rejects_other_forms_naming_the_accepted_ones(text: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_duration(text)

    assert DURATION_FORMS in str(raised.value)
    assert "30s, 15m, 12h, 1d, 2w" in DURATION_FORMS


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.04, "0.0s"),
        (4.25, "4.2s"),
        (45, "45s"),
        (125, "2m05s"),
        (3600, "1h"),
        (3720, "1h02m"),
        (86400, "1d"),
        (2 * 86400 + 4 * 3600 + 5, "2d04h"),
        (-3, "0.0s"),
    ],
)
def test_format_duration_is_short_and_drops_a_zero_second_unit(
    seconds: float | None, text: str
) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(("value", "expected"), [(None, None), (0, None), (60, 60.0), (1.5, 1.5)])
def test_retention_zero_or_none_means_never(value: Any, expected: float | None) -> None:
    assert retention_seconds("prune_done_after", value) == expected


@pytest.mark.parametrize("value", [-1, "1d", True])
def test_retention_rejects_a_negative_or_non_number(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="prune_done_after= must be a number"):
        retention_seconds("prune_done_after", value)


def test_the_pruner_lock_class_differs_from_the_other_advisory_lock_classes() -> None:
    classes = {ADVISORY_LOCK_CLASS_MIGRATE, ADVISORY_LOCK_CLASS_BEAT, ADVISORY_LOCK_CLASS_PRUNE}

    assert len(classes) == 3
    assert all(0 < value < 2**31 for value in classes)  # a PostgreSQL int4


def test_table_right_aligns_numeric_columns_and_left_aligns_text() -> None:
    table = format_table(("NAME", "COUNT"), [["a", 5], ["long name", 12345]])

    assert table.splitlines() == [
        "NAME       COUNT",
        "a              5",
        "long name  12345",
    ]


def queue(name: str, **counts: Any) -> QueueStats:
    return QueueStats(name, **counts)


def test_totals_add_counts_and_keep_the_longest_wait() -> None:
    total = total_stats(
        [
            queue("a", pending=3, due=2, done=4, oldest_due_age=5.0, finished_last_hour=4),
            queue("b", pending=1, due=1, failed=2, oldest_due_age=50.0, finished_last_minute=1),
            queue("c", running=1),
        ]
    )

    assert (total.pending, total.due, total.scheduled, total.running) == (4, 3, 1, 1)
    assert (total.done, total.failed, total.total) == (4, 2, 11)
    assert total.oldest_due_age == 50.0
    assert (total.finished_last_minute, total.finished_last_hour) == (1, 4)


def test_stats_text_has_a_row_per_queue_a_total_and_the_workers() -> None:
    stats = Stats(
        now=NOW,
        queues=[queue("default", pending=2, due=1, oldest_due_age=75.0), queue("emails", done=3)],
        live_workers=2,
        silent_workers=1,
        lease_timeout=30.0,
    )

    lines = format_stats(stats).splitlines()

    assert lines[0] == "at 2025-03-01 12:00:00+00:00"
    assert lines[1].split() == [
        "QUEUE",
        "WAITING",
        "PENDING",
        "DUE",
        "RUNNING",
        "DONE",
        "FAILED",
        "CANCELLED",
        "OLDEST",
        "DUE",
        "FINISHED",
        "1M",
        "FINISHED",
        "1H",
    ]
    assert lines[2].split() == ["default", "0", "2", "1", "0", "0", "0", "0", "1m15s", "0", "0"]
    assert lines[3].split() == ["emails", "0", "0", "0", "0", "3", "0", "0", "-", "0", "0"]
    assert lines[4].split() == ["(all)", "0", "2", "1", "0", "3", "0", "0", "1m15s", "0", "0"]
    assert lines[5] == "workers: 2 live, 1 silent past the lease (not yet rescued) (lease 30s)"


def test_stats_json_has_queues_total_and_workers() -> None:
    stats = Stats(NOW, [queue("default", pending=2, due=1)], 1, 0, 30.0)

    document = json.loads(to_json(stats.as_json()))

    assert document["now"] == "2025-03-01T12:00:00+00:00"
    assert document["queues"]["default"] == {
        "waiting": 0,
        "pending": 2,
        "running": 0,
        "done": 0,
        "failed": 0,
        "cancelled": 0,
        "due": 1,
        "scheduled": 1,
        "total": 2,
        "oldest_due_age": None,
        "finished_last_minute": 0,
        "finished_last_hour": 0,
    }
    assert document["total"]["pending"] == 2
    assert document["workers"] == {"live": 1, "silent": 0, "lease_timeout": 30.0}


def failed_job() -> JobRow:
    return JobRow(
        id=7,
        task_name="app.send",
        queue="emails",
        priority=0,
        args=["a@example.com"],
        kwargs={"subject": "hé"},
        status=JobStatus.FAILED,
        attempts=3,
        max_attempts=3,
        run_at=NOW - timedelta(minutes=5),
        locked_at=NOW - timedelta(minutes=5),
        locked_by=4,
        last_error='Traceback (most recent call last):\n  File "x.py", line 1\nOSError: refused',
        result=None,
        idempotency_key=None,
        created_at=NOW - timedelta(hours=1),
        updated_at=NOW - timedelta(minutes=4),
        finished_at=NOW - timedelta(minutes=4),
    )


def test_job_text_shows_every_field_and_the_whole_traceback() -> None:
    text = format_job(failed_job(), NOW)

    assert text.splitlines()[0] == "job 7"
    assert "  attempts:        3 of 3" in text
    assert '  kwargs:          {"subject": "hé"}' in text
    assert "  finished at:     2025-03-01 11:56:00+00:00 (4m ago)" in text
    assert "  locked by:       worker 4" in text
    assert text.endswith(
        'last error:\n  Traceback (most recent call last):\n    File "x.py", line 1\n'
        "  OSError: refused"
    )


def test_job_list_shows_the_last_line_of_the_error() -> None:
    lines = format_jobs(NOW, [failed_job()]).splitlines()

    assert lines[1].split() == [
        "7",
        "app.send",
        "emails",
        "failed",
        "3/3",
        "1h",
        "ago",
        "ended",
        "4m",
        "ago",
        "OSError:",
        "refused",
    ]
    assert format_jobs(None, []) == "no jobs"


def test_job_json_has_every_column() -> None:
    document = json.loads(to_json(job_as_json(failed_job())))

    assert document["status"] == "failed"
    assert document["finished_at"] == "2025-03-01T11:56:00+00:00"
    assert set(document) == {
        "id",
        "task_name",
        "queue",
        "priority",
        "args",
        "kwargs",
        "status",
        "attempts",
        "max_attempts",
        "run_at",
        "locked_at",
        "locked_by",
        "last_error",
        "result",
        "idempotency_key",
        "created_at",
        "updated_at",
        "finished_at",
        "meta",
        "started_at",
        "attempt_errors",
        "unique_key",
        "unique_window_start",
        "unique_window_end",
        "unreadable",
    }


def worker_row(**values: Any) -> dict[str, Any]:
    row = {"hostname": "h", "removed_at": None, "heartbeat_age": 1.0, "silence": None}
    row.update(values)
    return row


@pytest.mark.parametrize(
    ("row", "state"),
    [
        (worker_row(), "live"),
        (worker_row(heartbeat_age=30.0), "live"),
        (worker_row(heartbeat_age=31.0), "silent"),
        (worker_row(removed_at=NOW, silence=4.0), "stopped"),
        (worker_row(removed_at=NOW, silence=30.0), "lost"),
        (worker_row(hostname=None), "unknown"),
    ],
)
def test_worker_state_follows_heartbeat_age_and_removal_gap(
    row: dict[str, Any], state: str
) -> None:
    assert worker_state(row, lease_timeout=30.0) == state


def test_prune_text_names_counts_and_retention() -> None:
    result = PruneResult()
    result.add("done", 3)
    result.add("cancelled", 1)

    text = format_prune(result, done_after=86400.0, failed_after=None)

    assert text == (
        "pruned 4 finished job(s): done 3, failed 0, cancelled 1"
        " (retention: done 1d, failed and cancelled kept)"
    )
