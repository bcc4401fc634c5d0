"""AdminService servicer: proto in, ``AdminEngine``, proto out.

Authentication is the server interceptor's (``rpc.authz``): a call reaches this
servicer only with a token that has role ``admin`` (or when auth is off). Engine errors map
to rich statuses through ``rpc.status``; ``StateConflict`` is FAILED_PRECONDITION.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeAlias, TypeVar

from google.protobuf import field_mask_pb2
from google.rpc import code_pb2

from sepp import wire
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import admin_pb2_grpc
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import periodic_pb2 as ppb
from sepp.domain.listing import DeadFilter, JobQuery, JobSummary
from sepp.domain.store_errors import StoreError
from sepp.limits import MAX_DURATION_SECONDS, QueueSettings, field_bounds
from sepp.server.admin import AdminEngine, QueueStatsView, StateConflict, TypeFigures, WindowFigures, WorkerView
from sepp.server.admin.search import with_search
from sepp.server.admin.type_figures import ALPHA
from sepp.server.errors import EngineError, ShuttingDown
from sepp.server.parts import ServerParts
from sepp.server.periodic.admin import PeriodicAdmin
from sepp.server.queues import QueueState
from sepp.server.rpc.convert import job_to_proto, ts
from sepp.server.rpc.periodic import periodic_info, settings_from_proto
from sepp.server.rpc.producer import queue_settings_proto
from sepp.server.rpc.status import abort_for, abort_with
from sepp.server.rpc.workflows import cancel_proto, workflow_proto
from sepp.server.rpc.workflows import summary_proto as workflow_summary_proto
from sepp.server.rpc_args import duration_arg, optional_timestamp
from sepp.wire import duration_to_seconds, seconds_to_duration

#: grpc.aio.ServicerContext (grpc ships no type stubs).
Context: TypeAlias = Any
Req = TypeVar("Req")
Resp = TypeVar("Resp")

_DURATIONS = ("lease_duration", "dedup_window", "retry_base", "retry_cap", "completed_retention",
              "dead_letter_retention", "consumer_timeout")
_SCALARS = ("default_priority", "default_max_attempts", "retry_jitter", "max_in_flight", "rate_limit", "rate_burst",
            "concurrency_key", "max_in_flight_per_key")
_LIMITS = ("max_payload_bytes", "allowed_encodings", "max_custom_entries", "max_custom_key_bytes",
           "max_custom_bytes", "max_result_bytes")


# ---------------------------------------------------------------------- conversions


#: Most workers one ListWorkers answer holds (500 × at most ~5 KiB each stays far
#: under max_message_bytes whatever the workers said).
MAX_LISTED_WORKERS = 500


def worker_info(v: WorkerView) -> apb.WorkerInfo:
    """A ``WorkerView`` as the wire's ``WorkerInfo``."""
    return apb.WorkerInfo(worker_id=v.worker_id, host=v.host, queues=list(v.queues), concurrency=v.concurrency,
                          client_version=v.client_version, nodes=list(v.nodes), in_flight=v.in_flight,
                          first_seen=ts(v.first_seen), last_reserve=ts(v.last_reserve), last_seen=ts(v.last_seen),
                          completed_last_minute=v.completed_last_minute, failed_last_minute=v.failed_last_minute,
                          quiet=v.quiet, stopped_at=ts(v.stopped_at) if v.stopped_at else None)


def settings_patch(s: pb.QueueSettings, paths: Sequence[str] | None = None) -> dict[str, Any]:
    """A proto ``QueueSettings`` as the dict ``merge_settings`` takes (durations in seconds).

    Every duration that ``paths`` names (all of them when ``paths`` is empty) is checked at
    the edge against its bounds in ``sepp.limits.QueueSettings`` — so a huge or malformed
    Duration is refused with its exact value before any float conversion. Raises
    ``InvalidRequest``.
    """
    patch: dict[str, Any] = {name: getattr(s, name) for name in _SCALARS}
    for name in _DURATIONS:
        d = getattr(s, name)
        if not paths or name in paths:
            lo, hi = field_bounds(QueueSettings, name)
            patch[name] = duration_arg(d, name, lo or 0.0, hi if hi is not None else MAX_DURATION_SECONDS)
        else:
            patch[name] = duration_to_seconds(d)
    lim = s.limits
    patch["limits"] = {name: getattr(lim, name) for name in _LIMITS}
    patch["limits"]["allowed_encodings"] = tuple(lim.allowed_encodings)
    return patch


