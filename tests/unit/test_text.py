"""pgtasks._text and the name and secret helpers: storable, capped, printable text."""

from __future__ import annotations

import pytest

from pgtasks._dsn import dsn_secrets, redact
from pgtasks._payload import check_name
from pgtasks._text import printable, storable, truncate


def test_storable_escapes_lone_surrogates_and_nul_and_keeps_the_rest() -> None:
    assert storable("caf\udce9 \x00 é ✓") == "caf\\udce9 \\x00 é ✓"
    assert storable("plain") == "plain"
    storable("x\ud800y").encode("utf-8")


def test_truncate_keeps_head_and_tail_within_the_byte_limit() -> None:
    text = "Traceback\n" + "é" * 50_000 + "\nValueError: the end"
    cut = truncate(text, 4096)
    assert len(cut.encode()) <= 4096
    assert cut.startswith("Traceback") and cut.endswith("ValueError: the end")
    assert "bytes cut by pgtasks (limit 4096 bytes)" in cut
    assert truncate("short", 4096) == "short"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\x1b[2Jb", "a\\x1b[2Jb"),
        ("line\rover", "line\\x0dover"),
        ("bell\x07", "bell\\x07"),
        ("rtl\u202eevil", "rtl\\u202eevil"),
        ("c1\x9bx", "c1\\x9bx"),
        ("two\nlines", "two\\x0alines"),
    ],
)
def test_printable_escapes_what_a_terminal_acts_on(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_printable_multiline_keeps_newlines_and_tabs() -> None:
    assert printable("a\n\tb\x1b", multiline=True) == "a\n\tb\\x1b"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "non-empty"),
        (" ", "non-empty"),
        (5, "non-empty"),
        ("a\x00", "NUL"),
        ("a\udce9", "lone surrogate"),
        ("é" * 101, "202 bytes long"),
    ],
)
def test_check_name_rejects_what_postgresql_cannot_store_or_index(
    value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_name("queue", value)
    assert check_name("queue", "é" * 100) == "é" * 100


@pytest.mark.parametrize(
    "dsn",
    [
        "host=h password='S3 cr/t!' user=u",
        "host=h password = 'S3 cr/t!' user=u",
        "host=h password=S3\\ cr/t! user=u",
        "postgresql://u:S3%20cr%2Ft%21@h/db",
    ],
)
def test_redact_hides_a_password_whole_in_every_dsn_form(dsn: str) -> None:
    shown = redact(dsn, dsn_secrets(dsn))
    assert "***" in shown
    for part in ("S3", "cr/t", "cr%2F", "t!"):
        assert part not in shown, shown


def test_dsn_secrets_covers_the_url_encoded_forms() -> None:
    secrets = dsn_secrets("host=h password='S3 cr/t!'")
    text = "raw S3 cr/t! url S3%20cr%2Ft%21 plus S3+cr%2Ft%21"
    assert redact(text, secrets) == "raw *** url *** plus ***"
    assert dsn_secrets("host=h") == ()
