"""The Worker runtime's own cost per job (issue 15 item 4), with no handler work at all.

Starts a ``sepp serve`` (ServerProcess, group commit by default), fills the queue with
``--jobs`` jobs, then drains it from this process (uvloop) once per row:

* **raw stubs**: the floor — a loop of ``Reserve`` (up to 256) + one ``Settle`` of the acks,
  ``--lanes`` such loops at once, nothing else;
* **Worker** rows: ``sepp.worker.Worker`` with a no-op async handler, at its defaults and
  at tuned settings.

For each row: jobs/s (wall), this process's CPU time per job (``time.process_time``,
every thread: the event loop and gRPC's own), and the server's (``/proc``: the server
process and its children, the SQLite writer). The runtime's own cost is a Worker row's
CPU per job minus the raw row's — what the runtime adds on top of the two calls each
job needs. ``--profile ROW`` prints the top of a cProfile of one Worker row instead.

With ``--postgres-dsn DSN`` the server stores in PostgreSQL (a fresh schema, dropped at the
end) and the table adds the PostgreSQL cluster's CPU per job (every process of the
postmaster serving DSN, from /proc; ``postgres_drain.cluster_cpu``).

    python benchmarks/worker_overhead.py [--jobs 20000] [--mode group] [--rounds 3] [--profile defaults]
        [--postgres-dsn postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import uvloop
from _harness import table, tree_cpu
from postgres_drain import cluster_cpu, postmaster_of

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc, worker_pb2_grpc
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess
from sepp.worker import Job, Worker

QUEUE = "bench"
PAYLOAD = pb.Payload(data=b'{"i": 12345}', encoding="application/json")
BATCH = ppb.EnqueueBatchRequest(jobs=[pb.EnqueueRequest(queue=QUEUE, job_type="noop", payload=PAYLOAD)] * 256)

#: Worker rows: name → Worker keyword arguments (besides target and queues).
WORKER_ROWS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "concurrency 256": {"concurrency": 256},
    "concurrency 256, prefetch 256": {"concurrency": 256, "prefetch": 256},
}


async def fill(target: str, jobs: int) -> None:
    """Enqueue ``jobs`` no-op jobs (batches of 256)."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = producer_pb2_grpc.ProducerServiceStub(channel)
        left = jobs
        while left > 0:
            n = min(256, left)
            await stub.EnqueueBatch(BATCH if n == 256 else ppb.EnqueueBatchRequest(jobs=list(BATCH.jobs[:n])))
            left -= n


async def drain_raw(target: str, jobs: int, lanes: int = 2) -> None:
    """Drain ``jobs`` with bare Reserve + Settle loops."""
    done = 0
    async with grpc.aio.insecure_channel(target) as channel:
        work = worker_pb2_grpc.WorkerServiceStub(channel)
        req = wpb.ReserveRequest(queues=[QUEUE], max_jobs=256, worker_id="bench-raw")

        async def lane() -> None:
            nonlocal done
            while done < jobs:
                got = (await work.Reserve(req)).reservations
                if not got:
                    await asyncio.sleep(0.001)
                    continue
                settle = wpb.SettleRequest()
                add = settle.items.add
                for r in got:
                    ack = add().ack
                    ack.job_id = r.job.id
                    ack.lease_id = r.lease_id
                await work.Settle(settle)
                done += len(got)
                calls[0] += 1

        calls = [0]
        await asyncio.gather(*(lane() for _ in range(lanes)))
        CALLS["raw"] = (calls[0], calls[0])


#: Calls made by the last drain of each row: (Reserve, Settle).
CALLS: dict[str, tuple[int, int]] = {}


async def drain_worker(target: str, jobs: int, settings: dict[str, Any], name: str = "") -> None:
    """Drain ``jobs`` with a Worker (no-op handler), then stop it."""
    worker = Worker(target, [QUEUE], worker_id="bench-worker", **settings)
    done = 0
    finished = asyncio.Event()

    @worker.handler("noop")
    async def noop(job: Job) -> None:
        nonlocal done
        done += 1
        if done >= jobs:
            finished.set()

    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    await finished.wait()
    await worker.stop(5)
    await run
    CALLS[name] = (worker.stats.get("reserve_calls", 0), worker._settler.calls)


