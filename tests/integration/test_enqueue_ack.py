"""The enqueue ack and idempotency, over the wire (seed "Read the enqueue response"; SPEC §2 Idempotency, §6).

Covers: each ack field (``job_id`` a canonical UUIDv7 naming the stored job, sorted by
creation; ``deduplicated``); the stored job is the request field by field;
``deduplicated`` on single, batch and atomic calls, whatever the original's state;
two equal keys inside one batch; 32 concurrent enqueues with one key create exactly
one job; the dedup window's end frees the key (anchored at the original enqueue, not
extended by hits); a key is per queue.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import grpc
import pytest
from support.producer import connect, job
from support.servers import ServerFactory
from support.stubs import CALL_TIMEOUT
from support.waiting import wait_for

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc, worker_pb2
from sepp.testing import ServerProcess
from sepp.wire import custom_map_from_proto


def _key() -> str:
    return f"key-{uuid.uuid4().hex}"


def test_ack_job_id_is_a_uuidv7_naming_the_stored_job(shared_server: ServerProcess) -> None:
    """The ack's job_id is a canonical UUIDv7 (ids sort by creation), deduplicated is False,
    and the job behind it carries the request field by field."""
    with connect(shared_server.grpc_target) as s:
        req = job("ack", "welcome", data=b'{"user_id": 42}', encoding="application/json",
                  custom={"user_id": 42, "locale": "en-US", "vip": True, "score": 0.25, "big": 2**63 - 1},
                  priority=7, max_attempts=5, key="welcome-user-42",
                  trace={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
        ack = s.enqueue(req)
        assert ack.deduplicated is False
        parsed = uuid.UUID(ack.job_id)
        assert str(parsed) == ack.job_id and parsed.version == 7
        ids = [s.enqueue(job("ack", f"seq-{i}")).job_id for i in range(20)]
        assert ids == sorted(ids) and len(set(ids)) == 20, "UUIDv7 ids sort by creation"
        assert ack.job_id < ids[0]

        jobs = {j.id: j for j in s.reserve_all(["ack"])}
        assert set(jobs) == {ack.job_id, *ids}
        got = jobs[ack.job_id]
        assert (got.queue, got.job_type) == ("ack", "welcome")
        assert (got.payload.data, got.payload.encoding) == (b'{"user_id": 42}', "application/json")
        assert custom_map_from_proto(got.custom) == {"user_id": 42, "locale": "en-US", "vip": True, "score": 0.25,
                                                     "big": 2**63 - 1}
        assert got.custom["vip"].WhichOneof("kind") == "bool_value"
        assert got.custom["user_id"].WhichOneof("kind") == "int_value"
        assert (got.priority, got.max_attempts, got.attempt) == (7, 5, 1)
        assert got.idempotency_key == "welcome-user-42"
        assert dict(got.trace_context) == dict(req.trace_context)
        assert got.state == pb.RESERVED
        plain = jobs[ids[0]]
        assert (plain.priority, plain.max_attempts) == (5, 10), "queue defaults apply when not overridden"
        assert plain.payload.data == b"" and plain.payload.encoding == "" and not plain.custom


def test_single_enqueue_with_a_used_key_is_deduplicated_whatever_the_state(shared_server: ServerProcess) -> None:
    """A repeated key returns the original id with deduplicated=True and stores nothing —
    also after the original was reserved and completed."""
    with connect(shared_server.grpc_target) as s:
        key = _key()
        first = s.enqueue(job("dd", "a", key=key))
        again = s.enqueue(job("dd", "different-type", data=b"other", key=key))
        assert (again.job_id, again.deduplicated) == (first.job_id, True)
        [res] = s.reserve(["dd"])
        assert res.job.id == first.job_id and res.job.job_type == "a"
        assert s.reserve(["dd"]) == []
        s.worker.Ack(worker_pb2.AckRequest(job_id=res.job.id, lease_id=res.lease_id), timeout=CALL_TIMEOUT)
        after = s.enqueue(job("dd", "a", key=key))
        assert (after.job_id, after.deduplicated) == (first.job_id, True)
        assert s.reserve(["dd"]) == []


def test_batch_dedups_against_stored_keys_and_within_itself(shared_server: ServerProcess) -> None:
    """EnqueueBatch: a stored key is deduplicated; two equal keys in one batch → the first is
    created, the second is deduplicated to it (same id); a rejected neighbour changes nothing."""
    with connect(shared_server.grpc_target) as s:
        old, k1, k2 = _key(), _key(), _key()
        original = s.enqueue(job("bd", "old", key=old))
        results = s.batch([job("bd", "j0", key=k1), job("bd", "j1", key=old), job("bd", "j2", key=k1),
                           job("bd", "j3", key=k2, priority=10), job("bd", "j4", key=k2), job("bd", "j5")])
        kinds = [r.WhichOneof("outcome") for r in results]
        assert kinds == ["ack", "ack", "ack", "rejection", "ack", "ack"]
        acks = [r.ack for r in results]
        assert acks[0].deduplicated is False
        assert (acks[1].job_id, acks[1].deduplicated) == (original.job_id, True)
        assert (acks[2].job_id, acks[2].deduplicated) == (acks[0].job_id, True)
        assert acks[4].deduplicated is False, "the rejected job j3 claimed nothing"
        assert acks[5].deduplicated is False
        jobs = {j.id: j.job_type for j in s.reserve_all(["bd"])}
        assert jobs == {original.job_id: "old", acks[0].job_id: "j0", acks[4].job_id: "j4", acks[5].job_id: "j5"}


def test_atomic_counts_a_deduplicated_job_as_success(shared_server: ServerProcess) -> None:
    """EnqueueAtomic: a stored key and an in-batch repeat are deduplicated acks, not failures."""
    with connect(shared_server.grpc_target) as s:
        old, k = _key(), _key()
        original = s.enqueue(job("ad", "old", key=old))
        acks = s.atomic([job("ad", "a", key=k), job("ad", "b", key=old), job("ad", "c", key=k), job("ad", "d")])
        assert [a.deduplicated for a in acks] == [False, True, True, False]
        assert acks[1].job_id == original.job_id and acks[2].job_id == acks[0].job_id
        assert {j.id: j.job_type for j in s.reserve_all(["ad"])} == {
            original.job_id: "old", acks[0].job_id: "a", acks[3].job_id: "d"}


def test_a_key_is_per_queue(shared_server: ServerProcess) -> None:
    """The same key on two queues makes two jobs."""
    with connect(shared_server.grpc_target) as s:
        key = _key()
        a, b = s.enqueue(job("per-a", key=key)), s.enqueue(job("per-b", key=key))
        assert not a.deduplicated and not b.deduplicated and a.job_id != b.job_id
        assert [j.id for j in s.reserve_all(["per-a"])] == [a.job_id]
        assert [j.id for j in s.reserve_all(["per-b"])] == [b.job_id]


async def _concurrent(target: str, make: list[tuple[str, object]]) -> list[pb.EnqueueAck]:
    """Fire every (method, request) at once on separate channels; one ack per call."""
    channels = [grpc.aio.insecure_channel(target) for _ in make]
    try:
        stubs = [producer_pb2_grpc.ProducerServiceStub(c) for c in channels]
        await asyncio.gather(*(c.channel_ready() for c in channels))
        calls = []
        for stub, (method, req) in zip(stubs, make, strict=True):
            calls.append(getattr(stub, method)(req, timeout=CALL_TIMEOUT))
        out: list[pb.EnqueueAck] = []
        for method, resp in zip((m for m, _ in make), await asyncio.gather(*calls), strict=True):
            if method == "Enqueue":
                out.append(resp)
            elif method == "EnqueueBatch":
                out.extend(r.ack for r in resp.results)
            else:
                out.extend(resp.acks)
        return out
    finally:
        await asyncio.gather(*(c.close() for c in channels))


@pytest.mark.parametrize("mix", ["single", "mixed"])
async def test_32_concurrent_enqueues_with_one_key_create_one_job(shared_server: ServerProcess, mix: str) -> None:
    """32 simultaneous enqueues of one key (single calls, or single/batch/atomic mixed):
    every ack carries the same id, exactly one has deduplicated=False, one job exists."""
    key = _key()
    methods = ["Enqueue"] * 32 if mix == "single" else ["Enqueue", "EnqueueBatch", "EnqueueAtomic", "Enqueue"] * 8
    make: list[tuple[str, object]] = []
    for i, method in enumerate(methods):
        req = job(f"race-{mix}", f"t{i}", key=key)
        make.append((method, req if method == "Enqueue" else ppb.EnqueueBatchRequest(jobs=[req])))
    acks = await _concurrent(shared_server.grpc_target, make)
    assert len(acks) == 32
    assert len({a.job_id for a in acks}) == 1, "all acks name one job"
    assert sum(not a.deduplicated for a in acks) == 1, "exactly one enqueue created it"
    with connect(shared_server.grpc_target) as s:
        assert [j.id for j in s.reserve_all([f"race-{mix}"])] == [acks[0].job_id]


def test_the_end_of_the_dedup_window_frees_the_key(server_factory: ServerFactory) -> None:
    """dedup_window 0.5 s: within it the key dedups (hits do not extend it); once it has
    passed since the original enqueue, the key creates a new job, which then owns it."""
    proc = server_factory(queues={"win": {"dedup_window": 0.5}})
    with connect(proc.grpc_target) as s:
        key = _key()
        t0 = time.monotonic()
        first = s.enqueue(job("win", key=key))

        sent: list[float] = []

        def fresh() -> pb.EnqueueAck | None:
            sent.append(time.monotonic())
            ack = s.enqueue(job("win", key=key))
            if ack.deduplicated:
                assert ack.job_id == first.job_id
                return None
            return ack

        second = wait_for(fresh, timeout=15.0, interval=0.02, what="the dedup window to end")
        elapsed = time.monotonic() - t0
        assert elapsed >= 0.45, f"key freed after {elapsed:.3f} s, before the 0.5 s window"
        assert second.job_id != first.job_id
        again = s.enqueue(job("win", key=key))
        if time.monotonic() - sent[-1] < 0.5:  # answered within the new job's window for certain
            assert (again.job_id, again.deduplicated) == (second.job_id, True)
        elif again.deduplicated:  # a loaded machine took about the window: either answer is right
            assert again.job_id == second.job_id
        made = {first.job_id, second.job_id, again.job_id}
        assert {j.id for j in s.reserve_all(["win"])} == made
