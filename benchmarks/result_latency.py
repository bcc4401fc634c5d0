"""Enqueue → ``result()`` round trip of a no-op job, at 1, 10 and 100 callers in parallel.

Starts a fresh ``sepp serve`` (ServerProcess: SQLite, ``persist_mode = "group"``) and one
worker process, ``sepp worker result_latency:worker --log-level warning --quiet`` at the
Worker's defaults (concurrency 10, adaptive prefetch; ``--concurrency`` to change it; this
file is also the module holding the Worker, whose handler returns ``None``). Each caller,
in a loop: ``ack = await client.enqueue(EnqueueRequest("latency", "noop", payload=…))``,
then ``await client.result(ack)``; the time of the pair is one sample.

The callers are asyncio tasks sharing one ``AsyncClient``: the shape of an asyncio web
service (FastAPI, aiohttp) that enqueues a job per request and awaits its result — where
many callers wait in parallel in one process. ``--client sync`` runs them as threads
sharing one ``Client`` instead (a threaded Flask / Django service; the client is safe to
share between threads), where the GIL, not the server, tends to set the pace at 100.

Per caller count, each round measures ``--duration`` s after a 1 s warm-up (calls started
in the warm-up or ending after the window are not counted); the rounds cycle through the
counts, so drift hits each alike. The table pools the samples of every round: p50, p99 and
max in ms, and the round trips per second (median of the rounds).

    python benchmarks/result_latency.py [--duration 5] [--rounds 3] [--callers 1,10,100]
        [--client async|sync] [--concurrency 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from sepp.worker import Job, Worker

QUEUE = "latency"
JOB_TYPE = "noop"
HERE = Path(__file__).resolve().parent

worker = Worker("127.0.0.1:7700", queues=[QUEUE])


@worker.handler(JOB_TYPE)
async def noop(job: Job) -> None:
    """The no-op handler: no result."""


# ------------------------------------------------------------------ driver


async def async_callers(target: str, callers: int, duration: float) -> tuple[float, list[float]]:
    """(round trips/s, seconds of each) of ``callers`` tasks sharing one ``AsyncClient``."""
    from _harness import load

    from sepp import AsyncClient, EnqueueRequest, Payload

    request = EnqueueRequest(QUEUE, JOB_TYPE, payload=Payload.json({"user_id": 42}))
    async with AsyncClient(target) as client:

        async def round_trip() -> None:
            await client.result(await client.enqueue(request), timeout=60)

        got = await load(round_trip, callers, duration)
    return got.calls_per_s, got.latencies


def sync_callers(target: str, callers: int, duration: float, warmup: float = 1.0) -> tuple[float, list[float]]:
    """(round trips/s, seconds of each) of ``callers`` threads sharing one ``Client``,
    measured as ``_harness.load`` measures tasks."""
    from sepp import Client, EnqueueRequest, Payload

    request = EnqueueRequest(QUEUE, JOB_TYPE, payload=Payload.json({"user_id": 42}))
    lat: list[float] = []
    t0 = time.perf_counter() + warmup
    end = t0 + duration
    with Client(target) as client:

        def caller() -> None:
            while (s := time.perf_counter()) < end:
                client.result(client.enqueue(request), timeout=60)
                if s >= t0 and (e := time.perf_counter()) <= end:
                    lat.append(e - s)  # list.append is atomic under the GIL

        threads = [threading.Thread(target=caller) for _ in range(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return len(lat) / duration, lat


def main() -> None:
    """Parse the flags, start the server and the worker, run the rounds, print the table."""
    from _harness import table
    from e2e import pct

    from sepp import Client, EnqueueRequest
    from sepp.testing import ServerProcess

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds per caller count and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--callers", default="1,10,100", help="caller counts, comma-separated")
    ap.add_argument("--client", choices=("async", "sync"), default="async",
                    help="async: tasks sharing one AsyncClient; sync: threads sharing one Client")
    ap.add_argument("--concurrency", type=int, default=0, help="the worker's concurrency (0: the Worker's default)")
    args = ap.parse_args()
    counts = [int(c) for c in args.callers.split(",")]
    samples: dict[int, list[float]] = {c: [] for c in counts}
    rates: dict[int, list[float]] = {c: [] for c in counts}
    exe = str(Path(sys.executable).with_name("sepp"))
    with tempfile.TemporaryDirectory(prefix="sepp-result-latency-") as tmp, \
            ServerProcess(Path(tmp) / "data", {"persist_mode": "group", "log_level": "warning"}) as server:
        cmd = [exe, "worker", "result_latency:worker", "--server", server.grpc_target, "--queues", QUEUE,
               "--log-level", "warning", "--quiet"]
        if args.concurrency:
            cmd += ["--concurrency", str(args.concurrency)]
        log = open(Path(tmp) / "worker.log", "wb")  # closed below
        proc = subprocess.Popen(cmd, cwd=HERE, stdout=log, stderr=subprocess.STDOUT)
        try:
            with Client(server.grpc_target) as client:  # the worker is up once a job came back
                client.result(client.enqueue(EnqueueRequest(QUEUE, JOB_TYPE)), timeout=120)
            for r in range(args.rounds):
                for c in counts:
                    if args.client == "async":
                        rate, lat = asyncio.run(async_callers(server.grpc_target, c, args.duration))
                    else:
                        rate, lat = sync_callers(server.grpc_target, c, args.duration)
                    rates[c].append(rate)
                    samples[c] += [s * 1000 for s in lat]
                    print(f"round {r + 1}, {c} caller(s): {rate:,.0f} round trips/s", file=sys.stderr)
        finally:
            proc.terminate()  # our own worker, by its Popen handle
            proc.wait(timeout=30)
            log.close()
    rows = [[str(c), f"{statistics.median(rates[c]):,.0f}", f"{pct(samples[c], 0.5):.2f}",
             f"{pct(samples[c], 0.99):.2f}", f"{max(samples[c], default=float('nan')):.2f}", f"{len(samples[c]):,}"]
            for c in counts]
    client_desc = "asyncio tasks, one AsyncClient" if args.client == "async" else "threads, one Client"
    print(f"enqueue → result() of a no-op job; callers: {client_desc}; one worker process "
          f"(concurrency {args.concurrency or 'default'}); SQLite group commit; {args.duration:g} s x "
          f"{args.rounds} round(s) per caller count")
    print(table(["callers", "round trips/s", "p50 ms", "p99 ms", "max ms", "samples"], rows))


if __name__ == "__main__":
    main()