async def measure(target: str, jobs: int, drain: Callable[[], Awaitable[None]],
                  server_pid: int, postmaster: int) -> tuple[float, float, float, float]:
    """(jobs/s, client CPU µs per job, server CPU µs per job, PostgreSQL CPU µs per job — 0
    without ``postmaster``) of one drain of a freshly filled queue."""
    await fill(target, jobs)
    pg0 = cluster_cpu(postmaster) if postmaster else 0.0
    cpu0, srv0, t0 = time.process_time(), tree_cpu(server_pid), time.perf_counter()
    await drain()
    wall, cpu, srv = time.perf_counter() - t0, time.process_time() - cpu0, tree_cpu(server_pid) - srv0
    pg = (cluster_cpu(postmaster) - pg0) if postmaster else 0.0
    return jobs / wall, cpu / jobs * 1e6, srv / jobs * 1e6, pg / jobs * 1e6


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="sepp-bench-") as tmp:
        config: dict[str, Any] = {"persist_mode": args.mode, "log_level": "warning"}
        schema = f"bench_overhead_{os.getpid()}"
        postmaster = 0
        if args.postgres_dsn:
            config.update(storage="postgres", postgres_dsn=args.postgres_dsn, postgres={"schema": schema})
            postmaster = await postmaster_of(args.postgres_dsn)
        server = ServerProcess(Path(tmp) / "data", config)
        server.start()
        try:
            target = server.grpc_target
            raw = f"raw stubs (Reserve 256 + Settle, {args.lanes} lanes)"
            rows: dict[str, Callable[[], Awaitable[None]]] = {raw: lambda: drain_raw(target, args.jobs, args.lanes)}
            for name, settings in WORKER_ROWS.items():
                rows[f"Worker {name}"] = lambda s=settings, n=name: drain_worker(  # type: ignore[misc]
                    target, args.jobs, s, n)
            if args.profile:
                settings = WORKER_ROWS[args.profile]
                await fill(target, args.jobs)
                prof = cProfile.Profile()
                prof.enable()
                await drain_worker(target, args.jobs, settings)
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(30)
                return
            assert server.proc is not None
            results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in rows}
            for _ in range(args.rounds):  # rounds interleave the rows, so drift hits all alike
                for name, drain in rows.items():
                    results[name].append(await measure(target, args.jobs, drain, server.proc.pid, postmaster))
        finally:
            server.terminate()
            if args.postgres_dsn:
                conn = await asyncpg.connect(args.postgres_dsn)
                await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                await conn.close()
    raw_cpu = statistics.median(m[1] for m in next(iter(results.values())))
    out = []
    for (name, got), key in zip(results.items(), ["raw", *WORKER_ROWS], strict=True):
        rate, cpu, srv, pg = (statistics.median(m[i] for m in got) for i in range(4))
        extra = "—" if key == "raw" else f"{cpu - raw_cpu:.1f}"
        reserves, settles = CALLS.get(key, (0, 0))
        out.append([name, f"{rate:,.0f}", f"{cpu:.1f}", extra, f"{srv:.1f}", *([f"{pg:.1f}"] if postmaster else []),
                    str(reserves), str(settles)])
    store = "PostgreSQL" if postmaster else "SQLite"
    print(f"\nN = {args.jobs} jobs per drain, {store}, persist_mode={args.mode}, median of {args.rounds} rounds")
    print(table(["consumer", "drain jobs/s", "client CPU µs/job", "runtime's own µs/job", "server CPU µs/job",
                 *(["PostgreSQL CPU µs/job"] if postmaster else []), "Reserve calls", "Settle calls"], out))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--mode", default="group", choices=["sync", "group", "async"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lanes", type=int, default=2, help="raw Reserve+Settle loops at once")
    ap.add_argument("--profile", choices=sorted(WORKER_ROWS), help="cProfile one Worker row instead")
    ap.add_argument("--postgres-dsn", default="", help="store in PostgreSQL (a fresh schema) instead of SQLite")
    uvloop.run(main(ap.parse_args()))
