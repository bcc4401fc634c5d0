"""In-process engine benchmark (issue 9): the server's own cost of batched enqueue, without gRPC.

Builds ``JobEngine`` over a real ``SQLiteStore`` (writer process, a temp folder; or a
``PostgresStore`` in a fresh schema with ``--postgres-dsn``) in this
process and calls ``enqueue_batch`` with batches of 256 jobs (100-byte payloads), 4 in
flight. Prints a Markdown table: jobs/s (wall) and the CPU µs per job spent in this process
(the engine, validation, row building and the store's side of the pipe; the writer's own
work runs in its child process). Comparing two commits with this script shows a change of
the engine's per-job cost that the end-to-end benchmarks' noise (the gRPC layer, the client
on the same 2 cores) hides.

    python benchmarks/engine_enqueue.py [--batches 300] [--modes async,group] [--postgres-dsn DSN] [--custom N]
        [--in-flight 4]

``--custom N`` gives every job N custom-map entries (an int and strings: the issue 13
search index's cost); the script runs on any sepp (PYTHONPATH), so one sitting can compare
two commits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from sepp.api.v1 import common_pb2 as pb
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueRegistry
from sepp.storage.config import PostgresSettings
from sepp.storage.factory import open_store

BATCH = 256
IN_FLIGHT = 4


async def measure(mode: str, batches: int, dsn: str = "", custom: int = 0,
                  in_flight: int = IN_FLIGHT) -> tuple[float, float]:
    """(jobs/s wall, CPU µs per job in this process) for ``batches`` batches in ``mode``,
    ``in_flight`` at a time (1: a sequential producer, whose batches take the lone-write path);
    on PostgreSQL (``dsn``) in a fresh schema, dropped after."""
    folder = Path(tempfile.mkdtemp(prefix="sepp-engine-bench-"))
    extra: dict[str, Any] = {}
    if dsn:
        extra = {"storage": "postgres", "postgres_dsn": dsn,
                 "postgres": PostgresSettings(schema=f"bench_engine_{os.getpid()}")}
    config = ServerConfig(data_dir=folder, persist_mode=mode, **extra)  # type: ignore[arg-type]
    store = open_store(config)
    await store.open()
    try:
        registry = QueueRegistry(config.queue_defaults, config.strict, config.limits.max_encoding_bytes)
        engine = JobEngine(ServerParts.build(config, store, registry, Notifier()))
        payload = pb.Payload(data=b"x" * 100, encoding="application/octet-stream")
        reqs = [pb.EnqueueRequest(queue="q", job_type="t", payload=payload) for _ in range(BATCH)]
        for i, req in enumerate(reqs):
            for n in range(custom):
                if n == 0:
                    req.custom["user_id"].int_value = 1000 + i
                else:
                    req.custom[f"k{n}"].string_value = f"value-{n}-{i % 7}"
        for _ in range(20):  # warm-up
            await engine.enqueue_batch(reqs)

        async def producer() -> None:
            for _ in range(batches // in_flight):
                await engine.enqueue_batch(reqs)

        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(producer() for _ in range(in_flight)))
        cpu1, wall1 = time.process_time(), time.perf_counter()
    finally:
        await store.close()
        if dsn:
            drop = ["psql", dsn, "-qc", f"DROP SCHEMA IF EXISTS bench_engine_{os.getpid()} CASCADE"]
            await asyncio.to_thread(subprocess.run, drop, check=False, capture_output=True)
    jobs = (batches // in_flight) * in_flight * BATCH
    return jobs / (wall1 - wall0), (cpu1 - cpu0) / jobs * 1e6


def main() -> None:
    """Parse the flags, run each mode, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=300, help="batches of 256 per mode")
    parser.add_argument("--modes", default="async,group", help="persist modes, comma-separated")
    parser.add_argument("--postgres-dsn", default="", help="run on PostgreSQL (a fresh schema) instead of SQLite")
    parser.add_argument("--custom", type=int, default=0, help="custom-map entries per job")
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT, help="batches in flight (1: sequential)")
    args = parser.parse_args()
    print("| mode | jobs/s (wall) | CPU µs/job (engine process) |")
    print("|---|---|---|")
    for mode in args.modes.split(","):
        rate, cpu = asyncio.run(measure(mode, args.batches, args.postgres_dsn, args.custom, args.in_flight))
        print(f"| {mode} | {rate:,.0f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
