"""The oldest server the migrations run on: a clear error before anything changes."""

from __future__ import annotations

import psycopg
import pytest

import pgtasks
from pgtasks._store.migrator import MINIMUM_SERVER_VERSION, check_server_version


@pytest.mark.parametrize("version", [140000, 140015, 150018, 180001])
def test_a_server_of_14_or_later_passes(version: int) -> None:
    check_server_version(version)


@pytest.mark.parametrize(
    ("version", "shown"), [(130012, "13.12"), (120000, "12.0"), (90624, "9.6")]
)
def test_an_older_server_gets_an_error_naming_its_version_and_the_minimum(
    version: int, shown: str
) -> None:
    with pytest.raises(pgtasks.ServerVersionError) as raised:
        check_server_version(version)
    message = str(raised.value)
    assert f"PostgreSQL {shown}" in message
    assert "PostgreSQL 14 or later" in message
    assert "nothing was migrated" in message
    assert isinstance(raised.value, pgtasks.DatabaseError)


def test_the_test_server_is_supported(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        assert conn.info.server_version >= MINIMUM_SERVER_VERSION
