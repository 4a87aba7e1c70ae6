"""Migration tests migrate with the real Migrator: no pre-migrated schemas here."""

from __future__ import annotations

import pytest


@pytest.fixture
def premigrated_schemas() -> bool:
    """``make_app(migrate=True)`` runs ``app.migrate()`` in tests/migration."""
    return False
