"""Small app modules that tests load the way users do (``-A tests.apps.basic:app``)."""

from __future__ import annotations
