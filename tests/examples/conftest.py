"""The examples' environment: the test server, a schema of their own (dropped after)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.environment import pgtasks_env
from tests.support.schemas import drop_schema, new_schema_name


@pytest.fixture
def example_env(dsn: str) -> Iterator[dict[str, str]]:
    schema = new_schema_name()
    yield pgtasks_env(dsn, schema, schema_variable="PGTASKS_SCHEMA")
    drop_schema(dsn, schema)
