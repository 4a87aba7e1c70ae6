"""Startup and shutdown commute: a worker stopped at any moment of its start exits 0.

Real ``pgtasks worker`` processes get SIGTERM, SIGINT, or a second signal at every point
of their start: at named points (tests/apps/startup_app.py makes the worker signal itself
before or after the metrics server, the job threads, its registration, each service and
the round-trip lanes start, its first claim, and inside its first job), at random moments
after the spawn, and as a barrage (a signal every millisecond) from a random moment until
it exits. CPU burners run beside them, so the moments fall everywhere on a loaded machine.

Whatever the moment: the worker exits 0, a job it claimed finished (or, after a second
signal, went back to pending at once without using up its attempt), nothing is left
running, and its registration is gone. The only other end allowed is a timed signal that
came before the process set up its signal handling (the interpreter still importing
pgtasks: it has touched nothing), which ends by the signal's default action.

The scenarios run three at a time: every named point once (with a timed signal or a
barrage after every third), then more for what is left of PGTASKS_TEST_STOP_SIGNALS_SECONDS
(default 15 s); raise it to hunt for rare races.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgtasks import App
from tests.apps.startup_app import POINTS
from tests.apps.worker_app import create_executions_table
from tests.support.probe import Probe, wait_started
from tests.support.processes import ChildProcess, Processes

APP_PATH = "tests.apps.startup_app:app"
#: Seconds the first job runs: a single signal lets it finish.
JOB_SECONDS = 0.4
SHUTDOWN_TIMEOUT = 6.0
#: With a second signal the job never ends by itself and the grace period is longer than
#: EXIT_BOUND: only a release at once lets the worker exit in time.
ENDLESS_JOB_SECONDS = 3600.0
SECOND_SIGNAL_SHUTDOWN_TIMEOUT = 120.0
#: Longest a worker may take to log that it took a stop (a start on a machine this loaded
#: can take that long: the signal handling comes after the imports).
START_BOUND = 90.0
#: Longest a worker may take to exit once it logged the stop: the rest of its start, the
#: job, the stop. One that hangs stays far longer.
EXIT_BOUND = 25.0
BUDGET = float(os.environ.get("PGTASKS_TEST_STOP_SIGNALS_SECONDS", "15"))
PARALLEL = 3
BURNERS = 2
VARIANTS: tuple[tuple[signal.Signals, ...], ...] = (
    (signal.SIGTERM,),
    (signal.SIGINT,),
    (signal.SIGTERM, signal.SIGTERM),
    (signal.SIGINT, signal.SIGTERM),
)


@dataclasses.dataclass(frozen=True)
class Scenario:
    number: int
    #: "point" (the worker signals itself at ``point``), "timed" or "barrage".
    kind: str
    signals: tuple[signal.Signals, ...]
    point: str | None = None
    #: Seconds after the spawn of the first signal (and between the first and the second).
    delay: float = 0.0
    gap: float = 0.0
    enqueue_after: bool = False
    metrics: bool = False
    #: Whether ``delay`` counts from the app's being built (the CLI handles signals by
    #: then) rather than from the spawn.
    from_marker: bool = True

    @property
    def several(self) -> bool:
        """A second signal comes (the running job is to be released at once)."""
        return len(self.signals) > 1 or self.kind == "barrage"

    def describe(self) -> str:
        names = "+".join(signum.name for signum in self.signals)
        since = "the app built" if self.from_marker else "the spawn"
        where = self.point if self.kind == "point" else f"{self.delay * 1000:.0f} ms after {since}"
        gap = f" gap {self.gap * 1000:.0f} ms" if len(self.signals) > 1 and self.gap else ""
        late = " enqueued after the spawn" if self.enqueue_after else ""
        return f"#{self.number} {self.kind} {names} at {where}{gap}{late}"


@dataclasses.dataclass
class Result:
    scenario: Scenario
    #: "ok", "before handling" (a timed signal before the handlers: allowed) or a failure.
    verdict: str
    detail: str = ""
    exit_code: int | None = None
    #: Seconds from the spawn to the job's start (when it started).
    to_job: float | None = None


class Lab:
    """Runs scenarios: spawns workers on their own queue, signals them, checks the end."""

    def __init__(self, dsn: str, app: App, tmp_path: Path) -> None:
        self.dsn = dsn
        self.app = app
        self.tmp_path = tmp_path
        self.processes = Processes(tmp_path, APP_PATH)
        self._spawn_lock = threading.Lock()
        self.first = app.task(name="startup_app.first")(_first_stub)
        self.to_job: list[float] = []

    def typical_start(self) -> float:
        """Seconds from the app's being built to the job's start, as measured so far."""
        return statistics.median(self.to_job) if self.to_job else 1.0

    def run(self, scenario: Scenario) -> Result:
        queue = f"q{scenario.number}"
        marker = self.tmp_path / f"marker-{scenario.number}"
        arguments = [f"--queues={queue}", "--concurrency=1"]
        grace = SECOND_SIGNAL_SHUTDOWN_TIMEOUT if scenario.several else SHUTDOWN_TIMEOUT
        seconds = ENDLESS_JOB_SECONDS if scenario.several else JOB_SECONDS
        arguments.append(f"--shutdown-timeout={grace:g}")
        if scenario.metrics:
            arguments.append("--metrics-port=0")
        job_id = None
        if not scenario.enqueue_after:
            job_id = self.first.apply_async((seconds,), queue=queue).id
        with self._spawn_lock:
            child = self.processes.worker(
                self.dsn,
                self.schema,
                *arguments,
                wait_started=False,
                STARTUP_MARKER=str(marker),
                STARTUP_SIGNAL_AT=scenario.point or "",
                STARTUP_SIGNALS=",".join(signum.name for signum in scenario.signals),
                PYTHONFAULTHANDLER="1",  # a hung worker's stacks (see _wait_exit's caller)
            )
        spawned = time.time()
        if scenario.enqueue_after:
            job_id = self.first.apply_async((seconds,), queue=queue).id
        assert job_id is not None
        self._signal(child, scenario, marker)
        try:
            code = self._wait_exit(child)
        except subprocess.TimeoutExpired:
            # SIGABRT: faulthandler writes every thread's stack to the log.
            child.send(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait_exit(5)
            child.process.kill()
            child.wait_exit(10)
            return Result(
                scenario, "hang", f"no exit {EXIT_BOUND} s after the stop:\n{child.log()}"
            )
        with contextlib.closing(Probe(self.dsn, self.schema)) as probe:
            return self._check(scenario, child, code, job_id, probe, spawned, marker)

    @staticmethod
    def _wait_exit(child: ChildProcess) -> int:
        """The exit code, once the worker has taken the stop (its log says so; however
        long a start takes on a loaded machine) and then stopped within EXIT_BOUND."""
        pause = threading.Event()
        taken = time.monotonic() + START_BOUND
        while child.alive() and time.monotonic() < taken:
            if " received, stopping" in child.log():
                break
            pause.wait(0.05)
        return child.wait_exit(EXIT_BOUND)

    @property
    def schema(self) -> str:
        return self.app.schema

    def _signal(self, child: ChildProcess, scenario: Scenario, marker: Path) -> None:
        if scenario.kind == "point":
            return
        pause = threading.Event()
        if scenario.from_marker:
            ends = time.monotonic() + EXIT_BOUND
            while not marker.exists() and child.alive() and time.monotonic() < ends:
                pause.wait(0.001)
        pause.wait(scenario.delay)
        if scenario.kind == "barrage":
            ends = time.monotonic() + 5.0
            while child.alive() and time.monotonic() < ends:
                with contextlib.suppress(ProcessLookupError):
                    child.send(scenario.signals[0])
                pause.wait(0.001)
            return
        for index, signum in enumerate(scenario.signals):
            if index:
                pause.wait(scenario.gap)
            if child.alive():
                child.send(signum)

    def _check(
        self,
        scenario: Scenario,
        child: ChildProcess,
        code: int,
        job_id: int,
        probe: Probe,
        spawned: float,
        marker: Path,
    ) -> Result:
        job = probe.job(job_id)
        runs = probe.executions(job_id)
        to_job = runs[0]["started"].timestamp() - spawned if runs else None
        built = marker.stat().st_mtime if marker.exists() else None
        if runs and built is not None:
            self.to_job.append(runs[0]["started"].timestamp() - built)
        log = child.log()
        registered = [row for row in probe.workers() if row["pid"] == child.pid]

        def result(verdict: str, detail: str = "") -> Result:
            return Result(scenario, verdict, detail, code, to_job)

        if code != 0:
            # SIGINT's default raises KeyboardInterrupt: uncaught (exit -2), or click's
            # "Aborted!" (exit 1), or a failed start of the interpreter (exit 1).
            early = -code in (signal.SIGTERM, signal.SIGINT) or code == 1
            early = early and not marker.exists()
            if early and scenario.kind != "point" and not runs and not registered:
                return result("before handling")
            return result("exit", f"exit code {code}")
        if job["status"] == "running" or registered:
            return result("left", f"job {job['status']}, registered: {bool(registered)}")
        several = scenario.several
        if job["status"] == "done":
            if len(runs) != 1 or runs[0]["finished"] is None:
                return result("runs", f"done with executions {runs}")
        elif job["status"] == "pending":
            if job["attempts"] != 0:
                return result("attempt", f"pending with attempts {job['attempts']}")
            if runs and not several:
                return result("released", "released after a single signal")
        else:
            return result("status", f"job {job['status']}")
        if "Traceback" in log:
            return result("traceback", log)
        return result("ok")


def _first_stub(seconds: float) -> float:
    """Enqueues ``startup_app.first`` (it runs in the worker: tests/apps/startup_app.py)."""
    return seconds


#: The random scenarios' seed: printed with the results, given back through
#: PGTASKS_STOP_SIGNALS_SEED to run the same scenarios again.
SEED = int(os.environ.get("PGTASKS_STOP_SIGNALS_SEED") or random.randrange(2**32))


def schedule(lab: Lab) -> Iterator[Scenario]:
    """Every named point once (rotating through the variants), interleaved with timed
    signals and barrages; then random scenarios of every kind."""
    numbers = itertools.count(1)
    points = [f"{when}:{what}" for what in POINTS for when in ("before", "after")]
    chooser = random.Random(SEED)

    def timed(number: int) -> Scenario:
        variant = chooser.choice(VARIANTS)
        # Mostly from the app's being built; some from the spawn (the imports before).
        from_marker = chooser.random() < 0.85
        reach = lab.typical_start() + JOB_SECONDS + (0.0 if from_marker else 1.5)
        return Scenario(
            number,
            "timed",
            variant,
            delay=chooser.uniform(0.0, reach * 1.2),
            gap=chooser.uniform(0.0, 0.3),
            enqueue_after=chooser.random() < 0.3,
            metrics=chooser.random() < 0.5,
            from_marker=from_marker,
        )

    def barrage(number: int) -> Scenario:
        return Scenario(
            number,
            "barrage",
            (chooser.choice((signal.SIGTERM, signal.SIGINT)),),
            delay=chooser.uniform(0.0, (lab.typical_start() + JOB_SECONDS) * 1.2),
            metrics=chooser.random() < 0.5,
        )

    for index, point in enumerate(points):
        yield Scenario(
            next(numbers),
            "point",
            VARIANTS[index % len(VARIANTS)],
            point=point,
            metrics=point.endswith(":metrics") or index % 2 == 0,
        )
        if index % 3 == 2:
            yield timed(next(numbers)) if index % 2 else barrage(next(numbers))
    for number in numbers:
        kind = chooser.choice(("point", "timed", "timed", "barrage"))
        if kind == "point":
            point = chooser.choice(points)
            yield Scenario(
                number,
                "point",
                chooser.choice(VARIANTS),
                point=point,
                metrics=point.endswith(":metrics") or chooser.random() < 0.5,
            )
        else:
            yield timed(number) if kind == "timed" else barrage(number)


@contextlib.contextmanager
def cpu_burners(count: int) -> Iterator[None]:
    """``count`` processes spinning on a CPU each, while the block runs. At the lowest
    priority (nice 19): they fill every idle moment of this test's workers, but the tests
    the suite's other pytest process runs meanwhile (hand-off latencies among them) keep
    the CPU they would have had without them."""
    burners = [
        subprocess.Popen([sys.executable, "-c", "import os; os.nice(19)\nwhile True: pass"])
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait(10)


@pytest.fixture
def lab(dsn: str, make_app: Callable[..., App], tmp_path: Path) -> Iterator[Lab]:
    app = make_app()
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_executions_table(conn, app.schema)
    running = Lab(dsn, app, tmp_path)
    yield running
    running.processes.close()


# The budget bounds it (about 30 s on an idle 2-core machine); the timeout only keeps a
# machine loaded far beyond that from failing it.
@pytest.mark.timeout(BUDGET + 200)
@pytest.mark.slow
def test_a_worker_stopped_at_any_moment_of_its_start_exits_0(lab: Lab) -> None:
    points = 2 * len(POINTS)
    required = points + points // 3  # every named point once, with what goes between
    results: list[Result] = []
    started = time.monotonic()
    scenarios = schedule(lab)
    with cpu_burners(BURNERS), ThreadPoolExecutor(PARALLEL) as pool:
        pending: set[Any] = set()
        for count in itertools.count():
            if count >= required and time.monotonic() - started >= BUDGET:
                break
            if len(pending) >= PARALLEL:
                done = next(iter(_first_done(pending)))
                pending.discard(done)
                results.append(done.result())
            pending.add(pool.submit(lab.run, next(scenarios)))
        results += [future.result() for future in pending]
    elapsed = time.monotonic() - started
    failures = [r for r in results if r.verdict not in ("ok", "before handling")]
    kinds = {
        kind: sum(1 for r in results if r.scenario.kind == kind)
        for kind in ("point", "timed", "barrage")
    }
    early = sum(1 for r in results if r.verdict == "before handling")
    print(
        f"\n{len(results)} stopped starts in {elapsed:.1f} s ({kinds}); {early} timed signal(s)"
        f" came before the signal handling; start to first job {lab.typical_start():.2f} s;"
        f" {len(failures)} failure(s) (PGTASKS_STOP_SIGNALS_SEED={SEED})"
    )
    for failure in failures:
        print(f"FAILED {failure.scenario.describe()}: {failure.verdict} {failure.detail[-6000:]}")
    assert not failures, [f"{f.scenario.describe()}: {f.verdict}" for f in failures]


def _first_done(pending: set[Any]) -> set[Any]:
    from concurrent.futures import FIRST_COMPLETED, wait

    done, _ = wait(pending, return_when=FIRST_COMPLETED)
    return done


@pytest.mark.timeout(120)  # a worker start on a loaded machine, the grace, the margin
def test_a_stuck_stop_is_reported_its_jobs_released_and_the_process_ends_with_status_1(
    lab: Lab,
) -> None:
    from pgtasks._worker.signals import STOP_MARGIN, STUCK_EXIT_STATUS

    grace = 1.0
    job = lab.app.task(name="startup_app.stall_logging")(_stall_stub).apply_async(queue="stall")
    worker = lab.processes.worker(
        lab.dsn, lab.schema, "--queues=stall", f"--shutdown-timeout={grace:g}", wait_started=False
    )
    with contextlib.closing(Probe(lab.dsn, lab.schema)) as probe:
        wait_started(probe, job.id, timeout=EXIT_BOUND)
        # The job holds the log handler's lock from now on: the stop's first log line waits.
        signalled = time.monotonic()
        worker.send(signal.SIGTERM)
        code = worker.wait_exit(grace + STOP_MARGIN + 15)
        took = time.monotonic() - signalled
        log = worker.log()
        print(
            f"\nstuck stop (grace {grace:g} s + margin {STOP_MARGIN:g} s): exit {code} after"
            f" {took:.2f} s"
        )
        assert code == STUCK_EXIT_STATUS, log
        assert took >= grace + STOP_MARGIN - 0.5, log
        # What it waited for: the step, the loop thread and where it is, services, jobs.
        assert f"did not stop within {STOP_MARGIN:g} s of its stop deadline" in log, log
        assert "still waiting for: stop step: the running jobs to finish" in log, log
        assert "thread MainThread at " in log and "called from pgtasks/_worker/shutdown.py" in log
        assert "services still running: heartbeat, rescuer, listener, pruner" in log, log
        assert f"jobs held: {job.id} (startup_app.stall_logging)" in log, log
        # Released as a second signal would have: pending, its attempt given back.
        assert (
            f"released 1 job(s) back to pending (attempt not used up): {job.id}; deregistered"
            in log
        ), log
        row = probe.job(job.id)
        assert (row["status"], row["attempts"]) == ("pending", 0)
        assert [row for row in probe.workers() if row["pid"] == worker.pid] == []


def _stall_stub() -> None:
    """Enqueues ``startup_app.stall_logging`` (it runs in the worker)."""
