"""Tests of a user's test suite that uses pgtasks.testing (copied as test_shop.py)."""

from __future__ import annotations

from pgtasks import App
from pgtasks.testing import run_until_empty
from tests.apps.user_app import place_order, send_receipt


def test_placing_an_order_sends_its_receipt(shop_app: App) -> None:
    order = place_order.delay(7, ["book", "pen"])

    summary = run_until_empty(shop_app, timeout=20)

    assert summary.succeeded == 2
    assert order.fetch().result == 2


def test_each_test_starts_with_empty_queues(shop_app: App) -> None:
    summary = run_until_empty(shop_app, timeout=20)

    assert summary.started == 0


def test_the_app_uses_the_test_schema(shop_app: App, pgtasks_schema: str) -> None:
    assert shop_app.schema == pgtasks_schema
    assert send_receipt.delay(1).fetch().status == "pending"
