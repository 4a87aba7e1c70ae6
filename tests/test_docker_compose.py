"""Static checks of docker-compose.yml and Dockerfile (Docker itself is not needed)."""

from __future__ import annotations

import ast
import shlex
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from tests.support.environment import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
APP_SPEC = "examples.app:app"
APP_SERVICES = ("migrate", "worker", "beat")


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(compose, dict)
    result = compose["services"]
    assert isinstance(result, dict)
    return result


@pytest.fixture(scope="module")
def volumes() -> dict[str, Any]:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    return compose.get("volumes") or {}


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict, whether written as a mapping or as a list."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def command(service: dict[str, Any]) -> list[str]:
    cmd = service["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else [str(part) for part in cmd]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    result = []
    for line in lines:
        instruction, _, args = line.partition(" ")
        result.append((instruction.upper(), args.strip()))
    return result


def _installs_local_package(run_args: str) -> bool:
    words = run_args.replace("&&", " ").split()
    return "pip" in words and "install" in words and "." in words


def test_compose_defines_postgres_migrate_worker_and_beat(
    services: dict[str, dict[str, Any]],
) -> None:
    assert {"postgres", *APP_SERVICES} <= set(services)


def test_postgres_runs_postgres_16_on_a_named_volume(
    services: dict[str, dict[str, Any]], volumes: dict[str, Any]
) -> None:
    postgres = services["postgres"]
    assert postgres["image"] == "postgres:16"
    env = environment(postgres)
    assert env.get("POSTGRES_USER")
    assert env.get("POSTGRES_PASSWORD")
    assert env.get("POSTGRES_DB")
    mounts = [str(v).split(":") for v in postgres["volumes"]]
    named = [m for m in mounts if m[0] in volumes and m[1] == "/var/lib/postgresql/data"]
    assert named, f"no named volume on the data directory in {postgres['volumes']}"


def test_postgres_health_is_checked_with_pg_isready(services: dict[str, dict[str, Any]]) -> None:
    healthcheck = services["postgres"]["healthcheck"]
    test = healthcheck["test"]
    text = test if isinstance(test, str) else " ".join(test)
    assert "pg_isready" in text
    user = environment(services["postgres"])["POSTGRES_USER"]
    assert f"-U {user}" in text


@pytest.mark.parametrize(
    ("service", "verb"), [("migrate", "migrate"), ("worker", "worker"), ("beat", "beat")]
)
def test_each_app_service_runs_its_pgtasks_command_on_the_example_app(
    services: dict[str, dict[str, Any]], service: str, verb: str
) -> None:
    argv = command(services[service])
    assert argv[:2] == ["pgtasks", verb]
    assert "-A" in argv
    assert argv[argv.index("-A") + 1] == APP_SPEC


def test_example_app_module_exists_and_defines_app() -> None:
    module, _, attribute = APP_SPEC.partition(":")
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing"
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    assert attribute in names, f"{path.relative_to(ROOT)} has no top-level `{attribute} = ...`"


def test_worker_runs_eight_concurrent_jobs(services: dict[str, dict[str, Any]]) -> None:
    argv = command(services["worker"])
    assert argv[argv.index("--concurrency") + 1] == "8"


@pytest.mark.parametrize("service", APP_SERVICES)
def test_app_services_are_built_from_the_repo_dockerfile(
    services: dict[str, dict[str, Any]], service: str
) -> None:
    build = services[service]["build"]
    if isinstance(build, dict):
        assert build.get("context", ".") == "."
        assert build.get("dockerfile", "Dockerfile") == "Dockerfile"
    else:
        assert build == "."


@pytest.mark.parametrize("service", APP_SERVICES)
def test_app_services_dsn_matches_the_postgres_service(
    services: dict[str, dict[str, Any]], service: str
) -> None:
    pg_env = environment(services["postgres"])
    dsn = urlsplit(environment(services[service])["PGTASKS_DSN"])
    assert dsn.scheme in ("postgresql", "postgres")
    assert unquote(dsn.username or "") == pg_env["POSTGRES_USER"]
    assert unquote(dsn.password or "") == pg_env["POSTGRES_PASSWORD"]
    assert dsn.hostname == "postgres"
    assert (dsn.port or 5432) == 5432
    assert dsn.path.lstrip("/") == pg_env["POSTGRES_DB"]


def test_migrate_waits_for_a_healthy_postgres(services: dict[str, dict[str, Any]]) -> None:
    depends_on = services["migrate"]["depends_on"]
    assert depends_on["postgres"]["condition"] == "service_healthy"


def test_migrate_runs_once(services: dict[str, dict[str, Any]]) -> None:
    assert str(services["migrate"].get("restart", "no")) in ("no", "False", "false")


def test_worker_waits_for_migrations(services: dict[str, dict[str, Any]]) -> None:
    depends_on = services["worker"]["depends_on"]
    assert depends_on["migrate"]["condition"] == "service_completed_successfully"


def test_beat_waits_for_migrations(services: dict[str, dict[str, Any]]) -> None:
    depends_on = services["beat"]["depends_on"]
    assert depends_on["migrate"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("service", ["worker", "beat"])
def test_long_running_services_restart_unless_stopped(
    services: dict[str, dict[str, Any]], service: str
) -> None:
    assert services[service]["restart"] == "unless-stopped"


def test_worker_gets_forty_seconds_to_finish_running_jobs_on_stop(
    services: dict[str, dict[str, Any]],
) -> None:
    assert services["worker"]["stop_grace_period"] == "40s"


def test_dockerfile_starts_from_python_312_slim() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.12-slim")


def test_dockerfile_installs_the_package_from_the_copied_sources() -> None:
    instructions = dockerfile_instructions()
    install = next(
        i
        for i, (op, args) in enumerate(instructions)
        if op == "RUN" and _installs_local_package(args)
    )
    copied = " ".join(args for op, args in instructions[:install] if op == "COPY").split()
    # Everything setuptools needs to build the package: README.md (pyproject readme) and
    # LICENSE (license-files) included.
    for needed in ("pyproject.toml", "README.md", "LICENSE", "pgtasks"):
        assert needed in copied, f"{needed} is not copied before `pip install .`"


def test_dockerfile_ships_the_examples_and_runs_as_a_non_root_user() -> None:
    instructions = dockerfile_instructions()
    assert any(op == "COPY" and args.split()[0] == "examples" for op, args in instructions)
    users = [args for op, args in instructions if op == "USER"]
    assert users, "the image runs as root"
    assert users[-1].split(":")[0] not in ("root", "0")
