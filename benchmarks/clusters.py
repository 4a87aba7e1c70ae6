"""PostgreSQL 15 clusters of a benchmark or a test (scripts/ci-postgres15.sh): started on a
loopback address and port of their own, crashed (``pg_ctl stop -m immediate``), restarted,
stopped; a streaming replica of one, promoted (a failover by hand). Skipped (tests) when
Debian's PostgreSQL 15 is not installed."""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ci-postgres15.sh"
PG15_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))


def pg15_available() -> bool:
    return (PG15_BIN / "initdb").exists() and (PG15_BIN / "pg_ctl").exists()


class Cluster:
    """One cluster: its ``dsn`` and the state file the script keeps."""

    def __init__(self, state: Path, host: str, first_port: int) -> None:
        self.state = state
        self.host = host
        self.first_port = first_port
        self.dsn = ""

    def _script(self, *arguments: str) -> str:
        env = dict(os.environ)
        env.update(
            PG_BIN=str(PG15_BIN),
            PGTASKS_CI_PG_HOST=self.host,
            PGTASKS_CI_PG_PORT=str(self.first_port),
        )
        result = subprocess.run(
            [str(SCRIPT), *arguments],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"ci-postgres15.sh {' '.join(arguments)}: {result.stderr.strip()}")
        return result.stdout

    def start(self) -> Cluster:
        lines = self._script("start", str(self.state)).strip().splitlines()
        self.dsn = lines[-1].removeprefix("DSN=")
        return self

    def start_replica(self, state: Path) -> Cluster:
        """A streaming replica of this cluster (pg_basebackup -R, hot standby) on the next
        free port, once it streams."""
        replica = Cluster(state, "127.0.0.1", self.first_port + 1)
        lines = self._script("start-replica", str(self.state), str(state)).strip().splitlines()
        replica.dsn = lines[-1].removeprefix("DSN=")
        return replica

    def promote(self) -> None:
        """``pg_ctl promote -w`` (a replica): it leaves recovery and accepts writes."""
        self._script("promote", str(self.state))

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: sessions cut, no shutdown checkpoint."""
        self._script("crash", str(self.state))

    def restart(self) -> None:
        self._script("restart", str(self.state))

    def pid(self) -> int:
        return int(self._script("pid", str(self.state)).strip())

    def data_dir(self) -> Path:
        return Path(self.state.read_text().strip())

    def stop(self) -> None:
        if self.state.exists():
            self._script("stop", str(self.state))


def start_clusters(directory: Path, hosts: list[str], first_port: int) -> list[Cluster]:
    """One cluster per address (127.0.0.2, 127.0.0.3 …), ports from ``first_port`` on: the
    first alone (it may create the servers' OS user), the others side by side."""
    directory.mkdir(parents=True, exist_ok=True)
    clusters = [
        Cluster(directory / f"cluster-{index}.state", host, first_port + 10 * index)
        for index, host in enumerate(hosts)
    ]
    try:
        clusters[0].start()
        with ThreadPoolExecutor(max(1, len(clusters) - 1)) as pool:
            for started in [pool.submit(cluster.start) for cluster in clusters[1:]]:
                started.result()
    except BaseException:
        stop_clusters(clusters)
        raise
    return clusters


def stop_clusters(clusters: list[Cluster]) -> None:
    """Stop every cluster that was started, side by side."""
    with ThreadPoolExecutor(max(1, len(clusters))) as pool:
        for stopped in [pool.submit(cluster.stop) for cluster in clusters]:
            stopped.result()
