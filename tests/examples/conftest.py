"""The examples' environment: the test server, a schema of the test's own (dropped after)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.environment import pgtasks_env
from tests.support.schemas import drop_schema, new_schema_name


@pytest.fixture
def example_env(dsn: str) -> Iterator[dict[str, str]]:
    schema = new_schema_name()
    # The examples keep their tables in a schema of their own, which this variable moves;
    # a user's PGTASKS_SCHEMA never reaches them.
    yield pgtasks_env(dsn, schema, schema_variable="PGTASKS_EXAMPLE_SCHEMA")
    drop_schema(dsn, schema)
