"""Batched settles of overlapping jobs through two stores on one PostgreSQL schema (two
nodes): a worker that lost the answer to a batch re-sends it, maybe through another node,
maybe in another order (its queue of unanswered acks joins later ones). Both calls lock the
same rows; locked in different orders they deadlocked, and the loser's whole group waited
out PostgreSQL's ``deadlock_timeout`` (1 s by default) before the committer's retry.

The stores here run with ``deadlock_timeout`` at 60 s (a DSN setting), so a deadlock shows
as a call that does not end, not as a second lost: the row in the middle is held by a
third session until both calls wait on it, which makes the interleaving certain.

Also through two nodes: an ack whose job got a new lease while the ack waited for its row
(LEASE_MISMATCH, not a completion of the new holder's job), acks racing another node's
reclaim and re-lease (each verdict agrees with the row), and budgeted reserves at once
(``lease_within`` under SKIP LOCKED: no job leased twice).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from support.backends import PG_TEST_DSN
from support.nodes import open_nodes
from support.pg_locks import sessions_waiting_for

from sepp.domain.params import SettleKind, SettleParams, SettleResult
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.storage.base import Store
from storage.conformance_kit import NOW, POLICY, S, get, lease, put, row

pytestmark = pytest.mark.postgres_only(reason="two nodes on one database: SQLite's folder holds one process")

#: How long the two calls may take once the row is let go (no deadlock: well under 1 s).
DEADLINE = 20


@pytest.fixture
async def two_nodes(backend: str, tmp_path: Path) -> AsyncIterator[tuple[Store, Store, str]]:
    """Two open stores on one fresh schema (one fake clock at NOW), their sessions with
    ``deadlock_timeout = 60s``; and the schema's name."""
    async with open_nodes(backend, tmp_path, NOW, dsn_options="deadlock_timeout=60s") as ((a, b), schema):
        yield a, b, schema


def _acks(recs: list[JobRecord], kind: SettleKind = SettleKind.ACK) -> list[SettleParams]:
    return [SettleParams(r.id, r.lease_id or b"", kind, NOW + S) for r in recs]


