"""OpenTelemetry tracing for pgtasks: ``instrument(app)`` (the ``otel`` extra).

Needs only ``opentelemetry-api``; without it ``instrument(app)`` returns False and nothing
changes. Tracing is opt-in per App: an App that was not instrumented pays nothing.

What an instrumented App traces (see docs/howto/opentelemetry.md):

- each enqueue (``delay``, ``apply_async``, transactional ``connection=`` enqueues, beat)
  is a PRODUCER span ``send {task}``; ``delay_many`` / ``enqueue_many`` of several jobs is
  one CLIENT span ``send {task}`` with one PRODUCER span ``create {task}`` per job. The
  span's W3C trace context (the global propagator's fields: ``traceparent``,
  ``tracestate``) is stored in the job's meta under ``pgtasks.trace``;
- each attempt is a CONSUMER span ``process {task}`` where the task's code runs (a job
  thread, the event loop, a process-pool child): the child of the producer span on the
  first attempt, a new trace LINKED to it on retries. Attributes: ``messaging.system``
  (pgtasks), ``messaging.destination.name`` (queue), ``messaging.message.id`` (job id),
  ``pgtasks.attempt``, ``pgtasks.worker_id``, ``pgtasks.outcome`` (done, retried,
  failed, cancelled, lease_lost). Exceptions are recorded on it;
- JSON log lines (``--log-format json``) carry ``trace_id`` and ``span_id`` while a span
  is current (a log record factory, installed by the first ``instrument()``).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from pgtasks import App
    from pgtasks._jobs import InsertedJob, JobSpec

__all__ = ["TRACE_KEY", "instrument", "is_instrumented", "uninstrument"]

#: The reserved meta key holding a job's trace context.
TRACE_KEY = "pgtasks.trace"

logger = logging.getLogger("pgtasks.otel")

_factory_installed = False


def instrument(app: App, *, tracer_provider: TracerProvider | None = None) -> bool:
    """Trace ``app``'s enqueues and attempts; False (and nothing done) without the API.

    ``tracer_provider``: where spans go (default: the global one, as configured by the
    application's SDK set-up). Call it where the app is defined, so worker processes and
    process-pool children (which import the app) are instrumented too.
    """
    try:
        from opentelemetry import trace  # noqa: F401
    except ImportError:
        logger.debug("opentelemetry-api is not installed: pgtasks tracing stays off")
        return False
    app.instrumentation = _Tracing(tracer_provider)
    _install_log_fields()
    return True


def uninstrument(app: App) -> None:
    """Stop tracing ``app`` (the log record factory stays; it costs one check per record)."""
    app.instrumentation = None


def is_instrumented(app: App) -> bool:
    return isinstance(app.instrumentation, _Tracing)


def _install_log_fields() -> None:
    """Add ``trace_id`` / ``span_id`` to log records made while a span is current."""
    global _factory_installed
    if _factory_installed:
        return
    from opentelemetry import trace

    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        return record

    logging.setLogRecordFactory(factory)
    _factory_installed = True


def _common_name(names: Sequence[str]) -> str | None:
    first = names[0]
    return first if all(name == first for name in names) else None


def _with_trace(spec: JobSpec, carrier: dict[str, str]) -> JobSpec:
    """``spec`` with ``carrier`` under the reserved meta key (the user's keys kept)."""
    import dataclasses

    meta = json.loads(spec.meta_json) if spec.meta_json else {}
    meta[TRACE_KEY] = carrier
    return dataclasses.replace(spec, meta_json=json.dumps(meta, separators=(",", ":")))


class _Tracing:
    """The Instrumentation of pgtasks._instrumentation, on the OpenTelemetry API."""

    def __init__(self, tracer_provider: TracerProvider | None) -> None:
        from opentelemetry import trace

        from pgtasks import __version__

        self._provider = tracer_provider
        self._tracer: Tracer = trace.get_tracer(
            "pgtasks", __version__, tracer_provider=tracer_provider
        )

    def flush(self, timeout_millis: int = 5000) -> None:
        """Export buffered spans (the provider's force_flush, when it has one)."""
        from opentelemetry import trace

        provider = self._provider or trace.get_tracer_provider()
        force_flush = getattr(provider, "force_flush", None)
        if callable(force_flush):
            force_flush(timeout_millis)

    # -- producer side --
    @contextlib.contextmanager
    def _producing(self, specs: Sequence[JobSpec]) -> Iterator[tuple[list[JobSpec], list[Span]]]:
        """Start the enqueue's spans, inject their contexts, end them after the insert."""
        from opentelemetry import propagate, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        tasks = _common_name([spec.task_name for spec in specs])
        queue = _common_name([spec.queue for spec in specs])
        spans: list[Span] = []
        outer: Span | None = None
        if len(specs) > 1:
            outer = self._tracer.start_span(
                f"send {tasks}" if tasks else "send",
                kind=SpanKind.CLIENT,
                attributes=_producer_attributes("send", tasks, queue)
                | {"messaging.batch.message_count": len(specs)},
            )
        parent = trace.set_span_in_context(outer) if outer is not None else None
        traced: list[JobSpec] = []
        for spec in specs:
            operation = "create" if outer is not None else "send"
            span = self._tracer.start_span(
                f"{operation} {spec.task_name}",
                context=parent,
                kind=SpanKind.PRODUCER,
                attributes=_producer_attributes(operation, spec.task_name, spec.queue),
            )
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=trace.set_span_in_context(span))
            spans.append(span)
            traced.append(_with_trace(spec, carrier) if carrier else spec)
        try:
            if outer is not None:
                with trace.use_span(outer, end_on_exit=False):
                    yield traced, spans
            else:
                with trace.use_span(spans[0], end_on_exit=False):
                    yield traced, spans
        except BaseException as error:
            for span in [*spans, *([outer] if outer is not None else [])]:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            raise
        finally:
            for span in spans:
                span.end()
            if outer is not None:
                outer.end()

    def insert(
        self, specs: Sequence[JobSpec], insert: Callable[[Sequence[JobSpec]], list[InsertedJob]]
    ) -> list[InsertedJob]:
        with self._producing(specs) as (traced, spans):
            inserted = insert(traced)
            _set_ids(spans, inserted)
            return inserted

    async def ainsert(
        self,
        specs: Sequence[JobSpec],
        insert: Callable[[Sequence[JobSpec]], Awaitable[list[InsertedJob]]],
    ) -> list[InsertedJob]:
        with self._producing(specs) as (traced, spans):
            inserted = await insert(traced)
            _set_ids(spans, inserted)
            return inserted

    # -- consumer side --
    def attempt(
        self,
        *,
        job_id: int,
        task_name: str,
        queue: str,
        attempt: int,
        worker_id: int,
        meta: Mapping[str, Any],
    ) -> _AttemptSpan:
        from opentelemetry import context as otel_context
        from opentelemetry import propagate, trace
        from opentelemetry.trace import Link, SpanKind

        carrier = meta.get(TRACE_KEY)
        parent = None
        links: list[Link] = []
        if isinstance(carrier, dict):
            # Hostile input: only string fields reach the propagator.
            fields = {k: v for k, v in carrier.items() if isinstance(v, str)}
            producer = propagate.extract(fields)
            producer_context = trace.get_current_span(producer).get_span_context()
            if producer_context.is_valid:
                if attempt <= 1:
                    parent = producer
                else:
                    links.append(Link(producer_context, {"pgtasks.link": "enqueue"}))
        span = self._tracer.start_span(
            f"process {task_name}",
            # A retry starts a trace of its own: never a child of whatever is current here.
            context=parent if parent is not None else otel_context.Context(),
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": "pgtasks",
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": queue,
                "messaging.message.id": str(job_id),
                "pgtasks.task": task_name,
                "pgtasks.attempt": attempt,
                "pgtasks.worker_id": worker_id,
            },
        )
        return _AttemptSpan(span)


