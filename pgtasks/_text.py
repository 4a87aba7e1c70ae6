"""Text that pgtasks writes or prints: made storable, capped, and safe for a terminal.

Pure module: no I/O. Task code decides what an exception message or a traceback holds;
none of it may stop a worker, corrupt a terminal or fill the database:

- :func:`storable`: PostgreSQL text holds UTF-8 without NUL; lone surrogates (a file
  name from ``os.listdir`` with undecodable bytes) and NULs become backslash escapes.
- :func:`truncate`: a cap in UTF-8 bytes, with a marker saying how much was cut.
- :func:`printable`: control characters (ANSI escape sequences, carriage returns, bells)
  escaped for text output; JSON output stays exact.
"""

from __future__ import annotations

import re

#: Default cap of a stored error text (last_error): 64 KiB.
DEFAULT_MAX_ERROR_BYTES = 64 * 1024

#: Control characters a terminal acts on (C0 but tab and newline, DEL, C1) and the
#: bidirectional overrides that reorder what is shown.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_OR_NEWLINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def storable(text: str) -> str:
    """``text`` as PostgreSQL can store it: unencodable characters and NUL escaped."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def truncate(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` bytes of UTF-8, with a marker when cut.

    The head and the tail are kept (a traceback's last line names the error).
    """
    if len(text) * 4 <= max_bytes:
        return text
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= max_bytes:
        return text
    marker = f"\n[… {{}} bytes cut by pgtasks (limit {max_bytes} bytes) …]\n"
    budget = max(0, max_bytes - len(marker.format(len(data)).encode()))
    head_bytes = budget // 2
    tail_bytes = budget - head_bytes
    head = data[:head_bytes].decode("utf-8", "ignore")
    tail = data[len(data) - tail_bytes :].decode("utf-8", "ignore") if tail_bytes else ""
    cut = len(data) - len(head.encode()) - len(tail.encode())
    return head + marker.format(cut) + tail


def printable(text: str, *, multiline: bool = False) -> str:
    """``text`` with control characters escaped (``\\x1b``, ``\\r``, ``\\u202e``).

    With ``multiline``, newlines and tabs are kept (an error's traceback); otherwise a
    newline is escaped too, so one field stays on one line.
    """
    pattern = _CONTROL if multiline else _CONTROL_OR_NEWLINE
    text = storable(text)
    if not pattern.search(text):
        return text
    return pattern.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
