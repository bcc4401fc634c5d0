"""A drain on PostgreSQL at the storage seam: what the Worker runtime's reserve–ack cycle costs
the database (issue 10 benchmark, "end to end on PostgreSQL").

Opens a ``PostgresStore`` in a fresh schema, enqueues ``--jobs`` READY jobs in batches of 256
(``Store.enqueue``), optionally ANALYZEs ``jobs`` right after (``--analyze``: statistics that
see every job READY and none RESERVED, as autovacuum takes them after a bulk enqueue), then
drains the queue with ``--in-flight`` concurrent loops of ``Store.reserve`` (256 jobs, with a
byte budget as the server's Reserve gives one: ``--max-bytes``) and one ``Store.settle`` of
their 256 acks (the batched ``ack_many``). Reports jobs/s (wall), the CPU µs per job of this
process and of the PostgreSQL cluster (every process of the postmaster that serves ``--dsn``,
from /proc: the backends, WAL writer, checkpointer, autovacuum — and of any other session on
a shared machine) and of the backends serving the store's own connections only (found by
their client ports; no WAL writer, no other session), and with ``--verbose`` the
plans of ``ack_many`` and ``lease_within`` on the drained state. The WAL the drain wrote per job
(``pg_stat_wal``: records, full-page images, bytes) is a steadier measure of the database's work
than its CPU on a machine whose speed drifts, but it is the whole cluster's (another session's
writes count too; ``benchmarks/postgres_lease_wal.py`` counts one statement's). ``--sqlite`` runs the same
drain on a SQLite store in a temporary folder (this process's CPU only) as a yardstick.

    python benchmarks/postgres_drain.py [--jobs 20000] [--rounds 3] [--in-flight 2]
        [--max-bytes 4194304] [--analyze] [--verbose] [--sqlite] [--schema-sql SQL]
        [--dsn postgresql://postgres@127.0.0.1:5432/test]

The machine's speed drifts: compare rows of one run (e.g. with and without ``--analyze``, or
two checkouts run one after the other through ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
from _harness import table

from sepp.domain.params import ReserveParams, SettleKind, SettleParams
from sepp.domain.policy import PolicyTable, QueuePolicy
from sepp.domain.records import JobRow
from sepp.server.config import ServerConfig
from sepp.storage.base import Store
from sepp.storage.config import PostgresSettings
from sepp.storage.factory import open_store

NOW = 1_790_000_000_000_000
LEASE = 60_000_000
POLICY = PolicyTable(QueuePolicy(jitter=0.0))
TICKS = os.sysconf("SC_CLK_TCK")


def cluster_cpu(postmaster: int) -> float:
    """CPU seconds (user + system) of the postmaster ``postmaster`` and its children so far
    (children that exited are not counted: the drain keeps its connections)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == postmaster or int(fields[1]) == postmaster:  # fields[1] = ppid
            total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / TICKS


def pid_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def own_ports(server_port: int) -> set[int]:
    """The local TCP ports of this process's connections to ``server_port`` (from
    /proc/net/tcp and /proc/self/fd: the sockets this process holds)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table_path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table_path) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, remote, inode = cols[1], cols[2], cols[9]
            if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == server_port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


async def own_backends(conn: asyncpg.Connection, server_port: int) -> set[int]:
    """The PIDs of the PostgreSQL backends serving this process's connections (other
    sessions of a shared cluster left out)."""
    ports = own_ports(server_port)
    rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1::int[])", list(ports))
    return {int(r[0]) for r in rows} - {conn.get_server_pid()}


async def postmaster_of(dsn: str) -> int:
    """The PID of the postmaster serving ``dsn`` (first line of its postmaster.pid)."""
    conn = await asyncpg.connect(dsn)
    try:
        folder = await conn.fetchval("SELECT setting FROM pg_settings WHERE name = 'data_directory'")
    finally:
        await conn.close()
    text = await asyncio.to_thread(Path(folder, "postmaster.pid").read_text)
    return int(text.split()[0])


async def fill(store: Store, jobs: int) -> None:
    """Enqueue ``jobs`` READY jobs of queue ``q`` (small JSON payloads) in batches of 256."""
    for start in range(0, jobs, 256):
        n = min(jobs, start + 256) - start
        # The ids the engine gives jobs (``Store.new_job_ids``; random ones on a checkout
        # from before it, for comparing two checkouts through PYTHONPATH).
        made = getattr(store, "new_job_ids", None)
        ids = [u.bytes for u in await made(n)] if made is not None else [uuid.uuid4().bytes for _ in range(n)]
        rows = [JobRow(ids[i - start], "q", "t", 2, 0, NOW, NOW, 3, b'{"i": %d}' % i, "application/json",
                       None, None) for i in range(start, start + n)]
        await store.enqueue(rows, [0] * len(rows), NOW)


async def drain(store: Store, in_flight: int, max_bytes: int) -> tuple[float, float, int]:
    """Drain queue ``q``; (wall seconds, this process's CPU seconds, jobs acked)."""
    done = 0

    async def loop(worker: str) -> None:
        nonlocal done
        while True:
            got = await store.reserve(ReserveParams(["q"], 256, NOW, {"q": LEASE}, worker, max_bytes))
            if not got:
                return
            acks = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + 1) for r in got]
            done += sum(1 for res in await store.settle(acks, POLICY) if res.error is None)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(loop(f"w{i}") for i in range(in_flight)))
    return time.perf_counter() - wall0, time.process_time() - cpu0, done


