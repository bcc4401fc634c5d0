"""Batched enqueue: CPU time per job of each process on the path (issue 10, issue 15 item 3).

Starts one real ``sepp serve`` (SQLite in a temp folder, or PostgreSQL in a fresh schema with
``--postgres-dsn``), then, alternating in each round, enqueues ``--jobs`` ``{"i": n}`` JSON
jobs in batches of 256 three ways:

* ``raw stub``: one ``EnqueueBatchRequest`` serialized once, sent as bytes through a bare
  grpc stub, sequentially (no client-side protobuf work: the server's ceiling);
* ``enqueue_batch``: ``Client.enqueue_batch`` of requests built per batch
  (``EnqueueRequest(...)`` + ``Payload.json(...)``, as the peer harness does), sequentially;
* ``enqueue_many``: ``Client.enqueue_many`` of the same requests, 4 batches in flight.

For each it reads the CPU time (user + system, every thread) of this process, of the server
process, of its SQLite writer child process and (PostgreSQL) of the server's PostgreSQL
backends (found by ``application_name``) from ``/proc``, and prints a Markdown table of CPU µs
per job per process, the wall rate, and the wall rate as a ratio to the raw stub of the same
round. On a loaded machine read the CPU columns: the wall rate moves with the neighbours.

    python benchmarks/enqueue_cost.py [--jobs 20000] [--rounds 3] [--mode group] [--postgres-dsn DSN]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from _harness import median, table

from sepp import Client, EnqueueRequest, Payload
from sepp.api.v1 import producer_pb2 as ppb
from sepp.testing import ServerProcess

BATCH = 256
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) of ``pid`` so far, from ``/proc/PID/stat``;
    0.0 when the process is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid`` (the SQLite writer process)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def pg_backends(dsn: str, application: str) -> list[int]:
    """PIDs of the PostgreSQL backends whose ``application_name`` is ``application``."""
    sql = f"SELECT pid FROM pg_stat_activity WHERE application_name = '{application}'"
    res = subprocess.run(["psql", dsn, "-Atqc", sql], check=True, capture_output=True, text=True)
    return [int(x) for x in res.stdout.split()]


def requests(start: int, n: int) -> list[EnqueueRequest]:
    """``n`` fresh requests, like the peer harness builds them per batch."""
    return [EnqueueRequest("bench", "noop", payload=Payload.json({"i": i})) for i in range(start, start + n)]


def ranges(jobs: int) -> Iterator[int]:
    """Start index of each batch of ``BATCH`` among ``jobs`` jobs."""
    return iter(range(0, jobs, BATCH))


def run_raw(target: str, jobs: int) -> None:
    """Sequential raw-stub batches of pre-serialized bytes."""
    body = ppb.EnqueueBatchRequest(jobs=[r.to_proto() for r in requests(0, BATCH)]).SerializeToString()
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary("/sepp.api.v1.ProducerService/EnqueueBatch")
        call(body)
        for _ in ranges(jobs):
            call(body)


def run_batch(client: Client, jobs: int) -> None:
    """Sequential ``Client.enqueue_batch`` of requests built per batch."""
    for start in ranges(jobs):
        client.enqueue_batch(requests(start, BATCH))


def run_many(client: Client, jobs: int) -> None:
    """``Client.enqueue_many`` over a generator of fresh requests, 4 in flight."""
    gen = (EnqueueRequest("bench", "noop", payload=Payload.json({"i": i})) for i in range(jobs))
    client.enqueue_many(gen, in_flight=4)


def measure(fn: Callable[[], None], pids: dict[str, list[int]], jobs: int) -> dict[str, float]:
    """Run ``fn`` once; CPU µs per job of each process group, and ``wall`` jobs/s."""
    before = {k: sum(cpu_s(p) for p in v) for k, v in pids.items()}
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    c1, w1 = time.process_time(), time.perf_counter()
    out = {k: (sum(cpu_s(p) for p in v) - before[k]) / jobs * 1e6 for k, v in pids.items()}
    out["client"] = (c1 - c0) / jobs * 1e6
    out["wall"] = jobs / (w1 - w0)
    return out


def main() -> None:
    """Parse the flags, start the server, run the rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mode", default="group", help="persist_mode of the server")
    parser.add_argument("--postgres-dsn", default="", help="PostgreSQL (a fresh schema) instead of SQLite")
    parser.add_argument("--only", default="raw,batch,many", help="paths to run, comma-separated")
    args = parser.parse_args()
    node = f"bench-cost-{os.getpid()}"
    schema = f"bench_cost_{os.getpid()}"
    config: dict[str, Any] = {"persist_mode": args.mode, "node_name": node}
    if args.postgres_dsn:
        config.update(storage="postgres", postgres_dsn=args.postgres_dsn, postgres={"schema": schema})
    results: dict[str, list[dict[str, float]]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), config) as server:
            client = Client(server.grpc_target)
            client.enqueue_batch(requests(0, BATCH))  # connect, fetch the server info, warm up
            pids = {"server": [server.pid]}
            if args.postgres_dsn:
                pids["postgres"] = pg_backends(args.postgres_dsn, f"sepp {node}")
            else:
                pids["writer"] = children(server.pid)
            paths = {"raw": ("raw stub, sequential", lambda: run_raw(server.grpc_target, args.jobs)),
                     "batch": ("Client.enqueue_batch, sequential", lambda: run_batch(client, args.jobs)),
                     "many": ("Client.enqueue_many, 4 in flight", lambda: run_many(client, args.jobs))}
            chosen = [paths[k] for k in args.only.split(",")]
            for _ in range(args.rounds):
                for name, fn in chosen:
                    results.setdefault(name, []).append(measure(fn, pids, args.jobs))
            client.close()
    finally:
        if args.postgres_dsn:
            subprocess.run(["psql", args.postgres_dsn, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"],
                           check=False, capture_output=True)
    other = "postgres" if args.postgres_dsn else "writer"
    raw = results.get("raw stub, sequential")
    rows = []
    for name, runs in results.items():
        row = [name] + [f"{median([r[k] for r in runs]):.2f}" for k in ("client", "server", other)]
        row.append(f"{median([r['client'] + r['server'] + r[other] for r in runs]):.2f}")
        row.append(" / ".join(f"{r['wall']:,.0f}" for r in runs))
        if raw:
            row.append(" / ".join(f"{r['wall'] / q['wall']:.2f}" for r, q in zip(runs, raw, strict=True)))
        rows.append(row)
    headers = ["path", "client µs/job", "server µs/job", f"{other} µs/job", "sum µs/job", "jobs/s (each round)"]
    if raw:
        headers.append("÷ raw stub (same round)")
    print(table(headers, rows))


if __name__ == "__main__":
    main()
