"""Admin writes that make dependents READY wake the long polls of their queues at once, on
both backends (docs/workflows.md "When a dependency fails"): an admin cancel of a dependency
releases its "run" dependents. Without the wake-up a parked worker would find the job only
when its long poll's wait ends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable

from support.worker import until

from engine.engine_kit import Harness, request
from sepp.api.v1 import common_pb2 as pb
from sepp.domain.ids import job_id_text
from sepp.domain.states import State
from sepp.server.admin.engine import AdminEngine

#: A long poll waits this long (s) unless woken; a wake-up answers it well before.
POLL_S, WOKEN_WITHIN_S = 20.0, 10.0


async def _dependent(h: Harness, parent: bytes, policy: pb.DependencyFailure.ValueType) -> bytes:
    req = request("child")
    req.depends_on.append(job_id_text(parent))
    req.on_dependency_failure = policy
    ack = await h.engine.enqueue(req)
    return uuid.UUID(ack.job_id).bytes


async def _woken_by(h: Harness, child: bytes, write: Awaitable[object]) -> None:
    """Park a long poll on the child's queue, run ``write`` (an awaitable), and check the
    poll is answered with the child well before its wait ends."""
    notifier = h.parts.notifier  # as sepp.server.cluster subscribes a node (PostgreSQL: NOTIFY)
    h.store.subscribe(lambda q: notifier.ready_all() if q is None else notifier.ready(q), lambda: None)
    poll = asyncio.create_task(h.engine.reserve(["child"], 1, None, POLL_S, "wc"))
    await until(lambda: h.engine.parked("wc") == 1, what="the long poll to park")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await write
    got = await asyncio.wait_for(poll, POLL_S + 5)
    took = loop.time() - started
    assert [r.id for r in got] == [child] and took < WOKEN_WITHIN_S, (got, took)


async def test_an_admin_cancel_wakes_the_queue_of_a_run_dependent(harness: Harness) -> None:
    h = harness
    parent, _ = await h.enqueue("dep")
    child = await _dependent(h, parent, pb.DEPENDENCY_FAILURE_RUN)
    assert (await h.job(child)).state == State.DEFERRED
    admin = AdminEngine(h.parts, h.store.admin)
    await _woken_by(h, child, admin.cancel(job_id_text(parent)))
