"""End-to-end benchmark (issue 3): enqueue → reserve → settle through a real ``sepp serve``.

Starts a server (ServerProcess, group commit by default) and, from this process on
uvloop, measures:

* **throughput**: producers send ``EnqueueBatch`` of 256 while consumers drain the queue
  — once with the raw stubs (``Reserve`` 256 + one batched ``Settle`` of 256 acks per
  round) and once with the ``sepp.worker.Worker`` runtime (no-op async handler). The
  figure is jobs *completed* per second in the measured window.
* **latency**: one producer at ~1,000 jobs/s (single ``Enqueue`` calls, evenly paced);
  the time from the producer's send to the handler's start, p50/p99/max — again with
  raw stubs (long-poll ``Reserve``) and with the Worker.

* **scheduled backlog** (``--scheduled N``): batched enqueue and end-to-end rates on an
  empty database and with N far-future scheduled jobs waiting, and the change (median of
  three alternating rounds, each from a fresh copy of the database).

    python benchmarks/e2e.py [--duration 5] [--mode group] [--rate 1000] [--scheduled 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import grpc
import uvloop
from _harness import table

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc, worker_pb2_grpc
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess
from sepp.wire import seconds_to_duration
from sepp.worker import Job, Worker

QUEUE = "bench"
PAYLOAD = pb.Payload(data=b'{"user_id": 42, "template": "welcome", "locale": "en-US"}', encoding="application/json")
BATCH = ppb.EnqueueBatchRequest(jobs=[pb.EnqueueRequest(queue=QUEUE, job_type="noop", payload=PAYLOAD)] * 256)


_SCHEMAS: list[str] = []


def fresh(config: dict[str, object]) -> dict[str, object]:
    """``config`` for one more server: on PostgreSQL with a schema of its own (an empty
    database, like the fresh data folder SQLite gets); dropped by ``drop_schemas``."""
    pg = config.get("postgres")
    if not isinstance(pg, dict):
        return config
    schema = f"bench_{os.getpid()}_{len(_SCHEMAS)}"
    _SCHEMAS.append(schema)
    return {**config, "postgres": {**pg, "schema": schema}}


def drop_schemas(dsn: str) -> None:
    """Drop the schemas ``fresh`` made (psql; errors ignored)."""
    for schema in _SCHEMAS:
        subprocess.run(["psql", dsn, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"], check=False,
                       capture_output=True)


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (ms in, ms out)."""
    data = sorted(values)
    return data[min(len(data) - 1, int(q * len(data)))] if data else float("nan")


# ------------------------------------------------------------------ throughput


class Counter:
    """Jobs enqueued and completed, for backlog control and the measured window."""

    def __init__(self) -> None:
        self.enqueued = 0
        self.completed = 0


async def raw_throughput(target: str, duration: float, producers: int, consumers: int) -> float:
    """Completed jobs/s with raw stubs: EnqueueBatch 256 / Reserve 256 + Settle 256 acks."""
    counter = Counter()
    stop = asyncio.Event()
    async with grpc.aio.insecure_channel(target) as channel:
        prod = producer_pb2_grpc.ProducerServiceStub(channel)
        work = worker_pb2_grpc.WorkerServiceStub(channel)

        async def producer() -> None:
            while not stop.is_set():
                if counter.enqueued - counter.completed > 4096:
                    await asyncio.sleep(0.001)
                    continue
                await prod.EnqueueBatch(BATCH)
                counter.enqueued += 256

        async def consumer() -> None:
            req = wpb.ReserveRequest(queues=[QUEUE], max_jobs=256, worker_id="bench-raw",
                                     wait=seconds_to_duration(0.2))
            while not stop.is_set():
                got = (await work.Reserve(req)).reservations
                if not got:
                    continue
                items = [wpb.SettleItem(ack=wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id)) for r in got]
                await work.Settle(wpb.SettleRequest(items=items))
                counter.completed += len(got)

        tasks = [asyncio.create_task(producer()) for _ in range(producers)]
        tasks += [asyncio.create_task(consumer()) for _ in range(consumers)]
        rate = await _window(counter, duration)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    return rate


