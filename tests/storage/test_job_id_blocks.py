"""Job ids that carry their seq (PostgreSQL schema version 10; docs/decisions.md "PostgreSQL:
job ids carry their seq"), attacked at the storage seam: several nodes on one schema
enqueuing at once, crafted ids, an older node's inserts, a node's connections killed while
it needs a block, a caller cancelled while it waits for one, a batch needing many blocks.

Every store here is a real ``PostgresStore`` on a fresh schema of the test database; the
node names are this module's own; PostgreSQL is made unreachable for one node by a relay
in front of it that is shut and opened again (never by touching PostgreSQL)."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from support.backends import PG_TEST_DSN, fresh_schema
from support.pg_locks import sessions_waiting_for
from support.proxy import PausableProxy

from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.states import State
from sepp.storage.admin import JobQuery, Outcome
from sepp.storage.base import JobRow
from sepp.storage.errors import StoreError, StoreUnavailable
from sepp.storage.postgres import ids as pg_ids
from sepp.storage.postgres.store import PostgresStore
from storage.conformance_kit import NOW, POLICY, S, lease, row

pytestmark = pytest.mark.postgres_only(reason="nodes of one PostgreSQL database")

Opener = Callable[..., Awaitable[PostgresStore]]


def carried(job_id: bytes) -> int:
    return pg_ids.carried_seq(job_id)


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    yield fresh_schema()


@pytest.fixture
async def sql(schema: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection with the test schema on its search path (made after a store
    created the schema; statements name the schema's objects unqualified)."""
    conn = await asyncpg.connect(PG_TEST_DSN, server_settings={"search_path": schema})
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def open_store(schema: str) -> AsyncIterator[Opener]:
    """Open stores (nodes) on the test schema, each with a node name of its own
    (``a5-<hex>-<i>``: its connections' application_name); closed at teardown."""
    opened: list[PostgresStore] = []
    tag = secrets.token_hex(3)

    async def make(**kw: object) -> PostgresStore:
        store = PostgresStore(PG_TEST_DSN, schema=schema, node=f"a5-{tag}-{len(opened)}", **kw)  # type: ignore[arg-type]
        await store.open()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


async def native(store: PostgresStore, rows: list[JobRow]) -> list[JobRow]:
    ids = await store.new_job_ids(len(rows))
    return [r._replace(id=u.bytes) for r, u in zip(rows, ids, strict=True)]


# ---------------------------------------------------------------------------- several nodes


async def test_three_nodes_enqueuing_at_once_store_every_job_once(open_store: Opener,
                                                                    sql: asyncpg.Connection) -> None:
    """Three nodes enqueue batches of 1, 7, 300 and 2,500 jobs at once (native ids, a few
    foreign ones mixed in): no primary-key violation, every job is stored once under the id
    it was given, native rows with the seq their id carries, and each node's own jobs are in
    increasing seq order."""
    nodes = [await open_store() for _ in range(3)]
    made: list[list[JobRow]] = [[] for _ in nodes]

    async def producer(i: int) -> None:
        store = nodes[i]
        for size in (1, 7, 300, 2500, 1, 64):
            rows = await native(store, [row() for _ in range(size)])
            if size == 7:
                rows[3] = row()  # a foreign id among native ones
            assert await store.enqueue(rows, [0] * len(rows), NOW) == {}
            made[i].extend(rows)

    await asyncio.gather(*(producer(i) for i in range(3)), *(producer(i) for i in range(3)))
    every = [r for rows in made for r in rows]
    stored = {bytes(r["id"]): int(r["seq"]) for r in await sql.fetch("SELECT id, seq FROM jobs")}
    assert len(stored) == len(every) == await sql.fetchval("SELECT count(*) FROM jobs")
    assert set(stored) == {r.id for r in every}
    foreign = {bytes(r[0]) for r in await sql.fetch("SELECT id FROM jobs WHERE job_id_foreign(id, seq)")}
    assert len(foreign) == 6
    for r in every:
        if r.id not in foreign:
            assert stored[r.id] == carried(r.id)
    for rows in made:
        natives = [stored[r.id] for r in rows if r.id not in foreign]
        assert len(set(natives)) == len(natives)
    for store in nodes:
        for r in every[::97]:
            rec = await store.get_job(r.id)
            assert rec is not None and rec.id == r.id


