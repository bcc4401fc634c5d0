"""The last two dependencies of a job acked at the same moment through two nodes (two stores
on one PostgreSQL schema) release it exactly once (docs/workflows.md).

A third session holds the dependent's row, so both acks' releases reach it and wait; when it
is let go, the second release reads what the first wrote (READ COMMITTED): the job ends READY
with no unfinished dependency left, never released twice nor stuck DEFERRED.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from support.backends import PG_TEST_DSN
from support.nodes import open_nodes
from support.pg_locks import sessions_waiting_for

from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.states import State
from sepp.storage.base import Store
from storage.conformance_kit import NOW, POLICY, S, get, lease, put, row

pytestmark = pytest.mark.postgres_only(reason="two nodes on one database: SQLite's folder holds one process")

DEADLINE = 20


@pytest.fixture
async def two_nodes(backend: str, tmp_path: Path) -> AsyncIterator[tuple[Store, Store, str]]:
    """Two open stores on one fresh schema, their sessions with ``deadlock_timeout = 60s``."""
    async with open_nodes(backend, tmp_path, NOW, dsn_options="deadlock_timeout=60s") as ((a, b), schema):
        yield a, b, schema


async def test_the_last_two_dependencies_acked_on_two_nodes_release_the_job_once(
        two_nodes: tuple[Store, Store, str]) -> None:
    a, b, schema = two_nodes
    await put(a, row("dep"), row("dep"))
    ra, rb = await lease(a, "dep", n=2)
    child = row("child")
    await a.enqueue([child], [0], NOW, depends_on={0: [ra.id, rb.id]})
    assert (await get(a, child.id)).state == State.DEFERRED
    holder = await asyncpg.connect(PG_TEST_DSN)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute(f"SELECT 1 FROM {schema}.jobs WHERE id = $1 FOR UPDATE", child.id)
        acks = asyncio.gather(a.settle([SettleParams(ra.id, ra.lease_id or b"", SettleKind.ACK, NOW + S)], POLICY),
                              b.settle([SettleParams(rb.id, rb.lease_id or b"", SettleKind.ACK, NOW + S)], POLICY))
        await sessions_waiting_for(holder, 2, DEADLINE)  # both releases wait for the dependent's row
        await tx.rollback()
        (xa,), (xb) = await asyncio.wait_for(acks, DEADLINE)
        assert xa.state == State.COMPLETED and xb[0].state == State.COMPLETED
        state, left = await holder.fetchrow(f"SELECT state, deps_left FROM {schema}.jobs WHERE id = $1", child.id)
        assert (state, left) == (State.READY, 0)
        assert await holder.fetchval(f"SELECT count(*) FROM {schema}.job_waits") == 0
    finally:
        await holder.close()
    assert [r.id for r in await lease(b, "child", n=5, now=NOW + 2 * S)] == [child.id]
