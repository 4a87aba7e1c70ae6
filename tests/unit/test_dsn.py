"""pgtasks._dsn reads connection strings as libpq does (compared with psycopg's conninfo)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import conninfo

from pgtasks._dsn import describe_dsn, dsn_password, dsn_secrets, parse_dsn, redact_for

DSNS = [
    "",
    "host=db user=u password=S3cr3t! dbname=app",
    "host=db password = S3cr3t! dbname=app",
    "host=db password='S3 cr3t!' dbname=app",
    r"host=db password='it\'s \\ here' dbname=app",
    r"host=db password=a\ b\\c port=5433",
    "  host=db\tport=5432\n dbname=app  ",
    "password=",
    "host=db password=ab\\",
    "postgresql://user:S3cr3t!@db.example.com:5432/app",
    "postgres://user:S3cr3t!@db/app?sslmode=require",
    "postgresql://:S3cr3t!@db/app",
    "postgresql://user@db.example.com:5432/app",
    "postgresql://db/app?password=S3cr3t!&application_name=x",
    "postgresql://u:p%40ss%3Aw%2Fo%20rd@db/app",
    "postgresql://u:S3c?r3t!@db/app",
    "postgresql://u:S3c#r3t!@db/app",
    "postgresql://u:pw@/app?host=/run/pg",
    "postgresql://u:pw@[::1]:5433/app",
    "postgresql://u:pw@h1:5432,h2:5433/app",
    "postgresql://u:pw@h1,h2/app",
    "postgresql://",
    "postgresql:///app",
    "postgresql://u:a:b@db/app",
]


@pytest.mark.parametrize("dsn", DSNS)
def test_fields_are_libpqs(dsn: str) -> None:
    expected = {name: str(value) for name, value in conninfo.conninfo_to_dict(dsn).items()}

    assert parse_dsn(dsn) == expected


@pytest.mark.parametrize(
    "dsn", ["host", "host=db port", "password='unterminated", "postgresql://db/app?flag"]
)
def test_what_libpq_refuses_is_none(dsn: str) -> None:
    with pytest.raises(psycopg.ProgrammingError):
        conninfo.conninfo_to_dict(dsn)

    assert parse_dsn(dsn) is None


def test_the_secrets_are_the_password_and_its_url_encodings() -> None:
    dsn = "postgresql://u:p%40ss%20w@db/app"

    assert dsn_password(dsn) == "p@ss w"
    assert dsn_secrets(dsn) == ("p%40ss%20w", "p%40ss+w", "p@ss w")
    assert dsn_secrets("host=db") == ()


def test_an_error_text_loses_the_password_and_its_line_breaks() -> None:
    dsn = "host=db password='p@ss w'"

    assert redact_for(dsn, "failed:\n  auth for p@ss w\n") == "failed: auth for ***"


def test_a_description_names_every_host() -> None:
    assert describe_dsn("postgresql://u:pw@h1:5432,h2:5433/app") == "h1,h2:5432,5433/app"
