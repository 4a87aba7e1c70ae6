"""``pgtasks worker`` / ``pgtasks beat`` subprocesses of a test, with their logs.

:class:`Processes` starts them from the repository root on a test app (``-A``), each
writing its output to a file under the test's directory; whatever still runs at
:meth:`Processes.close` is killed and its log printed (pytest shows it when the test
failed). Worker intervals are shrunk by CLI flags (:data:`TIMING_FLAGS`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.environment import ROOT, pgtasks_command, pgtasks_env
from tests.support.waiting import wait_until

LEASE_TIMEOUT = 2.0
HEARTBEAT_INTERVAL = 0.3
RESCUE_INTERVAL = 0.3
POLL_INTERVAL = 0.2
TIMING_FLAGS = (
    f"--lease-timeout={LEASE_TIMEOUT}",
    f"--heartbeat-interval={HEARTBEAT_INTERVAL}",
    f"--rescue-interval={RESCUE_INTERVAL}",
    f"--poll-interval={POLL_INTERVAL}",
)
#: Longest a dead (or stalled) worker's job may wait to run again: its last heartbeat ages
#: past the lease, the next rescue pass (interval + 10% jitter) returns it to pending, a
#: worker claims it (1 s slack).
RESCUE_BOUND = LEASE_TIMEOUT + RESCUE_INTERVAL * 1.1 + 1.0
#: How long a worker may take to print its start banner: a bound for a machine under heavy
#: load (a worker with a process pool took 8 s at a load average of 14 on 2 cores, and
#: more than 15 s above 20), never a promise of a test.
STARTED_BOUND = 60.0
#: The start banner of a worker.
BANNER = re.compile(r"worker (?P<id>\d+) \((?P<name>[^)]+)\) started: (?P<rest>.*)")


@dataclasses.dataclass
class ChildProcess:
    """A ``pgtasks`` subprocess; its output goes to ``log_path``."""

    kind: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_for_log(self, text: str, timeout: float = 10.0) -> str:
        """The log, once it contains ``text``; fails at once if the process exits first."""

        def seen() -> str | None:
            log = self.log()
            if text in log:
                return log
            if self.process.poll() is not None:
                raise AssertionError(
                    f"{self.kind} {self.pid} exited ({self.process.returncode}) before"
                    f" logging {text!r}:\n{log}"
                )
            return None

        found: str = wait_until(seen, timeout=timeout, message=f"{text!r} in {self.kind} log")
        return found

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 15.0) -> re.Match[str]:
        """The first match of ``pattern`` in the log; fails at once if the process exits."""

        def seen() -> re.Match[str] | None:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"{self.kind} {self.pid} exited ({self.process.returncode}):\n{self.log()}"
                )
            return pattern.search(self.log())

        found: re.Match[str] = wait_until(seen, timeout=timeout, message=pattern.pattern)
        return found

    def worker_id(self, timeout: float = STARTED_BOUND) -> int:
        """The registration id from a worker's start banner."""
        match = BANNER.search(self.wait_for_log(" started: ", timeout=timeout))
        assert match is not None
        return int(match["id"])

    def send(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    def wait_exit(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def stop(self, signum: signal.Signals = signal.SIGTERM, timeout: float = 10.0) -> int:
        """Send ``signum`` and return the exit code."""
        self.send(signum)
        return self.wait_exit(timeout)


class Processes:
    """Starts ``pgtasks`` subprocesses on ``app_path``; kills whatever still runs at close."""

    def __init__(self, log_dir: Path, app_path: str) -> None:
        self.log_dir = log_dir
        self.app_path = app_path
        self.children: list[ChildProcess] = []

    def spawn(
        self,
        kind: str,
        command: Sequence[str],
        env: dict[str, str],
        *,
        stdout_to_log: bool = True,
        new_session: bool = False,
    ) -> ChildProcess:
        """Start ``command``; its stderr (and stdout, unless not ``stdout_to_log``) is logged."""
        log_path = self.log_dir / f"{kind}-{len(self.children)}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                list(command),
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file if stdout_to_log else subprocess.DEVNULL,
                stderr=log_file if not stdout_to_log else subprocess.STDOUT,
                start_new_session=new_session,
            )
        child = ChildProcess(kind, process, log_path)
        self.children.append(child)
        return child

    def worker(
        self,
        dsn: str,
        schema: str,
        *arguments: str,
        wait_started: bool = True,
        started_timeout: float = STARTED_BOUND,
        timing: Sequence[str] = TIMING_FLAGS,
        new_session: bool = False,
        app_path: str | None = None,
        **env: str,
    ) -> ChildProcess:
        """``pgtasks worker -A <app> TIMING ARGUMENTS``, by default once it has started
        (``app_path``: another app than the one of these processes)."""
        command = pgtasks_command("worker", "-A", app_path or self.app_path, *timing, *arguments)
        child = self.spawn(
            "worker", command, pgtasks_env(dsn, schema, **env), new_session=new_session
        )
        if wait_started:
            child.wait_for_log(" started: ", timeout=started_timeout)
        return child

    def workers(
        self,
        dsn: str,
        schema: str,
        *argument_lists: Sequence[str],
        started_timeout: float = STARTED_BOUND,
        timing: Sequence[str] = TIMING_FLAGS,
        env: Mapping[str, str] | None = None,
    ) -> list[ChildProcess]:
        """One worker per argument list (``env``: variables of each), all spawned before any
        is waited for (they start side by side, not one after another), returned once each
        has started."""
        children = [
            self.spawn(
                "worker",
                pgtasks_command("worker", "-A", self.app_path, *timing, *arguments),
                pgtasks_env(dsn, schema, **(env or {})),
            )
            for arguments in argument_lists
        ]
        for child in children:
            child.wait_for_log(" started: ", timeout=started_timeout)
        return children

    def beat(self, dsn: str, schema: str, *arguments: str, **env: str) -> ChildProcess:
        """``pgtasks beat -A <app> ARGUMENTS``."""
        command = pgtasks_command("beat", "-A", self.app_path, *arguments)
        return self.spawn("beat", command, pgtasks_env(dsn, schema, **env))

    def close(self) -> None:
        for child in self.children:
            if child.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send(signal.SIGCONT)
                    child.process.kill()
                child.process.wait(10)
            # Shown by pytest only when the test failed.
            print(f"--- {child.kind} {child.pid} (exit {child.process.returncode}) ---")
            print(child.log())
        self.children = []


def by_pid(children: Sequence[ChildProcess], pid: int) -> ChildProcess:
    return next(child for child in children if child.pid == pid)


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def child_pids(pid: int) -> list[int]:
    """Live children of ``pid`` (Linux /proc) but multiprocessing's resource tracker (which
    the spawn start method starts).
    """
    pids: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            pids += [int(child) for child in (task / "children").read_text().split()]
    return [child for child in pids if b"resource_tracker" not in command_line(child)]


def command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
