"""The periodic schedules' operations on PostgreSQL (``Store.load_periodic`` and
the rest): write operations for the ``PgCommitter`` (``committer.Tx``), SQL in
``periodic.sql``. A change tells the other nodes through ``tx.queues_changed()`` (they
reload their queues and schedules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sepp.domain.records import PeriodicRecord, PeriodicRun
from sepp.storage._sql import load_queries
from sepp.storage.postgres.committer import Tx
from sepp.storage.postgres.sql import rowcount

#: The named queries of ``periodic.sql``.
P = load_queries("sepp.storage.postgres", "periodic.sql")


def record(row: Any) -> PeriodicRecord:
    """A ``periodic`` row (``load_all`` column order: ``PeriodicRecord``'s fields) as a
    ``PeriodicRecord``."""
    stored = PeriodicRecord._make(row)
    return stored._replace(paused=bool(stored.paused), active_since=int(stored.active_since),
                           last_tick=int(stored.last_tick), last_run_at=int(stored.last_run_at),
                           last_job_id=bytes(stored.last_job_id or b""), updated_at=int(stored.updated_at))


class PutOp:
    """``Store.put_periodic``: True when created."""

    __slots__ = ("definition", "name", "now", "source")

    def __init__(self, name: str, definition: str, source: str, now: int) -> None:
        self.name, self.definition, self.source, self.now = name, definition, source, now

    async def __call__(self, tx: Tx) -> bool:
        created = await tx.conn.fetchval(P["put"], self.name, self.definition, self.source, self.now)
        tx.queues_changed()
        return bool(created)


class PauseOp:
    """``Store.set_periodic_paused``: the row after the change, or None."""

    __slots__ = ("name", "now", "paused")

    def __init__(self, name: str, paused: bool, now: int) -> None:
        self.name, self.paused, self.now = name, paused, now

    async def __call__(self, tx: Tx) -> PeriodicRecord | None:
        row = await tx.conn.fetchrow(P["set_paused"], self.name, self.paused, self.now)
        tx.queues_changed()
        return None if row is None else record(row)


class DeleteOp:
    """``Store.delete_periodic``: False when there was no such schedule."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    async def __call__(self, tx: Tx) -> bool:
        status = await tx.conn.execute(P["delete"], self.name)
        tx.queues_changed()
        return rowcount(status) > 0


class RecordRunsOp:
    """``Store.record_periodic_runs``: one statement for every run."""

    __slots__ = ("runs",)

    def __init__(self, runs: Sequence[PeriodicRun]) -> None:
        self.runs = runs

    async def __call__(self, tx: Tx) -> None:
        rs = self.runs
        await tx.conn.execute(P["record_runs"], [r.name for r in rs], [r.tick for r in rs], [r.job_id for r in rs],
                              [r.error for r in rs], [r.at for r in rs])
