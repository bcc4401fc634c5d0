"""``result``, ``wait`` and ``as_completed``: the waiting methods of ``Client`` (``SyncWaits``)
and ``AsyncClient`` (``AsyncWaits``), mixed into each; the transport-free parts are in
``_waiting``. Each poll is the client's own ``_call`` (idempotent: a connection is waited
for, transient errors retried), given the poll's length on top of its attempt timeout."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any

from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import _info, _waiting
from sepp.client.options import ClientOptions
from sepp.errors import SeppError
from sepp.request import EnqueueAck
from sepp.request.outcomes import JobOutcome

JobIds = Iterable[str | EnqueueAck] | str | EnqueueAck


class _Common:
    """What both mixins read of their client."""

    options: ClientOptions
    _cached: _info.CachedInfo | None

    def _longest_poll(self) -> float:
        """The server's ``max_wait`` when its info is cached, else ``DEFAULT_POLL``."""
        cached = self._cached
        return cached.info.limits.max_wait_seconds if cached is not None else _waiting.DEFAULT_POLL


class SyncWaits(_Common):
    """``Client``'s waiting methods (see the module docstring)."""

    _stub: Any
    _call: Callable[..., Any]

    def result(self, job_id: str | EnqueueAck, *, timeout: float | None = None) -> Any:
        """Wait until the job is finished; return its decoded result: ``None`` when it has none,
        the JSON value of an ``application/json`` result, the ``bytes`` of an
        ``application/octet-stream`` one, else the result as stored (data and encoding).
        ``timeout``: seconds (``None``: as long as it takes, in as many long-polls as needed).

        Raises:
            JobFailed: the job was dead-lettered (``.last_error``, ``.attempts``, ``.reason``).
            JobCancelled: an admin cancelled it.
            JobNotFound: no job has that id (never enqueued, or deleted after its retention).
            WaitTimeout: (a ``TimeoutError``) it did not finish within ``timeout``.
            TransportError: the server could not be asked (after the retries allowed).
            ValueError: ``job_id`` is not a UUID.
        """
        (outcome,) = self.wait([job_id], timeout=timeout).values()
        return _waiting.value_of(outcome)

    def wait(self, job_ids: JobIds, *, timeout: float | None = None) -> dict[str, JobOutcome]:
        """Wait until every job of ``job_ids`` (ids or ``EnqueueAck``\\ s) is finished; return
        {job id (canonical UUID text): its ``JobOutcome``} for all of them. A dead-lettered or
        cancelled job is an outcome here, not an error. Raises ``WaitTimeout`` (its
        ``finished`` and ``pending``) when ``timeout`` seconds pass first, else as ``result``."""
        done: dict[str, JobOutcome] = {}
        for outcome in self.as_completed(job_ids, timeout=timeout):
            done[outcome.job_id] = outcome
        return done

    def as_completed(self, job_ids: JobIds, *, timeout: float | None = None) -> Iterator[JobOutcome]:
        """Each job's ``JobOutcome`` as it finishes (jobs one answer of the server holds: in
        the order given), each once. Raises as ``wait`` (``WaitTimeout`` once ``timeout``
        passes, after the outcomes that came in time). More than 1,000 ids are waited for in
        chunks side by side (a thread each, ending with the iterator)."""
        ids = _waiting.job_ids(job_ids)
        deadline = _waiting.Deadline(timeout, self.options.clock)
        pending = dict.fromkeys(ids)
        done: dict[str, JobOutcome] = {}
        parts = _waiting.chunks(ids)
        if len(parts) == 1:
            first = True
            while pending:
                poll = deadline.poll(self._longest_poll(), first)
                if poll is None:
                    raise _waiting.timed_out(deadline, done, pending)
                first = False
                for outcome in _waiting.outcomes(self._poll(list(pending), poll), pending):
                    done[outcome.job_id] = outcome
                    yield outcome
            return
        yield from self._chunked(parts, deadline, pending, done)

    def _poll(self, ids: Sequence[str], poll: float) -> ppb.WaitJobsResponse:
        try:
            response: ppb.WaitJobsResponse = self._call(self._stub.WaitJobs, _waiting.request(ids, poll),
                                                        idempotent=True, extra_time=poll)
            return response
        except SeppError as exc:
            raise _waiting.not_found(exc, ids) from exc

    def _chunked(self, parts: list[list[str]], deadline: _waiting.Deadline, pending: dict[str, None],
                 done: dict[str, JobOutcome]) -> Iterator[JobOutcome]:
        """The chunks' polls in threads of their own, their outcomes passed back on a queue."""
        found: queue.SimpleQueue[list[JobOutcome] | BaseException | None] = queue.SimpleQueue()
        stop = threading.Event()

        def run(part: list[str]) -> None:
            left = dict.fromkeys(part)
            first = True
            try:
                while left and not stop.is_set():
                    poll = deadline.poll(self._longest_poll(), first)
                    if poll is None:
                        break
                    first = False
                    got = _waiting.outcomes(self._poll(list(left), poll), left)
                    if got:
                        found.put(got)
            except BaseException as exc:  # handed to the caller's thread, raised there
                found.put(exc)
            finally:
                found.put(None)

        for part in parts:
            threading.Thread(target=run, args=(part,), name="sepp-wait", daemon=True).start()
        running = len(parts)
        try:
            while running:
                item = found.get()
                if item is None:
                    running -= 1
                    continue
                yield from _waiting.arrived(item, pending, done)
            if pending:
                raise _waiting.timed_out(deadline, done, pending)
        finally:
            stop.set()


