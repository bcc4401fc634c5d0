"""Bulk actions benchmark (issue 13 item 4): how fast a "cancel every matching job" run goes
and how responsive the store stays meanwhile.

In-process (no gRPC): a ``JobEngine`` + ``AdminEngine`` over a fresh store of each backend,
``--jobs`` READY jobs enqueued in batches of 256, then ``BulkActions.start("cancel", …)``
over all of them (each job through ``AdminEngine.cancel``); then as many dead letters and a
``requeue`` run over them (``AdminEngine.requeue_dead``). While a run goes, a single enqueue
is timed every 50 ms (the latency a producer sees). Prints jobs/s of each run and the
enqueue latencies (median, max).

    python benchmarks/bulk_actions.py [--jobs 20000] [--backends sqlite,postgres]
        [--postgres-dsn postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sepp.api.v1 import common_pb2 as pb
from sepp.domain.params import SettleKind, SettleParams
from sepp.domain.states import State
from sepp.server.admin import AdminEngine
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueRegistry
from sepp.storage.admin import JobQuery
from sepp.storage.factory import open_store


async def run(backend: str, dsn: str, jobs: int) -> None:
    """One backend's run (see the module docstring)."""
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    extra: dict[str, Any] = {"storage": "postgres", "postgres_dsn": dsn, "postgres": {"schema": schema}} \
        if backend == "postgres" else {}
    with tempfile.TemporaryDirectory() as folder:
        cfg = ServerConfig(data_dir=Path(folder), **extra)
        store = open_store(cfg)
        await store.open()
        try:
            registry = QueueRegistry(cfg.queue_defaults, cfg.strict, cfg.limits.max_encoding_bytes,
                                     cfg.limits.max_queues)
            parts = ServerParts.build(cfg, store, registry, Notifier())
            engine = JobEngine(parts)
            admin = AdminEngine(parts, store.admin)
            req = pb.EnqueueRequest(queue="bulk", job_type="t")
            for start in range(0, jobs, 256):
                await engine.enqueue_batch([req] * min(256, jobs - start))
            await timed(admin, engine, backend, "cancel READY (each job: AdminEngine.cancel)", "cancel",
                        int(State.READY), jobs)
            # Dead letters for the redrive: lease 256 at a time and nack them to DEAD_LETTERED.
            for start in range(0, jobs, 256):
                await engine.enqueue_batch([req] * min(256, jobs - start))
                leased = await engine.reserve(["bulk"], 256, None, 0.0, "bench")
                now = parts.clock.now()
                await engine.settle([SettleParams(r.id, r.lease_id or b"", SettleKind.DEAD_LETTER, now, reason="X")
                                     for r in leased])
            await timed(admin, engine, backend, "requeue DEAD_LETTERED (AdminEngine.requeue_dead)", "requeue",
                        int(State.DEAD_LETTERED), jobs)
        finally:
            if backend == "postgres":
                await store.reads.fetch(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[attr-defined]
            await store.close()


async def timed(admin: AdminEngine, engine: JobEngine, backend: str, what: str, action: str, state: int,
                jobs: int) -> None:
    """Run one bulk action over every job of ``state`` in queue bulk, probing enqueues."""
    started = time.perf_counter()
    bulk = await admin.bulk.start(action, JobQuery(queue="bulk", state=state), jobs)
    latencies = []
    probe = pb.EnqueueRequest(queue="probe", job_type="t")
    while not bulk.finished:
        t0 = time.perf_counter()
        await engine.enqueue(probe)
        latencies.append(time.perf_counter() - t0)
        await asyncio.sleep(0.05)
    took = time.perf_counter() - started
    assert bulk.outcome.done == jobs, bulk
    print(f"| {backend} | {what} | {jobs:,} | {took:.1f} s | {jobs / took:,.0f} | "
          f"{statistics.median(latencies or [0.0]) * 1000:.1f} ms | {max(latencies or [0.0]) * 1000:.1f} ms |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--postgres-dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    print("| backend | action | jobs | run | jobs/s | enqueue during the run: median | max |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for backend in args.backends.split(","):
        asyncio.run(run(backend, args.postgres_dsn, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
