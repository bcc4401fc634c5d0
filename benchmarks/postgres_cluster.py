"""PostgreSQL benchmark (issue 10): one node and three nodes on one database, SQLite beside.

Starts real ``sepp serve`` processes (ServerProcess) — on PostgreSQL a fresh schema per
configuration (dropped at the end), on SQLite a fresh folder — and drives them from this
process on uvloop with grpc.aio, spreading the load evenly over the nodes (one channel
per node):

* **batched enqueue**: ``EnqueueBatch`` of 256 jobs, 1 call in flight (sequential, as the
  peer harness's producer) and 4 in flight per node;
* **single enqueue, 64 producers**: 64 concurrent ``Enqueue`` calls in all;
* **end to end, Worker runtime**: one ``sepp.worker.Worker`` per node (no-op async handler,
  concurrency 256, prefetch 256) fed by 2 producers of batches of 256 per node; completed
  jobs/s in the measured window.

All on one 2-core machine: three nodes show correctness and overhead, not scaling (the
nodes, the database and the load generator share the cores; docs/benchmarks.md).

    python benchmarks/postgres_cluster.py [--duration 5] [--nodes 1,3] [--dsn postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import uvloop
from _harness import load, table

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc
from sepp.testing import ServerProcess
from sepp.worker import Job, Worker

QUEUE = "bench"
PAYLOAD = pb.Payload(data=b'{"user_id": 42, "template": "welcome", "locale": "en-US"}', encoding="application/json")
ONE = pb.EnqueueRequest(queue="bench-single", job_type="noop", payload=PAYLOAD)
BATCH = ppb.EnqueueBatchRequest(jobs=[pb.EnqueueRequest(queue=QUEUE, job_type="noop", payload=PAYLOAD)] * 256)
FAST = {"queues": {QUEUE: {"lease_duration": 30.0}}, "log_level": "warning"}


@contextlib.contextmanager
def cluster(tmp: Path, nodes: int, storage: str, dsn: str, tag: str, writers: int = 4) -> Iterator[list[ServerProcess]]:
    """``nodes`` servers on one fresh schema (PostgreSQL) or one server on a fresh folder
    (SQLite); stopped (and the schema dropped) on exit."""
    schema = f"bench_{tag}_{os.getpid()}"
    config: dict[str, Any] = dict(FAST)
    if storage == "postgres":
        config.update(storage="postgres", postgres_dsn=dsn, postgres={"schema": schema, "writers": writers})
    procs: list[ServerProcess] = []
    try:
        for i in range(nodes):
            procs.append(ServerProcess(tmp / f"{tag}-{i}", {**config, "node_name": f"n{i + 1}"}).start())
        yield procs
    finally:
        for proc in procs:
            with contextlib.suppress(Exception):
                proc.terminate(timeout=30)
            proc.kill()
        if storage == "postgres":
            subprocess.run(["psql", dsn, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"], check=False,
                           capture_output=True)


async def enqueue_rates(targets: list[str], duration: float) -> dict[str, float]:
    """Batched enqueue (1 in flight in all; 4 in flight per node) and single enqueue with 64
    producers spread over the nodes: jobs/s."""
    channels = [grpc.aio.insecure_channel(t) for t in targets]
    try:
        batch = BATCH.SerializeToString()
        single = ONE.SerializeToString()
        batch_calls = [c.unary_unary("/sepp.api.v1.ProducerService/EnqueueBatch") for c in channels]
        single_calls = [c.unary_unary("/sepp.api.v1.ProducerService/Enqueue") for c in channels]
        for call in batch_calls:
            await call(batch)
        turn = iter(range(10**12))

        def spread(calls: list[Any], payload: bytes) -> Any:
            return lambda: calls[next(turn) % len(calls)](payload)

        seq = await load(spread(batch_calls, batch), 1, duration, 256)
        par = await load(spread(batch_calls, batch), 4 * len(targets), duration, 256)
        one = await load(spread(single_calls, single), 64, duration)
        return {"batch x1": seq.items_per_s, "batch x4/node": par.items_per_s, "single x64": one.items_per_s}
    finally:
        for c in channels:
            await c.close()


async def end_to_end(targets: list[str], duration: float) -> float:
    """Completed jobs/s with one Worker per node fed by 2 batch producers per node."""
    completed = 0
    enqueued = 0
    stop = asyncio.Event()
    workers = []
    for t in targets:
        w = Worker(t, [QUEUE], concurrency=256, prefetch=256, poll_wait=0.2, lease_duration=30.0,
                   worker_id=f"bench-{t}")

        @w.handler("noop")
        async def noop(job: Job) -> None:
            nonlocal completed
            completed += 1

        workers.append(w)
    channels = [grpc.aio.insecure_channel(t) for t in targets]
    stubs = [producer_pb2_grpc.ProducerServiceStub(c) for c in channels]

    async def producer(stub: producer_pb2_grpc.ProducerServiceStub) -> None:
        nonlocal enqueued
        while not stop.is_set():
            if enqueued - completed > 4096 * len(targets):
                await asyncio.sleep(0.001)
                continue
            await stub.EnqueueBatch(BATCH)
            enqueued += 256

    runs = [asyncio.create_task(w.run(install_signal_handlers=False)) for w in workers]
    tasks = [asyncio.create_task(producer(s)) for s in stubs for _ in range(2)]
    await asyncio.sleep(1.0)
    c0, t0 = completed, time.perf_counter()
    await asyncio.sleep(duration)
    rate = (completed - c0) / (time.perf_counter() - t0)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    for w in workers:
        await w.stop(5)
    await asyncio.gather(*runs, return_exceptions=True)
    for c in channels:
        await c.close()
    return rate


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per figure")
    parser.add_argument("--nodes", default="1,3", help="PostgreSQL node counts, comma-separated")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-sqlite", action="store_true", help="skip the SQLite reference row")
    parser.add_argument("--writers", type=int, default=4, help="postgres.writers of every node")
    parser.add_argument("--only", choices=("all", "enqueue", "e2e"), default="all", help="run one part only")
    args = parser.parse_args()
    setups = [] if args.no_sqlite else [("sqlite", 1)]
    setups += [("postgres", int(n)) for n in args.nodes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for storage, nodes in setups:
            tag = f"{storage}{nodes}"
            rates = {"batch x1": 0.0, "batch x4/node": 0.0, "single x64": 0.0}
            e2e = 0.0
            if args.only in ("all", "enqueue"):
                with cluster(Path(tmp), nodes, storage, args.dsn, tag + "e", args.writers) as procs:
                    rates = await enqueue_rates([p.grpc_target for p in procs], args.duration)
            if args.only in ("all", "e2e"):
                with cluster(Path(tmp), nodes, storage, args.dsn, tag + "w", args.writers) as procs:
                    e2e = await end_to_end([p.grpc_target for p in procs], args.duration)
            rows.append([f"{storage}, {nodes} node{'s' if nodes > 1 else ''}", f"{rates['batch x1']:,.0f}",
                         f"{rates['batch x4/node']:,.0f}", f"{rates['single x64']:,.0f}", f"{e2e:,.0f}"])
            print(" | ".join(rows[-1]), flush=True)
    print()
    print(table(["backend", "batched enqueue x1, jobs/s", "batched enqueue x4/node, jobs/s",
                 "single enqueue x64, jobs/s", "end to end (Worker), jobs/s"], rows))


if __name__ == "__main__":
    uvloop.run(main())
