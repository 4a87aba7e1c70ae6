"""What ``Worker(app, ...)`` makes of a set of keyword calls, good and bad, in words: the
settings it runs with, or the error's type and text. tests/unit/test_worker_options.py
compares it with tests/unit/snapshots/worker_keywords.json, written by
``python -m tests.support.worker_keywords`` before the keywords were declared once."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DSN = "postgresql://u:S3cr3t!@127.0.0.1:1/db"
SNAPSHOT = Path(__file__).parents[1] / "unit" / "snapshots" / "worker_keywords.json"

#: (name, positional arguments after the app, keywords).
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("no keywords", (), {}),
    ("queues positional", (["a", " b ", ""],), {}),
    ("queues keyword", (), {"queues": ["mail"]}),
    (
        "every keyword",
        (["q"],),
        {
            "concurrency": 4,
            "lease_timeout": 20,
            "heartbeat_interval": 2,
            "rescue_interval": 3,
            "poll_interval": 0.5,
            "shutdown_timeout": 7,
            "ignore_unknown": False,
            "prefetch": 0,
            "observers": (),
            "pool": "process",
            "processes": 2,
            "queue_executors": {"cpu": "process"},
            "process_start_method": "fork",
            "app_path": "mod:app",
            "max_tasks_per_child": 5,
            "max_memory_per_child": 100.5,
            "loop_lag_threshold": None,
            "store": None,
            "job_logs": "DEBUG",
            "min_concurrency": 2,
            "max_concurrency": 8,
        },
    ),
    ("unknown keyword", (), {"concurency": 5}),
    ("two unknown keywords", (), {"zeta": 1, "alpha": 2}),
    ("app as keyword too", (), {"app": None}),
    ("queues twice", (["a"],), {"queues": ["b"]}),
    ("too many positionals", (["a"], 5), {}),
    ("concurrency str", (), {"concurrency": "10"}),
    ("concurrency float", (), {"concurrency": 1.5}),
    ("concurrency zero", (), {"concurrency": 0}),
    ("concurrency bool", (), {"concurrency": True}),
    ("concurrency None", (), {"concurrency": None}),
    ("lease_timeout str", (), {"lease_timeout": "30"}),
    ("lease_timeout negative", (), {"lease_timeout": -1}),
    ("heartbeat past lease", (), {"heartbeat_interval": 40}),
    ("poll_interval list", (), {"poll_interval": [1]}),
    ("rescue_interval nan", (), {"rescue_interval": float("nan")}),
    ("shutdown_timeout None", (), {"shutdown_timeout": None}),
    ("shutdown_timeout negative", (), {"shutdown_timeout": -1}),
    ("prefetch negative", (), {"prefetch": -1}),
    ("prefetch str", (), {"prefetch": "2"}),
    ("pool unknown", (), {"pool": "fiber"}),
    ("pool None", (), {"pool": None}),
    ("processes zero", (), {"processes": 0}),
    ("queue_executors bad", (), {"queue_executors": {"cpu": "gpu"}}),
    ("queue_executors list", (), {"queue_executors": ["cpu"]}),
    ("start method unknown", (), {"process_start_method": "forkserver"}),
    ("app_path without colon", (), {"app_path": "no_colon"}),
    ("max_tasks_per_child zero", (), {"max_tasks_per_child": 0}),
    ("max_memory_per_child zero", (), {"max_memory_per_child": 0}),
    ("loop_lag_threshold str", (), {"loop_lag_threshold": "x"}),
    ("loop_lag_threshold zero", (), {"loop_lag_threshold": 0}),
    ("store unknown", (), {"store": "nope"}),
    ("job_logs level name", (), {"job_logs": "LOUD"}),
    ("job_logs off", (), {"job_logs": False}),
    ("job_logs number", (), {"job_logs": 30}),
    ("min_concurrency zero", (), {"min_concurrency": 0}),
    ("max below concurrency", (), {"max_concurrency": 5}),
    ("min above concurrency", (), {"concurrency": 2, "min_concurrency": 3}),
    ("queues empty", ([],), {}),
    ("queues a string", ("abc",), {}),
    ("queues bad name", (["nul\x00"],), {}),
    ("observers not a list", (), {"observers": 5}),
]


def outcome(make: Callable[[], Any]) -> str:
    try:
        worker = make()
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    attributes = {
        name: getattr(worker, name)
        for name in (
            "queues",
            "concurrency",
            "lease_timeout",
            "heartbeat_interval",
            "rescue_interval",
            "poll_interval",
            "shutdown_timeout",
            "ignore_unknown",
            "prefetch",
        )
    }
    return f"{worker.settings!r} {attributes!r} observers={worker.observers!r}"


def outcomes() -> dict[str, str]:
    from pgtasks import App, Worker

    app = App(DSN, schema="unit_tests")
    return {
        name: outcome(lambda args=args, keywords=keywords: Worker(app, *args, **keywords))
        for name, args, keywords in CALLS
    }


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(outcomes(), indent=1, ensure_ascii=True) + "\n")
    sys.stdout.write(f"wrote {SNAPSHOT}\n")
