from __future__ import annotations

from django.db import models


class Signup(models.Model):
    email = models.EmailField()
    welcomed = models.BooleanField(default=False)
