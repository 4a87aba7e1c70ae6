"""The transaction of a durable step: ``with ctx.transaction() as conn`` (and ``async with
ctx.atransaction()``) inside a step's function, and ``connection=True``.

The first ``transaction()`` of a step opens a connection and a transaction and locks the
job's row under the attempt's lease (refused: LeaseLostError); each ``with`` block is a
savepoint in it. The transaction stays open to the end of the step: the step's
checkpoint is written in it and it commits with the step's writes (exactly once), or
rolls back with them when the step raises.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import psycopg

from .._durable import StepError
from .._store.durable import StepRecord
from .._store.ports import StepPort

if TYPE_CHECKING:
    from .._app.app import App

OUTSIDE_A_STEP = (
    "ctx.transaction() is for the function of a step (ctx.step(name, function) where"
    " function opens it, or ctx.step(..., connection=True)): outside a step its writes"
    " would have no checkpoint to commit with"
)


class StepTransactions:
    """The step transaction of one attempt (mixed into DurableRun)."""

    _token: str | None
    _tx: tuple[contextlib.ExitStack, psycopg.Connection[Any]] | None = None
    _atx: tuple[contextlib.AsyncExitStack, psycopg.AsyncConnection[Any]] | None = None

    def _owner(self) -> App:
        raise NotImplementedError

    def _steps(self) -> StepPort:
        """The statements a running attempt may run (each write fenced by its lease)."""
        return self._owner().queries

    def _lease(self) -> dict[str, int]:
        raise NotImplementedError

    def _refused(self, what: str) -> Exception:
        raise NotImplementedError

    def _check_inside(self, other: object) -> None:
        if self._token is None:
            raise StepError(OUTSIDE_A_STEP)
        if other is not None:
            raise StepError("a step uses ctx.transaction() or ctx.atransaction(), not both")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        self._check_inside(self._atx)
        if self._tx is None:
            owner = self._owner()
            with contextlib.ExitStack() as stack:
                conn = stack.enter_context(owner.database.connection())
                stack.enter_context(conn.transaction())
                if self._steps().hold_job(conn, **self._lease()) is None:
                    raise self._refused("a step's transaction")
                self._tx = (stack.pop_all(), conn)
        with self._tx[1].transaction():  # a savepoint: a failed block undoes itself only
            yield self._tx[1]

    @contextlib.asynccontextmanager
    async def atransaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        self._check_inside(self._tx)
        if self._atx is None:
            owner = self._owner()
            async with contextlib.AsyncExitStack() as stack:
                conn = await stack.enter_async_context(owner.database.aconnection())
                await stack.enter_async_context(conn.transaction())
                if await self._steps().ahold_job(conn, **self._lease()) is None:
                    raise self._refused("a step's transaction")
                self._atx = (stack.pop_all(), conn)
        async with self._atx[1].transaction():
            yield self._atx[1]

    def _end_transaction(self, error: BaseException | None) -> None:
        """Commit (no error) or roll back the step's transaction, if it opened one."""
        opened, self._tx = self._tx, None
        if opened is not None:
            if error is None:
                opened[0].close()
            else:
                opened[0].__exit__(type(error), error, error.__traceback__)

    async def _aend_transaction(self, error: BaseException | None) -> None:
        opened, self._atx = self._atx, None
        if opened is not None:
            if error is None:
                await opened[0].aclose()
            else:
                await opened[0].__aexit__(type(error), error, error.__traceback__)
        self._end_transaction(error)

    def _with_connection(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``connection=True``: ``function`` called with the step's connection first."""

        def call(*args: Any, **kwargs: Any) -> Any:
            with self.transaction() as conn:
                return function(conn, *args, **kwargs)

        return call

    def _with_aconnection(self, function: Callable[..., Any]) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            async with self.atransaction() as conn:
                return await function(conn, *args, **kwargs)

        return call

    def _write_checkpoint(self, step: StepRecord) -> dict[str, Any]:
        """Write ``step`` in the step's transaction (committed with it), else on its own."""
        owner = self._owner()
        if self._tx is not None:
            return self._steps().record_job_step(self._tx[1], step)
        return owner.database.run(lambda conn: self._steps().record_job_step(conn, step))

    async def _awrite_checkpoint(self, step: StepRecord) -> dict[str, Any] | None:
        """Write ``step`` in the step's async transaction; None: it has none."""
        if self._atx is None:
            return None
        return await self._steps().arecord_job_step(self._atx[1], step)