async def test_keyed_enqueues_racing_on_three_nodes_keep_one_job_per_key(open_store: Opener,
                                                                          sql: asyncpg.Connection) -> None:
    """The same 50 keys enqueued at once through three nodes with native ids: one job per
    key, every call answered with that job's id, and the job found by it on every node."""
    nodes = [await open_store() for _ in range(3)]
    keys = [f"k{i}" for i in range(50)]

    async def call(store: PostgresStore) -> list[bytes]:
        rows = await native(store, [row(key=k) for k in keys])
        dedups = await store.enqueue(rows, [NOW + 3600 * S] * len(rows), NOW)
        return [dedups[i][0] if i in dedups else r.id for i, r in enumerate(rows)]

    answers = await asyncio.gather(*(call(nodes[i % 3]) for i in range(6)))
    assert await sql.fetchval("SELECT count(*) FROM jobs") == 50
    for i in range(50):
        assert len({a[i] for a in answers}) == 1
        for store in nodes:
            rec = await store.get_job(answers[0][i])
            assert rec is not None and rec.idempotency_key == keys[i]


# ---------------------------------------------------------------------------- crafted ids


async def test_a_crafted_id_carrying_a_seq_not_yet_handed_out_does_not_break_later_enqueues(
        open_store: Opener) -> None:
    """``enqueue`` accepts any 16-byte id (``Store.new_job_ids``). An id a caller chose that
    happens to carry a seq of this node's block that the node has not handed out yet must
    not take that seq from the job the node later makes of it."""
    store = await open_store()
    (first,) = await store.new_job_ids(1)
    seq = carried(first.bytes)
    crafted = os.urandom(8) + ((1 << 63) | (seq + 1)).to_bytes(8, "big")  # the node's next seq
    await store.enqueue([row()._replace(id=crafted)], [0], NOW)
    later = await native(store, [row() for _ in range(3)])
    await store.enqueue(later, [0] * 3, NOW)  # main: UniqueViolation on jobs_pkey
    for r in [*later, row()._replace(id=crafted)]:
        rec = await store.get_job(r.id)
        assert rec is not None and rec.id == r.id


async def test_an_id_already_stored_natively_is_not_stored_again_by_another_node(open_store: Opener,
                                                                                  sql: asyncpg.Connection) -> None:
    """Ids are unique (SQLite: its unique index; PostgreSQL before version 10:
    ``jobs_id_key``). A node that is handed an id another node already stored (a foreign id
    to it) must refuse it, not store a second row under the same id — that row would hide
    the first one from every lookup by id (the first job can then be leased but never
    acked)."""
    a, b = await open_store(), await open_store()
    (x,) = await native(a, [row()])
    await a.enqueue([x], [0], NOW)
    with pytest.raises(StoreError):
        await b.enqueue([row()._replace(id=x.id)], [0], NOW)
    assert await sql.fetchval("SELECT count(*) FROM jobs WHERE id = $1", x.id) == 1


@pytest.mark.parametrize("raw", [bytes(16), b"\xff" * 16, b"\x00" * 8 + b"\x80" + b"\x00" * 7,
                                 b"\xff" * 8 + b"\xbf" + b"\xff" * 7],
                         ids=["zero", "ff", "variant-seq0", "variant-max"])
async def test_extreme_ids_are_stored_found_settled_and_deleted(open_store: Opener, raw: bytes) -> None:
    """All-zero, all-0xff, and variant-10 ids carrying seq 0 and the largest seq: each is
    stored, found by id, leased, acked, and deleted by an admin, and an unstored id of the
    same kind is not found."""
    store = await open_store()
    await store.enqueue([row()._replace(id=raw)], [0], NOW)
    rec = await store.get_job(raw)
    assert rec is not None and rec.id == raw
    (job,) = await lease(store)
    assert job.id == raw
    (res,) = await store.settle([SettleParams(raw, job.lease_id or b"", SettleKind.ACK, NOW + S)], POLICY)
    assert res.error is None
    assert (await store.admin.delete_job(raw)).outcome is Outcome.DONE
    assert await store.get_job(raw) is None


