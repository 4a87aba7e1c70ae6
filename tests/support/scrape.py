"""Scrapes of a WorkerMetrics' /metrics page, parsed with prometheus_client's parser."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

from pgtasks import WorkerMetrics
from tests.support.waiting import wait_until

#: Every sample of a scrape: (sample name, labels) -> value.
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(metrics: WorkerMetrics) -> Samples:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{metrics.address}/metrics", timeout=5) as page:
        text = page.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def registry_samples(metrics: WorkerMetrics) -> Samples:
    """Every sample of the metrics' registry, read in process (no HTTP server)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(metrics.registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(scraped: Samples, name: str, /, **labels: str) -> float | None:
    """The sample of ``name`` with exactly these labels, or None."""
    return scraped.get((name, frozenset(labels.items())))


def scrape_until(metrics: WorkerMetrics, check: Callable[[Samples], bool], what: str) -> Samples:
    """Scrape until ``check`` holds; returns that scrape."""
    seen: list[Samples] = [{}]

    def matches() -> bool:
        seen[0] = samples(metrics)
        return check(seen[0])

    wait_until(matches, timeout=15, message=what)
    return seen[0]
