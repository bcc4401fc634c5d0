"""ProducerService servicer: proto in, engine, proto out — no business logic here (WaitJobs'
answer is built in ``rpc.outcomes``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

from sepp._version import __version__
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc
from sepp.domain.store_errors import StoreError
from sepp.hard_limits import MAX_DURATION_SECONDS
from sepp.server.engine import JobEngine
from sepp.server.errors import EngineError
from sepp.server.parts import ServerParts
from sepp.server.rpc.outcomes import wait_response
from sepp.server.rpc.status import abort_for
from sepp.server.rpc.watch import watch_jobs
from sepp.server.rpc.workflow_parts import gather
from sepp.server.rpc_args import duration_arg
from sepp.server.workflows import WorkflowAck
from sepp.wire import seconds_to_duration

#: grpc.aio.ServicerContext (grpc ships no type stubs).
Context: TypeAlias = Any

#: Feature flags advertised by GetServerInfo.
FEATURES = ("enqueue", "enqueue_batch", "enqueue_atomic", "idempotency", "scheduling", "priority",
            "trace_context", "worker", "settle_batch", "lease_extend", "admin", "enqueue_batch_plain", "wait_jobs",
            "watch_jobs", "progress", "enqueue_workflow", "dependency_outcomes", "enqueue_workflow_parts")

_PERSIST = {"sync": pb.SYNC, "group": pb.GROUP, "async": pb.ASYNC}


def queue_settings_proto(s: object) -> pb.QueueSettings:
    """``QueueSettings`` (pydantic) → proto."""
    from sepp.limits import QueueSettings

    assert isinstance(s, QueueSettings)
    lim = s.limits
    return pb.QueueSettings(
        default_priority=s.default_priority, default_max_attempts=s.default_max_attempts,
        lease_duration=seconds_to_duration(s.lease_duration), dedup_window=seconds_to_duration(s.dedup_window),
        retry_base=seconds_to_duration(s.retry_base), retry_cap=seconds_to_duration(s.retry_cap),
        retry_jitter=s.retry_jitter, completed_retention=seconds_to_duration(s.completed_retention),
        dead_letter_retention=seconds_to_duration(s.dead_letter_retention),
        max_in_flight=s.max_in_flight, rate_limit=s.rate_limit, rate_burst=s.rate_burst,
        concurrency_key=s.concurrency_key, max_in_flight_per_key=s.max_in_flight_per_key,
        consumer_timeout=seconds_to_duration(s.consumer_timeout),
        limits=pb.QueueLimits(max_payload_bytes=lim.max_payload_bytes, allowed_encodings=lim.allowed_encodings,
                              max_custom_entries=lim.max_custom_entries,
                              max_custom_key_bytes=lim.max_custom_key_bytes, max_custom_bytes=lim.max_custom_bytes,
                              max_result_bytes=lim.max_result_bytes))


#: One ``EnqueueResult`` holding an ``EnqueueAck`` with a 36-character job id and
#: ``deduplicated`` false, as protobuf encodes it, before the id: field 1 of
#: ``EnqueueBatchResponse`` (40 bytes), field 1 ``ack`` (38 bytes), field 1 ``job_id`` (36).
ACK_PREFIX = "\n(\n&\n$"


def acks_wire(results: list[Any]) -> bytes | None:
    """The serialized ``EnqueueBatchResponse`` of ``results`` when every one is a fresh ack
    (``(job_id, False)``, a canonical 36-character id), built with one string join (what
    building the message and serializing it cost per job: 0.3 µs); None otherwise (a
    rejection or a deduplicated job: the caller builds the message). The bytes are exactly
    what ``SerializeToString`` of the message gives."""
    texts: list[str] = []
    append = texts.append
    for r in results:
        if type(r) is not tuple or r[1] or len(r[0]) != 36:
            return None
        append(r[0])
    if not texts:
        return None
    wire = ACK_PREFIX + ACK_PREFIX.join(texts)
    return wire.encode("ascii") if wire.isascii() else None


class ProducerServicer(producer_pb2_grpc.ProducerServiceServicer):
    """Implements ``sepp.api.v1.ProducerService`` over a ``JobEngine``; GetServerInfo reads
    the node's ``parts`` (``server_info``)."""

    def __init__(self, parts: ServerParts, engine: JobEngine, started: float, node: str) -> None:
        self.parts = parts
        self.engine = engine
        self.started = started
        self.node = node

    async def Enqueue(self, request: pb.EnqueueRequest, context: Context) -> pb.EnqueueAck:
        try:
            return await self.engine.enqueue(request)
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)

    async def EnqueueBatch(self, request: ppb.EnqueueBatchRequest,  # type: ignore[override]
                           context: Context) -> ppb.EnqueueBatchResponse | bytes:
        """The batch's results: as serialized bytes when every job got a fresh ack
        (``acks_wire``), else as the message."""
        try:
            results = await self.engine.enqueue_batch(request.jobs, plain=request.plain)
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)
        wire = acks_wire(results)
        if wire is not None:
            return wire  # sent as it is (registration._passing_bytes)
        resp = ppb.EnqueueBatchResponse()
        add = resp.results.add
        for r in results:
            if type(r) is not tuple:
                add(rejection=r)
            elif r[1]:
                ack = add().ack
                ack.job_id = r[0]
                ack.deduplicated = True
            else:
                add().ack.job_id = r[0]  # deduplicated stays false (the default)
        return resp

    async def EnqueueAtomic(self, request: ppb.EnqueueBatchRequest,
                            context: Context) -> ppb.EnqueueAtomicResponse:
        try:
            acks = await self.engine.enqueue_atomic(request.jobs, request.plain)
            resp = ppb.EnqueueAtomicResponse()
            add = resp.acks.add
            for job_id, dedup in acks:
                add(job_id=job_id, deduplicated=dedup)
            return resp
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)

    async def EnqueueWorkflow(self, request: ppb.EnqueueWorkflowRequest,
                              context: Context) -> ppb.EnqueueWorkflowResponse:
        try:
            ack = await self.engine.enqueue_workflow(request.nodes, request.idempotency_key)
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)
        return _workflow_response(ack)

    async def EnqueueWorkflowParts(self, parts: AsyncIterator[ppb.EnqueueWorkflowRequest],
                                   context: Context) -> ppb.EnqueueWorkflowResponse:
        """``EnqueueWorkflow`` of a graph streamed in parts (``workflow_parts.gather``)."""
        try:
            nodes, key = await gather(parts)
            ack = await self.engine.enqueue_workflow(nodes, key)
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)
        return _workflow_response(ack)
    async def WaitJobs(self, request: ppb.WaitJobsRequest, context: Context) -> ppb.WaitJobsResponse:
        try:
            timeout = duration_arg(request.timeout, "timeout", 0.0, MAX_DURATION_SECONDS)
            outcomes = await self.engine.wait_jobs(request.job_ids, timeout)
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)
        return wait_response(outcomes)

    async def GetServerInfo(self, request: ppb.GetServerInfoRequest,
                            context: Context) -> ppb.ServerInfo:
        return server_info(self.parts, self.started, self.node)

    def WatchJobs(self, request: ppb.WatchJobsRequest,  # type: ignore[override]
                  context: Context) -> AsyncIterator[bytes]:
        """The live job events the filters select (``sepp.server.rpc.watch``), each message
        already serialized."""
        return watch_jobs(self.parts.job_events, request, context)


