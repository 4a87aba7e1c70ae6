"""Migration tests: empty to head, reruns, concurrent migrators, the CLI."""

from __future__ import annotations
