"""Who may use the dashboard, and which POSTs are genuine.

- Host: without authentication only requests for a loopback name (``localhost``,
  127.0.0.1, [::1]) or an ``allowed_hosts`` entry are served, so a page of another site
  cannot reach the dashboard through DNS rebinding; with authentication, ``allowed_hosts``
  (when given) is enforced the same way.
- Authentication: HTTP basic auth checked by an ``auth(user, password) -> bool`` callable
  (``basic_auth`` builds one comparing with ``hmac.compare_digest``), with a per-client
  limit on failed attempts (:class:`FailedLogins`). Without one, only loopback clients
  are served, and never a request that a proxy forwarded (a proxy on the same host makes
  every client look local), unless ``insecure_no_auth`` is set.
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
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
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


#: Headers a reverse proxy adds: a request carrying one came through a proxy, so its
#: client address (the proxy's) says nothing about who sent it.
FORWARDING_HEADERS = (
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
    "x-client-ip",
    "true-client-ip",
    "cf-connecting-ip",
)


def forwarding_header(headers: Mapping[str, str]) -> str | None:
    """The first forwarding header present (None: the request came straight here)."""
    for name in FORWARDING_HEADERS:
        if name in headers:
            return name
    return None


def host_name(header: str | None) -> str | None:
    """The host name of a Host header, lower-cased and without its port ("[::1]" for an
    IPv6 address); None when absent or malformed."""
    if not header or len(header) > 255 or not header.isascii():
        return None
    text = header.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        name, rest = text[: end + 1], text[end + 1 :]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        try:
            ipaddress.IPv6Address(name[1:-1])
        except ValueError:
            return None
        return name
    name, separator, port = text.partition(":")
    if separator and not port.isdigit():
        return None
    if not name or not all(char.isalnum() or char in ".-_" for char in name):
        return None
    return name.rstrip(".") or None


def host_matches(name: str, allowed: Iterable[str]) -> bool:
    """Does host ``name`` match an allowed entry: an exact name, ``.example.com`` (the
    domain and its subdomains) or ``*`` (any)?"""
    for entry in allowed:
        entry = entry.strip().lower().rstrip(".")
        if entry == "*" or entry == name:
            return True
        if entry.startswith(".") and (name == entry[1:] or name.endswith(entry)):
            return True
    return False


def is_loopback_host(name: str) -> bool:
    """A Host name that can only mean this machine: ``localhost`` or a loopback address
    (never another name, whatever a resolver says of it)."""
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return is_loopback(str(address))


class FailedLogins:
    """Failed basic-auth attempts per client: after ``limit`` within ``window`` seconds,
    the client is refused (429) until the oldest of them is ``window`` old.

    Bounded: at most ``max_clients`` clients are remembered (the least recent forgotten).
    Runs on the event loop's thread only (no lock).
    """

    def __init__(self, limit: int = 10, window: float = 60.0, max_clients: int = 10_000):
        self.limit = limit
        self.window = window
        self.max_clients = max_clients
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, client: str, now: float) -> deque[float] | None:
        failures = self._failures.get(client)
        if failures is None:
            return None
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        if not failures:
            del self._failures[client]
            return None
        return failures

    def retry_after(self, client: str, now: float | None = None) -> float | None:
        """Seconds until ``client`` may try again (None: it may now)."""
        now = time.monotonic() if now is None else now
        failures = self._recent(client, now)
        if failures is None or len(failures) < self.limit:
            return None
        return max(1.0, failures[0] + self.window - now)

    def failed(self, client: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        failures = self._recent(client, now) or deque(maxlen=self.limit)
        failures.append(now)
        self._failures[client] = failures
        self._failures.move_to_end(client)
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)


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