async def run(args: argparse.Namespace, sqlite: bool) -> list[str]:
    """One row of the table: the median of ``--rounds`` drains, each on a fresh store."""
    rates, own, pg, own_pg = [], [], [], []
    wal: list[tuple[float, ...]] = []
    postmaster = 0 if sqlite else await postmaster_of(args.dsn)
    plans: list[str] = []
    for _ in range(args.rounds):
        folder = Path(tempfile.mkdtemp(prefix="sepp-drain-"))
        schema = f"bench_drain_{os.getpid()}"
        extra: dict[str, Any] = {} if sqlite else {
            "storage": "postgres", "postgres_dsn": args.dsn, "postgres": PostgresSettings(schema=schema)}
        store = open_store(ServerConfig(data_dir=folder, persist_mode="group", **extra))  # type: ignore[arg-type]
        await store.open()
        conn = None if sqlite else await asyncpg.connect(args.dsn, server_settings={"search_path": schema})
        try:
            if conn is not None:
                await conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
                if args.schema_sql:
                    await conn.execute(args.schema_sql)
            await fill(store, args.jobs)
            if args.analyze and conn is not None:
                await conn.execute("ANALYZE jobs")  # every job READY: the statistics a bulk enqueue leaves
            pg0 = cluster_cpu(postmaster) if postmaster else 0.0
            port = int(await conn.fetchval("SHOW port")) if conn is not None else 0
            mine0 = {pid: pid_cpu(pid) for pid in await own_backends(conn, port)} if conn is not None else {}
            wal0 = await wal_figures(conn) if conn is not None else (0, 0, 0)
            wall, cpu, done = await drain(store, args.in_flight, args.max_bytes)
            pg1 = cluster_cpu(postmaster) if postmaster else 0.0
            mine1 = {pid: pid_cpu(pid) for pid in await own_backends(conn, port)} if conn is not None else {}
            own_pg.append(sum(c - mine0.get(pid, 0.0) for pid, c in mine1.items()) / done * 1e6)
            wal1 = await wal_figures(conn) if conn is not None else (0, 0, 0)
            rates.append(done / wall)
            own.append(cpu / done * 1e6)
            pg.append((pg1 - pg0) / done * 1e6)
            wal.append(tuple((b - a) / done for a, b in zip(wal0, wal1, strict=True)))
            if args.verbose and conn is not None and not plans:
                plans = await explain(conn, args.max_bytes)
        finally:
            await store.close()
            if conn is not None:
                await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                await conn.close()
    for line in plans:
        print(line)
    label = "SQLite" if sqlite else "PostgreSQL" + (", ANALYZE after enqueue" if args.analyze else "")
    return [label, f"{statistics.median(rates):,.0f}", f"{statistics.median(own):.1f}",
            "-" if sqlite else f"{statistics.median(pg):.1f}",
            "-" if sqlite else f"{statistics.median(own_pg):.1f}",
            *("-" if sqlite else f"{statistics.median(w[i] for w in wal):,.1f}" for i in range(3))]


async def wal_figures(conn: asyncpg.Connection) -> tuple[int, int, int]:
    """The cluster's WAL so far (``pg_stat_wal``, PostgreSQL 14+): (records, full-page images,
    bytes) — the drain's share is the difference around it (nothing else writes meanwhile)."""
    row = await conn.fetchrow("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal")
    return int(row[0]), int(row[1]), int(row[2])


async def explain(conn: asyncpg.Connection, max_bytes: int) -> list[str]:
    """The plans (EXPLAIN ANALYZE, rolled back) of one lease_within and one ack_many of 256
    jobs, after 512 fresh jobs are added (the explained lease takes the first 256)."""
    from sepp.storage.postgres.sql import Q
    rows = [(uuid.uuid4().bytes, "q", "t", 2, 0, NOW, NOW, 3, b"{}", "") for _ in range(512)]
    await conn.copy_records_to_table("jobs", records=rows, columns=[
        "id", "queue", "job_type", "state", "priority", "run_at", "enqueued_at", "max_attempts", "payload",
        "encoding"])
    lid = os.urandom(16)
    out: list[str] = []
    async with conn.transaction():
        plan = await conn.fetch("EXPLAIN ANALYZE " + Q["lease_within"], "q", 256, lid, NOW + LEASE, "w", NOW, "n",
                                max_bytes or 1 << 40, True)
        out += ["lease_within:"] + [r[0] for r in plan]
        leased = await conn.fetch(Q["lease_within"], "q", 256, lid, NOW + LEASE, "w", NOW, "n", 1 << 40, True)
        plan = await conn.fetch("EXPLAIN ANALYZE " + Q["ack_many"], NOW + 1, 1_000_000, [r[0] for r in leased],
                                [lid] * len(leased))
        out += ["ack_many:"] + [r[0] for r in plan]
    return out


async def main(args: argparse.Namespace) -> None:
    """Run the requested rows and print the table."""
    out = [await run(args, sqlite=False)]
    if args.sqlite:
        out.append(await run(args, sqlite=True))
    print(f"\n{args.jobs:,} jobs, reserve 256 + ack 256 per cycle, {args.in_flight} cycles in flight, "
          f"byte budget {args.max_bytes:,}; median of {args.rounds}")
    print(table(["store", "jobs/s", "CPU µs/job (this process)", "CPU µs/job (PostgreSQL)",
                 "CPU µs/job (its backends)", "WAL records/job",
                 "WAL full pages/job", "WAL bytes/job"], out))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--in-flight", type=int, default=2)
    ap.add_argument("--max-bytes", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--analyze", action="store_true", help="ANALYZE jobs after the enqueue (every job READY)")
    ap.add_argument("--verbose", action="store_true", help="print the plans of lease_within and ack_many")
    ap.add_argument("--sqlite", action="store_true", help="also drain a SQLite store (yardstick)")
    ap.add_argument("--schema-sql", default="", help="SQL run on the fresh schema before the enqueue "
                    "(an index design to compare, e.g. 'DROP INDEX jobs_reserved')")
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    asyncio.run(main(ap.parse_args()))
