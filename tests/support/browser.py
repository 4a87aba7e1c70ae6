"""Playwright driving Debian's chromium (never a browser Playwright downloads): the
``browser`` and ``page`` fixtures of browser tests, and the mark that skips them, saying
why, when chromium is not installed."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason="chromium is not installed (apt-get install -y chromium): browser tests skipped",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    from playwright.sync_api import expect

    # Live pages render at least every 5 s without a notification: wait past that.
    expect.set_options(timeout=15_000)
    context = browser.new_context(viewport={"width": 1100, "height": 720})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    try:
        yield opened
    finally:
        context.close()
