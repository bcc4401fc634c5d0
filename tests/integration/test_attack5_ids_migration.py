"""Migration 0010 (job ids carry their seq) attacked: a version-9 database with thousands of
jobs migrated by a new node while an older node goes on inserting (the version-9 way: no
seq) and leasing by id; afterwards two new nodes and the older one all enqueue at once.
Every job is stored once and found by id by every new node."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import asyncpg
import pytest
from storage.conformance_kit import lease
from support.backends import PG_TEST_DSN, fresh_schema

from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.policy import PolicyTable, QueuePolicy
from sepp.domain.records import JobRow
from sepp.storage.postgres import schema as pg_schema
from sepp.storage.postgres.store import PostgresStore

NOW = 1_790_000_000_000_000
S = 1_000_000
POLICY = PolicyTable(QueuePolicy(jitter=0.0))
OLD_INSERT = ("INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts, "
              "payload, encoding, extras, idempotency_key) VALUES ($1, 'q', 't', 2, 0, $2, $2, 3, 'p', '', NULL, NULL)")


@pytest.fixture
async def old_db() -> AsyncIterator[tuple[asyncpg.Connection, str]]:
    schema = fresh_schema()
    conn = await asyncpg.connect(PG_TEST_DSN)
    try:
        assert await pg_schema.migrate(conn, schema, up_to=9) == (0, 9)
        await conn.execute(f"SET search_path = {schema}")
        yield conn, schema
    finally:
        await conn.close()


async def test_migrating_while_an_older_node_inserts_then_all_nodes_enqueue(
        old_db: tuple[asyncpg.Connection, str]) -> None:
    conn, schema = old_db
    legacy = [os.urandom(16) for _ in range(5000)]
    await conn.copy_records_to_table(
        "jobs", records=[(j, "q", "t", 2, 0, NOW, NOW, 3, b"p", "") for j in legacy],
        columns=("id", "queue", "job_type", "state", "priority", "run_at", "enqueued_at", "max_attempts", "payload",
                 "encoding"))
    old = await asyncpg.connect(PG_TEST_DSN, server_settings={"search_path": schema})
    during: list[bytes] = []
    stop = asyncio.Event()

    async def older_node() -> None:
        while not stop.is_set():
            batch = [os.urandom(16) for _ in range(5)]
            await old.executemany(OLD_INSERT, [(j, NOW) for j in batch])
            during.extend(batch)
            await asyncio.sleep(0.005)

    inserting = asyncio.create_task(older_node())
    a = PostgresStore(PG_TEST_DSN, schema=schema, node="a5-mig-a")
    b = PostgresStore(PG_TEST_DSN, schema=schema, node="a5-mig-b")
    try:
        await asyncio.sleep(0.05)
        await asyncio.gather(a.open(), b.open())  # one migrates, the other waits for it
        new: list[bytes] = []

        async def enqueue(store: PostgresStore, size: int) -> None:
            ids = await store.new_job_ids(size)
            rows = [JobRow(u.bytes, "q", "t", 2, 0, NOW, NOW, 3, b"p", "", None, None) for u in ids]
            await store.enqueue(rows, [0] * size, NOW)
            new.extend(u.bytes for u in ids)

        await asyncio.gather(*(enqueue(s, n) for s in (a, b) for n in (1, 30, 700, 1500)))
        stop.set()
        await inserting
        total = await conn.fetchval("SELECT count(*) FROM jobs")
        assert total == len(legacy) + len(during) + len(new)
        assert await conn.fetchval("SELECT count(DISTINCT id) FROM jobs") == total
        assert await conn.fetchval("SELECT count(*) FROM jobs WHERE job_id_foreign(id, seq)") == \
            len(legacy) + len(during)
        for job_id in legacy[::500] + during[::5] + new[::150]:
            for store in (a, b):
                rec = await store.get_job(job_id)
                assert rec is not None and rec.id == job_id, job_id.hex()
        jobs = await lease(a, n=200, now=NOW + S)
        results = await b.settle([SettleParams(j.id, j.lease_id or b"", SettleKind.ACK, NOW + 2 * S) for j in jobs],
                                 POLICY)
        assert [r.error for r in results] == [None] * 200
    finally:
        stop.set()
        inserting.cancel()
        await old.close()
        await a.close()
        await b.close()