async def _cross(a: Store, b: Store, schema: str, recs: list[JobRecord], first: list[SettleParams],
                 second: list[SettleParams]) -> tuple[list[SettleResult], list[SettleResult]]:
    """Run ``a.settle(first)`` and ``b.settle(second)`` while a third session holds the row of
    ``recs``' middle job, until both wait; then let it go. Both must end within DEADLINE."""
    middle = recs[len(recs) // 2]
    holder = await asyncpg.connect(PG_TEST_DSN)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute(f"SELECT 1 FROM {schema}.jobs WHERE id = $1 FOR UPDATE", middle.id)
        calls = asyncio.gather(a.settle(first, POLICY), b.settle(second, POLICY))
        await sessions_waiting_for(holder, 2, DEADLINE)
        await tx.rollback()
        ra, rb = await asyncio.wait_for(calls, DEADLINE)
    finally:
        await holder.close()
    return list(ra), list(rb)


async def test_one_batch_of_acks_sent_twice_in_opposite_orders_through_two_nodes(
        two_nodes: tuple[Store, Store, str]) -> None:
    a, b, schema = two_nodes
    await put(a, *[row() for _ in range(9)])
    recs = await lease(a, n=9)
    ra, rb = await _cross(a, b, schema, recs, _acks(recs), _acks(recs)[::-1])
    assert [r.error for r in ra + rb] == [None] * 18   # SPEC §6: the repeat succeeds again
    assert {(await get(a, r.id)).state for r in recs} == {int(State.COMPLETED)}


async def test_one_batch_of_nacks_sent_twice_in_opposite_orders_through_two_nodes(
        two_nodes: tuple[Store, Store, str]) -> None:
    a, b, schema = two_nodes
    await put(a, *[row() for _ in range(9)])
    recs = await lease(a, n=9)
    release = SettleKind.RELEASE
    ra, rb = await _cross(a, b, schema, recs, _acks(recs, release), _acks(recs, release)[::-1])
    # one release of each job wins; the other finds the job READY: its lease is gone
    assert sorted(str(x.error) for x in ra + rb).count("None") == 9
    assert {(await get(a, r.id)).state for r in recs} == {int(State.READY)}


async def test_an_ack_whose_job_was_re_leased_while_it_waited_for_the_row_is_a_lease_mismatch(
        two_nodes: tuple[Store, Store, str]) -> None:
    """The batch's statement reads the jobs, then waits for the middle one's row; meanwhile
    another session gives that job a new lease (as a reclaim and a re-lease by another node
    end up). The ack must see the new lease once it has the row: LEASE_MISMATCH, not a
    completion of the new holder's job."""
    a, _, schema = two_nodes
    await put(a, *[row() for _ in range(5)])
    recs = await lease(a, n=5)
    middle = recs[2]
    holder = await asyncpg.connect(PG_TEST_DSN)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute(f"UPDATE {schema}.jobs SET lease_id = $2, attempt = attempt + 1 WHERE id = $1",
                             middle.id, b"\1" * 16)
        call = asyncio.ensure_future(a.settle(_acks(recs), POLICY))
        await sessions_waiting_for(holder, 1, DEADLINE)
        await tx.commit()
        results = await asyncio.wait_for(call, DEADLINE)
    finally:
        await holder.close()
    assert [str(r.error) for r in results] == ["None", "None", "SettleError.LEASE_MISMATCH", "None", "None"]
    after = await get(a, middle.id)
    assert (after.state, after.lease_id) == (int(State.RESERVED), b"\1" * 16)


async def test_budgeted_reserves_through_two_nodes_at_once_lease_no_job_twice(
        two_nodes: tuple[Store, Store, str]) -> None:
    """``lease_within`` under SKIP LOCKED: 16 budgeted reserves at once, 8 per node, over 300
    jobs of 10 bytes; every job leased exactly once in the end."""
    a, b, _ = two_nodes
    rows = [row(payload=bytes(10)) for _ in range(300)]
    await put(a, *rows)
    leased: list[bytes] = []
    for _ in range(40):
        batches = await asyncio.gather(*[lease(s, n=7, max_bytes=55, worker=f"w{i}")
                                         for i, s in enumerate([a, b] * 8)])
        leased.extend(r.id for batch in batches for r in batch)
        assert all(len(batch) <= 5 for batch in batches)   # 5 × 10 bytes within 55
        if not any(batches):
            break
    assert sorted(leased) == sorted(r.id for r in rows)


async def test_acks_racing_a_reclaim_and_a_re_lease_on_another_node_agree_with_the_rows(
        two_nodes: tuple[Store, Store, str]) -> None:
    """Node A acks 60 jobs (in ten batches, half reversed, a moment before their leases end, by its clock)
    while node B reclaims the expired leases and re-leases the jobs (a moment after, by its
    clock), round after round. Whichever wins each row: an ack answered OK is a COMPLETED
    job never handed out again; an ack refused is LEASE_EXPIRED or LEASE_MISMATCH and the
    job is back (READY, or RESERVED under B's lease) — never both, never another error.
    (Which side wins varies; a run here saw 24 acks of 300 win, the rest LEASE_MISMATCH.)"""
    a, b, _ = two_nodes
    for _ in range(5):
        await put(a, *[row() for _ in range(60)])
        recs = await lease(a, n=60)
        end = recs[0].lease_expires_at or 0
        early = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, end - 1) for r in recs]
        chunks = [early[i:i + 6] for i in range(0, 60, 6)]
        chunks = [c if i % 2 else c[::-1] for i, c in enumerate(chunks)]
        calls: list[Any] = []
        for chunk in chunks:   # node A's acks and node B's sweeps and re-leases, interleaved
            calls += [a.settle(chunk, POLICY), b.reclaim_expired(end + 1, 6, POLICY)]
        calls.append(lease(b, n=60, now=end + 1, worker="b"))
        answers = await asyncio.gather(*calls)
        again = answers[-1]
        verdict = {p.job_id: v for chunk, answer in zip(chunks, answers[0:-1:2], strict=True)
                   for p, v in zip(chunk, answer, strict=True)}
        re_leased = {r.id for r in again}
        for r in recs:
            job = await get(a, r.id)
            err = verdict[r.id].error
            if err is None:
                assert job.state == int(State.COMPLETED) and r.id not in re_leased, (job, err)
            else:
                assert str(err) in ("SettleError.LEASE_EXPIRED", "SettleError.LEASE_MISMATCH"), err
                assert job.state in (int(State.READY), int(State.RESERVED)), job
                assert (job.state == int(State.RESERVED)) == (r.id in re_leased)
        # a re-lease's lease settles; B finishes the round
        if again:
            done = await b.settle([SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, end + 2) for r in again],
                                  POLICY)
            assert [x.error for x in done] == [None] * len(again)
        rest = await lease(b, n=60, now=end + 2, worker="b")
        await b.settle([SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, end + 3) for r in rest], POLICY)


async def test_two_nodes_sweeping_at_once_reclaim_every_expired_lease_once(
        two_nodes: tuple[Store, Store, str]) -> None:
    """Two nodes run the reclaim sweep at the same moments, with small limits, over leases of
    twelve queues (``expired_leases`` probes each queue, then locks the oldest it chose
    SKIP LOCKED: a lease the other node holds is left to it). Every expired lease is
    reclaimed exactly once (one ``lease_expired`` attempt in its history, the counts add
    up), the live ones are left."""
    a, b, schema = two_nodes
    queues = [f"q{i:02d}" for i in range(12)]
    for i, q in enumerate(queues):
        await put(a, *[row(q) for _ in range(10)])
        await lease(a, q, n=5, lease_us=(i + 1) * S)
        await lease(a, q, n=5, lease_us=(i + 1) * S + 100 * S)
    now, total = NOW + 50 * S, 0
    while True:
        done = await asyncio.gather(*(s.reclaim_expired(now, 7, POLICY) for s in (a, b, a, b)))
        total += sum(r.count for r in done)
        if not any(r.count for r in done):
            break
    assert total == 60
    for q in queues:
        page = await a.admin.state_counts(q)
        assert (page[q].ready, page[q].reserved) == (5, 5), (q, page[q])
    conn = await asyncpg.connect(PG_TEST_DSN, server_settings={"search_path": schema})
    try:
        histories = [h for (h,) in await conn.fetch("SELECT history FROM jobs WHERE state = 2")]
    finally:
        await conn.close()
    assert len(histories) == 60 and all(h.count("lease_expired") == 1 for h in histories), histories
