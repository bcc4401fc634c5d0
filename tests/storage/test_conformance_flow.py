"""Conformance: flow control inside ``Store.reserve`` (docs/flow-control.md) —
``max_in_flight`` at the limit and one past, priority order among the jobs let through,
queues without limits untouched, and (PostgreSQL) the bound held by three stores on one
schema reserving at once, as three nodes do.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.nodes import open_nodes

from sepp.api.v1 import common_pb2 as pb
from sepp.domain.params import FlowLimits, ReserveParams, SettleKind
from sepp.domain.records import JobRecord
from sepp.storage.base import Store
from storage.conformance_kit import LEASE, NOW, S, put, row, settle1


async def limited(store: Store, flow: dict[str, FlowLimits], *queues: str, n: int = 1, now: int = NOW,
                  worker: str = "w") -> list[JobRecord]:
    """Reserve up to ``n`` from ``queues`` (default "q") with the flow limits ``flow``."""
    names = list(queues) or ["q"]
    return await store.reserve(ReserveParams(names, n, now, dict.fromkeys(names, LEASE), worker, flow=flow))


async def reserved(store: Store, queue: str = "q") -> int:
    """How many jobs of ``queue`` are RESERVED, as the admin counts say."""
    counts = await store.admin.state_counts(queue)  # type: ignore[attr-defined]
    return counts[queue].reserved if queue in counts else 0


async def test_max_in_flight_at_the_limit_and_one_past(store: Store) -> None:
    await put(store, *[row() for _ in range(6)])
    flow = {"q": FlowLimits(max_in_flight=3)}
    first = await limited(store, flow, n=2)
    assert len(first) == 2
    assert len(await limited(store, flow, n=5)) == 1          # the third slot, not five
    assert await limited(store, flow, n=5) == []              # at the limit: nothing, no error
    assert await reserved(store) == 3
    await settle1(store, first[0], SettleKind.ACK, NOW + 1)
    assert len(await limited(store, flow, n=5, now=NOW + 2)) == 1  # one slot freed, one job
    assert await reserved(store) == 3


async def test_priority_order_holds_among_the_jobs_let_through(store: Store) -> None:
    rows = [row(priority=p) for p in (1, 9, 5, 7)]
    await put(store, *rows)
    got = await limited(store, {"q": FlowLimits(max_in_flight=2)}, n=4)
    assert [r.priority for r in got] == [9, 7]


async def test_a_limit_binds_only_its_own_queue(store: Store) -> None:
    await put(store, *[row("a") for _ in range(3)], *[row("b") for _ in range(3)])
    got = await limited(store, {"a": FlowLimits(max_in_flight=1)}, "a", "b", n=10)
    assert [r.queue for r in got] == ["a", "b", "b", "b"]


@pytest.mark.postgres_only(reason="several nodes on one database: SQLite's folder holds one process")
async def test_three_nodes_on_one_schema_never_exceed_max_in_flight(backend: str, tmp_path: Path) -> None:
    async with open_nodes(backend, tmp_path, NOW, n=3) as (nodes, _):  # one schema
        await _race(nodes)


async def _race(nodes: list[Store]) -> None:
    await put(nodes[0], *[row() for _ in range(200)])
    flow = {"q": FlowLimits(max_in_flight=3)}
    peak, acked, held_back = 0, 0, 0

    async def reserver(i: int) -> None:
        nonlocal peak, acked, held_back
        store = nodes[i % 3]
        idle = 0
        while acked < 200 and idle < 200:
            jobs = await limited(store, flow, n=2, worker=f"w{i}")
            if not jobs:
                if acked < 190:  # at most 3 leased: READY jobs were there, the limit held them back
                    held_back += 1
                idle += 1
                await asyncio.sleep(0.001)
                continue
            idle = 0
            peak = max(peak, await reserved(store))
            for job in jobs:
                await settle1(store, job, SettleKind.ACK, NOW + 1)
                acked += 1

    await asyncio.gather(*(reserver(i) for i in range(12)))
    assert acked == 200
    assert peak <= 3, f"{peak} jobs RESERVED at once under a concurrency limit of 3"
    assert held_back > 0, "12 reservers of 2 never met the limit of 3: the race did not test it"


def _rate(amount: int, per_s: float = 1.0, burst: int = 0, max_in_flight: int = 0) -> dict[str, FlowLimits]:
    return {"q": FlowLimits(max_in_flight=max_in_flight, rate_amount=amount, rate_period=int(per_s * S),
                            rate_burst=burst or amount)}


async def test_rate_limit_starts_with_a_full_bucket_then_refills_evenly(store: Store) -> None:
    await put(store, *[row() for _ in range(30)])
    flow = _rate(10, burst=4)                                  # 10/s, bucket of 4
    assert len(await limited(store, flow, n=10)) == 4          # the burst, not ten
    assert await limited(store, flow, n=10) == []              # empty bucket: nothing, no error
    assert await limited(store, flow, n=10, now=NOW + S // 10 - 1) == []    # one past: not yet a token
    assert len(await limited(store, flow, n=10, now=NOW + S // 10)) == 1    # at 100 ms: exactly one
    assert len(await limited(store, flow, n=10, now=NOW + 10 * S)) == 4     # refilled, capped at the burst


async def test_rate_limit_spends_only_what_was_leased(store: Store) -> None:
    await put(store, row(), row())
    flow = _rate(5)
    assert len(await limited(store, flow, n=10)) == 2          # two jobs: two tokens
    await put(store, *[row() for _ in range(5)])
    assert len(await limited(store, flow, n=10)) == 3          # three left


async def test_rate_limit_and_max_in_flight_together(store: Store) -> None:
    await put(store, *[row() for _ in range(10)])
    flow = _rate(100, max_in_flight=2)
    assert len(await limited(store, flow, n=10)) == 2          # the slots bind first
    assert await limited(store, flow, n=10) == []


async def test_rate_limit_clock_going_back_refills_nothing(store: Store) -> None:
    await put(store, *[row() for _ in range(10)])
    flow = _rate(1, burst=1)
    assert len(await limited(store, flow, now=NOW + 5 * S)) == 1
    assert await limited(store, flow, now=NOW) == []           # another node's clock behind
    assert await limited(store, flow, now=NOW + 5 * S + S - 1) == []
    assert len(await limited(store, flow, now=NOW + 6 * S)) == 1


def tenant(value: object) -> bytes:
    """An ``extras`` blob whose custom map holds ``tenant_id`` = ``value`` (str, int or bool)."""
    cv = (pb.CustomValue(bool_value=value) if isinstance(value, bool) else
          pb.CustomValue(int_value=value) if isinstance(value, int) else pb.CustomValue(string_value=str(value)))
    return pb.EnqueueRequest(custom={"tenant_id": cv}).SerializeToString()


def _per_key(most: int) -> dict[str, FlowLimits]:
    return {"q": FlowLimits(key="tenant_id", max_per_key=most)}


async def test_per_key_limit_at_the_limit_and_one_past(store: Store) -> None:
    a = [row(extras=tenant("a")) for _ in range(4)]
    b = [row(extras=tenant("b")) for _ in range(2)]
    await put(store, *a, *b)
    first = await limited(store, _per_key(2), n=10)
    assert [r.id for r in first] == [a[0].id, a[1].id, b[0].id, b[1].id]   # two per tenant, in order
    assert await limited(store, _per_key(2), n=10) == []
    await settle1(store, first[0], SettleKind.ACK, NOW + 1)
    assert [r.id for r in await limited(store, _per_key(2), n=10, now=NOW + 2)] == [a[2].id]


async def test_per_key_groups_are_typed_and_jobs_without_the_entry_share_one(store: Store) -> None:
    rows = [row(extras=tenant("1")), row(extras=tenant(1)), row(extras=tenant(True)), row(), row(),
            row(extras=pb.EnqueueRequest(custom={"other": pb.CustomValue(int_value=1)}).SerializeToString())]
    await put(store, *rows)
    got = await limited(store, _per_key(1), n=10)
    assert [r.id for r in got] == [rows[0].id, rows[1].id, rows[2].id, rows[3].id]   # "1", 1, true, the no-entry group


async def test_a_tenant_behind_another_tenants_thousand_jobs_is_not_starved(store: Store) -> None:
    await put(store, *[row(extras=tenant("a"), priority=9) for _ in range(1000)])
    late = row(extras=tenant("b"), priority=0)
    await put(store, late)
    got = await limited(store, _per_key(1), n=5)
    assert [r.queue for r in got] == ["q", "q"] and got[1].id == late.id


async def test_per_key_limit_respects_the_byte_budget_and_max_in_flight(store: Store) -> None:
    await put(store, *[row(extras=tenant(i), payload=bytes(10)) for i in range(6)])
    names = ["q"]
    got = await store.reserve(ReserveParams(names, 10, NOW, {"q": LEASE}, "w", 25, flow=_per_key(1)))
    assert len(got) == 2                                       # 10 + 10 bytes fit in 25, a third does not
    flow = {"q": FlowLimits(max_in_flight=3, key="tenant_id", max_per_key=1)}
    assert len(await limited(store, flow, n=10)) == 1          # two held already: one slot left


# ---------------------------------------------------------------------- the held-back view's read


async def test_flow_read_without_rate_or_key_reads_nothing(store: Store) -> None:
    await put(store, row())
    read = await store.admin.flow_read("q", FlowLimits(max_in_flight=1))  # type: ignore[attr-defined]
    assert (read.bucket, read.key_allowed, read.key_scanned) == (None, 0, 0)


async def test_flow_read_gives_the_bucket_as_the_reserve_left_it(store: Store) -> None:
    await put(store, *[row() for _ in range(5)])
    flow = _rate(10, burst=4)
    assert (await store.admin.flow_read("q", flow["q"])).bucket is None  # type: ignore[attr-defined]
    assert len(await limited(store, flow, n=3)) == 3
    bucket = (await store.admin.flow_read("q", flow["q"])).bucket  # type: ignore[attr-defined]
    assert bucket is not None and (round(bucket[0], 6), bucket[1]) == (1.0, NOW)


async def test_flow_read_walks_the_per_key_groups_as_a_reserve_would(store: Store) -> None:
    a = [row(extras=tenant("a")) for _ in range(4)]
    await put(store, *a, row(extras=tenant("b")), row(), row())
    limits = _per_key(2)["q"]
    read = await store.admin.flow_read("q", limits)  # type: ignore[attr-defined]
    assert (read.key_allowed, read.key_scanned) == (5, 7)      # a, a, b, none, none; two of A's held back
    assert len(await limited(store, _per_key(2), n=1)) == 1    # one of A's now RESERVED
    read = await store.admin.flow_read("q", limits)  # type: ignore[attr-defined]
    assert (read.key_allowed, read.key_scanned) == (4, 6)      # A has one slot left
    assert len(await limited(store, _per_key(2), n=10)) == 4   # what the read said would pass
    read = await store.admin.flow_read("q", limits)  # type: ignore[attr-defined]
    assert (read.key_allowed, read.key_scanned) == (0, 2)      # A's last two, held back
