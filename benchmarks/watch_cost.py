"""What a live-events watcher costs the server (docs/decisions.md "Progress and live job
events"): the end-to-end rate of no-op jobs through one ``sepp serve`` (raw stubs:
``EnqueueBatch`` 256 / ``Reserve`` 256 + one ``Settle`` of 256 acks, as ``e2e.py``), in
alternating rounds without and with one ``WatchJobs`` stream of every event (three per
job: enqueued, reserved, completed), and the event rate the watcher received.

The watcher counts the events of each message without converting them (its own cost stays
small: this measures the server's). Prints the median of each, the change, and the
events/s; the acceptance figure is a change of at most 15 % at 20,000 events/s or more.
Because the load generator and the watcher share this process's CPU with the server on a
small machine, it also prints the server process's CPU time per completed job (from
/proc; the SQLite writer child not counted — events cost nothing there): on a loaded
machine that is the steadier figure of what the events cost the server.

    python benchmarks/watch_cost.py [--duration 5] [--rounds 3] [--storage sqlite|postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import grpc
import uvloop
from _harness import table
from e2e import BATCH, QUEUE, Counter

from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc, worker_pb2_grpc
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess
from sepp.wire import seconds_to_duration


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def round_rate(target: str, duration: float, watch: bool, pid: int, producers: int = 2,
                     consumers: int = 2) -> tuple[float, float, float]:
    """(completed jobs/s, events/s the watcher received, server CPU µs per job) over
    ``duration`` s after a 1 s warm-up."""
    counter = Counter()
    events = [0]
    stop = asyncio.Event()
    async with grpc.aio.insecure_channel(target) as channel:
        prod = producer_pb2_grpc.ProducerServiceStub(channel)
        work = worker_pb2_grpc.WorkerServiceStub(channel)
        stream = channel.unary_stream("/sepp.api.v1.ProducerService/WatchJobs",
                                      request_serializer=ppb.WatchJobsRequest.SerializeToString,
                                      response_deserializer=ppb.WatchJobsResponse.FromString)

        async def producer() -> None:
            while not stop.is_set():
                if counter.enqueued - counter.completed > 4096:
                    await asyncio.sleep(0.001)
                    continue
                await prod.EnqueueBatch(BATCH)
                counter.enqueued += 256

        async def consumer() -> None:
            req = wpb.ReserveRequest(queues=[QUEUE], max_jobs=256, worker_id="bench", wait=seconds_to_duration(0.2))
            while not stop.is_set():
                got = (await work.Reserve(req)).reservations
                if not got:
                    continue
                items = [wpb.SettleItem(ack=wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id)) for r in got]
                await work.Settle(wpb.SettleRequest(items=items))
                counter.completed += len(got)

        async def watcher() -> None:
            call = stream(ppb.WatchJobsRequest(queues=[QUEUE]))
            try:
                async for resp in call:
                    events[0] += len(resp.positions)
            except asyncio.CancelledError:
                call.cancel()
                raise

        tasks = [asyncio.create_task(producer()) for _ in range(producers)]
        tasks += [asyncio.create_task(consumer()) for _ in range(consumers)]
        if watch:
            tasks.append(asyncio.create_task(watcher()))
        await asyncio.sleep(1.0)
        c0, e0, t0, cpu0 = counter.completed, events[0], time.perf_counter(), cpu_seconds(pid)
        await asyncio.sleep(duration)
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
        done = counter.completed - c0
        rate, event_rate = done / elapsed, (events[0] - e0) / elapsed
        stop.set()
        for t in tasks[-1:] if watch else ():
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return rate, event_rate, cpu / max(done, 1) * 1e6


async def main(args: argparse.Namespace) -> None:
    config: dict[str, object] = {"persist_mode": "group", "sweep_interval": 1.0}
    if args.storage == "postgres":
        config.update(storage="postgres", postgres_dsn=args.dsn, postgres={"schema": f"bench_watch_{int(time.time())}"})
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), config) as server:
        plain: list[float] = []
        watched: list[float] = []
        event_rates: list[float] = []
        cpu_plain: list[float] = []
        cpu_watched: list[float] = []
        assert server.proc is not None
        pid = server.proc.pid
        for _ in range(args.rounds):
            rate, _events, cpu = await round_rate(server.grpc_target, args.duration, False, pid)
            plain.append(rate)
            cpu_plain.append(cpu)
            rate, event_rate, cpu = await round_rate(server.grpc_target, args.duration, True, pid)
            watched.append(rate)
            event_rates.append(event_rate)
            cpu_watched.append(cpu)
    base, with_watch = statistics.median(plain), statistics.median(watched)
    cpu_base, cpu_watch = statistics.median(cpu_plain), statistics.median(cpu_watched)
    rows = [["jobs/s, no watcher", f"{base:,.0f}", ", ".join(f"{r:,.0f}" for r in plain)],
            ["jobs/s, one watcher of every event", f"{with_watch:,.0f}", ", ".join(f"{r:,.0f}" for r in watched)],
            ["events/s the watcher received", f"{statistics.median(event_rates):,.0f}",
             ", ".join(f"{r:,.0f}" for r in event_rates)],
            ["change", f"{(with_watch / base - 1) * 100:+.1f} %", ""],
            ["server CPU µs/job, no watcher", f"{cpu_base:.1f}", ", ".join(f"{c:.1f}" for c in cpu_plain)],
            ["server CPU µs/job, one watcher", f"{cpu_watch:.1f}", ", ".join(f"{c:.1f}" for c in cpu_watched)],
            ["CPU-bound rate change (CPU/job ratio)", f"{(cpu_base / cpu_watch - 1) * 100:+.1f} %", ""]]
    print(table(["figure", "median", "rounds"], rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--storage", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    uvloop.run(main(parser.parse_args()))
