"""``sepp bench``: a quick load test of a running server.

Enqueues ``--jobs`` jobs (single calls or batches) with ``--concurrency`` calls in
flight through the Python ``AsyncClient``, then optionally drains them with a no-op
``Worker``, prints throughput and ack latency (a table, or one JSON document with
``--json``), and deletes its queue with whatever is left in it unless ``--keep``. For the full, reproducible figures
see ``benchmarks/`` and docs/benchmarks.md; this command is for trying a deployment.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sepp.cli.admin_views import STATE_ORDER
from sepp.cli.main import app
from sepp.cli.shell import (
    DEFAULT_SERVER,
    EXIT_REFUSED,
    EXIT_TRANSPORT,
    ClientTokenOpt,
    JsonOpt,
    ServerOpt,
    fail,
    fail_auth,
    print_json,
)
from sepp.cli.tls import TlsFiles, client_tls


async def _enqueue(server: str, queue: str, jobs: int, batch: int, concurrency: int,
                   tls: TlsFiles, token: str | None = None) -> tuple[float, list[float]]:
    from sepp import AsyncClient, EnqueueRequest, Payload

    request = EnqueueRequest(queue, "bench", payload=Payload.json({"bench": True}))
    calls = (jobs + batch - 1) // batch
    latencies: list[float] = []
    next_call = 0
    async with AsyncClient(server, token=token or "", **tls) as client:
        await client.get_server_info()

        async def loop() -> None:
            nonlocal next_call
            while next_call < calls:
                n = min(batch, jobs - next_call * batch)
                next_call += 1
                started = time.perf_counter()
                if batch == 1:
                    await client.enqueue(request)
                else:
                    await client.enqueue_batch([request] * n)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(concurrency)))
        return time.perf_counter() - started, latencies


async def _drain(server: str, queue: str, jobs: int, tls: TlsFiles, token: str | None = None) -> float:
    from sepp import Job, Worker

    worker = Worker(server, [queue], concurrency=256, poll_wait=0.5, token=token or "", **tls)
    done = 0
    finished = asyncio.Event()

    @worker.handler("bench")
    async def noop(job: Job) -> None:
        nonlocal done
        done += 1
        if done >= jobs:
            finished.set()

    started = time.perf_counter()
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    await finished.wait()
    elapsed = time.perf_counter() - started
    await worker.stop(5.0)
    await task
    return elapsed


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def _queue_jobs(server: str, queue: str, token: str | None) -> int | None:
    """Jobs the queue holds now (any state), or None when the server does not know it."""
    from sepp.client.admin import AdminClient, AdminError

    with AdminClient(server, token=token, **client_tls()) as admin:
        try:
            stats = admin.queue_stats([queue])
        except AdminError as exc:
            if exc.reason == "QUEUE_NOT_FOUND":
                return None
            raise
    return sum(getattr(s, name) for s in stats for name in STATE_ORDER) if stats else None


def _clean_up(server: str, queue: str, token: str | None) -> int:
    """Delete the bench queue and every job in it; returns the jobs deleted."""
    from sepp.client.admin import AdminClient

    with AdminClient(server, token=token, **client_tls()) as admin:
        return admin.delete_queue(queue, force=True)


def call_sizes(jobs: int, batch: int) -> str:
    """The calls ``jobs`` at ``batch`` a call made, as counts × sizes: ``2 × 256 job(s)``, or
    ``1 × 256 job(s) + 1 × 244 job(s)`` when the last call is smaller."""
    full, rest = divmod(jobs, batch)
    return " + ".join(f"{n:,} × {size} job(s)" for n, size in ((full, batch), (1 if rest else 0, rest)) if n)


@app.command()
def bench(
    server: ServerOpt = DEFAULT_SERVER,
    queue: Annotated[str, typer.Option(help="Queue to load: a scratch queue, deleted afterwards unless --keep.")]
    = "sepp-bench",
    jobs: Annotated[int, typer.Option(min=1, help="Jobs to enqueue.")] = 20_000,
    batch: Annotated[int, typer.Option(min=1, max=256, help="Jobs per call; 1 = single Enqueue.")] = 256,
    concurrency: Annotated[int, typer.Option(min=1, help="Calls in flight.")] = 4,
    drain: Annotated[bool, typer.Option("--drain/--no-drain", help="Then work them off with a no-op Worker.")] = True,
    keep: Annotated[bool, typer.Option("--keep", help="Leave the queue and its jobs in place afterwards.")] = False,
    as_json: JsonOpt = False,
    token: ClientTokenOpt = None,
) -> None:
    """Load-test a running server: enqueue rate, ack latency and work-off rate (not with --no-drain).

    Afterwards the bench queue and its jobs are deleted (leftover jobs would dominate the
    dashboard), so it refuses a queue that already holds jobs unless --keep.
    The token needs the produce, work and admin roles.
    """
    from sepp.errors import PermissionDenied, SeppError, Unauthenticated

    console = Console(highlight=False, quiet=as_json)
    try:
        held = _queue_jobs(server, queue, token)
        if held and not keep:
            fail(f"queue {queue!r} already holds {held:,} job(s); sepp bench deletes its queue afterwards — "
                 "use a scratch --queue, or --keep to leave everything in place",
                 as_json, EXIT_REFUSED, {"error": "queue not empty", "queue": queue, "jobs": held})
        with console.status(f"enqueueing {jobs:,} jobs…"):
            seconds, latencies = asyncio.run(_enqueue(server, queue, jobs, batch, concurrency, client_tls(), token))
        drained = None
        if drain:
            with console.status(f"working off {jobs:,} jobs…"):
                drained = asyncio.run(_drain(server, queue, jobs, client_tls(), token))
        deleted = None if keep else _clean_up(server, queue, token)
    except (Unauthenticated, PermissionDenied) as exc:  # exit 2, fix the token
        fail_auth(exc, as_json)
    except SeppError as exc:
        fail(f"bench failed: {type(exc).__name__}: {exc}", as_json, EXIT_TRANSPORT,
             {"error": "bench failed", "type": type(exc).__name__, "message": str(exc)})
    if as_json:
        print_json({"queue": queue, "jobs": jobs, "batch": batch, "concurrency": concurrency,
                    "calls": len(latencies), "enqueue_seconds": round(seconds, 6),
                    "enqueue_jobs_per_second": round(jobs / seconds, 1),
                    "ack_latency_ms": {"p50": round(_pct(latencies, 0.5), 3), "p99": round(_pct(latencies, 0.99), 3)},
                    "drain_seconds": None if drained is None else round(drained, 6),
                    "drain_jobs_per_second": None if drained is None else round(jobs / drained, 1),
                    "cleaned_up": deleted is not None, "jobs_deleted": deleted})
        return
    table = Table("what", "value")
    table.add_row("enqueued", f"{jobs:,} jobs in {seconds:.2f} s = {jobs / seconds:,.0f} jobs/s")
    table.add_row("calls", f"{call_sizes(jobs, batch)}, {min(concurrency, len(latencies))} in flight")
    table.add_row("ack latency p50 / p99", f"{_pct(latencies, 0.5):.2f} / {_pct(latencies, 0.99):.2f} ms")
    if drained is not None:
        table.add_row("worked off (no-op Worker)", f"{jobs:,} jobs in {drained:.2f} s = {jobs / drained:,.0f} jobs/s")
    cleanup = "kept (--keep)" if deleted is None else f"queue {queue} deleted with {deleted:,} job(s)"
    table.add_row("cleaned up", cleanup)
    console.print(table)
