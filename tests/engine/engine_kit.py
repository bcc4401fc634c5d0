"""An in-process server core for engine-level tests: the real ``JobEngine``
and ``Sweeper`` over a real SQLite store in a temp folder, driven by a ``FakeClock``.

Requests go in as the protobuf messages the RPC layer hands the engine (acks and nacks
through ``rpc.worker.settle_params``, the servicers' own mapping), so what is checked here
is what a client sees, without a process, a port or a sleep. Times are µs UTC.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.clock import FakeClock
from sepp.domain.ids import job_id_bytes, job_id_text
from sepp.domain.params import SettleResult
from sepp.domain.records import JobRecord
from sepp.server.engine import JobEngine
from sepp.server.parts import ServerParts
from sepp.server.rpc.worker import settle_params
from sepp.server.sweeper.runner import Sweeper
from sepp.storage.base import Store

#: One second in µs.
S = 1_000_000


def request(queue: str = "q", *, key: str = "", at_us: int | None = None, max_attempts: int | None = None,
            priority: int | None = None, job_type: str = "t") -> pb.EnqueueRequest:
    """An enqueue request as a client builds it (``at_us``: scheduled_at, µs UTC)."""
    req = pb.EnqueueRequest(queue=queue, job_type=job_type, idempotency_key=key)
    if max_attempts is not None:
        req.max_attempts = max_attempts
    if priority is not None:
        req.priority = priority
    if at_us is not None:
        req.scheduled_at.CopyFrom(Timestamp(seconds=at_us // S, nanos=at_us % S * 1000))
    return req


@dataclass
class Harness:
    """The engine, its sweeper (loops not started: passes run with ``sweep()``), the fake
    clock both read, and the store under them."""

    engine: JobEngine
    sweeper: Sweeper
    clock: FakeClock
    store: Store

    @property
    def parts(self) -> ServerParts:
        """The parts the engine and the sweeper share (``ServerParts``)."""
        return self.engine.parts

    @property
    def now(self) -> int:
        """The fake clock's time, µs UTC."""
        return self.clock.now()

    async def enqueue(self, queue: str = "q", *, key: str = "", at_us: int | None = None,
                      max_attempts: int | None = None, priority: int | None = None) -> tuple[bytes, bool]:
        """Enqueue one job (scheduled at ``at_us`` when given); (job id, deduplicated)."""
        ack = await self.engine.enqueue(request(queue, key=key, at_us=at_us, max_attempts=max_attempts,
                                                priority=priority))
        raw = job_id_bytes(ack.job_id)
        assert raw is not None
        return raw, ack.deduplicated

    async def reserve(self, queue: str = "q", n: int = 1, lease_s: float | None = None) -> list[JobRecord]:
        """Reserve without waiting."""
        return await self.engine.reserve([queue], n, lease_s, 0.0, "w")

    async def ack(self, job: JobRecord) -> SettleResult:
        """Ack through the RPC mapping; raises ``LeaseRefused`` when the lease does not hold."""
        req = wpb.AckRequest(job_id=job_id_text(job.id), lease_id=job_id_text(job.lease_id or b""))
        return await self.engine.settle_one(settle_params(req, self.now, 16 * 1024))

    async def nack(self, job: JobRecord, *, retry_after_s: int | None = None, dead_letter: str | None = None,
                   release: bool = False, message: str = "", bare: bool = False) -> SettleResult:
        """Nack through the RPC mapping: retry with backoff unless another directive is given
        (``bare``: no directive at all)."""
        req = wpb.NackRequest(job_id=job_id_text(job.id), lease_id=job_id_text(job.lease_id or b""),
                              error=wpb.JobError(message=message))
        if retry_after_s is not None:
            req.retry_after.CopyFrom(Duration(seconds=retry_after_s))
        elif dead_letter is not None:
            req.dead_letter = dead_letter
        elif release:
            req.release.SetInParent()
        elif not bare:
            req.retry.SetInParent()
        return await self.engine.settle_one(settle_params(req, self.now, 16 * 1024))

    async def job(self, job_id: bytes) -> JobRecord:
        """The stored job, which must exist."""
        rec = await self.store.get_job(job_id)
        assert rec is not None
        return rec

    async def writes_done(self) -> None:
        """Wait until the store has run every write operation submitted so far (its
        committer is idle): a backend may run them on several connections, in any order."""
        committer = self.store.committer  # type: ignore[attr-defined]
        for _ in range(10_000):
            if committer.idle:
                return
            await asyncio.sleep(0.001)
        raise AssertionError("the store's committer did not become idle within 10 s")


#: Builds a harness (``conftest.make_harness``); keyword arguments are ``ServerConfig``
#: fields, ``queues`` as {name: {setting: value}}.
HarnessFactory = Callable[..., Awaitable[Harness]]

