"""The CLI of an app of several stores (tests/apps/stores_app.py): its environment, with
PGTASKS_STORES as a TOML file and PGTASKS_ROUTES as JSON, and one command run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.environment import ROOT, pgtasks_command, pgtasks_env

APP = "tests.apps.stores_app:app"


def stores_env(dsn: str, schemas: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """PGTASKS_STORES as a TOML file naming ``schemas`` on ``dsn``; no PGTASKS_DSN."""
    stores = tmp_path / "stores.toml"
    stores.write_text(
        "".join(
            f'[stores.{name}]\ndsn = "{dsn}"\nschema = "{schema}"\n'
            for name, schema in schemas.items()
        )
    )
    base = pgtasks_env(dsn, schemas["default"])
    base.pop("PGTASKS_DSN")
    base.update(PGTASKS_STORES=str(stores), PGTASKS_ROUTES=json.dumps({"emails": "bulk"}))
    return base


def run(env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pgtasks_command(*arguments, "-A", APP),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
