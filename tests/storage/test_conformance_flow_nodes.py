"""Conformance: the per-key limit's fast path on every backend (a reserve that no group
could fill past the limit skips the group walk; one that could walks it), and flow limits
held by three stores on one PostgreSQL schema reserving at once,
as three nodes do — the rate limit's bucket drawn by every node (first use
included: the bucket row is created by whichever node draws first), the per-key limit
both below and at its bound (its fast path, which skips the group walk while no group can
reach the limit, and the walk), and a not-binding limit leasing every job. Each reserve
goes through the byte budget, as the engine's do.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.nodes import open_nodes

from sepp.domain.params import FlowLimits, ReserveParams, SettleKind
from sepp.domain.records import JobRecord
from sepp.storage.base import Store
from sepp.storage.flow_keys import group_of
from storage.conformance_kit import LEASE, NOW, S, put, row, settle1
from storage.test_conformance_flow import tenant

#: Several nodes on one database: SQLite's folder holds one process.
nodes_only = pytest.mark.postgres_only(reason="several nodes on one database: SQLite's folder holds one process")

#: The byte budget of every reserve here (the engine always passes one).
BUDGET = 4 << 20


@pytest.fixture
async def nodes(backend: str, tmp_path: Path) -> AsyncIterator[list[Store]]:
    """Three open stores on one schema (one fake clock, frozen at NOW)."""
    async with open_nodes(backend, tmp_path, NOW, n=3) as (stores, _):
        yield stores


async def _reserve(store: Store, flow: dict[str, FlowLimits], n: int, worker: str) -> list[JobRecord]:
    return await store.reserve(ReserveParams(["q"], n, NOW, {"q": LEASE}, worker, BUDGET, flow=flow))


@nodes_only
async def test_three_nodes_draw_one_bucket_never_more_than_its_tokens(nodes: list[Store]) -> None:
    await put(nodes[0], *[row() for _ in range(100)])
    flow = {"q": FlowLimits(rate_amount=1, rate_period=3600 * S, rate_burst=7)}   # 7 now, the next in an hour
    leased: list[bytes] = []

    async def reserver(i: int) -> None:
        for _ in range(20):
            leased.extend(j.id for j in await _reserve(nodes[i % 3], flow, 2, f"w{i}"))

    await asyncio.gather(*(reserver(i) for i in range(9)))
    assert len(leased) == len(set(leased)) == 7


async def _race_per_key(nodes: list[Store], most: int, tenants: int, jobs: int) -> int:
    """Reserve (n = 1, 2 or 3) and ack every job from 12 reservers on three nodes under a per-key limit
    of ``most`` (the jobs in runs of five per tenant, so a reserve meets one tenant
    several times); the highest count of one tenant's jobs held at once (by the reservers' own
    books: a job leaves them before its ack is sent, so the count never runs high)."""
    await put(nodes[0], *[row(extras=tenant(f"t{i // 5 % tenants}")) for i in range(jobs)])
    flow = {"q": FlowLimits(key="tenant_id", max_per_key=most)}
    held: Counter[object] = Counter()
    peak, acked, held_back = 0, 0, 0

    async def reserver(i: int) -> None:
        nonlocal peak, acked, held_back
        idle = 0
        while acked < jobs and idle < 300:
            got = await _reserve(nodes[i % 3], flow, 1 + i % 4 % 3, f"w{i}")
            if not got:
                if acked < jobs - 36:  # at most 36 held (12 × 3): READY jobs were held back
                    held_back += 1
                idle += 1
                await asyncio.sleep(0.001)
                continue
            idle = 0
            for job in got:
                held[group_of(job.extras, "tenant_id")] += 1
            peak = max(peak, *held.values())
            for job in got:
                held[group_of(job.extras, "tenant_id")] -= 1
                await settle1(nodes[i % 3], job, SettleKind.ACK, NOW + 1)
                acked += 1

    await asyncio.gather(*(reserver(i) for i in range(12)))
    assert acked == jobs
    if most * tenants < 12:  # more reservers than the limit lets run: some were held back
        assert held_back > 0, "the per-key limit never held a reserver back: the race did not test it"
    return peak


@nodes_only
async def test_three_nodes_hold_the_per_key_limit_where_it_binds(nodes: list[Store]) -> None:
    peak = await _race_per_key(nodes, most=2, tenants=3, jobs=150)
    assert peak <= 2, f"{peak} jobs of one key RESERVED at once under a per-key limit of 2"


@nodes_only
async def test_three_nodes_with_a_per_key_limit_that_cannot_bind_lease_every_job(nodes: list[Store]) -> None:
    assert await _race_per_key(nodes, most=1000, tenants=3, jobs=150) >= 1


async def test_per_key_fast_path_up_to_the_limit_then_the_walk(store: Store) -> None:
    await put(store, *[row(extras=tenant("a")) for _ in range(6)], row(extras=tenant("b")))
    flow = {"q": FlowLimits(key="tenant_id", max_in_flight=100, max_per_key=3)}
    assert len(await _reserve(store, flow, 2, "w")) == 2       # 0 held + 2 <= 3: no walk needed
    got = await _reserve(store, flow, 2, "w")                  # 2 held + 2 > 3: the walk
    assert [group_of(j.extras, "tenant_id") for j in got] == [("string_value", "a"), ("string_value", "b")]
    assert await _reserve(store, flow, 3, "w") == []           # a at its limit, b has no more jobs
