"""A reserved job's read of its dependencies' outcomes, for ``Job.dependency_outcomes`` /
``Job.dependency_results`` (docs/workflows.md "Reading the dependencies' results").

One ``DependencyReader`` per worker calls ``WorkerService.DependencyOutcomes`` over the
worker's channel, on the worker's event loop, page after page until every dependency is
answered. Nothing is asked before a handler asks: a job's reservation carries no ids and
no outcomes, so jobs without dependencies cost what they cost before. A synchronous handler
(in the worker's thread pool) waits for the read on the loop; an asynchronous one awaits it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from sepp.errors import JobNotFound

if TYPE_CHECKING:  # the producer's models load only when a handler reads (the worker loads none)
    from sepp.request.outcomes import JobOutcome
    from sepp.worker._rpc import WorkerRpc

T = TypeVar("T")

#: Longest wait, seconds, of a synchronous handler for its read (each page has its own
#: 30 s deadline; a read of thousands of dependencies takes several).
SYNC_READ_TIMEOUT = 300.0


class DependencyReader:
    """Reads the outcomes of a job's dependencies for the holder of its lease, over ``rpc``.
    ``loop`` is the worker's event loop (set when the worker starts): where the calls run."""

    __slots__ = ("loop", "rpc")

    def __init__(self, rpc: WorkerRpc) -> None:
        self.rpc = rpc
        self.loop: asyncio.AbstractEventLoop | None = None

    async def outcomes(self, job_id: str, lease_id: str) -> dict[str, JobOutcome | None]:
        """``{dependency id: outcome}`` in ``depends_on`` order (None: no longer stored).
        Raises ``LeaseError`` (the lease no longer holds) or a ``TransportError``."""
        from sepp.request.outcomes import JobOutcome

        out: dict[str, JobOutcome | None] = {}
        offset = 0
        while True:
            resp = await self.rpc.dependency_outcomes(job_id, lease_id, offset)
            for msg in resp.outcomes:
                out[msg.job_id] = JobOutcome.from_proto(msg) if msg.state else None
            offset += len(resp.outcomes)
            if offset >= resp.total or not resp.outcomes:
                return out

    def blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the worker's loop and wait for it, from a synchronous handler's
        thread (at most ``SYNC_READ_TIMEOUT`` s: ``TimeoutError``). Raises ``RuntimeError``
        on the loop's own thread — an ``async def`` handler awaits the ``*_async`` twin."""
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            coro.close()
            raise RuntimeError("an async handler reads its dependencies with await job.dependency_results_async() "
                               "(or dependency_outcomes_async()): the blocking call would stall the worker's loop")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(SYNC_READ_TIMEOUT)


def present(job_id: str, found: Mapping[str, JobOutcome | None]) -> dict[str, JobOutcome]:
    """``found`` without gaps: raises ``sepp.JobNotFound`` (its ``job_id`` the dependency)
    for the first dependency no longer stored."""
    for dep, outcome in found.items():
        if outcome is None:
            raise JobNotFound(f"dependency {dep} of job {job_id} is no longer stored (purged after its queue's "
                              "retention, or deleted): its outcome cannot be read", job_id=dep)
    return dict(found)  # type: ignore[arg-type]


def results(job_id: str, found: Mapping[str, JobOutcome | None]) -> dict[str, Any]:
    """``{dependency id: decoded result}`` (``JobOutcome.value``, as ``Client.result`` gives
    it) of ``found``. Raises ``sepp.JobNotFound`` (see ``present``), ``sepp.JobFailed`` /
    ``sepp.JobCancelled`` for a dependency dead-lettered or cancelled (a "run" dependent
    reads those with ``dependency_outcomes``), ``RuntimeError`` for one running again (redriven
    after this job was released), ``ValueError`` for a JSON result that does not decode."""
    out: dict[str, Any] = {}
    for dep, outcome in present(job_id, found).items():
        if not outcome.completed and not (outcome.dead_lettered or outcome.cancelled):
            raise RuntimeError(f"dependency {dep} of job {job_id} is {outcome.state} again (redriven after this "
                               "job was released): read job.dependency_outcomes() for its state")
        out[dep] = outcome.value()
    return out


__all__ = ["SYNC_READ_TIMEOUT", "DependencyReader", "present", "results"]
