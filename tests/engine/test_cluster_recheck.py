"""A long-polling reserve on a shared store finds a job made ready by another node even when
that node's wake-up notification never arrived: ``Cluster`` wakes every parked reserve each
``recheck_every`` seconds to look at the store again (docs/deploying.md, "Long polls wake
across nodes"). The other node here is a plain SQL update: it commits a READY row and tells
nobody, as a notification lost after its commit would leave it."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from support.backends import PG_TEST_DSN
from support.worker import until

from engine.engine_kit import HarnessFactory
from sepp.domain.states import State
from sepp.server.cluster import Cluster
from sepp.storage.postgres.store import PostgresStore

pytestmark = pytest.mark.postgres_only(reason="rechecks run on a store shared by nodes")

S = 1_000_000


async def test_a_parked_reserve_finds_a_job_whose_wake_up_was_lost(make_harness: HarnessFactory) -> None:
    h = await make_harness()
    assert isinstance(h.store, PostgresStore)
    node = Cluster(h.parts, "n", "127.0.0.1:1", heartbeat_every=3600, refresh_every=3600, recheck_every=0.2)
    await node.start()
    try:
        job_id, _ = await h.enqueue("q", at_us=h.now + 3600 * S)  # SCHEDULED an hour ahead: no wake-up
        # Longer than the test waits for it: without the rechecks it would come back empty.
        waiting = asyncio.ensure_future(h.engine.reserve(["q"], 1, None, 20.0, "w"))
        await until(lambda: h.engine.parked() == 1, what="the reserve to park")
        conn = await asyncpg.connect(PG_TEST_DSN)
        try:
            status = await conn.execute(f'UPDATE "{h.store.schema}".jobs SET state = $1, run_at = $2 WHERE id = $3',
                                        int(State.READY), h.now, job_id)
        finally:
            await conn.close()
        assert status == "UPDATE 1"
        jobs = await asyncio.wait_for(waiting, 10.0)
        assert [j.id for j in jobs] == [job_id]
    finally:
        await node.stop()


async def test_no_rechecks_when_turned_off(make_harness: HarnessFactory) -> None:
    h = await make_harness()
    node = Cluster(h.parts, "n", "127.0.0.1:1", heartbeat_every=3600, refresh_every=3600, recheck_every=0)
    await node.start()
    try:
        assert [t.get_name() for t in node._tasks] == ["sepp-heartbeat", "sepp-queue-refresh"]
    finally:
        await node.stop()
