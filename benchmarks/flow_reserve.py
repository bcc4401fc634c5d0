"""In-process benchmark of flow control (issue 12 "Benchmark"): Reserve throughput with each
limit switched on but not binding, against an unlimited queue, in the same sitting.

Builds ``JobEngine`` over a real store (SQLite in a temp folder, its writer process; or
PostgreSQL in a fresh schema with ``--postgres-dsn``), fills one queue per setting with
jobs (100-byte payloads, a ``tenant_id`` custom entry spread over 100 tenants), then
drains ``--jobs`` of them at a time with 4 reservers (Reserve of 16, then one Settle of
the 16 acks) and prints jobs/s per setting and its ratio to unlimited.

The machine is shared, so the runs are interleaved and the medians kept: each of
``--rounds`` rounds drains, for every limited setting, an unlimited queue and the limited
one back to back (the order of the pair flips every round, so neither always runs second),
and the ratio of that pair is one sample. The table shows the median jobs/s of each
setting and the median of its pair ratios (so a burst of load in one round moves one
sample, not the answer).

    python benchmarks/flow_reserve.py [--jobs 1000] [--rounds 15] [--postgres-dsn DSN]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
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
    """Reserve and ack ``jobs`` jobs of ``queue`` (a few more: the reservers stop once that
    many are done) with ``RESERVERS`` reservers; jobs/s."""
    done = 0
    started = time.perf_counter()

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

    await asyncio.gather(*(reserver(i) for i in range(RESERVERS)))
    return done / (time.perf_counter() - started)


async def measure(jobs: int, rounds: int, dsn: str = "") -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Interleaved, paired runs: (jobs/s samples per setting, pair ratios per limited setting)."""
    folder = Path(tempfile.mkdtemp(prefix="sepp-flow-bench-"))
    extra: dict[str, Any] = {}
    schema = f"bench_flow_{os.getpid()}"
    if dsn:
        extra = {"storage": "postgres", "postgres_dsn": dsn, "postgres": PostgresSettings(schema=schema)}
    queues = {f"q{i}": QueueSettings(**s) for i, s in enumerate(SETTINGS.values())}
    config = ServerConfig(data_dir=folder, queues=queues, **extra)  # type: ignore[arg-type]
    store = open_store(config)
    await store.open()
    rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
    ratios: dict[str, list[float]] = {name: [] for name in list(SETTINGS)[1:]}
    try:
        registry = QueueRegistry(config.queue_defaults, config.strict, config.limits.max_encoding_bytes)
        for q in registry.load(await store.load_queues(), dict(config.queues)):
            await store.upsert_queue(q.record(), 0)
        engine = JobEngine(config, store, registry, Notifier())
        payload = pb.Payload(data=b"x" * 100, encoding="application/octet-stream")
        names = list(SETTINGS)

        async def fill(i: int, count: int) -> None:
            queue = f"q{i}"
            for start in range(0, count, 256):
                reqs = []
                for n in range(start, min(count, start + 256)):
                    req = pb.EnqueueRequest(queue=queue, job_type="t", payload=payload)
                    req.custom["tenant_id"].string_value = f"t{n % 100}"
                    reqs.append(req)
                await engine.enqueue_batch(reqs)

        async def run(i: int) -> float:
            rate = await drain(engine, f"q{i}", jobs)
            rates[names[i]].append(rate)
            return rate

        # Every queue is filled first (untimed), so the two drains of a pair run seconds apart.
        spare = RESERVERS * BATCH  # a drain may take up to this many jobs past ``jobs``
        await fill(0, (jobs + spare) * (1 + rounds * (len(names) - 1)))
        for i in range(1, len(names)):
            await fill(i, (jobs + spare) * rounds)
        await run(0)  # warm-up (caches, prepared statements), not counted
        rates[names[0]].clear()
        for r in range(rounds):
            for i in range(1, len(names)):
                if (r + i) % 2:
                    base = await run(0)
                    limited = await run(i)
                else:
                    limited = await run(i)
                    base = await run(0)
                ratios[names[i]].append(limited / base)
    finally:
        await store.close()
        if dsn:
            drop = ["psql", dsn, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"]
            await asyncio.to_thread(subprocess.run, drop, check=False, capture_output=True)
    return rates, ratios


def main() -> None:
    """Parse the flags, run, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000, help="jobs per drain")
    parser.add_argument("--rounds", type=int, default=15, help="rounds (medians are kept)")
    parser.add_argument("--postgres-dsn", default="", help="run on PostgreSQL (a fresh schema) instead of SQLite")
    args = parser.parse_args()
    load = os.getloadavg()
    rates, ratios = asyncio.run(measure(args.jobs, args.rounds, args.postgres_dsn))
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; after: "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("| setting (not binding) | reserve+ack jobs/s (median) | vs unlimited (median of pairs) | pair ratios |")
    print("|---|---|---|---|")
    for name, samples in rates.items():
        got = ratios.get(name)
        ratio = f"{statistics.median(got):.1%}" if got else "100%"
        each = " ".join(f"{x:.2f}" for x in got) if got else "—"
        print(f"| {name} | {statistics.median(samples):,.0f} | {ratio} | {each} |")


if __name__ == "__main__":
    main()
