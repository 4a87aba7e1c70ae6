"""Logging: the ``extra`` keys pgtasks puts on records, and the text and JSON-lines formats.

pgtasks logs with the standard ``logging`` module under the ``pgtasks`` logger and its
children (``pgtasks.worker``, ``pgtasks.beat``, ``pgtasks.metrics`` …). Records about a
job carry :data:`EXTRA_KEYS` as attributes (``job_id``, ``task``, ``attempt``,
``worker_id``, ``outcome``; only those that apply; ``trace_id`` and ``span_id`` while an
OpenTelemetry span is current, with pgtasks.contrib.otel). :class:`JsonFormatter` writes one
JSON object per record: ``time``, ``level``, ``logger``, ``message``, the extra keys
present, any other ``extra`` a caller passed, then ``exception`` / ``stack`` text.
Messages never hold a DSN's password (they name servers with ``describe_dsn``).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any, Literal, TextIO

#: Attributes pgtasks sets through ``extra=`` on records about jobs and workers, in output order.
EXTRA_KEYS = ("job_id", "task", "attempt", "worker_id", "outcome")

#: The OpenTelemetry ids of the span current when the record was made (pgtasks.contrib.otel),
#: written after the extra keys.
TRACE_KEYS = ("trace_id", "span_id")

#: The text format (the default of every command).
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(
    logging.LogRecord("", logging.INFO, "", 0, "", None, None).__dict__
) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; keys in a stable order, values JSON (others as ``str``)."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        attributes = record.__dict__
        for key in EXTRA_KEYS + TRACE_KEYS:
            if key in attributes:
                document[key] = attributes[key]
        for key, value in attributes.items():
            if key not in _RECORD_ATTRIBUTES and key not in document and not key.startswith("_"):
                document[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            document["exception"] = record.exc_text
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        return json.dumps(document, default=str)


def make_formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"unknown log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")


def configure_logging(level: str, log_format: str = "text", stream: TextIO | None = None) -> None:
    """Log to ``stream`` (stderr) at ``level`` in ``log_format``, unless logging is set up."""
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(make_formatter(log_format))
    logging.basicConfig(level=level.upper(), handlers=[handler])
