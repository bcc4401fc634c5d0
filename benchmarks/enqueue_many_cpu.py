"""``Client.enqueue_many`` against a real server: jobs/s and CPU µs per job of the client
process and of the server (issue 15 item 3: the client is the bulk producer's bottleneck).

Starts one ``sepp serve`` (group persist mode, default SQLite storage, a temporary data dir,
free loopback ports; the sepp this script imports) and runs the peer harness's producer
(``/work/shared/peers/run_sepp.py --producer many``) against it, each measured run in a fresh
child process (so every ``--src`` gets the same server, interleaved):

    gen = (r for chunk in chunks(N, 256) for r in [EnqueueRequest("bench", "noop",
           payload=Payload.json({"i": i})) for i in chunk])
    results = client.enqueue_many(gen, in_flight=K)

Variants: ``many4`` / ``many1`` (``in_flight`` 4 / 1, requests built lazily by the generator,
as the harness does), ``many4-pre`` / ``many1-pre`` (the same on a list of requests built
before the clock starts: the cost of sending alone), ``batch-seq`` (the harness's default
producer: ``enqueue_batch`` per chunk of 256, requests built per chunk), ``raw-seq`` (the
floor: the bytes of one batch of 256 written once by ``_fastwire.plain_runs``, sent N/256 times
one after the other through the client's channel with bytes in and out, nothing parsed).
Each child warms up (GetServerInfo, one batch) and runs ``gc.collect()`` (unless
``--no-collect``: then the first full collection of what the imports left may fall in the
measured run, +1–1.5 µs a job, as it may in a short-lived producer), then measures the wall time, its own CPU
(``time.process_time``: every thread of the process, user + system), the part of it spent
in the cyclic garbage collector (``gc.callbacks``, the collecting thread's ``thread_time``)
and the server's CPU (``/proc``: the server process and its children, the SQLite writer),
and checks every result is an ``EnqueueAck``. CPU is in µs per job; the table shows the
median of the repeats (min–max after it).

    python benchmarks/enqueue_many_cpu.py [--jobs 20000] [--repeats 3]
        [--variants many4,many1,many4-pre,many1-pre,batch-seq] [--src DIR ...] [--postgres-dsn DSN]

``--postgres-dsn DSN``: the server stores in PostgreSQL (a fresh schema, dropped at the end),
and the table adds the PostgreSQL cluster's CPU per job (``postgres_drain.cluster_cpu``).

``--src DIR`` (repeatable): run the client with ``PYTHONPATH=DIR`` (e.g. ``/work/main/src``
against a branch's ``src``: an A/B of client code in one run; the server stays the one this
script imports). Without it the client is the sepp this script imports.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import asyncpg
from _harness import table
from postgres_drain import cluster_cpu, postmaster_of

VARIANTS = ("many4", "many1", "many4-pre", "many1-pre", "batch-seq", "raw-seq")
QUEUE = "bench"
CHUNK = 256
_TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and, recursively, its live children (``/proc``;
    the clock-tick resolution, usually 10 ms). A process that is gone counts 0."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return total + sum(proc_cpu(int(c)) for c in children)


def chunks(n: int, size: int) -> list[range]:
    """``range(n)`` in ranges of ``size`` (the harness's ``common.chunks``)."""
    return [range(s, min(s + size, n)) for s in range(0, n, size)]


class _GcClock:
    """CPU seconds the cyclic garbage collector took (``gc.callbacks``; per collecting thread)."""

    def __init__(self) -> None:
        self.total = 0.0
        self._start = threading.local()
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._start.t = time.thread_time()
        else:
            self.total += time.thread_time() - getattr(self._start, "t", time.thread_time())


def _raw_seq(client: Any, requests: list[Any], jobs: int) -> list[Any]:
    """``raw-seq``: one batch's bytes (``_fastwire.plain_runs``) sent ``jobs // len(requests)``
    times, sequentially, bytes in and out; returns one stand-in ack per job."""
    from sepp import EnqueueAck
    from sepp.client import _fastwire

    wire = _fastwire.plain_runs(requests, client._cached_info().shape)
    call = client._channel.unary_unary("/sepp.api.v1.ProducerService/EnqueueBatch",
                                       request_serializer=bytes, response_deserializer=bytes)
    for _ in range(jobs // len(requests)):
        call(wire, timeout=30)
    return [EnqueueAck("-")] * (jobs // len(requests) * len(requests))


def child(target: str, server_pid: int, variant: str, jobs: int, collect: bool = True) -> dict[str, Any]:
    """One measured run in this process (the client under test); returns its figures.
    ``collect``: run ``gc.collect()`` before the clock starts."""
    from sepp import Client, EnqueueAck, EnqueueRequest, Payload

    def requests_for(r: range) -> list[EnqueueRequest]:
        return [EnqueueRequest(QUEUE, "noop", payload=Payload.json({"i": i})) for i in r]

    with Client(target) as client:
        client.get_server_info(cached=True)
        client.enqueue_many(requests_for(range(CHUNK)), in_flight=1)  # warm: channel, memos
        pre = [r for c in chunks(jobs, CHUNK) for r in requests_for(c)] if variant.endswith("-pre") else None
        one = requests_for(range(CHUNK))
        if collect:
            gc.collect()  # the first full pass over what the imports left, not the run's own
        clock = _GcClock()
        cpu0, srv0, t0 = time.process_time(), proc_cpu(server_pid), time.perf_counter()
        if variant == "raw-seq":
            results = _raw_seq(client, one, jobs)
        elif variant == "batch-seq":
            results = [x for c in chunks(jobs, CHUNK) for x in client.enqueue_batch(requests_for(c))]
        else:
            in_flight = 4 if variant.startswith("many4") else 1
            gen = pre if pre is not None else (r for c in chunks(jobs, CHUNK) for r in requests_for(c))
            results = client.enqueue_many(gen, in_flight=in_flight)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        srv, in_gc = proc_cpu(server_pid) - srv0, clock.total
    jobs = len(results)
    if variant != "raw-seq" and not all(type(x) is EnqueueAck for x in results):
        raise SystemExit(f"{variant}: {len(results)} results, not all acks")
    return {"jobs_s": jobs / wall, "client_us": cpu / jobs * 1e6, "gc_us": in_gc / jobs * 1e6,
            "server_us": srv / jobs * 1e6}


async def _drop_schema(dsn: str, schema: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--src", action="append", default=[], help="PYTHONPATH of the client (repeatable: A/B)")
    parser.add_argument("--no-collect", action="store_true",
                        help="no gc.collect() before the clock (a fresh process's first full collection, "
                             "of what the imports left, then may fall in the run: +1-1.5 µs/job)")
    parser.add_argument("--postgres-dsn", default="", help="store in PostgreSQL (a fresh schema)")
    parser.add_argument("--child", nargs=3, metavar=("TARGET", "SERVER_PID", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        target, pid, variant = args.child
        print(json.dumps(child(target, int(pid), variant, args.jobs, not args.no_collect)))
        return

    from sepp.testing import ServerProcess

    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    srcs = args.src or [""]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {(v, s): [] for v in variants for s in srcs}
    load0 = os.getloadavg()
    config: dict[str, Any] = {"persist_mode": "group"}
    schema, postmaster = f"bench_enqueue_{os.getpid()}", 0
    if args.postgres_dsn:
        config.update(storage="postgres", postgres_dsn=args.postgres_dsn, postgres={"schema": schema})
        postmaster = asyncio.run(postmaster_of(args.postgres_dsn))
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp) / "data", config) as server:
        assert server.proc is not None
        for _ in range(args.repeats):
            for variant in variants:
                for src in srcs:  # interleaved: each src's run next to the other's
                    env = dict(os.environ)
                    if src:
                        env["PYTHONPATH"] = src
                    flags = ["--no-collect"] if args.no_collect else []
                    pg0 = cluster_cpu(postmaster) if postmaster else 0.0
                    out = subprocess.run(
                        [sys.executable, __file__, "--jobs", str(args.jobs), *flags, "--child", server.grpc_target,
                         str(server.proc.pid), variant], env=env, check=True, capture_output=True, text=True)
                    figures = json.loads(out.stdout.strip().splitlines()[-1])
                    # the child's whole life (warm-up batch included), per measured job: an upper bound
                    figures["pg_us"] = (cluster_cpu(postmaster) - pg0) / args.jobs * 1e6 if postmaster else 0.0
                    runs[variant, src].append(figures)
    if args.postgres_dsn:
        asyncio.run(_drop_schema(args.postgres_dsn, schema))

    def cell(values: list[float], fmt: str) -> str:
        return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"

    rows = []
    for (variant, src), figures in runs.items():
        rows.append([variant, src or "(this sepp)",
                     cell([f["jobs_s"] for f in figures], ",.0f"),
                     cell([f["client_us"] for f in figures], ".2f"),
                     cell([f["gc_us"] for f in figures], ".2f"),
                     cell([f["server_us"] for f in figures], ".2f"),
                     *([cell([f["pg_us"] for f in figures], ".2f")] if postmaster else [])])
    print(table(["variant", "client src", "jobs/s", "client CPU µs/job", "of it in gc", "server CPU µs/job",
                 *(["PostgreSQL CPU µs/job (whole child)"] if postmaster else [])], rows))
    print(f"\n{args.jobs} jobs a run, {args.repeats} repeats, median (min–max); "
          f"load average before {load0[0]:.2f}, after {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
