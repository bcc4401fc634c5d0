"""The server reads time through one injected ``Clock``.

In process over a real SQLite store in a temp folder (no mocks), driven by ``FakeClock``:
enqueue time, lease expiry, promotion and the sweeps follow the fake clock exactly, and a
scan of the source proves engine, sweeper and storage read no clock of their own.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

from google.protobuf.timestamp_pb2 import Timestamp

import sepp
from sepp.api.v1 import common_pb2 as pb
from sepp.domain.clock import FakeClock
from sepp.domain.ids import job_id_bytes
from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.states import State
from sepp.server.admin import AdminEngine
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueRegistry
from sepp.server.sweeper.runner import Sweeper
from sepp.storage.sqlite import SQLiteStore

_SRC = Path(sepp.__file__).parent
#: A direct reading of the time: ``time.time(``, ``time.monotonic(``, ``time.time_ns(``, or a
#: call of ``now_us(`` (the grep for direct time readings; the clock itself reads as ``clock.now()``).
_DIRECT = re.compile(r"time\.(time|monotonic|time_ns)\(|now_us\(")


def _run(body: Callable[[JobEngine, Sweeper, FakeClock], Awaitable[None]], tmp: Path) -> None:
    async def main() -> None:
        config = ServerConfig(data_dir=tmp)
        store = SQLiteStore(tmp, writer="thread")
        await store.open()
        try:
            clock = FakeClock()
            registry = QueueRegistry(config.queue_defaults, config.strict, config.limits.max_encoding_bytes)
            parts = ServerParts.build(config, store, registry, Notifier(), clock=clock)
            await body(JobEngine(parts), Sweeper(parts, 60.0), clock)
        finally:
            await store.close()

    asyncio.run(main())


def test_engine_and_sweeper_follow_the_fake_clock(tmp_path: Path) -> None:
    async def body(engine: JobEngine, sweeper: Sweeper, clock: FakeClock) -> None:
        assert sweeper.clock is engine.parts.clock is clock
        start = clock.now()
        ack = await engine.enqueue(pb.EnqueueRequest(queue="q", job_type="t"))
        raw = job_id_bytes(ack.job_id)
        assert raw is not None
        rec = await engine.parts.store.get_job(raw)
        assert rec is not None and rec.enqueued_at == rec.run_at == start
        # A job scheduled 10 s ahead is promoted by a pass only once the clock is there.
        at = Timestamp(seconds=start // 1_000_000 + 10)
        await engine.enqueue(pb.EnqueueRequest(queue="later", job_type="t", scheduled_at=at))
        assert (await sweeper.run_once())["promote"].count == 0
        clock.advance(10)
        done = await sweeper.run_once()
        assert set(done) == {"promote", "reclaim", "prune"}
        assert done["promote"].count == 1 and done["promote"].queues == frozenset({"later"})
        # A lease starts at the fake now and is reclaimed only after it ran out.
        jobs = await engine.reserve(["q"], 1, 30.0, 0.0, "w")
        assert [j.lease_expires_at for j in jobs] == [clock.now() + 30_000_000]
        clock.advance(29)
        assert (await sweeper.run_once())["reclaim"].count == 0
        clock.advance(1)
        assert (await sweeper.run_once())["reclaim"].count == 1
        assert sweeper.passes == dict.fromkeys(("promote", "reclaim", "prune"), 4)

    _run(body, tmp_path)


def test_settle_and_admin_times_come_from_the_clock(tmp_path: Path) -> None:
    async def body(engine: JobEngine, sweeper: Sweeper, clock: FakeClock) -> None:
        admin = AdminEngine(engine.parts, engine.parts.store.admin)
        assert admin.clock is clock
        await admin.start()
        try:
            await engine.enqueue(pb.EnqueueRequest(queue="q", job_type="t"))
            [job] = await engine.reserve(["q"], 1, 300.0, 0.0, "w")
            clock.advance(61)
            await engine.settle_one(SettleParams(job.id, job.lease_id or b"", SettleKind.ACK, clock.now()))
            rec = await engine.parts.store.get_job(job.id)
            assert rec is not None and rec.state == State.COMPLETED and rec.finished_at == clock.now()
            [view] = await admin.stats(["q"])
            assert view.now == clock.now()
            # Enqueued in the fake clock's first minute, completed in the next one.
            assert [(m.enqueued, m.completed) for m in view.throughput[-2:]] == [(1, 0), (0, 1)]
        finally:
            await admin.stop()

    _run(body, tmp_path)


def test_engine_sweeper_and_storage_read_no_clock_of_their_own() -> None:
    """A grep for direct time readings in the engine, the sweeper, the
    admin engine, the RPC and HTTP front ends and storage finds nothing (only ``domain.clock``)."""
    files = [p for d in ("server", "storage") for p in (_SRC / d).rglob("*.py")]
    assert files
    hits = [f"{p.relative_to(_SRC)}:{n}: {line.strip()}" for p in files
            for n, line in enumerate(p.read_text("utf-8").splitlines(), 1) if _DIRECT.search(line)]
    assert hits == []
