"""The JSON-lines log formatter and the text format (no database)."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from pgtasks._logging import EXTRA_KEYS, TEXT_FORMAT, JsonFormatter, make_formatter


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of its own writing JSON lines into a buffer."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("pgtasks.test_logging")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)
    logger.propagate = True


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_record_becomes_one_json_object_with_time_level_logger_and_message(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged

    logger.info("worker %d started: %s", 7, "queues=*")

    [line] = lines(stream)
    assert list(line) == ["time", "level", "logger", "message"]
    assert line["level"] == "INFO"
    assert line["logger"] == "pgtasks.test_logging"
    assert line["message"] == "worker 7 started: queues=*"
    assert datetime.fromisoformat(line["time"]).utcoffset() is not None


def test_a_job_line_carries_every_pgtasks_extra_key_in_a_stable_order(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged
    extra = {"outcome": "done", "worker_id": 3, "attempt": 2, "task": "app.send", "job_id": 41}

    logger.info("job 41 app.send attempt 2/5 done in 0.010 s", extra=extra)

    [line] = lines(stream)
    assert list(line)[4:] == list(EXTRA_KEYS)
    assert line["job_id"] == 41
    assert line["task"] == "app.send"
    assert line["attempt"] == 2
    assert line["worker_id"] == 3
    assert line["outcome"] == "done"


def test_only_the_extra_keys_a_record_has_are_written(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged

    logger.warning("rescued job 5", extra={"job_id": 5, "attempt": 1})

    [line] = lines(stream)
    assert {key for key in line if key in EXTRA_KEYS} == {"job_id", "attempt"}
    assert line["level"] == "WARNING"


def test_other_extra_keys_are_kept_and_values_json_cannot_hold_become_text(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged

    logger.info("custom", extra={"order_id": 12, "when": datetime(2024, 1, 2, 3, 4, 5)})

    [line] = lines(stream)
    assert line["order_id"] == 12
    assert line["when"] == "2024-01-02 03:04:05"


def test_an_exception_is_written_as_its_traceback_text_within_the_one_line(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged

    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        logger.exception("job 9 failed", extra={"job_id": 9})

    assert stream.getvalue().count("\n") == 1
    [line] = lines(stream)
    assert line["message"] == "job 9 failed"
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert line["exception"].endswith("ValueError: bad\nvalue")


def test_a_stack_requested_by_the_caller_is_written(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged

    logger.info("where am I", stack_info=True)

    [line] = lines(stream)
    assert line["stack"].startswith("Stack (most recent call last):")


def test_non_ascii_messages_round_trip(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = logged

    logger.info("tâche envoyée ✓")

    assert lines(stream)[0]["message"] == "tâche envoyée ✓"


def test_the_text_format_is_the_one_the_commands_always_used() -> None:
    formatter = make_formatter("text")
    record = logging.LogRecord("pgtasks.worker", logging.INFO, __file__, 1, "hello", None, None)

    assert TEXT_FORMAT == "%(asctime)s %(levelname)s %(name)s: %(message)s"
    assert formatter.format(record).endswith(" INFO pgtasks.worker: hello")


def test_make_formatter_builds_json_and_rejects_unknown_formats() -> None:
    assert isinstance(make_formatter("json"), JsonFormatter)
    with pytest.raises(ValueError, match="unknown log format 'xml': use one of text, json"):
        make_formatter("xml")


def test_a_record_with_exc_info_from_a_tuple_is_formatted_once() -> None:
    formatter = JsonFormatter()
    try:
        raise KeyError("k")
    except KeyError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "m", None, sys.exc_info())

    first = json.loads(formatter.format(record))
    second = json.loads(formatter.format(record))

    assert first == second
    assert "KeyError: 'k'" in first["exception"]


def test_trace_ids_follow_the_extra_keys(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = logged

    logger.info("traced", extra={"span_id": "b" * 16, "job_id": 1, "trace_id": "a" * 32})

    [line] = lines(stream)
    assert list(line)[4:] == ["job_id", "trace_id", "span_id"]