async def _window(counter: Counter, duration: float, warmup: float = 1.0) -> float:
    await asyncio.sleep(warmup)
    c0, t0 = counter.completed, time.perf_counter()
    await asyncio.sleep(duration)
    return (counter.completed - c0) / (time.perf_counter() - t0)


async def worker_throughput(target: str, duration: float, producers: int, concurrency: int) -> float:
    """Completed jobs/s with the Worker runtime (no-op async handler) fed by batched enqueues."""
    counter = Counter()
    stop = asyncio.Event()
    worker = Worker(target, [QUEUE], concurrency=concurrency, prefetch=concurrency, poll_wait=0.2,
                    lease_duration=30.0, worker_id="bench-worker")

    @worker.handler("noop")
    async def noop(job: Job) -> None:
        counter.completed += 1

    async with grpc.aio.insecure_channel(target) as channel:
        prod = producer_pb2_grpc.ProducerServiceStub(channel)

        async def producer() -> None:
            while not stop.is_set():
                if counter.enqueued - counter.completed > 4096:
                    await asyncio.sleep(0.001)
                    continue
                await prod.EnqueueBatch(BATCH)
                counter.enqueued += 256

        run = asyncio.create_task(worker.run(install_signal_handlers=False))
        tasks = [asyncio.create_task(producer()) for _ in range(producers)]
        rate = await _window(counter, duration)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await worker.stop(5)
        await run
    return rate


# ------------------------------------------------------------------ latency


async def paced_producer(stub: producer_pb2_grpc.ProducerServiceStub, rate: float, duration: float,
                         sent: dict[str, float]) -> None:
    """Single enqueues at ``rate`` jobs/s for ``duration`` s; ``sent[job_id]`` = send time (perf_counter)."""
    interval = 1.0 / rate
    start = time.perf_counter()
    n = 0
    req = pb.EnqueueRequest(queue=QUEUE, job_type="noop", payload=PAYLOAD)
    in_flight: set[asyncio.Task[None]] = set()

    async def one(at: float) -> None:
        ack = await stub.Enqueue(req)
        sent[ack.job_id] = at

    while (now := time.perf_counter()) - start < duration:
        target = start + n * interval
        if now < target:
            await asyncio.sleep(target - now)
        t = asyncio.create_task(one(time.perf_counter()))
        in_flight.add(t)
        t.add_done_callback(in_flight.discard)
        n += 1
    await asyncio.gather(*in_flight)


async def raw_latency(target: str, rate: float, duration: float) -> list[float]:
    """ms from send to reservation arrival, raw long-poll consumer (Reserve up to 256, wait 1 s)."""
    sent: dict[str, float] = {}
    started: dict[str, float] = {}
    stop = asyncio.Event()
    async with grpc.aio.insecure_channel(target) as channel:
        prod = producer_pb2_grpc.ProducerServiceStub(channel)
        work = worker_pb2_grpc.WorkerServiceStub(channel)

        async def consumer() -> None:
            req = wpb.ReserveRequest(queues=[QUEUE], max_jobs=256, worker_id="lat-raw", wait=seconds_to_duration(1.0))
            while not stop.is_set():
                got = (await work.Reserve(req)).reservations
                now = time.perf_counter()
                for r in got:
                    started[r.job.id] = now
                if got:
                    items = [wpb.SettleItem(ack=wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id)) for r in got]
                    await work.Settle(wpb.SettleRequest(items=items))

        task = asyncio.create_task(consumer())
        await paced_producer(prod, rate, duration, sent)
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.wait_for(task, 5)
    return [(started[j] - sent[j]) * 1000 for j in sent if j in started]


