"""The ``Store`` methods that speak of other nodes, as SQLite answers them: there are none.

One process owns a SQLite data folder (``store.LOCK_FILE``), so the cluster is this node:
nobody else is told of finished jobs, waits or job events, no other node's news ever
arrives, and the node's heartbeat and its workers' last report are kept in memory (nothing
is written; a restart starts with none, as the workers reconnect within a poll).
``SQLiteStore`` takes these methods from ``OneNode``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sepp.storage.base import NodeRecord, SweepResult, WorkerRecord


class OneNode:
    """``SQLiteStore``'s part of the ``Store`` protocol about other nodes (see the module).

    The owner sets ``_promoted`` (the ``on_promoted`` callback it calls when a reserve's
    promotion made jobs ready), ``_node`` (None) and ``_workers`` ([]) in its ``__init__``.
    """

    _promoted: Callable[[SweepResult, int], None]
    _node: NodeRecord | None
    _workers: list[WorkerRecord]

    @property
    def shared(self) -> bool:
        """``Store.shared``: False, one process owns the data folder (``LOCK_FILE``)."""
        return False

    def subscribe(self, ready: Callable[[str | None], None], queues_changed: Callable[[], None]) -> None:
        """``Store.subscribe``: there are no other nodes, so nothing is ever called."""

    def subscribe_events(self, on_payload: Callable[[str], None]) -> None:
        """``Store.subscribe_events``: there are no other nodes, so nothing is ever called."""

    async def publish_events(self, payload: str) -> None:
        """``Store.publish_events``: there are no other nodes to tell."""

    def on_promoted(self, promoted: Callable[[SweepResult, int], None]) -> None:
        """``Store.on_promoted``."""
        self._promoted = promoted

    def on_sql_enqueued(self, enqueued: Callable[[Mapping[str, int], Sequence[tuple[int, int]]], None]) -> None:
        """``Store.on_sql_enqueued``: SQLite has no SQL functions to enqueue through; never called."""

    async def sql_enqueued_jobs(self, blocks: Sequence[tuple[int, int]]) -> list[tuple[bytes, str, str, int, int]]:
        """``Store.sql_enqueued_jobs``: none."""
        return []

    def on_finished(self, finished: Callable[[Sequence[bytes] | None, Sequence[str]], None]) -> None:
        """``Store.on_finished``: no other nodes, so never called."""

    @property
    def others_waiting(self) -> bool:
        """``Store.others_waiting``: False, there are no other nodes."""
        return False

    def finished(self, job_ids: Sequence[bytes], queues: Sequence[str]) -> None:
        """``Store.finished``: nobody else to tell."""

    def waiting(self) -> None:
        """``Store.waiting``: nobody else to tell."""

    async def heartbeat(self, node: NodeRecord) -> None:
        """``Store.heartbeat``: the one node is kept in memory (nothing written)."""
        self._node = node

    async def nodes(self) -> list[NodeRecord]:
        """``Store.nodes``: this process's node, once it sent a heartbeat."""
        return [] if self._node is None else [self._node]

    async def report_workers(self, node: str, workers: Sequence[WorkerRecord], forget_before: int) -> None:
        """``Store.report_workers``: one node, so its last report is kept in memory (nothing
        written; a restart starts with no workers, as they reconnect within a poll)."""
        self._workers = sorted((w for w in workers if w.last_seen >= forget_before),
                               key=lambda w: (w.worker_id, w.node))

    async def workers(self) -> list[WorkerRecord]:
        """``Store.workers``: the last report."""
        return list(self._workers)
