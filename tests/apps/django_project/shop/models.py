from __future__ import annotations

from django.db import models


class Order(models.Model):
    reference = models.TextField()
    status = models.TextField(default="new")
