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
sample, not the answer), and the same for the CPU each job cost: this process plus the
server side (SQLite's writer process, or the PostgreSQL backends of the store's
connections, found by their application_name) — steadier than wall-clock on a shared machine.

    python benchmarks/flow_reserve.py [--jobs 1000] [--rounds 15] [--postgres-dsn DSN]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from sepp.api.v1 import common_pb2 as pb
from sepp.domain.params import SettleKind, SettleParams
from sepp.limits import QueueSettings
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
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
_TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used; 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _children() -> list[int]:
    """The pids of this process's children (the SQLite writer process)."""
    pids: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            pids.extend(int(x) for x in (task / "children").read_text().split())
    return pids


class CpuMeter:
    """CPU seconds used by the benchmark and the store's server side together: this
    process, plus its child processes (SQLite's writer process) or the PostgreSQL backends
    serving connections named ``application`` (found in ``pg_stat_activity``). The
    machine is shared, so CPU per job is steadier than wall-clock throughput."""

    def __init__(self, dsn: str, application: str) -> None:
        self.dsn, self.application = dsn, application
        self.pids: list[int] = []

    async def find(self) -> None:
        """Look up the server-side pids (once the store's connections are open)."""
        if not self.dsn:
            self.pids = _children()
            return
        conn = await asyncpg.connect(self.dsn)
        try:
            rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE application_name = $1",
                                    self.application)
        finally:
            await conn.close()
        self.pids = [r[0] for r in rows]

    def now(self) -> float:
        """CPU seconds used so far."""
        return time.process_time() + sum(_proc_cpu(pid) for pid in self.pids)


async def drain(engine: JobEngine, queue: str, jobs: int, cpu: CpuMeter) -> tuple[float, float]:
    """Reserve and ack ``jobs`` jobs of ``queue`` (a few more: the reservers stop once that
    many are done) with ``RESERVERS`` reservers: (jobs/s, CPU µs per job)."""
    done = 0
    started, cpu_started = time.perf_counter(), cpu.now()

    async def reserver(i: int) -> None:
        nonlocal done
        while done < jobs:
            got = await engine.reserve([queue], BATCH, None, 0.0, f"w{i}")
            if not got:
                await asyncio.sleep(0)
                continue
            now = engine.parts.clock.now()
            await engine.settle([SettleParams(j.id, j.lease_id or b"", SettleKind.ACK, now) for j in got])
            done += len(got)

    await asyncio.gather(*(reserver(i) for i in range(RESERVERS)))
    return done / (time.perf_counter() - started), (cpu.now() - cpu_started) / done * 1e6


class Samples:
    """Per setting: jobs/s and CPU µs per job of each drain; per limited setting: the pair
    ratios of throughput (limited ÷ unlimited) and of CPU per job (unlimited ÷ limited, so
    above 1 is cheaper, as for throughput)."""

    def __init__(self, names: list[str]) -> None:
        self.rates: dict[str, list[float]] = {name: [] for name in names}
        self.cpus: dict[str, list[float]] = {name: [] for name in names}
        self.ratios: dict[str, list[float]] = {name: [] for name in names[1:]}
        self.cpu_ratios: dict[str, list[float]] = {name: [] for name in names[1:]}


async def measure(jobs: int, rounds: int, dsn: str = "") -> Samples:
    """Interleaved, paired runs of every limited setting against unlimited."""
    folder = Path(tempfile.mkdtemp(prefix="sepp-flow-bench-"))
    extra: dict[str, Any] = {}
    schema = f"bench_flow_{os.getpid()}"
    node = f"bench-flow-{os.getpid()}"
    if dsn:
        extra = {"storage": "postgres", "postgres_dsn": dsn, "postgres": PostgresSettings(schema=schema)}
    queues = {f"q{i}": QueueSettings(**s) for i, s in enumerate(SETTINGS.values())}
    config = ServerConfig(data_dir=folder, queues=queues, node_name=node, **extra)  # type: ignore[arg-type]
    store = open_store(config)
    await store.open()
    names = list(SETTINGS)
    out = Samples(names)
    cpu = CpuMeter(dsn, f"sepp {node}")
    try:
        registry = QueueRegistry(config.queue_defaults, config.strict, config.limits.max_encoding_bytes)
        for q in registry.load(await store.load_queues(), dict(config.queues)):
            await store.upsert_queue(q.record(), 0)
        engine = JobEngine(ServerParts.build(config, store, registry, Notifier()))
        payload = pb.Payload(data=b"x" * 100, encoding="application/octet-stream")

        async def fill(i: int, count: int) -> None:
            queue = f"q{i}"
            for start in range(0, count, 256):
                reqs = []
                for n in range(start, min(count, start + 256)):
                    req = pb.EnqueueRequest(queue=queue, job_type="t", payload=payload)
                    req.custom["tenant_id"].string_value = f"t{n % 100}"
                    reqs.append(req)
                await engine.enqueue_batch(reqs)

        async def run(i: int) -> tuple[float, float]:
            rate, per_job = await drain(engine, f"q{i}", jobs, cpu)
            out.rates[names[i]].append(rate)
            out.cpus[names[i]].append(per_job)
            return rate, per_job

        # Every queue is filled first (untimed), so the two drains of a pair run seconds apart.
        spare = RESERVERS * BATCH  # a drain may take up to this many jobs past ``jobs``
        await fill(0, (jobs + spare) * (1 + rounds * (len(names) - 1)))
        for i in range(1, len(names)):
            await fill(i, (jobs + spare) * rounds)
        await cpu.find()
        await run(0)  # warm-up (caches, prepared statements), not counted
        out.rates[names[0]].clear()
        out.cpus[names[0]].clear()
        for r in range(rounds):
            for i in range(1, len(names)):
                if (r + i) % 2:
                    base = await run(0)
                    limited = await run(i)
                else:
                    limited = await run(i)
                    base = await run(0)
                out.ratios[names[i]].append(limited[0] / base[0])
                out.cpu_ratios[names[i]].append(base[1] / limited[1])
    finally:
        await store.close()
        if dsn:
            drop = ["psql", dsn, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"]
            await asyncio.to_thread(subprocess.run, drop, check=False, capture_output=True)
    return out


def main() -> None:
    """Parse the flags, run, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000, help="jobs per drain")
    parser.add_argument("--rounds", type=int, default=15, help="rounds (medians are kept)")
    parser.add_argument("--postgres-dsn", default="", help="run on PostgreSQL (a fresh schema) instead of SQLite")
    args = parser.parse_args()
    load = os.getloadavg()
    got = asyncio.run(measure(args.jobs, args.rounds, args.postgres_dsn))
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; after: "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    med = statistics.median
    print("| setting (not binding) | jobs/s (median) | vs unlimited (median of pairs) "
          "| CPU µs/job (median) | vs unlimited, by CPU (median of pairs) |")
    print("|---|---|---|---|---|")
    for name in got.rates:
        wall = f"{med(got.ratios[name]):.1%}" if name in got.ratios else "100%"
        by_cpu = f"{med(got.cpu_ratios[name]):.1%}" if name in got.cpu_ratios else "100%"
        print(f"| {name} | {med(got.rates[name]):,.0f} | {wall} | {med(got.cpus[name]):,.0f} | {by_cpu} |")
    for name in got.ratios:
        print(f"pairs {name}: jobs/s " + " ".join(f"{x:.2f}" for x in got.ratios[name])
              + "; CPU " + " ".join(f"{x:.2f}" for x in got.cpu_ratios[name]))


if __name__ == "__main__":
    main()