async def worker_latency(target: str, rate: float, duration: float) -> list[float]:
    """ms from send to handler start, Worker runtime (concurrency 64)."""
    sent: dict[str, float] = {}
    started: dict[str, float] = {}
    worker = Worker(target, [QUEUE], concurrency=64, poll_wait=1.0, worker_id="lat-worker")

    @worker.handler("noop")
    async def noop(job: Job) -> None:
        started[job.id] = time.perf_counter()

    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    async with grpc.aio.insecure_channel(target) as channel:
        await paced_producer(producer_pb2_grpc.ProducerServiceStub(channel), rate, duration, sent)
    await asyncio.sleep(0.5)
    await worker.stop(5)
    await run
    return [(started[j] - sent[j]) * 1000 for j in sent if j in started]


# ------------------------------------------------------------------ scheduled backlog


async def fill_scheduled(target: str, jobs: int) -> float:
    """Store ``jobs`` SCHEDULED jobs (a year out, on another queue); returns seconds taken."""
    far = pb.EnqueueRequest(queue="later", job_type="noop", payload=PAYLOAD)
    far.scheduled_at.FromSeconds(int(time.time()) + 300 * 86400)
    raw = ppb.EnqueueBatchRequest(jobs=[far] * 256).SerializeToString()
    started = time.perf_counter()
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary("/sepp.api.v1.ProducerService/EnqueueBatch")
        sem = asyncio.Semaphore(4)

        async def one() -> None:
            async with sem:
                await call(raw)

        await asyncio.gather(*(one() for _ in range((jobs + 255) // 256)))
    return time.perf_counter() - started


async def enqueue_rate(target: str, duration: float) -> float:
    """Batched enqueue jobs/s (4 batches of 256 in flight, pre-serialized)."""
    raw = BATCH.SerializeToString()
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary("/sepp.api.v1.ProducerService/EnqueueBatch")
        done = 0
        end = time.perf_counter() + duration

        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < end:
                await call(raw)
                done += 256

        await asyncio.gather(*(loop() for _ in range(4)))
    return done / duration


async def scheduled_backlog(tmp: Path, config: dict[str, object], jobs: int, duration: float,
                            producers: int, consumers: int, rounds: int = 3) -> list[list[str]]:
    """Enqueue and end-to-end rates on an empty database and with ``jobs`` scheduled jobs
    waiting — same server settings, same run — and the change.

    The backlog is stored once (then the server stops, which checkpoints the WAL). Each
    round measures both databases from a fresh copy, each rate in a freshly started
    server; the rounds alternate empty / loaded so drift on the machine hits both, and the
    table shows the median of ``rounds``.
    """
    pristine = {0: tmp / "pristine-0", jobs: tmp / f"pristine-{jobs}"}
    pristine[0].mkdir()
    with ServerProcess(pristine[jobs], config) as server:
        fill = await fill_scheduled(server.grpc_target, jobs)
    rates: dict[int, tuple[list[float], list[float]]] = {0: ([], []), jobs: ([], [])}
    for n in range(rounds):
        for backlog in (0, jobs):
            folder = tmp / f"round-{n}-{backlog}"
            shutil.copytree(pristine[backlog], folder)
            with ServerProcess(folder, config) as server:
                rates[backlog][0].append(await enqueue_rate(server.grpc_target, duration))
            shutil.rmtree(folder)
            shutil.copytree(pristine[backlog], folder)
            with ServerProcess(folder, config) as server:
                rates[backlog][1].append(await raw_throughput(server.grpc_target, duration, producers, consumers))
            shutil.rmtree(folder)
    rows = []
    for label, backlog in (("empty database", 0), (f"{jobs:,} scheduled jobs waiting", jobs)):
        enq, e2e = (statistics.median(v) for v in rates[backlog])
        rows.append([label, f"{enq:,.0f}", f"{e2e:,.0f}", f"{fill:.0f} s" if backlog else "-"])
    for col in (1, 2):
        base = float(rows[0][col].replace(",", ""))
        loaded = float(rows[1][col].replace(",", ""))
        rows[1][col] += f" ({loaded / base - 1:+.0%})"
    return rows


# ------------------------------------------------------------------ main


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per scenario")
    parser.add_argument("--mode", default="group", help="persist mode of the server")
    parser.add_argument("--rate", type=float, default=1000.0, help="jobs/s of the latency runs")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--scheduled", type=int, default=0,
                        help="also compare rates with this many scheduled jobs waiting (e.g. 1000000)")
    parser.add_argument("--writer", choices=("auto", "process", "thread"), default="auto",
                        help="sqlite_writer of the server (default: auto, the server's default)")
    parser.add_argument("--only", choices=("all", "throughput", "latency", "backlog"), default="all",
                        help="run one part only (backlog needs --scheduled)")
    parser.add_argument("--storage", choices=("sqlite", "postgres"), default="sqlite",
                        help="storage backend of the server (postgres: a fresh schema per server, dropped after)")
    parser.add_argument("--postgres-dsn", default="postgresql://postgres@127.0.0.1:5432/test",
                        help="database of --storage postgres")
    parser.add_argument("--writers", type=int, default=4, help="postgres.writers (write connections per node)")
    args = parser.parse_args()
    config: dict[str, object] = {"persist_mode": args.mode, "queues": {QUEUE: {"lease_duration": 30.0}}}
    if args.storage == "postgres":
        config.update(storage="postgres", postgres_dsn=args.postgres_dsn,
                      postgres={"schema": f"bench_{os.getpid()}", "writers": args.writers})
    else:
        config["sqlite"] = {"writer": args.writer}
    try:
        if args.only != "backlog":
            await throughput_and_latency(args, config)
    finally:
        drop_schemas(args.postgres_dsn)
    if args.scheduled and args.only in ("all", "backlog"):
        with tempfile.TemporaryDirectory() as tmp:
            backlog = await scheduled_backlog(Path(tmp), config, args.scheduled, args.duration, args.producers,
                                              args.consumers)
        print()
        print(table(["database", "batched enqueue jobs/s", "end-to-end jobs/s", "fill time"], backlog))


async def throughput_and_latency(args: argparse.Namespace, config: dict[str, object]) -> None:
    """The throughput and latency table (``--only throughput`` / ``latency`` for one half)."""
    raw = wrk = 0.0
    lat_raw: list[float] = []
    lat_wrk: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in ("all", "throughput"):
            with ServerProcess(Path(tmp) / "thr-raw", fresh(config)) as server:
                raw = await raw_throughput(server.grpc_target, args.duration, args.producers, args.consumers)
            with ServerProcess(Path(tmp) / "thr-worker", fresh(config)) as server:
                wrk = await worker_throughput(server.grpc_target, args.duration, args.producers, 256)
        if args.only in ("all", "latency"):
            with ServerProcess(Path(tmp) / "lat-raw", fresh(config)) as server:
                lat_raw = await raw_latency(server.grpc_target, args.rate, args.duration)
            with ServerProcess(Path(tmp) / "lat-worker", fresh(config)) as server:
                lat_wrk = await worker_latency(server.grpc_target, args.rate, args.duration)
    rows = []
    if args.only in ("all", "throughput"):
        rows.append(["end-to-end, raw stubs (batch 256 / reserve 256 / settle 256)", f"{raw:,.0f}", "-", "-", "-"])
        rows.append(["end-to-end, Worker runtime (no-op async handler, concurrency 256)", f"{wrk:,.0f}", "-", "-",
                     "-"])
    for name, lat in (("enqueue→start, raw long-poll reserve", lat_raw), ("enqueue→start, Worker runtime", lat_wrk)):
        if lat:
            rows.append([f"{name} @ {args.rate:,.0f}/s ({len(lat):,} jobs)", "-", f"{pct(lat, 0.5):.2f}",
                         f"{pct(lat, 0.99):.2f}", f"{max(lat):.2f}"])
    print(f"persist mode {args.mode}, {args.duration:g} s per scenario, "
          f"{args.producers} producer(s) / {args.consumers} raw consumer(s)")
    print(table(["scenario", "jobs/s", "p50 ms", "p99 ms", "max ms"], rows))
    if lat_raw:
        print(f"- raw latency mean {statistics.fmean(lat_raw):.2f} ms")


if __name__ == "__main__":
    uvloop.install()
    asyncio.run(main())
