"""Conformance: the workers the nodes report (``Store.report_workers`` / ``Store.workers``) and
the jobs in flight per worker (``AdminStore.reserved_by_worker``) — the Workers page.
On a store that is not shared (SQLite) the one node's last report is all there is; on a shared
one every node's rows sit side by side."""

from __future__ import annotations

from sepp.domain.params import SettleKind
from sepp.domain.records import WorkerRecord
from sepp.storage.base import Store
from storage.conformance_kit import NOW, S, lease, put, row, settle1


def worker(worker_id: str, node: str = "n1", *, last_seen: int = NOW, queues: tuple[str, ...] = ("q", "mail"),
           done: int = 0, stopped_at: int = 0) -> WorkerRecord:
    return WorkerRecord(worker_id, node, "host-1", queues, 8, "sepp-python/0.1.0", NOW - 60 * S, last_seen - S,
                        last_seen, done, 1, stopped_at)


async def test_a_report_replaces_the_nodes_last_one(store: Store) -> None:
    await store.report_workers("n1", [worker("a"), worker("b", done=5)], NOW - 3600 * S)
    assert await store.workers() == [worker("a"), worker("b", done=5)]
    await store.report_workers("n1", [worker("b", done=7, queues=())], NOW - 3600 * S)
    assert await store.workers() == [worker("b", done=7, queues=())]  # "a" is gone, "b" replaced, no queues kept
    odd = worker("c", queues=("a,b", 'q"1', "x\x1fy", "é"))  # any queue text survives the trip
    await store.report_workers("n1", [odd], NOW - 3600 * S)
    assert await store.workers() == [odd]
    stopped = worker("d", stopped_at=NOW)  # a clean stop travels with the row (0 = running)
    await store.report_workers("n1", [stopped, worker("e")], NOW - 3600 * S)
    assert [(w.worker_id, w.stopped_at) for w in await store.workers()] == [("d", NOW), ("e", 0)]
    await store.report_workers("n1", [], NOW - 3600 * S)
    assert await store.workers() == []


async def test_rows_not_seen_since_the_cutoff_are_forgotten(store: Store) -> None:
    cutoff = NOW - 3600 * S
    await store.report_workers("n1", [worker("old", last_seen=cutoff - 1), worker("edge", last_seen=cutoff)], cutoff)
    assert [w.worker_id for w in await store.workers()] == ["edge"]  # at the cutoff: kept; one µs before: not


async def test_nodes_report_side_by_side_on_a_shared_store(store: Store) -> None:
    if not store.shared:
        return  # one node: covered above
    cutoff = NOW - 3600 * S
    await store.report_workers("n1", [worker("a"), worker("b")], cutoff)
    await store.report_workers("n2", [worker("a", "n2", done=3)], cutoff)
    assert [(w.worker_id, w.node) for w in await store.workers()] == [("a", "n1"), ("a", "n2"), ("b", "n1")]
    await store.report_workers("n1", [], cutoff)  # n1 replaces only its own rows
    assert await store.workers() == [worker("a", "n2", done=3)]
    stale = worker("a", "n2", last_seen=cutoff - S)
    await store.report_workers("n2", [stale], cutoff - 2 * S)
    await store.report_workers("n1", [worker("c")], cutoff)  # n1's report forgets n2's stale row
    assert [(w.worker_id, w.node) for w in await store.workers()] == [("c", "n1")]


async def test_jobs_in_flight_are_counted_per_worker(store: Store) -> None:
    await put(store, *[row() for _ in range(6)])
    assert await store.admin.reserved_by_worker() == {}
    await lease(store, n=3, worker="w-1")
    held = await lease(store, n=2, worker="w-2")
    await lease(store, n=1, worker="")
    assert await store.admin.reserved_by_worker() == {"w-1": 3, "w-2": 2, "": 1}
    await settle1(store, held[0], SettleKind.ACK, NOW)
    assert await store.admin.reserved_by_worker() == {"w-1": 3, "w-2": 1, "": 1}