class AsyncWaits(_Common):
    """``AsyncClient``'s waiting methods: ``SyncWaits``' with ``await`` / ``async for``."""

    _call: Callable[..., Any]

    async def result(self, job_id: str | EnqueueAck, *,
                     timeout: float | None = None) -> Any:  # noqa: ASYNC109 - the wait's length, as Client's
        """See :meth:`sepp.Client.result`."""
        (outcome,) = (await self.wait([job_id], timeout=timeout)).values()
        return _waiting.value_of(outcome)

    async def wait(self, job_ids: JobIds, *,
                   timeout: float | None = None) -> dict[str, JobOutcome]:  # noqa: ASYNC109 - as Client's
        """See :meth:`sepp.Client.wait`."""
        done: dict[str, JobOutcome] = {}
        async for outcome in self.as_completed(job_ids, timeout=timeout):
            done[outcome.job_id] = outcome
        return done

    async def as_completed(self, job_ids: JobIds, *,
                           timeout: float | None = None) -> AsyncIterator[JobOutcome]:  # noqa: ASYNC109 - as Client's
        """See :meth:`sepp.Client.as_completed` (``async for``; the chunks of more than 1,000
        ids are polled by tasks, cancelled when the iteration ends)."""
        ids = _waiting.job_ids(job_ids)
        deadline = _waiting.Deadline(timeout, self.options.clock)
        pending = dict.fromkeys(ids)
        done: dict[str, JobOutcome] = {}
        found: asyncio.Queue[list[JobOutcome] | BaseException | None] = asyncio.Queue()

        async def run(part: list[str]) -> None:
            left = dict.fromkeys(part)
            first = True
            try:
                while left:
                    poll = deadline.poll(self._longest_poll(), first)
                    if poll is None:
                        break
                    first = False
                    got = _waiting.outcomes(await self._poll(list(left), poll), left)
                    if got:
                        found.put_nowait(got)
            except Exception as exc:
                found.put_nowait(exc)
            finally:
                found.put_nowait(None)

        tasks = [asyncio.ensure_future(run(part)) for part in _waiting.chunks(ids)]
        running = len(tasks)
        try:
            while running:
                item = await found.get()
                if item is None:
                    running -= 1
                    continue
                for outcome in _waiting.arrived(item, pending, done):
                    yield outcome
            if pending:
                raise _waiting.timed_out(deadline, done, pending)
        finally:
            for task in tasks:
                task.cancel()

    async def _poll(self, ids: Sequence[str], poll: float) -> ppb.WaitJobsResponse:
        try:
            response: ppb.WaitJobsResponse = await self._call("WaitJobs", _waiting.request(ids, poll),
                                                              idempotent=True, extra_time=poll)
            return response
        except SeppError as exc:
            raise _waiting.not_found(exc, ids) from exc


__all__ = ["AsyncWaits", "SyncWaits"]
