"""A forked child lets go of the pools it inherited: every Database of this process is
tracked, and an ``os.fork()`` hook (child side) drops their pools without closing them.

Their sockets are the parent's sessions: closing or using them from the child would break
the parent. The child's first query opens pools of its own.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .database import Database

#: Every Database of this process, so that a forked child can let go of what it inherited.
_databases: weakref.WeakSet[Database] = weakref.WeakSet()
#: In a forked child: the parent's pools, kept (never used, closed or garbage-collected,
#: whose finalizers would act on the parent's connections).
_inherited: list[object] = []


def _forget_inherited_pools() -> None:
    """``os.fork()`` hook (child side): drop the parent's pools without closing them."""
    for database in list(_databases):
        pools = (database._pool, database._apool, database._replica_pool)
        _inherited.extend(pool for pool in pools if pool is not None)
        database._lock = threading.Lock()  # another thread may have held it during the fork
        database._pool, database._pool_pid = None, 0
        database._apool, database._apool_loop = None, None
        database._replica_pool, database._replica_pid = None, 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_pools)


def track(database: Database) -> None:
    """Let a forked child of this process forget ``database``'s pools."""
    _databases.add(database)
