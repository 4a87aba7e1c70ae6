"""pgtasks' own migrations, applied on Django's connection."""

from __future__ import annotations

from ..._store.migrator import Migrator
from ...sql import Migration
from .config import get_app, raw_connection


def migrate_schema(alias: str) -> list[Migration]:
    """Apply pending pgtasks migrations to the schema of ``settings.PGTASKS`` (idempotent)."""
    app = get_app()
    applied = Migrator(app.queries).migrate(raw_connection(alias))
    app.database.schema_checked = False
    return applied
