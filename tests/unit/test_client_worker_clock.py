"""The client and the worker read the time from an injected ``Clock`` (``sepp.domain.clock``):
a ``FakeClock`` drives the lease lengths the worker assumes, its adaptive prefetch, the
client's ``ServerInfo`` cache age, attempt deadlines and "now" of local validation, without
sleeping. The default is the system clock (``SYSTEM_CLOCK``)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import cast

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.client import ClientOptions, _core, _info
from sepp.domain.clock import SYSTEM_CLOCK, FakeClock
from sepp.rejections import RejectionCode
from sepp.request import EnqueueRequest, Rejection
from sepp.worker import Job, Worker
from sepp.worker._lease import LeaseKeeper
from sepp.worker._reports import Reports
from sepp.worker._rpc import WorkerRpc
from sepp.worker._slots import SlotPool
from sepp.worker._threads import DaemonThreadPool
from sepp.worker.config import PREFETCH_MAX_WAIT


def reservation(expires_us: int, job_id: str = "j1") -> wpb.Reservation:
    msg = wpb.Reservation(job=pb.Job(id=job_id, queue="q", job_type="t"), lease_id="l1")
    msg.lease_expires_at.FromMicroseconds(expires_us)
    return msg


class Extends:
    """A ``WorkerRpc`` stand-in that records ``extend`` calls and grants them."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[float] = []

    async def extend(self, job_id: str, lease_id: str, extend_by: float) -> wpb.ExtendLeaseResponse:
        self.calls.append(extend_by)
        resp = wpb.ExtendLeaseResponse()
        resp.lease_expires_at.FromMicroseconds(self.clock.now() + round(extend_by * 1e6))
        return resp


def test_the_lease_length_is_read_off_the_workers_clock() -> None:
    clock = FakeClock()
    keeper = LeaseKeeper(cast(WorkerRpc, Extends(clock)), None, clock=clock)
    job = Job(reservation(clock.now() + 30_000_000))
    assert keeper.lease_length(job) == 30.0
    clock.advance(20)
    assert keeper.lease_length(job) == 10.0
    assert LeaseKeeper(cast(WorkerRpc, None), 7.0, clock=clock).lease_length(job) == 7.0  # set: as it is


async def test_a_fake_clock_sets_the_extension_a_short_lease_gets() -> None:
    """A lease that ends 0.3 s after the fake now is extended after a third of it, by 0.3 s
    (the timers are the loop's; the length is the clock's)."""
    clock = FakeClock()
    rpc = Extends(clock)
    keeper = LeaseKeeper(cast(WorkerRpc, rpc), None, clock=clock)
    keeper.track(Job(reservation(clock.now() + 300_000)))
    for _ in range(200):
        if rpc.calls:
            break
        await asyncio.sleep(0.01)
    await keeper.close()
    assert rpc.calls and abs(rpc.calls[0] - 0.3) < 1e-3


async def test_the_adaptive_prefetch_halves_by_the_workers_clock() -> None:
    clock = FakeClock()
    keeper = LeaseKeeper(cast(WorkerRpc, None), 30.0, clock=clock)
    reports = Reports(cast(WorkerRpc, None), keeper, [], {}, 256, clock)
    pool = SlotPool({}, DaemonThreadPool(1), reports, concurrency=2, prefetch=None, max_reserve=256,
                    tracer_provider=None, monotonic=clock.monotonic)
    assert pool.ahead == 2
    pool.pending.append(Job(reservation(clock.now() + 30_000_000), clock.monotonic()))
    pool._shrink_ahead(clock.monotonic())
    assert pool.ahead == 2  # the oldest prefetched job has not waited at all
    clock.advance(PREFETCH_MAX_WAIT * 2)
    pool._shrink_ahead(clock.monotonic())
    assert pool.ahead == 1


def test_the_worker_takes_a_clock_and_defaults_to_the_systems() -> None:
    clock = FakeClock()
    assert Worker(queues=["q"], clock=clock)._clock is clock
    assert Worker(queues=["q"])._clock is SYSTEM_CLOCK


def server_info() -> ppb.ServerInfo:
    """A ``ServerInfo`` message with valid limits (a 30-day scheduling horizon)."""
    limits = pb.ServerLimits(max_enqueue_batch=256, max_attempts_ceiling=1000, max_trace_entries=8)
    limits.max_queue_name_bytes = limits.max_encoding_bytes = 128
    limits.max_job_type_bytes = limits.max_idempotency_key_bytes = 256
    limits.max_trace_value_bytes = 512
    limits.max_schedule_horizon.FromSeconds(30 * 86_400)
    return ppb.ServerInfo(version="1", limits=limits)


def test_the_server_info_cache_ages_by_the_clients_clock() -> None:
    clock = FakeClock()
    cached = _info.CachedInfo.build(server_info(), clock)
    assert cached.age() == 0.0 and cached.fresh(300)
    unknown = [Rejection(RejectionCode.UNKNOWN_QUEUE)]
    assert not _info.needs_refresh(unknown, cached)
    clock.advance(_info.UNKNOWN_QUEUE_REFRESH_AFTER)
    assert _info.needs_refresh(unknown, cached)
    clock.advance(300)
    assert not cached.fresh(300) and cached.fresh(None)


def test_local_validation_reads_now_off_the_clients_clock() -> None:
    """A job scheduled a day ahead of the real now is past the horizon of a client whose clock
    stands years earlier (``ScheduledTooFar``), and within it on the system clock."""
    when = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    proto = EnqueueRequest("q", "t", scheduled_at=when).to_proto()
    info = server_info()
    early = _info.CachedInfo.build(info, FakeClock(start_us=0))
    verdict = _info.validate(early, proto)
    assert verdict is not None and verdict.code is RejectionCode.SCHEDULED_TOO_FAR
    assert _info.validate(_info.CachedInfo.build(info), proto) is None


def test_attempt_deadlines_are_the_clients_clock() -> None:
    clock = FakeClock()
    options = ClientOptions(timeout=2.0, clock=clock)
    deadline = _core.deadline(options)
    assert deadline == 2.0 and _core.time_left(deadline, clock) == 2.0
    assert _core.connect_pause(deadline, 1.0, clock) == 1.0
    clock.advance(1.5)
    assert _core.connect_pause(deadline, 1.0, clock) == 0.5
    clock.advance(0.5)
    assert _core.connect_pause(deadline, 1.0, clock) is None
    assert ClientOptions().clock is SYSTEM_CLOCK
