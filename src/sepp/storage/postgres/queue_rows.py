"""The queue-row writes of the PostgreSQL backend, run by the committer: create or replace
a queue, and change one under its row lock (``Store.change_queue``). Each tells the other
nodes (``tx.queues_changed``) and ends the flow bound of the queue's old limits.
"""

from __future__ import annotations

from collections.abc import Callable

from sepp.domain.records import QueueRecord
from sepp.storage.postgres import flow
from sepp.storage.postgres.committer import Tx
from sepp.storage.postgres.sql import Q
from sepp.storage.postgres.sql import rowcount as _count
from sepp.storage.row_types import QueueRow


class QueueOp:
    """``Store.upsert_queue``."""

    __slots__ = ("now", "queue")

    def __init__(self, queue: QueueRecord, now: int) -> None:
        self.queue, self.now = queue, now

    async def __call__(self, tx: Tx) -> None:
        q = self.queue
        await tx.conn.execute(Q["upsert_queue"], q.name, q.settings_json, q.paused, q.declared, self.now, self.now)
        await flow.forget(tx.conn, q.name)  # new limits: the bound of the old ones ends here
        tx.queues_changed()


class Refused:
    """What ``ChangeQueueOp`` returns when its ``change`` raised: the exception, for the
    caller (the transaction commits the rest of its group; this operation wrote nothing)."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


class ChangeQueueOp:
    """``Store.change_queue``: the row read ``FOR UPDATE``, changed by ``change``, written
    back, in the transaction of the group."""

    __slots__ = ("change", "name", "now")

    def __init__(self, name: str, change: Callable[[QueueRecord | None], QueueRecord], now: int) -> None:
        self.name, self.change, self.now = name, change, now

    async def __call__(self, tx: Tx) -> QueueRecord | Refused:
        name, now = self.name, self.now
        while True:
            row = await tx.conn.fetchrow(Q["lock_queue"], name)
            stored = None if row is None else QueueRow._make(row).record()
            try:
                new = self.change(stored)
            except Exception as exc:
                return Refused(exc)
            new = QueueRecord(name, new.settings_json, new.paused, new.declared)
            if stored is not None:
                await tx.conn.execute(Q["update_queue"], name, new.settings_json, new.paused, new.declared, now)
            elif not _count(await tx.conn.execute(Q["insert_queue_if_absent"], name, new.settings_json, new.paused,
                                                  new.declared, now, now)):
                continue  # another node created it since the read: change the row it made
            await flow.forget(tx.conn, name)  # new limits: the bound of the old ones ends here
            tx.queues_changed()
            return new
