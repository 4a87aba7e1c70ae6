"""A sampler of the running counts of limited jobs, read in the database all along."""

from __future__ import annotations

import collections
import threading

import psycopg
from psycopg import sql


class Sampler(threading.Thread):
    """Reads the running limited jobs per task, key and queue until stopped; keeps maxima."""

    def __init__(self, dsn: str, schema: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.schema = dsn, schema
        self.maxima: collections.Counter[tuple[str, str]] = collections.Counter()
        self.samples = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        query = sql.SQL(
            "SELECT task_name, queue, limit_key FROM {}.jobs"
            " WHERE status = 'running' AND limit_groups IS NOT NULL"
        ).format(sql.Identifier(self.schema))
        try:
            self._sample(query)
        except psycopg.OperationalError:
            return  # the database went away (the test ended): stop sampling

    def _sample(self, query: sql.Composed) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopping.wait(0.01):
                counts: collections.Counter[tuple[str, str]] = collections.Counter()
                for task_name, queue, key in conn.execute(query):
                    counts[("task", task_name)] += 1
                    counts[("queue", queue)] += 1
                    if key is not None:
                        counts[("key", f"{task_name}/{key}")] += 1
                for group, count in counts.items():
                    self.maxima[group] = max(self.maxima[group], count)
                self.samples += 1
