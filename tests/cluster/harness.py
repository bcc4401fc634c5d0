"""Helpers of the multi-node suite: producers spread over nodes, Worker runtimes on every
node (in one background event loop) with a ledger of deliveries and settle outcomes, and
queue counts through the admin API.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from support.worker import Wire

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess
from sepp.worker import Job, JobReport, Worker


def enqueue_spread(nodes: Sequence[ServerProcess], queue: str, count: int, *, batch: int = 256,
                   job_type: str = "t", producers: int = 3) -> list[str]:
    """Enqueue ``count`` jobs of ``job_type`` into ``queue`` in ``EnqueueBatch`` calls of
    ``batch``, round-robin over ``nodes``, from ``producers`` threads; returns every id
    (each batch's ids in order). Raises ``grpc.RpcError`` / ``AssertionError`` on a failure."""
    sizes = [min(batch, count - start) for start in range(0, count, batch)]
    wires = [Wire(n.grpc_target, queue=queue) for n in nodes]
    try:
        def one(i: int) -> list[str]:
            w = wires[i % len(wires)]
            return w.enqueue_many([pb.EnqueueRequest(queue=queue, job_type=job_type) for _ in range(sizes[i])])

        with ThreadPoolExecutor(producers) as pool:
            return [job_id for ids in pool.map(one, range(len(sizes))) for job_id in ids]
    finally:
        for w in wires:
            w.close()


def queue_stats(node: ServerProcess, queue: str) -> apb.QueueStats:
    """``GetQueueStats`` of one queue through ``node``."""
    w = Wire(node.grpc_target)
    try:
        resp = w.admin.GetQueueStats(apb.GetQueueStatsRequest(queues=[queue]), timeout=20)
    finally:
        w.close()
    (stats,) = [s for s in resp.stats if s.queue == queue]
    assert isinstance(stats, apb.QueueStats)
    return stats


@dataclass
class Ledger:
    """What the workers saw: handler calls and settle reports, by job id (thread-safe enough:
    every write happens on the fleet's one event loop)."""

    #: job id → the lease ids it was delivered (handler started) with, in order.
    deliveries: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: job id → the node index whose worker ran each delivery.
    delivered_by: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    #: job ids whose handler returned (on any delivery).
    finished: set[str] = field(default_factory=set)
    #: every settle report (``Worker.on_outcome``), with the node index of its worker.
    reports: list[tuple[int, JobReport]] = field(default_factory=list)

    def acked(self) -> Counter[str]:
        """job id → how many completing acks the server accepted."""
        return Counter(r.job.id for _, r in self.reports if r.state == "completed" and not r.refused)

    def refused(self) -> dict[str, list[str]]:
        """job id → the refusal reasons of its settles that did not apply."""
        out: dict[str, list[str]] = defaultdict(list)
        for _, r in self.reports:
            if r.refused:
                out[r.job.id].append(r.refused)
        return out


Handler = Callable[[Job], Awaitable[None]]


class Fleet:
    """One ``sepp.worker.Worker`` per (node, copy) on a background thread's event loop.

    ``handler(job)`` runs every job (any job type); the ledger records each start and each
    settle. ``start()`` returns once the loop runs; ``stop(grace)`` stops every worker
    gracefully (grace seconds) and joins the thread; ``stop_node(i)`` only node ``i``'s.
    """

    def __init__(self, nodes: Sequence[ServerProcess], queue: str, handler: Handler, *, per_node: int = 1,
                 job_types: Sequence[str] = ("t",), **worker_kw: object) -> None:
        self.ledger = Ledger()
        self.loop = asyncio.new_event_loop()
        self.workers: list[tuple[int, Worker]] = []
        self._thread = threading.Thread(target=self._run, daemon=True, name="fleet")
        self._tasks: list[asyncio.Task[None]] = []
        for i, node in enumerate(nodes):
            for c in range(per_node):
                w = Worker(node.grpc_target, [queue], worker_id=f"n{i + 1}-w{c}", shutdown_grace=5.0,
                           **worker_kw)  # type: ignore[arg-type]
                for jt in job_types:
                    w.register(jt, self._wrap(i, handler))
                w.on_outcome(self._recorder(i))
                self.workers.append((i, w))
        self._ready = threading.Event()
        self._abandoned: set[int] = set()

    def _recorder(self, index: int) -> Callable[[JobReport], None]:
        def record(report: JobReport) -> None:
            self.ledger.reports.append((index, report))
        return record

    def _wrap(self, index: int, handler: Handler) -> Handler:
        async def run(job: Job) -> None:
            self.ledger.deliveries[job.id].append(job.lease_id)
            self.ledger.delivered_by[job.id].append(index)
            await handler(job)
            self.ledger.finished.add(job.id)
        return run

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            self._tasks = [asyncio.create_task(w.run(install_signal_handlers=False)) for _, w in self.workers]
            self._ready.set()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        try:
            self.loop.run_until_complete(main())
        except RuntimeError:  # stopped with abandoned workers still retrying (``abandon``)
            return
        self.loop.close()

    def start(self) -> Fleet:
        """Start every worker; returns self."""
        self._thread.start()
        assert self._ready.wait(10), "the worker fleet did not start"
        return self

    def call(self, coro: Awaitable[object], timeout: float = 30.0) -> object:
        """Run ``coro`` on the fleet's loop and wait for its result."""
        async def wrapped() -> object:
            return await coro
        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result(timeout)

    def held(self, index: int) -> int:
        """Jobs node ``index``'s workers hold right now (running + prefetched)."""
        return sum(w.held for i, w in self.workers if i == index)

    def stop_node(self, index: int, grace: float = 0.0) -> None:
        """Stop node ``index``'s workers (``grace`` seconds for running handlers)."""
        async def stop() -> None:
            await asyncio.gather(*(w.stop(grace) for i, w in self.workers if i == index))
        self.call(stop(), timeout=grace + 30)

    def abandon(self, index: int) -> None:
        """Give up on node ``index``'s workers (their node died): ``stop`` does not wait for
        them — a worker whose server is gone keeps retrying its settles, so it cannot drain."""
        self._abandoned.add(index)

    def stop(self, grace: float = 5.0) -> None:
        """Stop every worker not abandoned and join the loop's thread (the loop is stopped
        under abandoned ones). Idempotent."""
        if self._thread.is_alive():
            async def stop() -> None:
                await asyncio.gather(*(w.stop(grace) for i, w in self.workers if i not in self._abandoned))
                if self._abandoned:
                    self.loop.stop()
            # not ``call``: the loop ends with the last worker, maybe before it could
            # pass the stop's result back
            asyncio.run_coroutine_threadsafe(stop(), self.loop)
            self._thread.join(grace + 30)
            assert not self._thread.is_alive(), "the worker fleet did not stop"


def elapsed(since: float) -> float:
    """Seconds since the monotonic instant ``since``."""
    return time.monotonic() - since


def explain(nodes: Sequence[ServerProcess], queue: str, fleet: Fleet | None = None) -> str:
    """A failure's context: the queue's counts (through the first live node), what the
    fleet holds and has acked, and the nodes' last warning/error lines."""
    parts: list[str] = []
    for node in nodes:
        if node.proc is not None and node.proc.poll() is None:
            try:
                s = queue_stats(node, queue)
                parts.append(f"stats: scheduled={s.scheduled} ready={s.ready} reserved={s.reserved} "
                             f"completed={s.completed} dead_lettered={s.dead_lettered}")
            except Exception as exc:  # context only
                parts.append(f"stats unavailable: {exc}")
            break
    if fleet is not None:
        parts.append(f"fleet holds {[fleet.held(i) for i in range(len(nodes))]}, acked {len(fleet.ledger.acked())}")
    for i, node in enumerate(nodes, 1):
        noisy = [line for line in node.output if "WARNING" in line or "ERROR" in line or "Traceback" in line]
        if noisy:
            parts.append(f"n{i}: " + "\n    ".join(noisy[-5:]))
    return "\n".join(parts)
