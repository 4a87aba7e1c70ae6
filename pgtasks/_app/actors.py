"""Who acts: the actor an operator's change is audited under."""

from __future__ import annotations

import getpass
import socket


def actor_here(via: str) -> str:
    """Who acts from this process: ``cli:alice@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{via}:{user}@{socket.gethostname()}"
