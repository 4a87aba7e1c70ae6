"""OpenTelemetry tracing: one trace from the enqueue to the attempts of a job.

    pip install 'pgtasks[otel]' opentelemetry-sdk
    python -m examples.otel

Sets up the OpenTelemetry SDK with an in-memory exporter (a real application would export
to its collector), instruments the app, enqueues a job that fails once and then succeeds,
runs a worker in this process, and prints the spans.
"""

from __future__ import annotations

import os
import threading
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pgtasks import App, JobContext, Worker
from pgtasks.contrib.otel import instrument

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

# A schema of its own: this example never meets the jobs of your own workers (nor
# they its jobs). PGTASKS_EXAMPLE_SCHEMA moves it (the test suite does).
app = App(schema=os.environ.get("PGTASKS_EXAMPLE_SCHEMA", "examples_otel"))
instrument(app)  # where the app is defined: workers and process-pool children import it


@app.task(name="shop.charge", bind=True, max_attempts=3, retry_backoff=0.05, retry_jitter=False)
def charge(ctx: JobContext, order: int) -> str:
    if ctx.attempt == 1:
        raise ConnectionError("payment gateway timed out")
    return f"order {order} charged"


def main() -> int:
    app.migrate()
    worker = Worker(app, concurrency=2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        tracer = trace.get_tracer("shop")
        with tracer.start_as_current_span("checkout"):  # the request that enqueues
            job = charge.delay(order=42)
        print(f"result: {job.get(timeout=30)}")
        deadline = time.monotonic() + 10
        while len(exporter.get_finished_spans()) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)  # the second attempt's span ends once its outcome is written
    finally:
        worker.stop()
        thread.join()
        app.close()
    spans = sorted(exporter.get_finished_spans(), key=lambda span: span.start_time or 0)
    checkout = next(span for span in spans if span.name == "checkout")
    for span in spans:
        context = span.get_span_context()
        same = "same trace" if context.trace_id == checkout.context.trace_id else "new trace"
        attributes = span.attributes or {}
        details = ""
        if span.kind.name == "CONSUMER":
            details = (
                f" attempt={attributes['pgtasks.attempt']}"
                f" outcome={attributes['pgtasks.outcome']} links={len(span.links)}"
            )
        print(f"{span.name:<22} {span.kind.name:<9} {same}{details}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
