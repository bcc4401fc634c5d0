"""``WatchJobs``: the live job events of ``sepp.server.job_events`` as a server stream.

Each message carries every event buffered for the call since the previous one (at most
``EVENTS_PER_MESSAGE``): under load one message holds many events, which is what keeps a
busy stream cheap (one gRPC message costs far more than one event in it). A watcher that
falls ``watch_buffer`` events behind ends with RESOURCE_EXHAUSTED, ErrorInfo reason
``WATCH_BEHIND`` (metadata ``behind``, ``buffer``); a stopping server ends every stream with
UNAVAILABLE (``SHUTTING_DOWN``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from google.rpc import code_pb2

from sepp import wire
from sepp.api.v1 import producer_pb2 as ppb
from sepp.domain.ids import job_id_bytes, job_id_text
from sepp.quoting import quote
from sepp.rejections import Reason
from sepp.server.errors import InvalidRequest
from sepp.server.job_events import MAX_WATCH_IDS, MAX_WATCH_NAMES, JobEvent, JobEvents
from sepp.server.rpc.status import abort_for, abort_with

#: Most events one ``WatchJobsResponse`` carries (each at most ~5 KiB with a full progress
#: value: a message stays far below the message cap).
EVENTS_PER_MESSAGE = 500


def watch_filters(request: ppb.WatchJobsRequest) -> tuple[list[bytes], list[str], list[str]]:
    """The filters of a ``WatchJobsRequest``: (job ids as bytes, queues, job types). Raises
    ``InvalidRequest`` for too many of any (fields ``job_ids``, ``queues``, ``job_types``) or
    an id that is not a UUID."""
    for name, values, cap in (("job_ids", request.job_ids, MAX_WATCH_IDS), ("queues", request.queues, MAX_WATCH_NAMES),
                              ("job_types", request.job_types, MAX_WATCH_NAMES)):
        if len(values) > cap:
            raise InvalidRequest(f"a watch filters on at most {cap} {name.replace('_', ' ')}", name, cap, len(values))
    ids = []
    for text in request.job_ids:
        raw = job_id_bytes(text)
        if raw is None:
            raise InvalidRequest(f"job_ids: {quote(text)} is not a UUID", "job_ids")
        ids.append(raw)
    return ids, list(request.queues), list(request.job_types)


def events_message(events: Sequence[JobEvent]) -> ppb.WatchJobsResponse:
    """The ``WatchJobsResponse`` of ``events`` (in order)."""
    resp = ppb.WatchJobsResponse()
    add = resp.events.add
    for e in events:
        m = add(position=e.position, kind=e.kind, job_id=job_id_text(e.job_id), queue=e.queue,  # type: ignore[arg-type]
                job_type=e.job_type, state=e.state, attempt=e.attempt, node=e.node)  # type: ignore[arg-type]
        at = m.at
        at.seconds, rem = divmod(e.at, 1_000_000)
        at.nanos = rem * 1000
        if e.run_at:
            run_at = m.run_at
            run_at.seconds, rem = divmod(e.run_at, 1_000_000)
            run_at.nanos = rem * 1000
        if e.worker_id:
            m.worker_id = e.worker_id
        if e.error:
            m.error = e.error
        if e.reason:
            m.reason = e.reason
        if e.progress:
            m.progress = e.progress
        if e.result_bytes:
            m.result_bytes = e.result_bytes
    return resp


async def watch_jobs(hub: JobEvents, request: ppb.WatchJobsRequest, context: Any) -> AsyncIterator[bytes]:
    """The stream of one ``WatchJobs`` call (see the module docstring): each message as its
    serialized bytes (the registration sends bytes as they are)."""
    try:
        ids, queues, types = watch_filters(request)
    except InvalidRequest as exc:
        await abort_for(context, exc)
    watcher = hub.watch(ids, queues, types)
    try:
        while True:
            await watcher.wake.wait()
            if watcher.closed:
                await abort_with(context, wire.plain_status(code_pb2.UNAVAILABLE, Reason.SHUTTING_DOWN,
                                                            "the server is shutting down; watch another node or "
                                                            "again once it is back (events meanwhile are not "
                                                            "replayed)"))
            if watcher.behind:
                await abort_with(context, wire.plain_status(
                    code_pb2.RESOURCE_EXHAUSTED, Reason.WATCH_BEHIND,
                    f"the watcher fell behind by {watcher.behind} events (the server buffers {watcher.limit} per "
                    "watcher) and was cut off: read the events faster or narrow the filters, then watch again "
                    "and read the jobs' stored state for what was missed",
                    {"behind": str(watcher.behind), "buffer": str(watcher.limit)}))
            events = watcher.take()
            for start in range(0, len(events), EVENTS_PER_MESSAGE):
                yield events_message(events[start:start + EVENTS_PER_MESSAGE]).SerializeToString()
    finally:
        hub.unwatch(watcher)


__all__ = ["EVENTS_PER_MESSAGE", "events_message", "watch_filters", "watch_jobs"]
