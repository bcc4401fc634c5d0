"""PostgreSQL run_alone (a lone one-queue Reserve, a plain ack batch without
BEGIN/COMMIT) through two stores on one schema."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from support.backends import PG_TEST_DSN
from support.nodes import open_nodes

from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.states import State
from sepp.storage.base import Store
from storage.conformance_kit import NOW, POLICY, S, get, lease, put, row

pytestmark = pytest.mark.postgres_only(reason="two nodes on one database")


@pytest.fixture
async def two_nodes(backend: str, tmp_path: Path) -> AsyncIterator[tuple[Store, Store, str]]:
    async with open_nodes(backend, tmp_path, NOW) as ((a, b), schema):
        yield a, b, schema


async def test_promotion_by_a_lone_reserve_wakes_the_other_node(two_nodes: tuple[Store, Store, str]) -> None:
    a, b, _ = two_nodes
    woke: asyncio.Queue[str | None] = asyncio.Queue()
    b.subscribe(woke.put_nowait, lambda: None)
    await put(a, row("x", state=State.SCHEDULED, run_at=NOW + S))
    await asyncio.sleep(0.3)  # time for a notice of the put, if any, to arrive: drained, not awaited
    while not woke.empty():
        woke.get_nowait()
    # A one-queue Reserve of ANOTHER queue at a time the x job is due promotes it.
    assert await lease(a, "y", now=NOW + 2 * S) == []
    got = await asyncio.wait_for(woke.get(), 10.0)
    assert got == "x"


async def test_many_lone_reserves_never_lease_twice(two_nodes: tuple[Store, Store, str]) -> None:
    a, b, _ = two_nodes
    await put(a, *[row("q") for _ in range(300)])
    await put(a, *[row("q", state=State.SCHEDULED, run_at=NOW + S) for _ in range(100)])
    results = await asyncio.gather(*[lease(s, "q", n=7, now=NOW + 2 * S, worker=f"w{i}")
                                     for i in range(60) for s in (a, b)])
    ids = [r.id for rs in results for r in rs]
    assert len(ids) == len(set(ids)) == 400


async def test_acks_mixing_refused_expired_duplicate(two_nodes: tuple[Store, Store, str]) -> None:
    a, b, _ = two_nodes
    await put(a, *[row("q") for _ in range(6)])
    recs = await lease(a, "q", n=6, lease_us=10 * S)
    now = NOW + 5 * S
    items = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, now) for r in recs]
    items[1] = SettleParams(recs[1].id, b"x" * 16, SettleKind.ACK, now)  # wrong lease
    items.append(SettleParams(b"\0" * 16, b"y" * 16, SettleKind.ACK, now))  # unknown job
    first = await b.settle(items[:3], POLICY)
    res = await a.settle(items, POLICY)
    assert [r.error for r in res][:3] == [r.error for r in first]
    assert res[0].error is None and res[1].error is not None and res[-1].error is not None
    for r in recs[2:]:
        assert (await get(a, r.id)).state == State.COMPLETED
    # acks after the expiry: refused, job untouched
    await put(a, *[row("e") for _ in range(3)])
    recs = await lease(a, "e", n=3, lease_us=S)
    late = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + 2 * S) for r in recs]
    res = await b.settle(late, POLICY)
    assert all(r.error is not None for r in res), res
    for r in recs:
        assert (await get(a, r.id)).state == State.RESERVED


async def test_writer_killed_then_next_call_works(two_nodes: tuple[Store, Store, str]) -> None:
    a, _, _ = two_nodes
    await put(a, *[row("q") for _ in range(20)])
    admin = await asyncpg.connect(PG_TEST_DSN)
    try:
        recs = await lease(a, "q", n=10)
        # kill this store's own writer backend only (its pid), nothing else on the server
        pids = [c.get_server_pid() for c in a._committer._conns if c is not None]  # type: ignore[attr-defined]
        assert pids
        for pid in pids:
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
        items = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + S) for r in recs]
        for _ in range(3):
            try:
                res = await a.settle(items, POLICY)
                break
            except Exception as exc:  # StoreUnavailable once
                print("err", type(exc).__name__, exc)
        assert all(r.error is None for r in res), res
        more = await lease(a, "q", n=10)
        assert len(more) == 10
    finally:
        await admin.close()


async def _kill_blocked_writer(admin: asyncpg.Connection, store: Store) -> None:
    """Terminate the backend of ``store``'s writer once it waits for a lock (its pid only)."""
    for _ in range(500):
        for c in store._committer._conns:  # type: ignore[attr-defined]
            if c is not None and await admin.fetchval("SELECT cardinality(pg_blocking_pids($1))",
                                                      c.get_server_pid()):
                await admin.execute("SELECT pg_terminate_backend($1)", c.get_server_pid())
                return
        await asyncio.sleep(0.01)
    raise AssertionError("the writer never blocked")


