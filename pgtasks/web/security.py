"""Who may use the dashboard, and which POSTs are genuine.

- Authentication: HTTP basic auth checked by an ``auth(user, password) -> bool`` callable
  (``basic_auth`` builds one comparing with ``hmac.compare_digest``). Without one, only
  loopback clients are served (401 otherwise) unless ``insecure_no_auth`` is set.
- CSRF: a POST must come from the dashboard's own origin (Origin, else Referer, names the
  request's Host) and carry the form token (an HMAC of the dashboard's secret).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.requests import Request

#: ``auth(user, password) -> bool``: may this user in?
AuthCallable = Callable[[str, str], bool]

USER_ENV = "PGTASKS_WEB_USER"
PASSWORD_ENV = "PGTASKS_WEB_PASSWORD"  # noqa: S105 (the variable's name, not a password)
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


def basic_auth(user: str, password: str) -> AuthCallable:
    """An ``auth=`` callable accepting exactly this user and password (constant time)."""
    if not user or not password:
        raise ValueError("basic_auth needs a non-empty user and password")
    expected_user, expected_password = user.encode(), password.encode()

    def check(given_user: str, given_password: str) -> bool:
        # Both comparisons always run: the time taken tells nothing about which failed.
        user_ok = hmac.compare_digest(given_user.encode(), expected_user)
        password_ok = hmac.compare_digest(given_password.encode(), expected_password)
        return user_ok and password_ok

    return check


def auth_from_env(environ: dict[str, str] | None = None) -> AuthCallable | None:
    """Basic auth from PGTASKS_WEB_USER / PGTASKS_WEB_PASSWORD (None when neither is set;
    ValueError when only one is).
    """
    env = os.environ if environ is None else environ
    user, password = env.get(USER_ENV, ""), env.get(PASSWORD_ENV, "")
    if not user and not password:
        return None
    if not user or not password:
        raise ValueError(f"set both {USER_ENV} and {PASSWORD_ENV}, or neither")
    return basic_auth(user, password)


def is_loopback(host: str | None) -> bool:
    """True for a loopback address or name (127.0.0.0/8, ::1, localhost)."""
    if not host:
        return False
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # ::ffff:127.0.0.1
    return address.is_loopback


def credentials(request: Request) -> tuple[str, str] | None:
    """The (user, password) of a basic Authorization header; None when absent or malformed."""
    header = request.headers.get("authorization", "")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic" or not encoded:
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, separator, password = decoded.partition(":")
    return (user, password) if separator else None


def csrf_token(secret: bytes) -> str:
    return hmac.new(secret, b"pgtasks web: csrf", hashlib.sha256).hexdigest()


def same_origin(request: Request) -> bool:
    """Does the Origin (or, without one, the Referer) name this request's own host?"""
    host = request.headers.get("host")
    source = request.headers.get("origin") or request.headers.get("referer")
    if not host or not source or source == "null":
        return False
    return urlsplit(source).netloc.lower() == host.lower()


def csrf_problem(request: Request, form: dict[str, str], secret: bytes) -> str | None:
    """Why this POST is refused (None: it is genuine)."""
    if not same_origin(request):
        return "cross-origin request refused (Origin or Referer must name this dashboard)"
    token = form.get("csrf", "")
    if not hmac.compare_digest(token.encode(), csrf_token(secret).encode()):
        return "missing or invalid CSRF token: reload the page and try again"
    return None