def populated_paths(s: pb.QueueSettings) -> list[str]:
    """The implied update mask (AIP-134): non-zero scalars, set durations, populated limits."""
    paths = [name for name in _SCALARS if getattr(s, name)]
    paths += [name for name in _DURATIONS if s.HasField(name)]  # type: ignore[arg-type]
    if s.HasField("limits"):
        paths += [f"limits.{name}" for name in _LIMITS if getattr(s.limits, name)]
    return paths


def mask_paths(settings: pb.QueueSettings, mask: field_mask_pb2.FieldMask) -> list[str]:
    """The explicit mask's paths, or the implied one."""
    return list(mask.paths) if mask.paths else populated_paths(settings)


def queue_info(q: QueueState) -> pb.QueueInfo:
    """A ``QueueInfo`` for a registry entry."""
    return pb.QueueInfo(name=q.name, settings=queue_settings_proto(q.settings), paused=q.paused,
                        declared=q.declared)


def stats_proto(view: QueueStatsView) -> apb.QueueStats:
    """A ``QueueStats`` for a stats view."""
    c = view.counts
    msg = apb.QueueStats(queue=view.name, paused=view.paused, scheduled=c.scheduled, ready=c.ready,
                         reserved=c.reserved, completed=c.completed, dead_lettered=c.dead_lettered,
                         cancelled=c.cancelled, deferred=c.deferred)
    if view.oldest_deferred_at is not None:
        msg.oldest_deferred_age.CopyFrom(seconds_to_duration(view.oldest_deferred_age or 0.0))
    if view.oldest_ready_at is not None:
        msg.oldest_ready_at.CopyFrom(ts(view.oldest_ready_at))
        msg.oldest_ready_age.CopyFrom(seconds_to_duration(view.oldest_ready_age or 0.0))
    msg.no_consumer = view.no_consumer
    if view.last_reserve is not None:
        msg.last_reserve_at.CopyFrom(ts(view.last_reserve))
    held = view.held_back
    if held is not None:
        msg.held_back.CopyFrom(apb.HeldBack(max_in_flight=held.max_in_flight, rate_limit=held.rate_limit,
                                            per_key=held.per_key, total=held.total,
                                            per_key_scan_limited=held.scan_limited))
    for row in view.throughput:
        msg.throughput.add(minute=ts(row.minute * 60_000_000), enqueued=row.enqueued, completed=row.completed,
                           dead_lettered=row.dead_lettered)
    return msg


def _window_proto(w: WindowFigures) -> apb.JobTypeWindow:
    msg = apb.JobTypeWindow(completed=w.completed, retried=w.retried, dead_lettered=w.dead_lettered, runs=w.runs)
    if w.p50 is not None:
        msg.run_time_p50.CopyFrom(seconds_to_duration(w.p50))
    if w.p95 is not None:
        msg.run_time_p95.CopyFrom(seconds_to_duration(w.p95))
    if w.max is not None:
        msg.run_time_max.CopyFrom(seconds_to_duration(w.max))
    return msg


def type_stats_proto(queue: str, figures: Sequence[TypeFigures]) -> apb.GetJobTypeStatsResponse:
    """The job-type figures of ``queue`` as ``GetJobTypeStatsResponse``."""
    return apb.GetJobTypeStatsResponse(queue=queue, relative_accuracy=ALPHA, job_types=[
        apb.JobTypeStats(job_type=f.job_type, last_hour=_window_proto(f.hour), last_day=_window_proto(f.day))
        for f in figures])


def summary_proto(s: JobSummary) -> apb.JobSummary:
    """A ``JobSummary`` (Job without payload data and history)."""
    return apb.JobSummary(job=job_to_proto(s.record, with_history=False), payload_bytes=s.payload_bytes,
                          attempts_recorded=s.attempts_recorded, last_error=s.last_error)


# ---------------------------------------------------------------------- errors


async def _abort(context: Context, code: int, reason: str, message: str,
                 metadata: dict[str, str] | None = None) -> NoReturn:
    await abort_with(context, wire.plain_status(code, reason, message, metadata))


def _rpc(method: Callable[[AdminServicer, Req, Context], Awaitable[Resp]],
         ) -> Callable[[AdminServicer, Req, Context], Awaitable[Resp]]:
    """Run, and map engine errors to rich statuses."""

    @functools.wraps(method)
    async def wrapper(self: AdminServicer, request: Req, context: Context) -> Resp:
        try:
            return await method(self, request, context)
        except StateConflict as exc:
            await _abort(context, code_pb2.FAILED_PRECONDITION, exc.reason, str(exc), exc.metadata)
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)

    return wrapper


