"""Conformance: a job keeps the ids it depends on (``Store.job_dependencies``), on every
backend — what a handler's read of its dependencies' results starts from
(docs/workflows.md "Reading the dependencies' results").

The ids are the job's ``depends_on`` in the order given (a workflow node's edges first),
kept after the release deleted the edges, with the job's state and current lease id.
"""

from __future__ import annotations

import os

from sepp.domain.params import SettleKind
from sepp.domain.states import State
from sepp.storage.base import Store
from sepp.storage.dependencies import RUN
from sepp.storage.workflows import WorkflowClaim
from storage.conformance_kit import NOW, S, get, lease, put, row, settle1


async def _done(store: Store, queue: str, n: int, now: int = NOW + S) -> list[bytes]:
    """``n`` jobs of ``queue`` enqueued, leased and acked; their ids in enqueue order."""
    rows = [row(queue) for _ in range(n)]
    await put(store, *rows)
    recs = await lease(store, queue, n=n)
    for rec in recs:
        assert (await settle1(store, rec, SettleKind.ACK, now)).state == State.COMPLETED
    return [r.id for r in rows]


async def test_the_ids_are_kept_in_the_order_given_after_the_release(store: Store) -> None:
    a, b, c = (row("dep") for _ in range(3))
    await put(store, a, b, c)
    child = row("child")
    order = [c.id, a.id, b.id]
    assert await store.enqueue([child], [0], NOW, depends_on={0: order}) == {}
    deps = await store.job_dependencies(child.id)
    assert deps is not None
    assert (deps.state, deps.lease_id, deps.depends_on) == (State.DEFERRED, None, order)
    for rec in await lease(store, "dep", n=3):
        await settle1(store, rec, SettleKind.ACK, NOW + S)
    (leased,) = await lease(store, "child", n=5, now=NOW + 2 * S)
    deps = await store.job_dependencies(child.id)
    assert deps is not None
    assert (deps.state, deps.lease_id, deps.depends_on) == (State.RESERVED, leased.lease_id, order)


async def test_completed_dependencies_are_kept_too(store: Store) -> None:
    done = await _done(store, "dep", 2)
    child = row("child")
    assert await store.enqueue([child], [0], NOW + 2 * S, depends_on={0: done}) == {}
    assert (await get(store, child.id)).state == State.READY  # nothing to wait for
    deps = await store.job_dependencies(child.id)
    assert deps is not None and deps.depends_on == done


async def test_a_job_without_dependencies_and_an_unknown_id(store: Store) -> None:
    plain = row("plain")
    await put(store, plain)
    deps = await store.job_dependencies(plain.id)
    assert deps is not None and (deps.state, deps.depends_on) == (State.READY, [])
    assert await store.job_dependencies(os.urandom(16)) is None


async def test_a_workflow_node_lists_its_edges_then_its_own_dependencies(store: Store) -> None:
    (outside,) = await _done(store, "before", 1)
    header = [row("kids") for _ in range(3)]
    callback = row("cb")
    rows = [*header, callback]
    deps = {3: [header[2].id, header[0].id, header[1].id, outside]}
    claim = WorkflowClaim(os.urandom(16), "", NOW + 3600 * S)
    assert await store.enqueue_workflow(rows, [0] * 4, NOW, (), (), deps, {3: RUN}, claim) is None
    got = await store.job_dependencies(callback.id)
    assert got is not None and got.depends_on == deps[3]
    for r in header:
        got = await store.job_dependencies(r.id)
        assert got is not None and got.depends_on == []


async def test_a_chord_of_a_thousand_and_one_children_keeps_every_id(store: Store) -> None:
    header = [row("kids") for _ in range(1001)]
    callback = row("cb")
    claim = WorkflowClaim(os.urandom(16), "", NOW + 3600 * S)
    ids = [r.id for r in header]
    assert await store.enqueue_workflow([*header, callback], [0] * 1002, NOW, (), (), {1001: ids}, {}, claim) is None
    got = await store.job_dependencies(callback.id)
    assert got is not None and got.depends_on == ids
