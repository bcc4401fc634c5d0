"""The floor of a lone durable request on this machine (issue 15 item 2), with no sepp code.

Item 2's targets are ratios of sepp's lone-producer ``Enqueue`` rate to an empty unary
grpc.aio call (``benchmarks/producer.py``). This script measures what any grpc.aio server
in Python pays on top of that empty call for the storage work a lone enqueue cannot skip,
each variant a bare echo server (uvloop, like sepp's) whose one handler does only that work
on the event loop, then answers an empty message:

* ``empty`` — nothing (the denominator of the targets);
* ``fdatasync 4k`` — overwrite one 4 KiB block of a preallocated file and ``fdatasync`` it:
  the cheapest durable write there is (no size change, no journal commit), the floor of
  ``group`` and ``sync``;
* ``sqlite off`` — one-row ``INSERT`` into a table shaped like sepp's ``jobs`` (its id index
  and reserve index) in ``BEGIN IMMEDIATE`` / ``COMMIT``, WAL, ``synchronous=OFF``: the
  floor of ``async`` on SQLite (the write handed to the OS, SPEC §5);
* ``sqlite full`` — the same with ``synchronous=FULL`` (the WAL fsynced at each commit):
  the floor of ``group``/``sync`` on SQLite.

Beside them, in the same rounds, sepp itself: ``sepp async`` / ``sepp group`` / ``sepp sync``
are a lone-producer ``Enqueue`` (a ~200-byte job serialized once, as in ``producer.py``) on a
fresh ``sepp serve`` (ServerProcess, default SQLite storage) in that persist mode.

The client is one grpc.aio caller in this process (uvloop), one call at a time, as in
``producer.py``. Variants are interleaved and repeated; each row's ratio is to the empty
call of the same round. Prints a Markdown table (calls/s and the ratio, median of rounds).

    python benchmarks/lone_floor.py [--duration 2] [--rounds 3] [--no-sepp]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import grpc
import uvloop
from _harness import EchoServer, empty_call, load, table
from producer import one_job

from sepp.testing import ServerProcess

FLOORS = ("empty", "fdatasync 4k", "sqlite off", "sqlite full")
SEPP = ("sepp async", "sepp group", "sepp sync")
VARIANTS = FLOORS + SEPP

JOBS = """CREATE TABLE jobs (seq INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, queue TEXT NOT NULL,
    job_type TEXT NOT NULL, state INTEGER NOT NULL, priority INTEGER NOT NULL, run_at INTEGER NOT NULL,
    enqueued_at INTEGER NOT NULL, max_attempts INTEGER NOT NULL, payload BLOB, encoding TEXT NOT NULL)"""
READY = "CREATE INDEX jobs_ready ON jobs (queue, priority DESC, run_at, seq) WHERE state = 2"
INSERT = ("INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts, payload,"
          " encoding) VALUES (?, 'bench', 'welcome', 2, 0, ?, ?, 3, ?, 'application/json')")
PAYLOAD = b'{"user_id": 42, "template": "welcome", "locale": "en-US"}' + b" " * 140


def _work(variant: str, folder: str) -> Callable[[], None]:
    """The storage work of ``variant`` (blocking, run on the event loop like sepp's lone path)."""
    if variant == "empty":
        return lambda: None
    if variant == "fdatasync 4k":
        fd = os.open(os.path.join(folder, "block"), os.O_RDWR | os.O_CREAT, 0o600)
        os.write(fd, b"\0" * (1 << 20))
        os.fsync(fd)
        block = b"x" * 4096
        turn = [0]

        def sync() -> None:
            turn[0] = (turn[0] + 1) % 256
            os.pwrite(fd, block, turn[0] * 4096)
            os.fdatasync(fd)

        return sync
    conn = sqlite3.connect(os.path.join(folder, "floor.db"), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={'OFF' if variant == 'sqlite off' else 'FULL'}")
    conn.execute(JOBS)
    conn.execute(READY)
    seq = [0]

    def insert() -> None:
        seq[0] += 1
        now = time.time_ns() // 1000
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT, (os.urandom(8) + seq[0].to_bytes(8, "big"), now, now, PAYLOAD))
        conn.execute("COMMIT")

    return insert


def _prepared(variant: str) -> Callable[[], None]:
    """``_work`` of ``variant`` in a fresh temporary folder (runs in the echo server's child)."""
    return _work(variant, tempfile.mkdtemp(prefix="sepp-floor-"))


async def measure_sepp(target: str, duration: float) -> float:
    """Lone-producer ``Enqueue`` calls/s on a sepp server at ``target``."""
    async with grpc.aio.insecure_channel(target) as channel:
        enqueue = channel.unary_unary("/sepp.api.v1.ProducerService/Enqueue")
        single = one_job().SerializeToString()
        result = await load(lambda: enqueue(single), 1, duration)
    return result.calls_per_s


def run_variant(variant: str, duration: float) -> float:
    """Calls/s of ``variant`` (a fresh server for each)."""
    if variant in SEPP:
        mode = variant.split()[1]
        with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), {"persist_mode": mode}) as server:
            return uvloop.run(measure_sepp(server.grpc_target, duration))
    with EchoServer(None if variant == "empty" else partial(_prepared, variant)) as echo:
        async def call_it() -> float:
            async with grpc.aio.insecure_channel(echo.target) as channel:
                return (await load(empty_call(channel), 1, duration)).calls_per_s

        return uvloop.run(call_it())


def main() -> None:
    """Parse the flags, run the rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=2.0, help="seconds measured per variant and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-sepp", action="store_true", help="the floors only")
    args = parser.parse_args()
    variants = FLOORS if args.no_sepp else VARIANTS
    rates: dict[str, list[float]] = {v: [] for v in variants}
    ratios: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for variant in variants:
            rates[variant].append(run_variant(variant, args.duration))
        for variant in variants:
            ratios[variant].append(rates[variant][-1] / rates["empty"][-1])
    rows = [[v, f"{statistics.median(rates[v]):,.0f}", f"{1e6 / statistics.median(rates[v]):,.0f}",
             f"{statistics.median(ratios[v]):.2f} ({min(ratios[v]):.2f}–{max(ratios[v]):.2f})"] for v in variants]
    print(table(["server work per call", "calls/s", "µs per call", "× the empty call"], rows))
    print(f"\n{args.rounds} rounds of {args.duration:g} s per variant, interleaved; median (min–max) of the "
          f"per-round ratios; load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