# ---------------------------------------------------------------------- servicer


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    """Implements ``sepp.api.v1.AdminService`` over an ``AdminEngine`` (tokens: ``rpc.authz``),
    with the node's ``parts`` (limits)."""

    def __init__(self, parts: ServerParts, admin: AdminEngine) -> None:
        self.parts = parts
        self.admin = admin

    # ------------------------------------------------------------------ queues

    @_rpc
    async def ListQueues(self, request: apb.ListQueuesRequest, context: Context) -> apb.ListQueuesResponse:
        return apb.ListQueuesResponse(queues=[queue_info(q) for q in self.admin.queues()])

    @_rpc
    async def GetQueue(self, request: apb.GetQueueRequest, context: Context) -> pb.QueueInfo:
        return queue_info(self.admin.queue(request.name))

    @_rpc
    async def DeclareQueue(self, request: apb.DeclareQueueRequest,
                           context: Context) -> apb.DeclareQueueResponse:
        if request.HasField("settings"):
            paths = mask_paths(request.settings, request.update_mask)
            q, created = await self.admin.declare_queue(request.name, settings_patch(request.settings, paths), paths)
        else:
            q, created = await self.admin.declare_queue(request.name)
        return apb.DeclareQueueResponse(queue=queue_info(q), created=created)

    @_rpc
    async def UpdateQueue(self, request: apb.UpdateQueueRequest, context: Context) -> pb.QueueInfo:
        paths = mask_paths(request.settings, request.update_mask)
        q = await self.admin.update_queue(request.name, settings_patch(request.settings, paths), paths)
        return queue_info(q)

    @_rpc
    async def DeleteQueue(self, request: apb.DeleteQueueRequest,
                          context: Context) -> apb.DeleteQueueResponse:
        return apb.DeleteQueueResponse(jobs_deleted=await self.admin.delete_queue(request.name, request.force))

    @_rpc
    async def PauseQueue(self, request: apb.PauseQueueRequest, context: Context) -> pb.QueueInfo:
        return queue_info(await self.admin.set_paused(request.name, True))

    @_rpc
    async def ResumeQueue(self, request: apb.ResumeQueueRequest, context: Context) -> pb.QueueInfo:
        return queue_info(await self.admin.set_paused(request.name, False))

    @_rpc
    async def PurgeQueue(self, request: apb.PurgeQueueRequest, context: Context) -> apb.PurgeQueueResponse:
        return apb.PurgeQueueResponse(deleted=await self.admin.purge(request.queue, list(request.states)))

    @_rpc
    async def GetQueueStats(self, request: apb.GetQueueStatsRequest,
                            context: Context) -> apb.GetQueueStatsResponse:
        views = await self.admin.stats(list(request.queues))
        return apb.GetQueueStatsResponse(stats=[stats_proto(v) for v in views])

    # ------------------------------------------------------------------ jobs

    @_rpc
    async def GetJob(self, request: apb.GetJobRequest, context: Context) -> pb.Job:
        rec = await self.admin.get_job(request.job_id)
        msg = job_to_proto(rec)
        msg.waiting_on.extend(await self.admin.waiting_on(rec))
        return msg

    @_rpc
    async def ListJobs(self, request: apb.ListJobsRequest, context: Context) -> apb.ListJobsResponse:
        query = JobQuery(queue=request.queue or None, state=int(request.state) or None,
                         job_type=request.job_type or None, reason_prefix=request.reason_prefix or None,
                         finished_after=optional_timestamp(request, "finished_after"),
                         finished_before=optional_timestamp(request, "finished_before"))
        query = with_search(query, job_id=request.job_id, idempotency_key=request.idempotency_key,
                            error_contains=request.error_contains,
                            custom=[(term.key, term.value) for term in request.custom],
                            max_key_bytes=self.parts.limits.max_idempotency_key_bytes)
        page = await self.admin.list_jobs(query, request.page_token, request.page_size)
        return apb.ListJobsResponse(jobs=[summary_proto(s) for s in page.jobs], next_page_token=page.next_token,
                                    scan_limited=page.scan_limited)

    @_rpc
    async def FindJobByIdempotencyKey(self, request: apb.FindJobByIdempotencyKeyRequest,
                                      context: Context) -> apb.FindJobByIdempotencyKeyResponse:
        job_id, expires, job = await self.admin.find_by_key(request.queue, request.key)
        resp = apb.FindJobByIdempotencyKeyResponse(job_id=job_id, key_expires_at=ts(expires))
        if job is not None:
            resp.job.CopyFrom(job_to_proto(job))
        return resp

    @_rpc
    async def CancelJob(self, request: apb.CancelJobRequest, context: Context) -> pb.Job:
        return job_to_proto(await self.admin.cancel(request.job_id, request.reason))

    @_rpc
    async def RequeueJob(self, request: apb.RequeueJobRequest, context: Context) -> pb.Job:
        return job_to_proto(await self.admin.requeue(request.job_id, not request.without_dependents))

    @_rpc
    async def RequeueDeadLettered(self, request: apb.RequeueDeadLetteredRequest,
                                  context: Context) -> apb.RequeueDeadLetteredResponse:
        f = request.filter
        where = DeadFilter(queue=f.queue or None, job_type=f.job_type or None, reason_prefix=f.reason_prefix or None,
                           after=optional_timestamp(f, "dead_lettered_after", "filter.dead_lettered_after"),
                           before=optional_timestamp(f, "dead_lettered_before", "filter.dead_lettered_before"))
        matched, requeued = await self.admin.requeue_dead(where, request.dry_run, request.max_jobs,
                                                          not request.without_dependents)
        return apb.RequeueDeadLetteredResponse(matched=matched, requeued=requeued)

    # ------------------------------------------------------------------ workflows

    @_rpc
    async def ListWorkflows(self, request: apb.ListWorkflowsRequest,
                            context: Context) -> apb.ListWorkflowsResponse:
        page, token = await self.admin.workflows.list_workflows(request.page_token, request.page_size)
        return apb.ListWorkflowsResponse(workflows=[workflow_summary_proto(s) for s in page], next_page_token=token)

    @_rpc
    async def GetWorkflow(self, request: apb.GetWorkflowRequest, context: Context) -> apb.WorkflowInfo:
        return workflow_proto(await self.admin.workflows.get_workflow(request.workflow_id))

    @_rpc
    async def CancelWorkflow(self, request: apb.CancelWorkflowRequest,
                             context: Context) -> apb.CancelWorkflowResponse:
        done, view = await self.admin.workflows.cancel_workflow(request.workflow_id, request.reason)
        return cancel_proto(done, view)

    @_rpc
    async def DeleteJob(self, request: apb.DeleteJobRequest, context: Context) -> apb.DeleteJobResponse:
        await self.admin.delete_job(request.job_id)
        return apb.DeleteJobResponse()

    @_rpc
    async def GetJobTypeStats(self, request: apb.GetJobTypeStatsRequest,
                              context: Context) -> apb.GetJobTypeStatsResponse:
        return type_stats_proto(request.queue, await self.admin.type_figures(request.queue))

    @_rpc
    async def ListWorkers(self, request: apb.ListWorkersRequest, context: Context) -> apb.ListWorkersResponse:
        views = await self.admin.workers()
        return apb.ListWorkersResponse(workers=[worker_info(v) for v in views[:MAX_LISTED_WORKERS]],
                                       quiet=sum(v.quiet for v in views), total=len(views),
                                       stopped=sum(bool(v.stopped_at) for v in views))

    # ------------------------------------------------------------------ periodic schedules

    def _periodic(self) -> PeriodicAdmin:
        if self.admin.periodic is None:  # only a server built without its scheduler (never sepp serve)
            raise ShuttingDown("periodic schedules are not available on this server")
        return self.admin.periodic

    @_rpc
    async def ListPeriodic(self, request: ppb.ListPeriodicRequest, context: Context) -> ppb.ListPeriodicResponse:
        return ppb.ListPeriodicResponse(schedules=[periodic_info(v) for v in await self._periodic().list()])

    @_rpc
    async def GetPeriodic(self, request: ppb.GetPeriodicRequest, context: Context) -> ppb.PeriodicInfo:
        return periodic_info(await self._periodic().get(request.name))

    @_rpc
    async def DeclarePeriodic(self, request: ppb.DeclarePeriodicRequest,
                              context: Context) -> ppb.DeclarePeriodicResponse:
        spec = settings_from_proto(request.schedule)
        v, created = await self._periodic().declare(spec)
        return ppb.DeclarePeriodicResponse(schedule=periodic_info(v), created=created)

    @_rpc
    async def PausePeriodic(self, request: ppb.PausePeriodicRequest, context: Context) -> ppb.PeriodicInfo:
        return periodic_info(await self._periodic().set_paused(request.name, True))

    @_rpc
    async def ResumePeriodic(self, request: ppb.ResumePeriodicRequest, context: Context) -> ppb.PeriodicInfo:
        return periodic_info(await self._periodic().set_paused(request.name, False))

    @_rpc
    async def TriggerPeriodic(self, request: ppb.TriggerPeriodicRequest,
                              context: Context) -> ppb.TriggerPeriodicResponse:
        job_id, deduplicated = await self._periodic().trigger(request.name)
        return ppb.TriggerPeriodicResponse(job_id=job_id, deduplicated=deduplicated)

    @_rpc
    async def DeletePeriodic(self, request: ppb.DeletePeriodicRequest,
                             context: Context) -> ppb.DeletePeriodicResponse:
        await self._periodic().delete(request.name)
        return ppb.DeletePeriodicResponse()
