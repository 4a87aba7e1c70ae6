"""Kept for ``scripts/dump-schema``: the description now lives in tests.support.snapshot."""

from __future__ import annotations

from tests.support.snapshot import QUERIES, describe_schema

__all__ = ["QUERIES", "describe_schema"]
