#!/usr/bin/env python3
"""``python examples/django_project/manage.py migrate | pgtasks_worker | pgtasks_beat``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # The repository root, so that ``examples.django_project`` imports.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