async def _killed_while_blocked(store: Store, lock_sql: str, *args: object,
                                call: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    """Run ``call()`` on ``store`` while another connection holds ``lock_sql`` (with
    ``args``) in an open transaction, kill the writer backend it blocks on, check the call
    failed, then let the lock go."""
    holder = await asyncpg.connect(PG_TEST_DSN)
    admin = await asyncpg.connect(PG_TEST_DSN)
    try:
        tr = holder.transaction()
        await tr.start()
        await holder.execute(lock_sql, *args)
        task = asyncio.create_task(call())
        await _kill_blocked_writer(admin, store)
        with pytest.raises(Exception):  # noqa: B017 - any failure: the point is what was committed
            await asyncio.wait_for(task, 10)
        await tr.rollback()
    finally:
        await holder.close()
        await admin.close()


async def test_writer_killed_mid_ack_statement_commits_nothing_and_retry_works(
        two_nodes: tuple[Store, Store, str]) -> None:
    a, _, schema = two_nodes
    await put(a, *[row("q") for _ in range(8)])
    recs = await lease(a, "q", n=8)
    items = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + S) for r in recs]
    await _killed_while_blocked(a, f'SELECT 1 FROM "{schema}".jobs WHERE id = $1 FOR UPDATE', recs[4].id,
                                call=lambda: a.settle(items, POLICY))
    for r in recs:
        assert (await get(a, r.id)).state == State.RESERVED  # nothing of the statement committed
    res = await a.settle(items, POLICY)
    assert all(x.error is None for x in res), res


async def test_writer_killed_mid_lone_reserve_leases_nothing(two_nodes: tuple[Store, Store, str]) -> None:
    a, _, schema = two_nodes
    await put(a, *[row("q") for _ in range(5)], row("q", state=State.SCHEDULED, run_at=NOW + S))
    await _killed_while_blocked(a, f'LOCK TABLE "{schema}".jobs IN ACCESS EXCLUSIVE MODE',
                                call=lambda: lease(a, "q", n=10, now=NOW + 2 * S))
    got = await lease(a, "q", n=10, now=NOW + 2 * S)
    assert len(got) == 6


async def test_writer_killed_between_the_ack_statement_and_the_refused_ones(
        two_nodes: tuple[Store, Store, str]) -> None:
    """The ack_many statement commits by itself; the refused ack is then judged in a
    transaction that blocks (its row held) and is killed: the caller gets StoreUnavailable
    though the good acks are committed. Its retry must answer them as acked (repeated)."""
    a, _, schema = two_nodes
    await put(a, *[row("q") for _ in range(4)])
    recs = await lease(a, "q", n=4)
    items = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + S) for r in recs[:3]]
    items.append(SettleParams(recs[3].id, b"z" * 16, SettleKind.ACK, NOW + S))  # wrong lease: judged alone
    await _killed_while_blocked(a, f'SELECT 1 FROM "{schema}".jobs WHERE id = $1 FOR UPDATE', recs[3].id,
                                call=lambda: a.settle(items, POLICY))
    res = await a.settle(items, POLICY)
    assert [x.error is None for x in res] == [True, True, True, False], res
