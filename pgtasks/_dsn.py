"""DSN text: reading a connection string's fields, hiding its password, naming its server.

Pure module: no I/O, no database driver. Connection strings are parsed as libpq parses
them (``PQconninfoParse``): the URI form ``postgresql://user:password@host:port/db?k=v``
(user, password and parameters percent-decoded) and the ``key=value`` form (values
single-quoted with ``\\'`` and ``\\\\`` escapes, or unquoted up to a space, a backslash
escaping the next character). tests/unit/test_dsn.py checks the fields against libpq's.
"""

from __future__ import annotations

import re
from urllib.parse import quote, quote_plus, unquote

_URI_PREFIXES = ("postgresql://", "postgres://")

_URL_PASSWORD = re.compile(r"(?P<head>postgres(?:ql)?://[^:/@?#]*:)(?P<password>[^@/]*)(?=@)")
#: A key=value password: quoted ('a b', with \' and \\ escapes), or unquoted up to the
#: next space that is not escaped (libpq reads "a\ b" as "a b").
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>\bpassword\s*=\s*)(?P<password>'(?:[^'\\]|\\.)*'?|(?:\\.|[^\s\\])+\\?)"
)


def parse_dsn(dsn: str) -> dict[str, str] | None:
    """The fields a connection string sets (None: libpq would refuse it)."""
    if dsn.startswith(_URI_PREFIXES):
        return _parse_uri(dsn)
    return _parse_keywords(dsn)


def _parse_keywords(text: str) -> dict[str, str] | None:
    fields: dict[str, str] = {}
    position = _skip_spaces(text, 0)
    while position < len(text):
        start = position
        while position < len(text) and text[position] != "=" and not text[position].isspace():
            position += 1
        name = text[start:position]
        position = _skip_spaces(text, position)
        if position == len(text) or text[position] != "=" or not name:
            return None  # a keyword without "="
        value = _keyword_value(text, _skip_spaces(text, position + 1))
        if value is None:
            return None
        fields[name], position = value[0], _skip_spaces(text, value[1])
    return fields


def _skip_spaces(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def _keyword_value(text: str, position: int) -> tuple[str, int] | None:
    """The value at ``position`` and where it ends (None: an unterminated quote)."""
    end = len(text)
    value: list[str] = []
    quoted = position < end and text[position] == "'"
    if quoted:
        position += 1
    while position < end:
        char = text[position]
        if char == "\\":
            # A backslash escapes the next character (a last one is dropped).
            value.append(text[position + 1 : position + 2])
            position += 2
            continue
        if quoted and char == "'":
            return "".join(value), position + 1
        if not quoted and char.isspace():
            break
        value.append(char)
        position += 1
    return None if quoted else ("".join(value), position)


def _parse_uri(uri: str) -> dict[str, str] | None:
    rest = uri.split("://", 1)[1]
    fields: dict[str, str] = {}
    # As libpq: the credentials end at the first "@" before any "/" (a "?" or "#" in a
    # password is part of it).
    at = _first_of(rest, "@/")
    if at < len(rest) and rest[at] == "@":
        credentials, rest = rest[:at], rest[at + 1 :]
        user, colon, password = credentials.partition(":")
        if user:
            fields["user"] = unquote(user)
        if colon and password:
            fields["password"] = unquote(password)
    rest, _, query = rest.partition("?")
    netloc, slash, database = rest.partition("/")
    hosts, ports = [], []
    for part in netloc.split(",") if netloc else []:
        if part.startswith("["):
            host, bracket, tail = part[1:].partition("]")
            if not bracket:
                return None
            port = tail[1:] if tail.startswith(":") else ""
        else:
            host, _, port = part.partition(":")
        hosts.append(unquote(host))
        ports.append(port)
    if any(hosts):
        fields["host"] = ",".join(hosts)
    if any(ports) or len(ports) > 1:
        fields["port"] = ",".join(ports)
    if slash and database:
        fields["dbname"] = unquote(database)
    for parameter in query.split("&") if query else []:
        name, equals, value = parameter.partition("=")
        if not equals:
            return None
        fields[unquote(name)] = unquote(value)
    return fields


def _first_of(text: str, characters: str) -> int:
    """The index of the first of ``characters`` in ``text`` (its length: none)."""
    return next((index for index, char in enumerate(text) if char in characters), len(text))


def dsn_password(dsn: str) -> str | None:
    """The password a connection string holds (None: none, or not a connection string)."""
    fields = parse_dsn(dsn)
    password = fields.get("password") if fields is not None else None
    return password or None


def dsn_secrets(dsn: str) -> tuple[str, ...]:
    """The forms of ``dsn``'s password that a text may hold: as is and URL-encoded."""
    password = dsn_password(dsn)
    if not password:
        return ()
    forms = {password, quote(password, safe=""), quote_plus(password, safe="")}
    # Longest first: a form that contains another is replaced whole.
    return tuple(sorted(forms, key=len, reverse=True))


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Hide passwords in a DSN (URL or key=value form) or in any text that may hold one."""
    text = _URL_PASSWORD.sub(lambda match: match["head"] + "***", text)
    text = _KEYWORD_PASSWORD.sub(lambda match: match["head"] + "***", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def redact_for(dsn: str, text: str) -> str:
    """``text`` (an error about ``dsn``, say) without ``dsn``'s password, on one line."""
    return " ".join(redact(text, dsn_secrets(dsn)).split())


def describe_dsn(dsn: str) -> str:
    """``host:port/dbname`` for logs; never the password."""
    params = parse_dsn(dsn)
    if params is None:
        return redact(dsn)
    host = params.get("host") or params.get("hostaddr") or "localhost"
    if host.startswith("/"):
        host = f"socket {host}"
    port = params.get("port")
    database = params.get("dbname") or params.get("user") or "postgres"
    return f"{host}{':' + port if port else ''}/{database}"
