"""The node and worker rows of the PostgreSQL backend, written by the committer: each
node's heartbeat and its report of the workers connected to it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sepp.domain.records import NodeRecord, WorkerRecord
from sepp.storage.postgres.committer import Tx
from sepp.storage.postgres.sql import Q


class ReportWorkersOp:
    """``Store.report_workers``: replace the node's worker rows, forget the old ones."""

    __slots__ = ("forget_before", "node", "workers")

    def __init__(self, node: str, workers: Sequence[WorkerRecord], forget_before: int) -> None:
        self.node = node
        self.workers = workers
        self.forget_before = forget_before

    async def __call__(self, tx: Tx) -> None:
        conn = tx.conn
        await conn.execute(Q["forget_node_workers"], self.node)
        if self.workers:
            ws = self.workers
            await conn.execute(Q["report_workers"], [w.worker_id for w in ws], [w.host for w in ws],
                               [json.dumps(list(w.queues)) for w in ws], [w.concurrency for w in ws],
                               [w.client_version for w in ws], [w.first_seen for w in ws],
                               [w.last_reserve for w in ws], [w.last_seen for w in ws],
                               [w.completed_minute for w in ws], [w.failed_minute for w in ws], self.node,
                               [w.stopped_at for w in ws])
        await conn.execute(Q["forget_old_workers"], self.forget_before)


class HeartbeatOp:
    """``Store.heartbeat``: insert or update the node's row."""

    __slots__ = ("node",)

    def __init__(self, node: NodeRecord) -> None:
        self.node = node

    async def __call__(self, tx: Tx) -> None:
        await tx.conn.execute(Q["heartbeat"], *self.node)
