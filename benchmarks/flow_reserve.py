"""In-process benchmark of flow control (issue 12 "Benchmark"): Reserve throughput with each
limit switched on but not binding, against an unlimited queue, in the same sitting.

Builds ``JobEngine`` over a real store (SQLite in a temp folder, its writer process; or
PostgreSQL in a fresh schema with ``--postgres-dsn``), enqueues ``--jobs`` jobs (100-byte
payloads, a ``tenant_id`` custom entry spread over 100 tenants) into one queue per
setting, then drains each queue with 4 reservers (Reserve of 16, then one Settle of the
16 acks) and prints jobs/s per setting and its ratio to unlimited. The settings run in
turn, ``--rounds`` times (the best round of each is kept: the machine is shared).

    python benchmarks/flow_reserve.py [--jobs 20000] [--rounds 2] [--postgres-dsn DSN]
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
from sepp.domain.params import SettleKind, SettleParams
from sepp.limits import QueueSettings
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.queues import QueueRegistry
from sepp.storage.config import PostgresSettings
from sepp.storage.factory import open_store

#: The settings compared: each limit on, none of them binding.
SETTINGS: dict[str, dict[str, Any]] = {
    "unlimited": {},
    "max_in_flight = 1000000": {"max_in_flight": 1_000_000},
    'rate_limit = "2000000000/s"': {"rate_limit": "2000000000/s"},
    "max_in_flight_per_key = 1000000": {"concurrency_key": "tenant_id", "max_in_flight_per_key": 1_000_000},
}
RESERVERS = 4
BATCH = 16


async def drain(engine: JobEngine, queue: str, jobs: int) -> float:
    """Reserve and ack every job of ``queue`` with ``RESERVERS`` reservers; jobs/s."""
    done = 0

    async def reserver(i: int) -> None:
        nonlocal done
        while done < jobs:
            got = await engine.reserve([queue], BATCH, None, 0.0, f"w{i}")
            if not got:
                await asyncio.sleep(0)
                continue
            now = engine._clock_now()
            await engine.settle([SettleParams(j.id, j.lease_id or b"", SettleKind.ACK, now) for j in got])
            done += len(got)

    started = time.perf_counter()
    await asyncio.gather(*(reserver(i) for i in range(RESERVERS)))
    return jobs / (time.perf_counter() - started)


async def measure(jobs: int, rounds: int, dsn: str = "") -> dict[str, float]:
    """Best jobs/s per setting over ``rounds`` rounds."""
    folder = Path(tempfile.mkdtemp(prefix="sepp-flow-bench-"))
    extra: dict[str, Any] = {}
    schema = f"bench_flow_{os.getpid()}"
    if dsn:
        extra = {"storage": "postgres", "postgres_dsn": dsn, "postgres": PostgresSettings(schema=schema)}
    queues = {f"q{i}": QueueSettings(**s) for i, s in enumerate(SETTINGS.values())}
    config = ServerConfig(data_dir=folder, queues=queues, **extra)  # type: ignore[arg-type]
    store = open_store(config)
    await store.open()
    best: dict[str, float] = {}
    try:
        registry = QueueRegistry(config.queue_defaults, config.strict, config.limits.max_encoding_bytes)
        for q in registry.load(await store.load_queues(), dict(config.queues)):
            await store.upsert_queue(q.record(), 0)
        engine = JobEngine(config, store, registry, Notifier())
        payload = pb.Payload(data=b"x" * 100, encoding="application/octet-stream")
        for _round in range(rounds):
            for i, name in enumerate(SETTINGS):
                queue = f"q{i}"
                for start in range(0, jobs, 256):
                    reqs = []
                    for n in range(start, min(jobs, start + 256)):
                        req = pb.EnqueueRequest(queue=queue, job_type="t", payload=payload)
                        req.custom["tenant_id"].string_value = f"t{n % 100}"
                        reqs.append(req)
                    await engine.enqueue_batch(reqs)
                best[name] = max(best.get(name, 0.0), await drain(engine, queue, jobs))
    finally:
        await store.close()
        if dsn:
            drop = ["psql", dsn, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"]
            await asyncio.to_thread(subprocess.run, drop, check=False, capture_output=True)
    return best


def main() -> None:
    """Parse the flags, run, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per setting and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds (the best is kept)")
    parser.add_argument("--postgres-dsn", default="", help="run on PostgreSQL (a fresh schema) instead of SQLite")
    args = parser.parse_args()
    best = asyncio.run(measure(args.jobs, args.rounds, args.postgres_dsn))
    base = best["unlimited"]
    print("| setting (not binding) | reserve+ack jobs/s | vs unlimited |")
    print("|---|---|---|")
    for name, rate in best.items():
        print(f"| {name} | {rate:,.0f} | {rate / base:.0%} |")


if __name__ == "__main__":
    main()