async def test_short_and_long_ids_are_not_found(open_store: Opener) -> None:
    """Lookups by ids of other lengths (an admin search for a short id, a long one) answer
    "not found", never an error."""
    store = await open_store()
    rows = await native(store, [row() for _ in range(3)])
    await store.enqueue(rows, [0] * 3, NOW)
    for raw in (b"", b"\x01", rows[0].id[:8], rows[0].id[:15], rows[0].id + b"\x00"):
        assert await store.get_job(raw) is None
        assert (await store.admin.delete_job(raw)).outcome is Outcome.NOT_FOUND
        page = await store.admin.list_jobs(JobQuery(job_id=raw), None, 10)
        assert page.jobs == []


# ---------------------------------------------------------------------------- older nodes


async def test_an_older_nodes_inserts_while_new_nodes_enqueue_are_all_found(open_store: Opener,
                                                                            sql: asyncpg.Connection,
                                                                            schema: str) -> None:
    """Rows inserted the version-9 way (no seq: the sequence's default) at the same time as
    two new nodes enqueue: no collision, every job found by id on every node, and the new
    nodes' ids still carry their rows' seqs."""
    a, b = await open_store(), await open_store()
    old = await asyncpg.connect(PG_TEST_DSN, server_settings={"search_path": schema})
    insert = ("INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts, "
              "payload, encoding, extras, idempotency_key) VALUES ($1, 'q', 't', 2, 0, $2, $2, 3, 'p', '', NULL, NULL)")
    old_ids = [os.urandom(16) for _ in range(200)]
    new: list[JobRow] = []

    async def older() -> None:
        for i in range(0, 200, 10):
            await old.executemany(insert, [(j, NOW) for j in old_ids[i:i + 10]])
            await asyncio.sleep(0)

    async def newer(store: PostgresStore) -> None:
        for size in (5, 100, 1200, 3):
            rows = await native(store, [row() for _ in range(size)])
            await store.enqueue(rows, [0] * size, NOW)
            new.extend(rows)

    try:
        await asyncio.gather(older(), newer(a), newer(b))
    finally:
        await old.close()
    assert await sql.fetchval("SELECT count(*) FROM jobs") == 200 + len(new)
    assert await sql.fetchval("SELECT count(*) FROM jobs WHERE job_id_foreign(id, seq)") == 200
    for job_id in old_ids[::7] + [r.id for r in new[::53]]:
        for store in (a, b):
            rec = await store.get_job(job_id)
            assert rec is not None and rec.id == job_id


# ---------------------------------------------------------------------------- outages and cancels


class Door(PausableProxy):
    """A relay to the test database on a fixed port that can be shut (``close``: every
    connection dropped, new ones refused) and opened again on the same port (``reopen``):
    PostgreSQL unreachable for one node, without touching PostgreSQL."""

    def __init__(self, port: int = 0) -> None:
        url = urlsplit(PG_TEST_DSN)
        super().__init__(url.hostname or "127.0.0.1", url.port or 5432, port)

    @property
    def dsn(self) -> str:
        url = urlsplit(PG_TEST_DSN)
        netloc = f"{url.username + '@' if url.username else ''}127.0.0.1:{self.port}"
        return urlunsplit(url._replace(netloc=netloc))

    def reopen(self) -> Door:
        return Door(self.port)


async def test_a_node_that_cannot_reach_postgresql_when_it_needs_a_block_answers_unavailable_then_recovers(
        schema: str) -> None:
    """PostgreSQL cannot be reached just when the node's seqs ran out (stale): ``new_job_ids``
    raises ``StoreUnavailable`` promptly (the engine answers UNAVAILABLE), more than once,
    and once PostgreSQL answers again the node's next ids are stored and found."""
    door = Door()
    store = PostgresStore(door.dsn, schema=schema, node=f"a5-{secrets.token_hex(3)}", pool_size=2)
    await store.open()
    try:
        await store.new_job_ids(3)
        store._ids._fetched_at -= pg_ids.MAX_AGE + 1  # its seqs are stale: the next call fetches
        door.close()
        for _ in range(2):
            with pytest.raises(StoreUnavailable):
                await asyncio.wait_for(store.new_job_ids(1), 15)
        door = door.reopen()
        rows = await native(store, [row() for _ in range(3)])
        await asyncio.wait_for(store.enqueue(rows, [0] * 3, NOW), 15)
        for r in rows:
            rec = await store.get_job(r.id)
            assert rec is not None
    finally:
        await store.close()
        door.close()


