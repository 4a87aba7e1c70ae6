"""One Procrastinate worker process for the benchmarks (run by `procrastinate_bench`).

    python -m benchmarks.peers.procrastinate_worker --dsn DSN --concurrency N

``App.run_worker(concurrency=N)``: Procrastinate's own event loop and signal handlers
(SIGINT/SIGTERM stop it gracefully), one no-op ``async def`` task that logs each execution.
"""

from __future__ import annotations

import argparse
import logging

from benchmarks.peers._common import Recorder
from benchmarks.peers.procrastinate_bench import make_app


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.procrastinate_worker")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    recorder = Recorder(args.dsn)
    app = make_app(args.dsn, recorder=recorder, pool_size=args.concurrency + 1)
    try:
        app.run_worker(concurrency=args.concurrency, listen_notify=True)
    finally:
        recorder.close()


if __name__ == "__main__":
    main()