def _producer_attributes(operation: str, task: str | None, queue: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": "pgtasks",
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }
    if queue is not None:
        attributes["messaging.destination.name"] = queue
    if task is not None:
        attributes["pgtasks.task"] = task
    return attributes


def _set_ids(spans: Sequence[Span], inserted: Sequence[InsertedJob]) -> None:
    for span, job in zip(spans, inserted, strict=False):
        span.set_attribute("messaging.message.id", str(job.id))
        if job.existed:
            span.set_attribute("pgtasks.existed", True)


class _AttemptSpan:
    """The CONSUMER span of one attempt (pgtasks._instrumentation.AttemptTrace)."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self._ended = False

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        from opentelemetry import trace

        with trace.use_span(self.span, end_on_exit=False, record_exception=False):
            yield

    def record_exception(self, error: BaseException) -> None:
        self.span.record_exception(error)

    def end(self, outcome: str, error: str | None = None) -> None:
        from opentelemetry.trace import Status, StatusCode

        if self._ended:
            return
        self._ended = True
        self.span.set_attribute("pgtasks.outcome", outcome)
        if outcome in ("failed", "retried", "lease_lost") and error is not None:
            last = error.strip().splitlines()[-1] if error.strip() else outcome
            self.span.set_status(Status(StatusCode.ERROR, last[:500]))
        elif outcome == "lease_lost":
            self.span.set_status(Status(StatusCode.ERROR, "lease lost"))
        self.span.end()

    def log_fields(self) -> dict[str, str]:
        context = self.span.get_span_context()
        return {
            "trace_id": format(context.trace_id, "032x"),
            "span_id": format(context.span_id, "016x"),
        }
