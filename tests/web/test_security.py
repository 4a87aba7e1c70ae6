"""The dashboard probed as an attacker would, through httpx's ASGI transport on a real
PostgreSQL: DNS rebinding (Host), requests forwarded by a proxy, the headers of refusals,
the limit on failed logins, redirects that never name the Host, and hostile filters.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from pgtasks import App
from pgtasks.web import asgi, basic_auth
from pgtasks.web.gate import SECURITY_HEADERS
from pgtasks.web.security import FailedLogins, host_matches, host_name
from tests.support.web import REMOTE, Client


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"authorization": f"Basic {token}"}


def assert_security_headers(response: object) -> None:
    headers = response.headers  # type: ignore[attr-defined]
    for name, value in SECURITY_HEADERS.items():
        assert headers.get(name) == value, (name, headers)


# -- DNS rebinding: the Host header ---------------------------------------------------------------
@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:8080", "127.0.0.1.nip.io", "localhost.evil.example", "10.0.0.5"],
)
def test_without_auth_a_request_for_another_host_is_refused(
    make_client: Callable[..., Client], host: str
) -> None:
    """A page of evil.example whose name now resolves to 127.0.0.1 (DNS rebinding) sends
    ``Host: evil.example`` from a loopback client: it reads nothing and changes nothing."""
    web = make_client()
    for method, path in (
        ("GET", "/"),
        ("GET", "/jobs"),
        ("GET", "/events"),
        ("POST", "/jobs/1/retry"),
    ):
        response = web.request(method, path, headers={"host": host})
        assert response.status_code == 421, (path, response.text)
        assert "DNS rebinding" in response.text
        assert "allowed_hosts" in response.text
        assert web.state.csrf not in response.text
        assert_security_headers(response)


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8080", "127.0.0.1:8080", "127.9.9.9", "[::1]:8080", "[::1]"]
)
def test_without_auth_loopback_host_names_are_served(
    make_client: Callable[..., Client], host: str
) -> None:
    assert make_client().get("/", headers={"host": host}).status_code == 200


def test_a_missing_or_malformed_host_is_a_400(make_client: Callable[..., Client]) -> None:
    web = make_client()
    for host in ("", "a b", "local/host", "[::1", "[::zz]:80", "localhost:http"):
        response = web.get("/", headers={"host": host})
        assert response.status_code == 400, (host, response.text)
        assert_security_headers(response)


def test_allowed_hosts_extend_the_names_served_without_auth(
    make_client: Callable[..., Client],
) -> None:
    web = make_client(allowed_hosts=["tasks.internal", ".corp.example"])
    assert web.get("/", headers={"host": "tasks.internal"}).status_code == 200
    assert web.get("/", headers={"host": "ops.corp.example:8443"}).status_code == 200
    assert web.get("/", headers={"host": "corp.example"}).status_code == 200
    assert web.get("/", headers={"host": "evilcorp.example"}).status_code == 421
    assert web.get("/", headers={"host": "localhost"}).status_code == 200


def test_with_auth_allowed_hosts_are_the_only_names_served(
    make_client: Callable[..., Client],
) -> None:
    auth = basic_auth("ops", "pw")
    anywhere = make_client(client=REMOTE, auth=auth)
    assert anywhere.get("/", headers={**basic("ops", "pw"), "host": "x.example"}).status_code == 200
    pinned = make_client(client=REMOTE, auth=auth, allowed_hosts=["tasks.example.com"])
    ok = pinned.get("/", headers={**basic("ops", "pw"), "host": "tasks.example.com"})
    assert ok.status_code == 200
    refused = pinned.get("/", headers={**basic("ops", "pw"), "host": "localhost"})
    assert refused.status_code == 421
    assert_security_headers(refused)


def test_host_names_are_parsed_strictly() -> None:
    assert host_name("LocalHost:8080") == "localhost"
    assert host_name("[::1]:80") == "[::1]"
    assert host_name("example.com.") == "example.com"
    for bad in (None, "", "a b", "x:y", "[::1]x", "ex\u00e4mple.com", "a/b", "a@b"):
        assert host_name(bad) is None, bad
    assert host_matches("a.b.example", [".example"])
    assert not host_matches("bexample", [".example"])
    assert host_matches("anything", ["*"])


# -- reverse proxies ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "header",
    [
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=203.0.113.9;proto=https"),
        ("x-real-ip", "203.0.113.9"),
        ("x-forwarded-host", "tasks.example.com"),
        ("x-forwarded-proto", "https"),
    ],
)
def test_without_auth_a_forwarded_request_is_refused_with_how_to_put_auth_in_front(
    make_client: Callable[..., Client], header: tuple[str, str]
) -> None:
    """A proxy on the same host makes every client loopback: forwarded requests are
    refused unless authentication is configured (or declared to be in the proxy)."""
    response = make_client().get("/", headers=dict([header]))
    assert response.status_code == 403
    assert header[0] in response.text
    assert "PGTASKS_WEB_USER" in response.text and "insecure_no_auth" in response.text
    assert_security_headers(response)
    # With authentication configured the proxy may forward (the credentials decide).
    auth = make_client(auth=basic_auth("ops", "pw"))
    assert auth.get("/", headers={**dict([header]), **basic("ops", "pw")}).status_code == 200
    # Authentication in the proxy, declared: served.
    assert make_client(insecure_no_auth=True).get("/", headers=dict([header])).status_code == 200


# -- authentication -------------------------------------------------------------------------------
def test_refusals_carry_the_security_headers(make_client: Callable[..., Client]) -> None:
    web = make_client(client=REMOTE, auth=basic_auth("ops", "pw"))
    response = web.get("/")
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Basic")
    assert_security_headers(response)
    no_auth = make_client(client=REMOTE).get("/")
    assert no_auth.status_code == 401
    assert_security_headers(no_auth)
    assert_security_headers(make_client().get("/nowhere"))


def test_failed_logins_are_limited_per_client(make_client: Callable[..., Client]) -> None:
    web = make_client(client=REMOTE, auth=basic_auth("ops", "s3cret"), login_attempts=5)
    # Requests without credentials (a browser's first try) are not attempts.
    for _ in range(8):
        assert web.get("/").status_code == 401
    for attempt in range(5):
        assert web.get("/", headers=basic("ops", f"guess{attempt}")).status_code == 401
    blocked = web.get("/", headers=basic("ops", "s3cret"))  # even the right password waits
    assert blocked.status_code == 429
    assert int(blocked.headers["retry-after"]) >= 1
    assert "too many failed logins" in blocked.text
    assert_security_headers(blocked)
    # Another client is not affected.
    other = Client(web.dashboard, ("198.51.100.4", 5000))
    assert other.get("/", headers=basic("ops", "s3cret")).status_code == 200


def test_the_failed_login_window_slides_and_memory_is_bounded() -> None:
    logins = FailedLogins(limit=3, window=60.0, max_clients=2)
    for second in range(3):
        logins.failed("a", now=100.0 + second)
    assert logins.retry_after("a", now=103.0) == pytest.approx(57.0)
    assert logins.retry_after("a", now=160.5) is None  # the first failure left the window
    logins.failed("b", now=200.0)
    logins.failed("c", now=200.0)
    assert len(logins._failures) == 2  # "a" was forgotten first


# -- redirects ------------------------------------------------------------------------------------
def test_redirects_never_name_the_host(make_client: Callable[..., Client], app: App) -> None:
    web = make_client(allowed_hosts=["*"])
    for path in ("/jobs/", "/workers/", "/schedules/", "/jobs/?status=failed"):
        response = web.get(path, headers={"host": "attacker.example"})
        assert response.status_code == 308, path
        location = response.headers["location"]
        assert location.startswith("/") and not location.startswith("//"), location
        assert "attacker" not in location
    assert web.get("/jobs/?status=failed").headers["location"] == "/jobs?status=failed"
    for path in ("//evil.example/", "/\\evil.example/", "/nowhere/"):
        response = web.get(f"http://localhost:8080{path}")
        assert response.status_code == 404, path
        assert "location" not in response.headers
    # Mounted: the redirect stays under the mount point.
    outer = Client(Starlette(routes=[Mount("/ops", app=asgi(app))]))
    assert outer.get("/ops/jobs/").headers["location"] == "/ops/jobs"


def test_an_action_redirects_to_a_path_not_the_host(
    make_client: Callable[..., Client],
) -> None:
    web = make_client(allowed_hosts=["*"])
    response = web.post(
        "/queues/pause",
        {"queue": "q"},
        headers={"host": "attacker.example"},
        origin="http://attacker.example",
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/?done=paused"


# -- hostile filters ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("query", "says"),
    [
        ('args=["\\ud800"]', "jsonb cannot store"),
        ('args={"\\udfff": 1}', "jsonb cannot store"),
        ("args=" + "[" * 2000, "args"),
        ("queue=%ED%A0%80", None),  # UTF-8 of a surrogate: decoded as U+FFFD, a queue name
        ("task=a%00b", "NUL"),
        ("due=maybe", "due"),
        ("before=%D9%A3", "before"),  # an Arabic-Indic digit: not an id
        ("status=running&from=10000-01-01", "date and time"),
    ],
)
def test_hostile_filters_are_a_400_never_a_500(web: Client, query: str, says: str | None) -> None:
    # A stream of a valid filter would not end: the event streams are tried with bad ones.
    paths = ("/jobs", "/jobs/counts") if says is None else ("/jobs", "/events/jobs")
    if says is not None and not query.startswith("before"):
        paths += ("/jobs/counts",)
    for path in paths:
        response = web.get(f"{path}?{query}")
        if says is None:
            assert response.status_code == 200, (path, response.text)
            continue
        assert response.status_code == 400, (path, query, response.text)
        assert says in response.text
        assert "Traceback" not in response.text


def test_hostile_posts_are_a_4xx(web: Client) -> None:
    assert web.post("/jobs/bulk/cancel", {"args": '["\\ud800"]'}).status_code == 400
    assert web.post("/jobs/selected", {"action": "retry", "id": "12x"}).status_code == 400
    assert web.post("/jobs/selected", {"action": "drop", "id": "1"}).status_code == 400
    assert web.post("/jobs/selected", {"action": "retry"}).status_code == 400
    many = [str(number) for number in range(1, 600)]
    response = web.request(
        "POST",
        "/jobs/selected",
        data={"csrf": web.state.csrf, "action": "retry", "id": many},
        headers={"origin": "http://localhost:8080"},
    )
    assert response.status_code == 400
    assert "at most 500" in response.text
