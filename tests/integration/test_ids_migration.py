"""PostgreSQL migration 0010 (job ids carry their seq; docs/decisions.md "PostgreSQL: job ids
carry their seq"): a database of version 9 holding jobs in several states, a claimed key
and a custom-index entry is migrated in place — ``jobs_id_key`` is gone, every old row is
in ``jobs_id_foreign`` — and the old jobs are then found, leased, acked, deduplicated
against, searched and deleted by id as before, next to new jobs whose ids carry their seq;
a row an older node inserts afterwards (its own id, the sequence's next seq) is found too;
and a migration while an older node goes on inserting, then every node enqueuing at once."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import asyncpg
import pytest
from storage.conformance_kit import lease
from support.backends import PG_TEST_DSN, fresh_schema
from support.worker import until

from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.policy import PolicyTable, QueuePolicy
from sepp.domain.records import JobRow
from sepp.storage.admin import JobQuery, Outcome
from sepp.storage.postgres import schema as pg_schema
from sepp.storage.postgres.store import PostgresStore

pytestmark = pytest.mark.postgres_only(reason="a PostgreSQL schema migration")

NOW = 1_790_000_000_000_000
S = 1_000_000
POLICY = PolicyTable(QueuePolicy(jitter=0.0))
#: The columns version 9 inserts (an older node's insert_job: no seq, the identity's next).
OLD_INSERT = ("INSERT INTO {s}.jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts, "
              "payload, encoding, extras, idempotency_key) VALUES ($1, 'q', 't', $2, 0, $3, $3, 3, 'p', '', $4, $5)")


@pytest.fixture
async def old_schema() -> AsyncIterator[tuple[asyncpg.Connection, str]]:
    schema = fresh_schema()
    conn = await asyncpg.connect(PG_TEST_DSN)
    try:
        yield conn, schema
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()


async def test_version_9_jobs_are_found_by_id_after_the_migration(old_schema: tuple[asyncpg.Connection, str]) -> None:
    conn, schema = old_schema
    assert await pg_schema.migrate(conn, schema, up_to=9) == (0, 9)
    ready, keyed, scheduled, tagged = (os.urandom(16) for _ in range(4))
    insert = OLD_INSERT.format(s=schema)
    await conn.execute(insert, ready, 2, NOW, None, None)
    await conn.execute(insert, keyed, 2, NOW, None, "k")
    await conn.execute(insert, scheduled, 1, NOW + 3600 * S, None, None)
    await conn.execute(insert, tagged, 2, NOW, b"\x22\x00", None)
    await conn.execute(f"INSERT INTO {schema}.idempotency VALUES ('q', 'k', $1, $2)", keyed, NOW + 3600 * S)
    await conn.execute(f"INSERT INTO {schema}.job_custom SELECT seq, 'user', '7' FROM {schema}.jobs WHERE id = $1",
                       tagged)
    assert await pg_schema.migrate(conn, schema) == (9, pg_schema.latest_version())
    indexes = {r[0] for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = $1 "
                                              "AND tablename = 'jobs'", schema)}
    assert "jobs_id_key" not in indexes and "jobs_id_foreign" in indexes, indexes
    assert await conn.fetchval(f"SELECT count(*) FROM {schema}.jobs WHERE {schema}.job_id_foreign(id, seq)") == 4
    store = PostgresStore(PG_TEST_DSN, schema=schema)
    await store.open()
    try:
        for job_id in (ready, keyed, scheduled, tagged):
            rec = await store.get_job(job_id)
            assert rec is not None and rec.id == job_id
        # New jobs next to the old ones, and a row an older node inserts after the migration.
        (new,) = await store.new_job_ids(1)
        new_row = JobRow(new.bytes, "q", "t", 2, 0, NOW, NOW, 3, b"p", "", None, None)
        assert await store.enqueue([new_row], [0], NOW) == {}
        late = os.urandom(16)
        await conn.execute(insert, late, 2, NOW, None, None)
        assert await conn.fetchval(f"SELECT count(*) FROM {schema}.jobs WHERE {schema}.job_id_foreign(id, seq)") == 5
        # The old key still deduplicates to its old job.
        again = JobRow(os.urandom(16), "q", "t", 2, 0, NOW, NOW, 3, b"p", "", None, "k")
        assert await store.enqueue([again], [NOW + 3600 * S], NOW) == {0: (keyed, 2)}
        page = await store.admin.list_jobs(JobQuery(custom=(("user", "7"),)), None, 10)
        assert [s.record.id for s in page.jobs] == [tagged]
        page = await store.admin.list_jobs(JobQuery(idempotency_key="k"), None, 10)
        assert [s.record.id for s in page.jobs] == [keyed]
        jobs = await lease(store, n=10, now=NOW + S)
        assert {j.id for j in jobs} == {ready, keyed, tagged, new.bytes, late}
        results = await store.settle([SettleParams(j.id, j.lease_id or b"", SettleKind.ACK, NOW + 2 * S)
                                      for j in jobs], POLICY)
        assert [r.error for r in results] == [None] * 5
        assert (await store.admin.delete_job(scheduled)).outcome is Outcome.DONE
        assert await store.get_job(scheduled) is None
    finally:
        await store.close()


async def test_migrating_while_an_older_node_inserts_then_all_nodes_enqueue(
        old_schema: tuple[asyncpg.Connection, str]) -> None:
    """A version-9 database with thousands of jobs migrated by a new node (two start at once:
    one migrates, the other waits) while an older node goes on inserting the version-9 way
    (no seq); afterwards both new nodes enqueue at once. Every job is stored once and found
    by id by every new node, and acks through the other node complete them."""
    conn, schema = old_schema
    assert await pg_schema.migrate(conn, schema, up_to=9) == (0, 9)
    await conn.execute(f"SET search_path = {schema}")
    insert = OLD_INSERT.format(s=schema)
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
            await old.executemany(insert, [(j, 2, NOW, None, None) for j in batch])
            during.extend(batch)
            await asyncio.sleep(0.005)

    inserting = asyncio.create_task(older_node())
    a = PostgresStore(PG_TEST_DSN, schema=schema, node="a5-mig-a")
    b = PostgresStore(PG_TEST_DSN, schema=schema, node="a5-mig-b")
    try:
        await until(lambda: during, what="the older node's first inserts")  # it inserts during the migration
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
