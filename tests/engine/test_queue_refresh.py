"""A cluster refresh of the queue settings (``QueueRegistry.refresh``) never forgets a
queue an enqueue created meanwhile.

The refresh reads the queue rows, then applies them unless a local change happened since
the read (``generation``). An enqueue to a new queue creates it in memory, stores its row
with the jobs and marks it persisted: that must count as a local change. It did not, so a
refresh whose read predated the queue's row forgot the queue as "deleted on another node",
and reserves found its READY jobs in no queue (``[]``) until the next refresh — the model
test's timing-dependent "reservation order" failure on PostgreSQL under load (``[] ==
[job]``, a flaky replay).
"""

from __future__ import annotations

from engine.engine_kit import Harness


async def test_a_queue_created_by_an_enqueue_survives_a_refresh_that_read_before_it(harness: Harness) -> None:
    h = harness
    registry = h.parts.queues
    # The order of a real race, made deterministic: the enqueue creates the queue in memory
    # (its validation, before any await), the refresh then starts and reads the rows while
    # the enqueue's commit (the queue's row) is still in flight, the commit lands and marks
    # the queue persisted, and only then the refresh applies what it read.
    registry.on_demand("fresh")
    read_at = registry.generation
    records = await h.store.load_queues()
    assert all(r.name != "fresh" for r in records)
    job_id, _ = await h.enqueue("fresh")  # stores the queue's row with the job: persisted
    assert registry.refresh(records, read_at) is None  # overtaken by that change: read again
    assert registry.get("fresh") is not None
    (job,) = await h.reserve("fresh")
    assert job.id == job_id


async def test_a_refresh_that_read_after_the_enqueue_keeps_the_queue(harness: Harness) -> None:
    h = harness
    await h.enqueue("fresh")
    registry = h.parts.queues
    read_at = registry.generation
    assert registry.refresh(await h.store.load_queues(), read_at) is not None
    assert registry.get("fresh") is not None
    assert len(await h.reserve("fresh")) == 1