def server_info(parts: ServerParts, started: float, node: str) -> ppb.ServerInfo:
    """The ``ServerInfo`` message: version, features, modes and every advertised limit.
    ``started`` is ``parts.clock.monotonic()`` at start (seconds): uptime is measured from it.
    ``storage`` and ``nodes`` say which backend and which nodes share it (``parts.nodes``,
    as of the last heartbeat)."""
    cfg = parts.config
    lim = cfg.limits
    info = ppb.ServerInfo(
        version=__version__, features=FEATURES, persist_mode=_PERSIST[cfg.persist_mode], strict=cfg.strict,
        limits=pb.ServerLimits(
            max_enqueue_batch=lim.max_enqueue_batch, max_attempts_ceiling=lim.max_attempts_ceiling,
            max_queue_name_bytes=lim.max_queue_name_bytes, max_job_type_bytes=lim.max_job_type_bytes,
            max_schedule_horizon=seconds_to_duration(lim.max_schedule_horizon),
            max_idempotency_key_bytes=lim.max_idempotency_key_bytes, max_encoding_bytes=lim.max_encoding_bytes,
            max_trace_entries=lim.max_trace_entries, max_trace_value_bytes=lim.max_trace_value_bytes,
            max_wait=seconds_to_duration(lim.max_wait_seconds)),
        queue_defaults=queue_settings_proto(parts.queues.defaults),
        uptime=seconds_to_duration(parts.clock.monotonic() - started), node=node, storage=cfg.storage)
    for n in parts.nodes:
        entry = info.nodes.add(name=n.name, address=n.address, version=n.version)
        entry.started_at.FromMicroseconds(n.started_at)
        entry.last_seen.FromMicroseconds(n.last_seen)
    for q in parts.queues.all():
        info.queues.add(name=q.name, settings=queue_settings_proto(q.settings), paused=q.paused,
                        declared=q.declared)
    return info


def _workflow_response(ack: WorkflowAck) -> ppb.EnqueueWorkflowResponse:
    """The wire answer of an enqueued (or deduplicated) workflow: its id and one ack per node."""
    resp = ppb.EnqueueWorkflowResponse(workflow_id=ack.workflow_id, deduplicated=ack.deduplicated)
    add = resp.acks.add
    for job_id, dedup in ack.acks:
        add(job_id=job_id, deduplicated=dedup)
    return resp
