"""``PgReads``: what the PostgreSQL driver's admin, matching and figures modules use of it —
reads on the pool and writes through the group committer — so that none of them needs the
store itself (the store builds one and hands it out; the import graph stays a tree).
"""

from __future__ import annotations

from typing import Any, TypeVar

import asyncpg

from sepp.storage.errors import StoreClosed
from sepp.storage.postgres.committer import Op, PgCommitter, store_error

T = TypeVar("T")

#: What a read on the pool may raise: mapped to ``StoreError`` / ``StoreUnavailable``.
DRIVER_ERRORS = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)


class PgReads:
    """The read pool of one store (``pool``: set once the store opened it; ``closed``: set
    when the store starts closing) and its committer (``submit``).

    Every read raises ``StoreClosed`` once ``closed`` is set (or before the pool exists),
    ``StoreUnavailable`` for a lost connection and ``StoreError`` for anything else the
    driver refuses (``committer.store_error``)."""

    __slots__ = ("_committer", "closed", "pool")

    def __init__(self, committer: PgCommitter) -> None:
        self._committer = committer
        self.pool: asyncpg.Pool | None = None
        self.closed = False

    def reader(self) -> asyncpg.Pool:
        """The pool, open; raises ``StoreClosed`` when the store is closed or not open yet."""
        if self.closed or self.pool is None:
            raise StoreClosed("store is closed")
        return self.pool

    async def submit(self, op: Op[T], weight: int = 1) -> T:
        """Run the write ``op(tx)`` in the committer's next group commit (``PgCommitter.submit``;
        ``weight``: jobs it counts for in the backlog)."""
        return await self._committer.submit(op, weight)

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """Rows of one read on the pool (errors: see the class)."""
        try:
            rows: list[asyncpg.Record] = await self.reader().fetch(sql, *args)
            return rows
        except DRIVER_ERRORS as exc:
            raise store_error(exc) from exc

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        """The first row of one read, or None (errors as ``fetch``)."""
        try:
            return await self.reader().fetchrow(sql, *args)
        except DRIVER_ERRORS as exc:
            raise store_error(exc) from exc

    async def fetchval(self, sql: str, *args: Any) -> Any:
        """The first column of the first row of one read (errors as ``fetch``)."""
        try:
            return await self.reader().fetchval(sql, *args)
        except DRIVER_ERRORS as exc:
            raise store_error(exc) from exc