async def test_a_caller_cancelled_while_waiting_for_a_block_leaves_the_node_working(
        open_store: Opener, schema: str) -> None:
    """While the jobs sequence is locked (its block cannot be fetched), a caller waiting for
    ids is cancelled; once the lock is released the others waiting get distinct ids and the
    node goes on."""
    store = await open_store()
    await store.new_job_ids(1)
    store._ids._fetched_at -= pg_ids.MAX_AGE + 1  # stale: the next call must fetch
    locker = await asyncpg.connect(PG_TEST_DSN, server_settings={"search_path": schema})
    try:
        tx = locker.transaction()
        await tx.start()
        await locker.execute(f"ALTER SEQUENCE jobs_seq_seq INCREMENT BY {pg_ids.BLOCK}")  # blocks nextval
        cancelled = asyncio.ensure_future(store.new_job_ids(5))
        waiting = [asyncio.ensure_future(store.new_job_ids(n)) for n in (1, 2000, 3)]
        await sessions_waiting_for(locker, 1)  # the block's fetch waits for the lock
        assert not any(f.done() for f in [cancelled, *waiting])
        cancelled.cancel()
        await tx.rollback()
    finally:
        await locker.close()
    got = [u.bytes for f in await asyncio.gather(*waiting) for u in f]
    assert len(set(got)) == len(got) == 2004
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    rows = [row()._replace(id=i) for i in got]
    await store.enqueue(rows, [0] * len(rows), NOW)
    assert (await store.get_job(got[-1])) is not None


async def test_a_batch_needing_many_blocks_at_once(open_store: Opener, sql: asyncpg.Connection) -> None:
    """A batch of 10,000 ids on a fresh node (about ten blocks in one wait), stored in one
    call, while another node takes blocks too: every id distinct, carried and found."""
    a, b = await open_store(), await open_store()

    async def other() -> None:
        for _ in range(20):
            await b.enqueue(await native(b, [row()]), [0], NOW)

    big, _ = await asyncio.gather(a.new_job_ids(10_000), other())
    raw = [u.bytes for u in big]
    seqs = [carried(r) for r in raw]
    assert len(set(seqs)) == 10_000 and seqs == sorted(seqs)
    rows = [row()._replace(id=r) for r in raw]
    await a.enqueue(rows, [0] * len(rows), NOW)
    assert await sql.fetchval("SELECT count(*) FROM jobs WHERE job_id_foreign(id, seq)") == 0
    for r in raw[::999]:
        assert await a.get_job(r) is not None and await b.get_job(r) is not None


async def test_admin_writes_by_id_of_both_kinds_on_another_node(open_store: Opener) -> None:
    """Jobs enqueued through one node, native and foreign, cancelled, requeued, searched and
    deleted by id through another."""
    a, b = await open_store(), await open_store()
    rows = await native(a, [row() for _ in range(2)]) + [row(), row()]
    await a.enqueue(rows, [0] * 4, NOW)
    for r in rows:
        assert (await b.admin.cancel(r.id, NOW, POLICY, "stop")).outcome is Outcome.DONE
        rec = await b.get_job(r.id)
        assert rec is not None and rec.state == int(State.CANCELLED)
        assert (await b.admin.requeue(r.id, NOW + S)).outcome is Outcome.DONE
        page = await b.admin.list_jobs(JobQuery(job_id=r.id), None, 10)
        assert [s.record.id for s in page.jobs] == [r.id]
        assert (await b.admin.delete_job(r.id)).outcome is Outcome.DONE
        assert await a.get_job(r.id) is None
