"""A pgtasks task of the project's own (not a Django task), on the project's App."""

from __future__ import annotations

from pgtasks.contrib.django import get_app

from .models import Order

app = get_app()


@app.task(name="shop.count_orders")
def count_orders() -> int:
    return Order.objects.count()
