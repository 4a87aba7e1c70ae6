"""``python -m pgtasks``: the ``pgtasks`` command line. Importing this module runs nothing."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    main()
