"""Job logs past the root logger's level and across threads (pgtasks/_execution/joblogs.py),
with real workers: a task's INFO lines are captured while the root logger says WARNING
(and its DEBUG lines with ``job_logs="DEBUG"``), the process's handlers print what they
printed before, the root's level comes back when the worker stops; lines of threads the
task starts, of a ThreadPoolExecutor it makes, and of work it submits to one made outside
it are the attempt's, each attempt's its own; a line after the attempt ended is not kept."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pgtasks import App
from pgtasks._errors import ConfigurationError
from pgtasks._execution.settings import ExecutorSettings
from tests.support.inprocess import finished, running_worker

logger = logging.getLogger("shop.levels")


def texts(meta: dict[str, Any], attempt: int = 1) -> list[tuple[str, str]]:
    lines = meta.get("pgtasks.logs", {}).get(str(attempt), {}).get("lines", [])
    return [(line[1], line[3]) for line in lines]


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def printed() -> Iterator[Collect]:
    """The root at WARNING (Python's default) with a handler, as an application has."""
    root = logging.getLogger()
    level, handler = root.level, Collect()
    root.setLevel(logging.WARNING)
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


def test_info_lines_are_captured_under_a_warning_root_and_printed_as_before(
    app: App, printed: Collect
) -> None:
    @app.task(name="levels.quiet_root")
    def task() -> None:
        logger.debug("a debug line")
        logger.info("an info line")
        logger.warning("a warning line")
        alone.info("an info line of a logger that does not propagate")

    # Handlers of loggers that take the root's level: one on the way up, one apart.
    above, apart = Collect(), Collect()
    logging.getLogger("shop").addHandler(above)
    alone = logging.getLogger("audit.alone")
    alone.propagate = False
    alone.addHandler(apart)
    try:
        with running_worker(app):
            assert logging.getLogger().level == logging.INFO
            row = finished(task.delay())
            logging.getLogger("elsewhere").info("outside any job")
    finally:
        logging.getLogger("shop").removeHandler(above)
        alone.removeHandler(apart)
    assert texts(row.meta) == [("INFO", "an info line"), ("WARNING", "a warning line")]
    assert "an info line" not in printed.messages and "outside any job" not in printed.messages
    assert "a warning line" in printed.messages
    assert above.messages == ["a warning line"] and apart.messages == []
    assert above.filters == [] and apart.filters == []
    assert logging.getLogger().level == logging.WARNING
    assert logging.getLogger("pgtasks").level == logging.NOTSET
    assert printed.filters == []


def test_debug_lines_are_captured_when_the_level_says_so(app: App, printed: Collect) -> None:
    @app.task(name="levels.debug")
    def task() -> None:
        logger.debug("a debug line")

    with running_worker(app, job_logs="DEBUG"):
        row = finished(task.delay())
    assert texts(row.meta) == [("DEBUG", "a debug line")]
    assert printed.messages == []
    with running_worker(app, job_logs="warning"):
        row = finished(task.delay())
    assert "pgtasks.logs" not in row.meta


@pytest.mark.parametrize("value", ["verbose", 0, 99, 2.5])
def test_a_bad_capture_level_is_refused(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="job_logs= must be True, False or a level"):
        ExecutorSettings(job_logs=value)


def test_lines_of_threads_the_task_starts_are_its_own(app: App, printed: Collect) -> None:
    shared = concurrent.futures.ThreadPoolExecutor(max_workers=1)  # made outside any job
    late = threading.Event()
    threads: list[threading.Thread] = []

    def in_thread(name: str) -> None:
        logger.info("%s: from a thread", name)
        inner = threading.Thread(target=logger.info, args=(f"{name}: from its thread",))
        inner.start()
        inner.join()

    def after_the_end(name: str) -> None:
        late.wait(30)
        logger.info("%s: after the attempt ended", name)

    @app.task(name="levels.threads")
    def task(name: str) -> None:
        thread = threading.Thread(target=in_thread, args=(name,))
        thread.start()
        thread.join()
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as own:
            list(own.map(lambda n: logger.info("%s: own pool %d", name, n), range(2)))
        shared.submit(logger.info, f"{name}: shared pool").result()
        lingering = threading.Thread(target=after_the_end, args=(name,))
        lingering.start()
        threads.append(lingering)

    with running_worker(app, concurrency=2):
        first, second = task.delay("a"), task.delay("b")
        rows = [finished(first), finished(second)]
        late.set()
        for thread in threads:
            thread.join(30)
    shared.shutdown()
    for name, row in zip("ab", rows, strict=True):
        assert sorted(text for _, text in texts(row.meta)) == sorted(
            [
                f"{name}: from a thread",
                f"{name}: from its thread",
                f"{name}: own pool 0",
                f"{name}: own pool 1",
                f"{name}: shared pool",
            ]
        )
    assert printed.messages == []
