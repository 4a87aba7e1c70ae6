"""What a worker whose stop is stuck reports and releases (the watchdog in signals.py).

Both run on the watchdog's thread while the worker's own threads may be stuck anywhere:
they read the worker's state without its locks (a snapshot that a moving thread may
change is read again), and the release runs on a connection of its own, on a helper
thread given a bounded time.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from .._leases import ClaimedJob
    from .._store.ports import WorkerPort
    from .ledger import JobLedger
    from .registration import Registration
    from .services import Service

#: Jobs named in a report at most (the rest are counted).
NAMED_JOBS = 10


def thread_location(thread: threading.Thread | None) -> str:
    """Where ``thread`` is: its innermost frame, and its innermost frame in pgtasks."""
    if thread is None:
        return "no thread"
    if not thread.is_alive():
        return f"thread {thread.name} (ended)"
    import sys

    frame = sys._current_frames().get(thread.ident or 0)
    if frame is None:
        return f"thread {thread.name}"
    stack = traceback.extract_stack(frame)

    def where(entry: traceback.FrameSummary) -> str:
        path = entry.filename.replace("\\", "/")
        if "/pgtasks/" in path:
            short = "pgtasks/" + path.rsplit("/pgtasks/", 1)[1]
        else:
            short = "/".join(path.rsplit("/", 2)[-2:])  # logging/__init__.py
        return f"{short}:{entry.lineno} in {entry.name}"

    text = f"thread {thread.name} at {where(stack[-1])}"
    own = [entry for entry in stack if "/pgtasks/" in entry.filename.replace("\\", "/")]
    if own and own[-1] is not stack[-1]:
        text += f", called from {where(own[-1])}"
    return text


def held_jobs(ledger: JobLedger) -> list[ClaimedJob]:
    """The jobs the worker holds: running, and ended with their outcome not written."""
    for _ in range(10):
        try:
            running = list(ledger.in_flight.values())
            unwritten = [entry[0] for entry in list(ledger.unwritten)]
        except RuntimeError:  # changed while read: read again
            continue
        jobs = {item.job.id: item.job for item in [*running, *unwritten]}
        return list(jobs.values())
    return []


def stop_status(
    step: str, run_thread: threading.Thread | None, services: Sequence[Service], ledger: JobLedger
) -> str:
    """What a stop waits for: its step, where the loop thread is, live services, jobs."""
    parts = [step, thread_location(run_thread)]
    alive = [service.name for service in services if service.thread.is_alive()]
    parts.append(f"services still running: {', '.join(alive) or 'none'}")
    jobs = held_jobs(ledger)
    named = ", ".join(f"{job.id} ({job.task_name})" for job in jobs[:NAMED_JOBS])
    more = f" and {len(jobs) - NAMED_JOBS} more" if len(jobs) > NAMED_JOBS else ""
    parts.append(f"jobs held: {named or 'none'}{more}")
    return "; ".join(parts)


def release_held(
    connect: Callable[[], psycopg.Connection[Any]],
    queries: WorkerPort,
    registration: Registration,
    ledger: JobLedger,
    seconds: float,
) -> str:
    """Release the held jobs (fenced: a lease lost meanwhile is left alone) and
    deregister, on a new connection, within ``seconds``; what was done, in words."""
    jobs = held_jobs(ledger)
    done: dict[str, Any] = {}

    def release() -> None:
        conn = connect()
        try:
            done["released"] = sorted(queries.release_jobs(conn, jobs)) if jobs else []
            worker_id = registration.worker_id
            if worker_id is not None:
                queries.deregister_worker(conn, worker_id)
            done["deregistered"] = True
        except psycopg.Error as error:
            done["error"] = f"{type(error).__name__}: {str(error).strip()[:200]}"
        finally:
            conn.close()

    def guarded() -> None:
        try:
            release()
        except psycopg.Error as error:  # the connection itself failed
            done["error"] = f"{type(error).__name__}: {str(error).strip()[:200]}"

    thread = threading.Thread(target=guarded, name="pgtasks-stop-release", daemon=True)
    thread.start()
    thread.join(seconds)
    if "released" not in done:
        why = done.get("error") or f"no answer within {seconds:g} s"
        return (
            f"could not release its {len(jobs)} job(s) ({why}): they are rescued after the"
            " lease expires"
        )
    released = done["released"]
    deregistered = "deregistered" if "deregistered" in done else "not deregistered"
    return (
        f"released {len(released)} job(s) back to pending (attempt not used up):"
        f" {', '.join(str(job_id) for job_id in released) or 'none'}; {deregistered}"
    )
