"""Live job events for producers: ``Client.watch`` / ``AsyncClient.watch`` over the
``WatchJobs`` stream, as ``JobEvent`` objects.

Events are live and at-most-once (docs/decisions.md "Live job events"): a watch sees the
changes made after the server accepted it, and a watch that ends — the server stopped
(``Unavailable``), the watcher fell behind the server's buffer (``WatchBehind``) — is not
resumed by itself: watch again and read the jobs' stored state for what happened between.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client._status import error_from_rpc
from sepp.errors import ServerError
from sepp.wire import progress_value

#: The full method name of the stream.
WATCH_METHOD = "/sepp.api.v1.ProducerService/WatchJobs"
#: Event kind number → its name (``JobEvent.kind``).
KINDS = {ppb.JOB_EVENT_ENQUEUED: "enqueued", ppb.JOB_EVENT_PROMOTED: "promoted", ppb.JOB_EVENT_RESERVED: "reserved",
         ppb.JOB_EVENT_PROGRESS: "progress", ppb.JOB_EVENT_COMPLETED: "completed",
         ppb.JOB_EVENT_RETRY_SCHEDULED: "retry_scheduled", ppb.JOB_EVENT_DEAD_LETTERED: "dead_lettered",
         ppb.JOB_EVENT_CANCELLED: "cancelled", ppb.JOB_EVENT_REQUEUED: "requeued"}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


_STATES = {number: name for name, number in pb.JobState.items()}


def _time(us: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=us)


def events_of(resp: ppb.WatchJobsResponse) -> list[JobEvent]:
    """The events of one ``WatchJobsResponse`` (its columns read back into one object per
    event), in order. Raises ``ServerError`` when its columns disagree in length."""
    positions = list(resp.positions)
    n = len(positions)
    columns = (resp.kinds, resp.queues, resp.job_types, resp.states, resp.at_us, resp.attempts, resp.worker_ids,
               resp.run_at_us, resp.errors, resp.reasons, resp.progress, resp.result_bytes, resp.nodes)
    raw = resp.job_ids
    if len(raw) != 16 * n or any(len(c) != n for c in columns):
        raise ServerError(f"a WatchJobs message whose columns disagree ({n} positions, {len(raw)} id bytes)")
    out = []
    for i, (pos, kind, queue, job_type, state, at, attempt, worker, run_at, error, reason, progress, size,
            node) in enumerate(zip(positions, *columns, strict=True)):
        h = raw[16 * i:16 * i + 16].hex()
        out.append(JobEvent(pos, KINDS.get(kind, str(kind)), f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}",
                            queue, job_type, _STATES.get(state, str(state)), _time(at), attempt, worker,
                            _time(run_at) if run_at else None, error, reason, progress_value(progress), size, node))
    return out


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One state change of one job (``Client.watch``).

    Attributes:
        position: Increases with every event the answering server relays (gaps: events the
            filters left out); counted per server process.
        kind: ``enqueued``, ``promoted``, ``reserved``, ``progress``, ``completed``,
            ``retry_scheduled``, ``dead_lettered``, ``cancelled`` or ``requeued``.
        job_id, queue, job_type: The job.
        state: Its state after the change (``READY``, ``RESERVED``, ``COMPLETED`` …).
        at: When the change was made (aware UTC, the server's clock).
        attempt: Its attempt after the change (0 before the first delivery).
        worker_id: ``reserved``: the worker that leased it.
        run_at: ``enqueued``, ``promoted``, ``retry_scheduled``: when it runs (aware UTC), else None.
        error: ``retry_scheduled``, ``dead_lettered``: the worker's error message.
        reason: ``dead_lettered``, ``cancelled``, ``requeued``: why.
        progress: ``progress``: the value the handler set (decoded JSON), else None.
        result_bytes: ``completed``: the stored result's size in bytes.
        node: The server node where the change was made.
    """

    position: int
    kind: str
    job_id: str
    queue: str
    job_type: str
    state: str
    at: dt.datetime
    attempt: int
    worker_id: str = ""
    run_at: dt.datetime | None = None
    error: str = ""
    reason: str = ""
    progress: Any = None
    result_bytes: int = 0
    node: str = ""

    def to_json(self) -> dict[str, Any]:
        """The event as plain JSON (times as RFC 3339 text; empty fields left out)."""
        out: dict[str, Any] = {"position": self.position, "kind": self.kind, "job_id": self.job_id,
                               "queue": self.queue, "job_type": self.job_type, "state": self.state,
                               "at": self.at.isoformat().replace("+00:00", "Z"), "attempt": self.attempt}
        for name in ("worker_id", "error", "reason", "node"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if self.run_at is not None:
            out["run_at"] = self.run_at.isoformat().replace("+00:00", "Z")
        if self.progress is not None:
            out["progress"] = self.progress
        if self.kind == "completed":
            out["result_bytes"] = self.result_bytes
        return out


def watch_request(queues: Iterable[str], job_ids: Iterable[str], job_types: Iterable[str]) -> ppb.WatchJobsRequest:
    """The ``WatchJobsRequest`` of the filters. Raises ``TypeError`` when one is a string
    (a queue name passed where a list of them belongs)."""
    for name, value in (("queues", queues), ("job_ids", job_ids), ("job_types", job_types)):
        if isinstance(value, str | bytes):
            raise TypeError(f"{name} takes a list of names, not one string: {name}=[{value!r}]")
    return ppb.WatchJobsRequest(queues=list(queues), job_ids=list(job_ids), job_types=list(job_types))


def stream_method(channel: Any) -> Any:
    """The ``WatchJobs`` multi-callable of a grpc (or grpc.aio) ``channel``."""
    return channel.unary_stream(WATCH_METHOD, request_serializer=ppb.WatchJobsRequest.SerializeToString,
                                response_deserializer=ppb.WatchJobsResponse.FromString)


class JobWatch:
    """The events of one watch (``Client.watch``), in order: iterate it; ``close()`` (or
    leave its ``with`` block) ends it. Iterating raises the watch's end as a ``SeppError``
    (``Unavailable``, ``WatchBehind``, ``PermissionDenied``, ``RejectedError`` for bad
    filters …); after ``close()`` it just stops."""

    def __init__(self, call: Any, target: str) -> None:
        self._call = call
        self._target = target
        self._pending: Iterator[JobEvent] = iter(())
        self._closed = False

    def __iter__(self) -> JobWatch:
        return self

    def __next__(self) -> JobEvent:
        while True:
            for event in self._pending:
                return event
            try:
                resp = next(self._call)
            except grpc.RpcError as exc:
                if self._closed:
                    raise StopIteration from None
                raise error_from_rpc(exc, self._target) from None
            self._pending = iter(events_of(resp))

    def close(self) -> None:
        """End the watch (idempotent)."""
        self._closed = True
        self._call.cancel()

    def __enter__(self) -> JobWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncJobWatch:
    """The events of one watch (``AsyncClient.watch``): ``async for`` over it; ``close()`` (or
    leave its ``async with`` block) ends it. Errors as ``JobWatch``."""

    def __init__(self, call: Any, target: str) -> None:
        self._call = call
        self._target = target
        self._stream: AsyncIterator[ppb.WatchJobsResponse] | None = None
        self._pending: Iterator[JobEvent] = iter(())
        self._closed = False

    def __aiter__(self) -> AsyncJobWatch:
        return self

    async def __anext__(self) -> JobEvent:
        while True:
            for event in self._pending:
                return event
            if self._stream is None:
                self._stream = self._call.__aiter__()
            try:
                resp = await self._stream.__anext__()
            except grpc.RpcError as exc:
                if self._closed:
                    raise StopAsyncIteration from None
                raise error_from_rpc(exc, self._target) from None
            except asyncio.CancelledError:
                if self._closed:  # close() cancelled the call, not the task
                    raise StopAsyncIteration from None
                raise
            self._pending = iter(events_of(resp))

    async def close(self) -> None:
        """End the watch (idempotent)."""
        self._closed = True
        self._call.cancel()

    async def __aenter__(self) -> AsyncJobWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["KINDS", "WATCH_METHOD", "AsyncJobWatch", "JobEvent", "JobWatch", "events_of", "stream_method",
           "watch_request"]
