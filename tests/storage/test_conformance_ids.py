"""Job ids (``Store.new_job_ids``): the ids a store makes and any other 16-byte id find their
job through every path that looks a job up by id, alone and mixed in one call.

On PostgreSQL the two kinds are stored apart (schema version 10, docs/decisions.md
"PostgreSQL: job ids carry their seq"): an id the store made carries its row's seq (found
through the primary key), any other is "foreign" (found through ``jobs_id_foreign``) — so
each path is run with both, in calls of one row, of a few (one INSERT) and of many (a COPY),
plain and keyed. SQLite makes random UUIDv7s and looks every id up the same way.
"""

from __future__ import annotations

import os
import uuid

import asyncpg
import pytest

from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.states import State
from sepp.storage.admin import JobQuery, Outcome
from sepp.storage.base import JobRow, Store
from sepp.storage.postgres.store import PostgresStore
from storage.conformance_kit import LEASE, NOW, POLICY, S, get, lease, row

#: Rows per call: one row, a few (one multi-row INSERT) and many (a binary COPY on PostgreSQL).
SIZES = [1, 5, 100]


async def _native(store: Store, rows: list[JobRow]) -> list[JobRow]:
    """``rows`` with ids the store made."""
    ids = await store.new_job_ids(len(rows))
    return [r._replace(id=u.bytes) for r, u in zip(rows, ids, strict=True)]


async def _foreign_rows(store: Store) -> int:
    """How many jobs a PostgreSQL store keeps in jobs_id_foreign (-1 on SQLite)."""
    if not isinstance(store, PostgresStore):
        return -1
    conn = await asyncpg.connect(store.dsn, server_settings={"search_path": store.schema})
    try:
        return int(await conn.fetchval("SELECT count(*) FROM jobs WHERE job_id_foreign(id, seq)"))
    finally:
        await conn.close()


async def test_new_ids_are_distinct_uuidv7s_also_past_a_block(store: Store) -> None:
    made = [u for n in (1, 300, 3000, 1) for u in await store.new_job_ids(n)]
    assert len({u.bytes for u in made}) == len(made) == 3302
    now_ms = NOW // 1000
    for u in made:
        parsed = uuid.UUID(bytes=u.bytes)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122 and str(parsed) == str(u)
        # UUIDv7's first 48 bits: Unix ms of the real clock (the store's FakeClock is not used).
        assert abs(int.from_bytes(u.bytes[:6], "big") - now_ms) < 10 * 365 * 86_400_000
    assert await store.new_job_ids(0) == []
    if isinstance(store, PostgresStore):
        seqs = [int.from_bytes(u.bytes[8:], "big") & ((1 << 62) - 1) for u in made]
        assert seqs == sorted(seqs)  # handed out in increasing order: FIFO among a node's jobs


@pytest.mark.parametrize("size", SIZES)
async def test_native_and_foreign_ids_in_one_call_are_found_and_settled(store: Store, size: int) -> None:
    native = await _native(store, [row() for _ in range(size)])
    foreign = [row() for _ in range(size)]
    for part in (native, foreign):  # one kind per call
        assert await store.enqueue(part, [0] * len(part), NOW) == {}
    more = await _native(store, [row() for _ in range(size)])
    more = [j for pair in zip(more, [row() for _ in range(size)], strict=True) for j in pair]  # both in one call
    assert await store.enqueue(more, [0] * len(more), NOW) == {}
    every = native + foreign + more
    if isinstance(store, PostgresStore):
        assert await _foreign_rows(store) == 2 * size
    for r in every:
        rec = await get(store, r.id)
        assert (rec.id, rec.queue, rec.state) == (r.id, "q", int(State.READY))
    leased = await lease(store, n=len(every))
    assert sorted(j.id for j in leased) == sorted(r.id for r in every)
    assert leased[0].lease_id is not None
    # Acks of both kinds in one call (PostgreSQL: the batched ack_many), one nack and one
    # extension by id.
    acks = [SettleParams(j.id, j.lease_id or b"", SettleKind.ACK, NOW + S) for j in leased[1:]]
    results = await store.settle(acks, POLICY)
    assert all(r.error is None for r in results), results
    first = leased[0]
    assert first.lease_id is not None
    ext = await store.extend(first.id, first.lease_id, NOW + S, NOW + LEASE + S)
    assert ext.error is None, ext
    (nack,) = await store.settle([SettleParams(first.id, first.lease_id, SettleKind.DEAD_LETTER, NOW + 2 * S,
                                                reason="r")], POLICY)
    assert nack.error is None and (await get(store, first.id)).state == int(State.DEAD_LETTERED)
    for j in leased[1:]:
        assert (await get(store, j.id)).state == int(State.COMPLETED)


@pytest.mark.parametrize("kind", ["native", "foreign"])
async def test_admin_writes_and_searches_find_a_job_by_either_kind_of_id(store: Store, kind: str) -> None:
    rows = [row(key=f"k{i}") for i in range(3)]
    if kind == "native":
        rows = await _native(store, rows)
    target, dead, gone = rows
    entry = (target.id, "user", "7")
    assert await store.enqueue([target._replace(extras=b"\x22\x00"), dead, gone], [NOW + 3600 * S] * 3, NOW,
                               (), [entry]) == {}
    # The key's holder answers a later call with the original id (PostgreSQL: held_keys).
    again = (await _native(store, [row(key="k0")]))[0] if kind == "native" else row(key="k0")
    assert await store.enqueue([again], [NOW + 3600 * S], NOW) == {0: (target.id, int(State.READY))}
    assert await store.admin.find_idempotency("q", "k0") == (target.id, NOW + 3600 * S)
    page = await store.admin.list_jobs(JobQuery(job_id=target.id), None, 10)
    assert [s.record.id for s in page.jobs] == [target.id]
    page = await store.admin.list_jobs(JobQuery(custom=(("user", "7"),)), None, 10)
    assert [s.record.id for s in page.jobs] == [target.id]
    page = await store.admin.list_jobs(JobQuery(idempotency_key="k1"), None, 10)
    assert [s.record.id for s in page.jobs] == [dead.id]
    assert (await store.admin.cancel(dead.id, NOW, POLICY, "stop")).outcome is Outcome.DONE
    assert (await store.admin.requeue(dead.id, NOW + S)).outcome is Outcome.DONE
    assert (await get(store, dead.id)).state == int(State.READY)
    assert (await store.admin.delete_job(gone.id)).outcome is Outcome.DONE
    assert await store.get_job(gone.id) is None
    assert (await store.admin.delete_job(gone.id)).outcome is Outcome.NOT_FOUND
    # An id nobody stored, and one that looks like a made id of a seq some job has.
    assert await store.get_job(os.urandom(16)) is None
    forged = target.id[:6] + bytes([target.id[6] ^ 1]) + target.id[7:]
    assert await store.get_job(forged) is None
    assert (await store.admin.delete_job(forged)).outcome is Outcome.NOT_FOUND
