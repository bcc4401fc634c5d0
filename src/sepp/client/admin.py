"""``AdminClient``: a small blocking client of the ``AdminService``, used by the CLI.

::

    with AdminClient("127.0.0.1:7700", token="s3cret") as admin:
        admin.pause_queue("emails")
        for s in admin.iter_jobs(queue="emails", state="dead_lettered"):
            print(s.job.id, s.last_error)

Methods return the protobuf messages of ``sepp.api.v1`` (``QueueInfo``, ``Job``,
``QueueStats``, …). Failures raise:

* :class:`AdminRefused` (an :class:`AdminError`, in the rejection family
  ``sepp.errors.RefusedError``) — the server refused: ``code`` is the gRPC status
  (NOT_FOUND, FAILED_PRECONDITION, INVALID_ARGUMENT), ``reason`` the
  ErrorInfo reason (``QUEUE_NOT_FOUND``, ``JOB_STATE``, …), ``metadata`` its details;
* :class:`sepp.errors.TransportError` subclasses — no answer (``Unavailable``,
  ``DeadlineExceeded``), no or a refused token (``Unauthenticated``, ``PermissionDenied``)
  or an unexpected status (``ServerError``).

Errors are decoded by the clients' one decoder (``sepp.client._core.error_from_rpc``).

Admin calls are not retried: most of them are not idempotent.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any

import grpc
from google.protobuf import field_mask_pb2

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import admin_pb2_grpc
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import periodic_pb2 as ppb
from sepp.client._core import error_from_rpc
from sepp.client.auth import token_metadata
from sepp.client.options import ClientOptions
from sepp.client.target import (
    first_contact_error,
    given_target,
    mark_reached,
    normalize_target,
    reached_a_server,
    rpc_details,
)
from sepp.client.tls import PathArg, with_tls
from sepp.domain.states import STATE_BY_NAME, parse_state
from sepp.errors import AdminError, AdminRefused, TransportError

#: Job states by their lower-case names (``dead_lettered``; ``dead-lettered`` also works):
#: the domain name table (``sepp.domain.states``).
STATES: dict[str, int] = dict(STATE_BY_NAME)


def state_number(state: str | int | None) -> int:
    """A state given in any spelling (``ready``, ``DEAD_LETTERED``, ``dead-lettered``,
    ``Dead lettered``) or as its number → number (0 for None or ``""``). Raises
    ``ValueError`` for an unknown one (``sepp.domain.states.parse_state``)."""
    if state is None or state == "":
        return 0
    if isinstance(state, int):
        if state not in STATES.values():
            raise ValueError(f"unknown job state {state}")
        return state
    return parse_state(state)


def _ts(moment: dt.datetime) -> Any:
    from google.protobuf import timestamp_pb2

    if moment.tzinfo is None:
        raise TypeError("times must carry a time zone (a naive datetime is ambiguous)")
    t = timestamp_pb2.Timestamp()
    try:
        t.FromDatetime(moment.astimezone(dt.UTC))
    except OverflowError:  # e.g. 0001-01-01T00:00:00+14:00 is before year 1 in UTC
        raise ValueError(f"{moment.isoformat()} is outside 0001-01-01 .. 9999-12-31 UTC") from None
    return t


class AdminClient:
    """Blocking ``AdminService`` client. ``token`` (a token with role ``admin``) is sent as
    ``authorization: Bearer <token>``; ``None`` reads ``$SEPP_TOKEN``, ``""`` sends
    none. ``timeout`` (seconds) bounds every call. A refused token raises ``Unauthenticated``
    or ``PermissionDenied`` (the transport family; in earlier versions ``AdminRefused``). TLS:
    ``credentials``, or ``tls_ca`` / ``tls_cert`` / ``tls_key`` PEM files
    (``sepp.client.tls``), not both. ``target``: ``HOST:PORT`` (the forms of ``sepp.Client``;
    ``sepp.client.target``; ``None``: ``$SEPP_SERVER`` when set, else ``127.0.0.1:7700``).
    Raises ``ValueError`` for a TLS file that cannot be read or used, and for a ``target``
    that is not ``HOST:PORT``. A call to an address this process never
    reached, where nothing can be connected to, raises ``Unavailable`` naming the cause
    (``connection refused: is sepp running on …?``); admin calls never wait for a connection."""

    def __init__(self, target: str | None = None, *, token: str | None = None, timeout: float = 30.0,
                 credentials: grpc.ChannelCredentials | None = None, tls_ca: PathArg | None = None,
                 tls_cert: PathArg | None = None, tls_key: PathArg | None = None) -> None:
        credentials = with_tls(ClientOptions(credentials=credentials), tls_ca, tls_cert, tls_key).credentials
        #: The address dialled: ``target`` without a ``grpc://`` / ``http://`` prefix.
        self.target = normalize_target(given_target(target), tls=credentials is not None)
        self._tls = credentials is not None
        #: Whether a call got an answer from a server (``sepp.client.target.mark_reached``).
        self._reached = False
        self.timeout = timeout
        self._metadata = token_metadata(token)
        # Receive as much as the Client does (16 MiB, the server's default max_message_bytes):
        # with gRPC's 4 MiB default a GetServerInfo / ListQueues answer of many queues failed
        # here while producers still read it.
        options = [("grpc.max_receive_message_length", ClientOptions().max_message_bytes)]
        self._channel = (grpc.secure_channel(self.target, credentials, options=options) if credentials is not None
                         else grpc.insecure_channel(self.target, options=options))
        self._stub: Any = admin_pb2_grpc.AdminServiceStub(self._channel)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        """Call ``method`` once (no retry, no wait for a connection); a gRPC error becomes a
        sepp exception — on a first contact with nothing at ``target`` the one that names
        the cause (``sepp.client.target.first_contact_error``)."""
        try:
            response = getattr(self._stub, method)(request, timeout=timeout or self.timeout,
                                                   metadata=self._metadata)
        except grpc.RpcError as exc:
            error = error_from_rpc(exc, self.target, admin=True)
            if not self._reached:
                if reached_a_server(error):
                    self._reached = True
                    mark_reached(self.target)
                else:
                    error = first_contact_error(error, rpc_details(exc), self.target, tls=self._tls) or error
            raise error from None
        if not self._reached:
            self._reached = True
            mark_reached(self.target)
        return response

    # ------------------------------------------------------------------ queues

    def list_queues(self) -> list[pb.QueueInfo]:
        """Every queue, sorted by name."""
        return list(self._call("ListQueues", apb.ListQueuesRequest()).queues)

    def get_queue(self, name: str) -> pb.QueueInfo:
        """One queue (AdminError QUEUE_NOT_FOUND when unknown)."""
        return self._call("GetQueue", apb.GetQueueRequest(name=name))  # type: ignore[no-any-return]

    def declare_queue(self, name: str, settings: pb.QueueSettings | None = None,
                      paths: Sequence[str] = ()) -> tuple[pb.QueueInfo, bool]:
        """Create or mark declared; ``paths`` names the settings taken from ``settings``
        (empty = the populated ones). Returns (queue, created)."""
        req = apb.DeclareQueueRequest(name=name, update_mask=field_mask_pb2.FieldMask(paths=list(paths)))
        if settings is not None:
            req.settings.CopyFrom(settings)
        resp = self._call("DeclareQueue", req)
        return resp.queue, resp.created

    def update_queue(self, name: str, settings: pb.QueueSettings, paths: Sequence[str] = ()) -> pb.QueueInfo:
        """Change settings of an existing queue at once."""
        req = apb.UpdateQueueRequest(name=name, settings=settings,
                                     update_mask=field_mask_pb2.FieldMask(paths=list(paths)))
        return self._call("UpdateQueue", req)  # type: ignore[no-any-return]

    def delete_queue(self, name: str, force: bool = False) -> int:
        """Forget a queue (with ``force``, and its jobs). Returns the jobs deleted."""
        return int(self._call("DeleteQueue", apb.DeleteQueueRequest(name=name, force=force)).jobs_deleted)

    def pause_queue(self, name: str) -> pb.QueueInfo:
        """Reserve gives nothing from the queue until resumed."""
        return self._call("PauseQueue", apb.PauseQueueRequest(name=name))  # type: ignore[no-any-return]

    def resume_queue(self, name: str) -> pb.QueueInfo:
        """Undo a pause."""
        return self._call("ResumeQueue", apb.ResumeQueueRequest(name=name))  # type: ignore[no-any-return]

    def purge_queue(self, name: str, states: Iterable[str | int] = ()) -> int:
        """Delete the queue's jobs in ``states`` (default SCHEDULED + READY). Returns how many."""
        req = apb.PurgeQueueRequest(queue=name, states=[state_number(s) for s in states])  # type: ignore[misc]
        return int(self._call("PurgeQueue", req, timeout=max(self.timeout, 600)).deleted)

    def queue_stats(self, names: Sequence[str] = ()) -> list[apb.QueueStats]:
        """Counts, oldest-ready age and throughput of ``names`` (every queue when empty)."""
        return list(self._call("GetQueueStats", apb.GetQueueStatsRequest(queues=list(names))).stats)

    def job_type_stats(self, queue: str) -> apb.GetJobTypeStatsResponse:
        """Per job type of ``queue``: completed, retried and dead-lettered counts and
        run time p50 / p95 / max over the last hour (``last_hour``) and 24 hours (``last_day``),
        busiest first. Raises ``AdminError`` (QUEUE_NOT_FOUND) for an unknown queue."""
        return self._call("GetJobTypeStats", apb.GetJobTypeStatsRequest(queue=queue))  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ jobs

    def get_job(self, job_id: str) -> pb.Job:
        """One job with payload and history."""
        return self._call("GetJob", apb.GetJobRequest(job_id=job_id))  # type: ignore[no-any-return]

    def list_jobs(self, *, queue: str = "", state: str | int | None = None, job_type: str = "",
                  reason_prefix: str = "", page_size: int = 50, page_token: str = "", job_id: str = "",
                  idempotency_key: str = "", error_contains: str = "",
                  where: Sequence[tuple[str, str]] = ()) -> apb.ListJobsResponse:
        """One page of jobs; pass ``next_page_token`` back for the next one. The search filters
        (``ListJobsRequest``): ``job_id``, ``idempotency_key``, ``error_contains`` and
        ``where`` — custom-map entries (key, value as text) the job must all have. A search
        page may hold fewer jobs than ``page_size`` and still have a next page
        (``scan_limited``). Raises ``AdminRefused`` (INVALID_ARGUMENT) for a bad filter."""
        req = apb.ListJobsRequest(queue=queue, state=state_number(state), job_type=job_type,  # type: ignore[arg-type]
                                  reason_prefix=reason_prefix, page_size=page_size, page_token=page_token,
                                  job_id=job_id, idempotency_key=idempotency_key, error_contains=error_contains,
                                  custom=[apb.CustomMatch(key=k, value=v) for k, v in where])
        return self._call("ListJobs", req)  # type: ignore[no-any-return]

    def iter_jobs(self, *, queue: str = "", state: str | int | None = None, job_type: str = "",
                  reason_prefix: str = "", page_size: int = 500, job_id: str = "", idempotency_key: str = "",
                  error_contains: str = "", where: Sequence[tuple[str, str]] = ()) -> Iterator[apb.JobSummary]:
        """Every matching job, page after page (the filters of ``list_jobs``)."""
        token = ""
        while True:
            page = self.list_jobs(queue=queue, state=state, job_type=job_type, reason_prefix=reason_prefix,
                                  page_size=page_size, page_token=token, job_id=job_id,
                                  idempotency_key=idempotency_key, error_contains=error_contains, where=where)
            yield from page.jobs
            token = page.next_page_token
            if not token:
                return

    def find_job_by_key(self, queue: str, key: str) -> apb.FindJobByIdempotencyKeyResponse:
        """The job a live idempotency key points at (``.job`` unset if it was deleted)."""
        req = apb.FindJobByIdempotencyKeyRequest(queue=queue, key=key)
        return self._call("FindJobByIdempotencyKey", req)  # type: ignore[no-any-return]

    def cancel_job(self, job_id: str, reason: str = "") -> pb.Job:
        """Cancel now (SCHEDULED/READY) or ask the worker to (RESERVED)."""
        return self._call("CancelJob", apb.CancelJobRequest(job_id=job_id, reason=reason))  # type: ignore[no-any-return]

    def requeue_job(self, job_id: str, *, without_dependents: bool = False) -> pb.Job:
        """Redrive a DEAD_LETTERED or CANCELLED job (attempt reset, history kept; DEFERRED if it
        still waits for dependencies). The jobs cancelled because it failed wait again, unless
        ``without_dependents`` (docs/workflows.md)."""
        req = apb.RequeueJobRequest(job_id=job_id, without_dependents=without_dependents)
        return self._call("RequeueJob", req)  # type: ignore[no-any-return]

    def requeue_dead_lettered(self, *, queue: str = "", job_type: str = "", reason_prefix: str = "",
                              after: dt.datetime | None = None, before: dt.datetime | None = None,
                              dry_run: bool = False, max_jobs: int = 0,
                              without_dependents: bool = False) -> tuple[int, int]:
        """Bulk redrive of matching DEAD_LETTERED jobs (their dependents cancelled because they
        failed wait again, unless ``without_dependents``). Returns (matched, requeued).

        Raises ``TypeError`` for a naive ``after``/``before``, ``ValueError`` for one outside
        0001-01-01 .. 9999-12-31 UTC.
        """
        f = apb.DeadLetterFilter(queue=queue, job_type=job_type, reason_prefix=reason_prefix)
        if after is not None:
            f.dead_lettered_after.CopyFrom(_ts(after))
        if before is not None:
            f.dead_lettered_before.CopyFrom(_ts(before))
        req = apb.RequeueDeadLetteredRequest(filter=f, dry_run=dry_run, max_jobs=max_jobs,
                                             without_dependents=without_dependents)
        resp = self._call("RequeueDeadLettered", req, timeout=max(self.timeout, 600))
        return int(resp.matched), int(resp.requeued)

    def delete_job(self, job_id: str) -> None:
        """Delete one job."""
        self._call("DeleteJob", apb.DeleteJobRequest(job_id=job_id))

    # ------------------------------------------------------------------ workflows

    def list_workflows(self, *, page_size: int = 50, page_token: str = "") -> apb.ListWorkflowsResponse:
        """One page of workflows, newest first (``workflows``, ``next_page_token``: "" on the
        last page), each with its node count, jobs per state and whether it is terminal.
        ``page_size`` 1..1000. Raises ``AdminRefused`` (INVALID_ARGUMENT) for a bad size or token."""
        req = apb.ListWorkflowsRequest(page_size=page_size, page_token=page_token)
        return self._call("ListWorkflows", req)  # type: ignore[no-any-return]

    def get_workflow(self, workflow_id: str) -> apb.WorkflowInfo:
        """One workflow: its summary, every node (job id, queue, job type, state, the indexes
        of the nodes it runs after) and the indexes of its failed nodes. ``AdminRefused``
        WORKFLOW_NOT_FOUND when no stored job carries the id."""
        return self._call("GetWorkflow", apb.GetWorkflowRequest(workflow_id=workflow_id))  # type: ignore[no-any-return]

    def cancel_workflow(self, workflow_id: str, reason: str = "") -> apb.CancelWorkflowResponse:
        """Cancel every unfinished node of the workflow in one commit (RESERVED ones are asked
        to stop): ``cancelled``, ``cancel_requested`` and the workflow's ``summary`` after.
        ``AdminRefused`` WORKFLOW_NOT_FOUND when unknown."""
        req = apb.CancelWorkflowRequest(workflow_id=workflow_id, reason=reason)
        return self._call("CancelWorkflow", req)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ workers

    def list_workers(self) -> apb.ListWorkersResponse:
        """Every worker that called within the last hour, on any node: ``workers``
        (live first) and ``quiet`` (how many went quiet)."""
        return self._call("ListWorkers", apb.ListWorkersRequest())  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ periodic schedules

    def list_periodic(self) -> list[ppb.PeriodicInfo]:
        """Every periodic schedule by name, with its next three run times and last run."""
        return list(self._call("ListPeriodic", ppb.ListPeriodicRequest()).schedules)

    def get_periodic(self, name: str) -> ppb.PeriodicInfo:
        """One schedule (AdminError PERIODIC_NOT_FOUND when unknown)."""
        return self._call("GetPeriodic", ppb.GetPeriodicRequest(name=name))  # type: ignore[no-any-return]

    def declare_periodic(self, schedule: ppb.PeriodicSchedule) -> tuple[ppb.PeriodicInfo, bool]:
        """Create a schedule or replace the definition of the one of that name: (its info,
        created). AdminError PERIODIC_INVALID (metadata ``field``) when it cannot run."""
        resp = self._call("DeclarePeriodic", ppb.DeclarePeriodicRequest(schedule=schedule))
        return resp.schedule, bool(resp.created)

    def pause_periodic(self, name: str) -> ppb.PeriodicInfo:
        """Pause a schedule: no job until it is resumed."""
        return self._call("PausePeriodic", ppb.PausePeriodicRequest(name=name))  # type: ignore[no-any-return]

    def resume_periodic(self, name: str) -> ppb.PeriodicInfo:
        """Resume a schedule (the ticks of the pause are not caught up)."""
        return self._call("ResumePeriodic", ppb.ResumePeriodicRequest(name=name))  # type: ignore[no-any-return]

    def trigger_periodic(self, name: str) -> ppb.TriggerPeriodicResponse:
        """Enqueue the schedule's job now: ``job_id`` and ``deduplicated``."""
        return self._call("TriggerPeriodic", ppb.TriggerPeriodicRequest(name=name))  # type: ignore[no-any-return]

    def delete_periodic(self, name: str) -> None:
        """Forget a schedule (its jobs stay)."""
        self._call("DeletePeriodic", ppb.DeletePeriodicRequest(name=name))


__all__ = ["STATES", "AdminClient", "AdminError", "AdminRefused", "TransportError", "state_number"]
