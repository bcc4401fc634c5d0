"""Two stores on one PostgreSQL schema (two nodes), attacked: acks of one node racing
nacks and extends of the same deliveries on the other (ack_many's probe takes no row lock),
and the reclaim sweep (``expired_leases``, queue by queue over jobs_leased) over leases in
many queues, in queues whose row was deleted, and in queues whose names sort oddly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
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


@pytest.mark.parametrize("kind", [SettleKind.RELEASE, SettleKind.RETRY, SettleKind.DEAD_LETTER])
async def test_acks_on_one_node_racing_nacks_of_the_same_leases_on_the_other(
        two_nodes: tuple[Store, Store, str], kind: SettleKind) -> None:
    """Each delivery is settled exactly once: its ack and its nack never both succeed, and
    the row agrees with the one that did."""
    a, b, _ = two_nodes
    for _ in range(4):
        await put(a, *[row(max_attempts=5) for _ in range(64)])
        recs = await lease(a, n=64)
        acks = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + S) for r in recs]
        nacks = [SettleParams(r.id, r.lease_id or b"", kind, NOW + S) for r in recs]
        chunks = range(0, 64, 8)
        calls = []
        for i in chunks:
            calls += [a.settle(acks[i:i + 8] if i % 16 else acks[i:i + 8][::-1], POLICY),
                      b.settle(nacks[i:i + 8][::-1] if i % 16 else nacks[i:i + 8], POLICY)]
        answers = await asyncio.gather(*calls)
        acked = {p.job_id: v for i, answer in zip(chunks, answers[0::2], strict=True)
                 for p, v in zip(acks[i:i + 8] if i % 16 else acks[i:i + 8][::-1], answer, strict=True)}
        nacked = {p.job_id: v for i, answer in zip(chunks, answers[1::2], strict=True)
                  for p, v in zip(nacks[i:i + 8][::-1] if i % 16 else nacks[i:i + 8], answer, strict=True)}
        for r in recs:
            job = await get(a, r.id)
            ok_ack, ok_nack = acked[r.id].error is None, nacked[r.id].error is None
            assert ok_ack != ok_nack, (acked[r.id], nacked[r.id], job)
            assert (job.state == int(State.COMPLETED)) == ok_ack, (job, acked[r.id], nacked[r.id])
        # the jobs nacked back to READY/SCHEDULED are drained before the next round
        conn = await asyncpg.connect(PG_TEST_DSN, server_settings={"search_path": two_nodes[2]})
        try:
            await conn.execute("UPDATE jobs SET state = 4 WHERE state <> 4")
        finally:
            await conn.close()


async def test_acks_on_one_node_racing_extends_on_the_other_complete_every_job(
        two_nodes: tuple[Store, Store, str]) -> None:
    a, b, _ = two_nodes
    await put(a, *[row() for _ in range(64)])
    recs = await lease(a, n=64)
    acks = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + S) for r in recs]
    calls: list[Any] = []
    for i in range(0, 64, 8):
        calls.append(a.settle(acks[i:i + 8], POLICY))
        calls += [b.extend(r.id, r.lease_id or b"", NOW + S, NOW + 600 * S) for r in recs[i:i + 8]]
    answers = await asyncio.gather(*calls, return_exceptions=True)
    assert not [x for x in answers if isinstance(x, BaseException)]
    results = [v for answer in answers if isinstance(answer, list) for v in answer]
    assert [v.error for v in results] == [None] * 64
    assert {(await get(a, r.id)).state for r in recs} == {int(State.COMPLETED)}
    swept = await b.reclaim_expired(NOW + 1000 * S, 100, POLICY)
    assert swept.count == 0


async def test_the_sweep_reclaims_leases_of_many_queues_and_of_queues_whose_row_was_deleted(
        two_nodes: tuple[Store, Store, str]) -> None:
    a, b, schema = two_nodes
    queues = [f"q{i:03d}" for i in range(150)] + ["", " ", "Z", "a", "é", "\u00a0q", "q\u0300", "ß", "q" * 200]
    for q in queues:
        await put(a, row(q), row(q))
        await lease(a, q, n=1, lease_us=S)           # expires
        await lease(a, q, n=1, lease_us=10_000 * S)  # live
    conn = await asyncpg.connect(PG_TEST_DSN, server_settings={"search_path": schema})
    try:
        await conn.execute("DELETE FROM queues WHERE name = ANY($1::text[])", queues[::3])
    finally:
        await conn.close()
    total = 0
    while True:
        done = await asyncio.gather(a.reclaim_expired(NOW + 5 * S, 13, POLICY),
                                    b.reclaim_expired(NOW + 5 * S, 13, POLICY))
        total += sum(r.count for r in done)
        if not any(r.count for r in done):
            break
    assert total == len(queues)
    conn = await asyncpg.connect(PG_TEST_DSN, server_settings={"search_path": schema})
    try:
        by_queue = dict(await conn.fetch("SELECT queue, count(*) FILTER (WHERE state = 3) FROM jobs GROUP BY queue"))
    finally:
        await conn.close()
    assert by_queue == dict.fromkeys(queues, 1)
