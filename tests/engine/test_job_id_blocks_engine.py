"""A PostgreSQL node waiting for a block of seqs (``Store.new_job_ids``; docs/decisions.md
"PostgreSQL: job ids carry their seq"), at the engine: the load shedding of SPEC §2 while
the block cannot be fetched (the jobs sequence locked by another session: PostgreSQL slow
to answer, as when its host stalls), and the requests of a batch at ``max_enqueue_batch``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
from support.backends import PG_TEST_DSN
from support.worker import until

from engine.engine_kit import HarnessFactory, request
from sepp.domain.ids import job_id_bytes
from sepp.server.errors import BacklogFull
from sepp.storage.postgres import ids as pg_ids
from sepp.storage.postgres.store import PostgresStore

pytestmark = pytest.mark.postgres_only(reason="blocks of seqs are PostgreSQL's")


async def _locked_sequence(schema: str) -> AsyncIterator[None]:
    """Hold a lock on the jobs sequence that makes every ``nextval`` wait (ALTER SEQUENCE in
    an open transaction) until the block ends."""
    conn = await asyncpg.connect(PG_TEST_DSN, server_settings={"search_path": schema})
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute(f"ALTER SEQUENCE jobs_seq_seq INCREMENT BY {pg_ids.BLOCK}")
        yield
        await tx.rollback()
    finally:
        await conn.close()


async def test_enqueues_waiting_for_a_block_are_shed_past_the_commit_backlog(make_harness: HarnessFactory) -> None:
    """``max_commit_backlog`` 10, the node's seqs stale and the next block slow to come: of 40
    enqueues, those past the first 10 are answered OVERLOADED at once — as they are when the
    commits are what is slow — rather than all waiting (unbounded, their payloads held) for
    the block. Main: none is answered until the block comes (the backlog counts only jobs
    submitted for commit, and nothing is submitted while the ids are awaited)."""
    h = await make_harness(max_commit_backlog=10)
    store = h.store
    assert isinstance(store, PostgresStore)
    await h.enqueue()
    store._ids._fetched_at -= pg_ids.MAX_AGE + 1  # stale: the next enqueue waits for a block
    lock = _locked_sequence(store.schema)
    await lock.__anext__()
    try:
        calls = [asyncio.ensure_future(h.engine.enqueue(request())) for _ in range(40)]
        # while the block is awaited (the lock is held until the finally below)
        await until(lambda: sum(c.done() for c in calls) >= 30, within=10,
                    what="the enqueues past the backlog answered")
        answered = [c for c in calls if c.done()]
        shed = [c for c in answered if isinstance(c.exception(), BacklogFull)]
    finally:
        with pytest.raises(StopAsyncIteration):
            await lock.__anext__()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert len(shed) >= 30, f"{len(answered)} answered while the block was awaited, {len(shed)} shed"
    stored = [r for r in results if not isinstance(r, BaseException)]
    assert len(stored) <= 10 and all(isinstance(r, BacklogFull) for r in results if isinstance(r, BaseException))


async def test_a_batch_at_max_enqueue_batch_on_a_fresh_node_gets_distinct_stored_ids(
        make_harness: HarnessFactory) -> None:
    """A batch of ``max_enqueue_batch`` jobs as a node's first enqueue (several blocks in one
    wait), two more at once: every job stored under a distinct id and found."""
    h = await make_harness(limits={"max_enqueue_batch": 5000})
    batches = await asyncio.gather(*(h.engine.enqueue_batch([request() for _ in range(5000)]) for _ in range(3)))
    texts = [r[0] for b in batches for r in b if isinstance(r, tuple)]
    assert len(set(texts)) == 15000
    for t in texts[::1499]:
        raw = job_id_bytes(t)
        assert raw is not None and await h.store.get_job(raw) is not None
