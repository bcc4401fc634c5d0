"""WorkerService servicer: reserve, ack, nack, extend, batched settle, and the
stop of a worker's long-polls (``StopReserving``)."""

from __future__ import annotations

from typing import Any, TypeAlias

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.api.v1 import worker_pb2_grpc
from sepp.domain.ids import job_id_bytes
from sepp.domain.params import SettleKind, SettleParams, SettleResult
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.domain.store_errors import StoreError
from sepp.domain.transitions import result_refused, result_too_large_message
from sepp.limits import MAX_LEASE, MAX_SETTLE_BATCH, MIN_LEASE
from sepp.rejections import Reason, RejectionCode
from sepp.server.children import store_refusal
from sepp.server.engine import JobEngine
from sepp.server.errors import EngineError, InvalidRequest, JobRejected
from sepp.server.fast_rows import ack_params, ack_params_of, result_ack_params
from sepp.server.parts import ServerParts
from sepp.server.rpc.convert import ReservationWriter, job_to_proto, set_ts, ts
from sepp.server.rpc.outcomes import dependency_response
from sepp.server.rpc.settle_wire import ALL_COMPLETED, BACK, add_result, all_ack_ids, settle_response
from sepp.server.rpc.status import abort_for
from sepp.server.rpc_args import duration_arg
from sepp.validation import queue_fix, utf8_len
from sepp.wire import quote

#: grpc.aio.ServicerContext (grpc ships no type stubs).
Context: TypeAlias = Any

#: What converting a damaged row into a message raises (a column of the wrong type or out
#: of range: protobuf refuses it).
_UNCONVERTIBLE = (TypeError, ValueError, OverflowError, UnicodeError)

#: Room kept in a Reserve answer for framing beyond the reservations themselves, bytes.
_RESPONSE_SLACK = 1024


def _ids(job_id: str, lease_id: str) -> tuple[bytes, bytes]:
    jid = job_id_bytes(job_id)
    if jid is None:
        raise InvalidRequest(f"job_id {quote(job_id)} is not a UUID", "job_id")
    lid = job_id_bytes(lease_id)
    if lid is None:
        raise InvalidRequest(f"lease_id {quote(lease_id)} is not a UUID", "lease_id")
    return jid, lid


def _truncate(text: str, limit: int) -> str:
    if utf8_len(text) <= limit:
        return text
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


#: Longest dead-letter reason kept, UTF-8 bytes (longer is truncated).
MAX_REASON_BYTES = 1024


def settle_params(item: wpb.AckRequest | wpb.NackRequest, now: int, max_detail: int,
                  max_delay: float = 365 * 86400.0, max_encoding: int = 128) -> SettleParams:
    """An ack or nack message → ``SettleParams``. Error message and detail are cut to
    ``max_detail`` bytes, a dead-letter reason to 1 KiB; an ack's ``result`` is carried over
    (its size is judged by the store, against the job's queue). Raises ``InvalidRequest`` for
    a bad item (malformed ids, a malformed ``retry_after`` or one below 0 or above
    ``max_delay`` seconds: field ``retry_after``, limit 0 or ``max_delay``, the exact value; a
    result encoding label longer than ``max_encoding`` UTF-8 bytes or holding a NUL: field
    ``result.encoding``)."""
    jid, lid = _ids(item.job_id, item.lease_id)
    if isinstance(item, wpb.AckRequest):
        if not item.HasField("result"):
            return SettleParams(jid, lid, SettleKind.ACK, now, outcome="completed")
        encoding = item.result.encoding
        size = utf8_len(encoding)
        if size > max_encoding:
            raise InvalidRequest(f"the result's encoding label is {size} bytes long; a label is at most "
                                 f"max_encoding_bytes ({max_encoding})", "result.encoding", max_encoding, size)
        if "\x00" in encoding:  # every backend stores labels as text (docs/decisions.md)
            raise InvalidRequest("the result's encoding label contains a NUL character (U+0000)", "result.encoding")
        return SettleParams(jid, lid, SettleKind.ACK, now, outcome="completed", result=item.result.data,
                            result_encoding=encoding)
    directive = item.WhichOneof("directive")
    message = _truncate(item.error.message, max_detail)
    detail = _truncate(item.error.detail, max_detail)
    if directive is None or directive == "retry":
        return SettleParams(jid, lid, SettleKind.RETRY, now, outcome="retry", error_message=message,
                            error_detail=detail)
    if directive == "retry_after":
        # 0 .. max_schedule_horizon, refused with the exact value (and the horizon as the limit).
        delay = duration_arg(item.retry_after, "retry_after", 0.0, max_delay)
        return SettleParams(jid, lid, SettleKind.RETRY, now, delay=int(delay * 1_000_000), outcome="retry_after",
                            error_message=message, error_detail=detail)
    if directive == "dead_letter":
        # PostgreSQL text cannot hold U+0000: the free-form reason keeps U+FFFD instead (as
        # an admin cancel reason does), on every backend alike (docs/decisions.md).
        given = _truncate(item.dead_letter, MAX_REASON_BYTES).replace("\x00", "\ufffd")
        reason = "NACK_DEAD_LETTER" + (f": {given}" if given else "")
        return SettleParams(jid, lid, SettleKind.DEAD_LETTER, now, reason=reason, outcome="dead_letter",
                            error_message=message or given, error_detail=detail)
    return SettleParams(jid, lid, SettleKind.RELEASE, now, outcome="released", error_message=message,
                        error_detail=detail)


class WorkerServicer(worker_pb2_grpc.WorkerServiceServicer):
    """Implements ``sepp.api.v1.WorkerService`` over a ``JobEngine``, with the node's
    ``parts`` (limits, clock, worker registry)."""

    def __init__(self, parts: ServerParts, engine: JobEngine) -> None:
        self.engine = engine
        self.max_detail = parts.limits.max_error_detail_bytes
        self.max_message = parts.limits.max_message_bytes
        self.max_delay = parts.limits.max_schedule_horizon
        self.max_wait = parts.limits.max_reserve_wait
        self.max_encoding = parts.limits.max_encoding_bytes
        #: Each queue's policy (its max_result_bytes: the Reserve answer's limits, a refusal's).
        self._policy_for = parts.queues.policy_for
        #: The settle time of acks and nacks (µs UTC) comes from the server's clock.
        self._clock_now = parts.clock.now
        #: Result encoding labels already found valid (``_LABELS_KEPT`` at most): a worker
        #: sends a handful, the same on every ack, and each is checked once, not per job.
        self._good_labels: set[str] = set()
        self.workers = parts.workers

    async def Reserve(self, request: wpb.ReserveRequest,  # type: ignore[override]
                      context: Context) -> wpb.ReserveResponse | bytes:
        """Lease up to ``max_jobs`` jobs (``JobEngine.reserve``) and answer them. An answer
        well within ``max_message_bytes`` is answered already serialized
        (``ReservationWriter``; the registration sends bytes as they are); a larger one is
        built message by message, giving back what does not fit."""
        try:
            lease = (duration_arg(request.lease_duration, "lease_duration", MIN_LEASE, MAX_LEASE)
                     if request.HasField("lease_duration") else None)
            wait = duration_arg(request.wait, "wait", 0.0, self.max_wait) if request.HasField("wait") else 0.0
            # The engine notes the worker for the Workers page when it accepts the
            # call, before the long poll, and again when the call ends.
            jobs = await self.engine.reserve(request.queues, request.max_jobs, lease, wait, request.worker_id,
                                             host=request.host, concurrency=request.concurrency,
                                             client_version=request.client_version)
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)
        # Each job is converted on its own: one whose row cannot be (a damaged column) is not
        # handed out but dead-lettered with DAMAGED_ROW, and the others are delivered.
        damaged: list[tuple[JobRecord, Exception]] = []
        # The answer must fit in one message (max_message_bytes): what does not fit is given
        # back at once, keeping its place and its attempt.
        budget = self.max_message - _RESPONSE_SLACK
        # Cheap upper bound first: payload + history + a generous 2 KiB per job of the rest.
        try:
            small = sum(len(r.payload) + len(r.history or "") + len(r.extras or b"") + 2048 for r in jobs) < budget
        except TypeError:  # a damaged row's column of the wrong type: the careful path below
            small = False
        if small:  # written as wire bytes directly (the registration sends bytes as they are)
            writer = ReservationWriter()
            for rec in jobs:
                try:
                    writer.add(rec)
                except _UNCONVERTIBLE as exc:
                    damaged.append((rec, exc))
            if damaged:
                await self.engine.bury_damaged(damaged)
                jobs = [rec for rec in jobs if all(rec is not d for d, _ in damaged)]
            self._give_back_if_cancelled(context, jobs)
            return bytes(writer) + self._result_limits(jobs).SerializeToString()
        resp = self._result_limits(jobs)  # (the limits of every queue leased: what is given back too)
        budget -= resp.ByteSize()
        size = 0
        overflow: list[JobRecord] = []
        for rec in jobs:
            if overflow:
                overflow.append(rec)
                continue
            try:
                job = job_to_proto(rec)
                res = wpb.Reservation(job=job, lease_id=job.lease_id, lease_expires_at=ts(rec.lease_expires_at or 0),
                                      attempt=rec.attempt)
                n = res.ByteSize() + 16
            except _UNCONVERTIBLE as exc:
                damaged.append((rec, exc))
                continue
            if size + n > budget and not resp.reservations:
                del res.job.attempts[:]  # a lone job with a huge attempt history: send it without
                n = res.ByteSize() + 16
            if size + n > budget and resp.reservations:
                overflow.append(rec)
                continue
            resp.reservations.append(res)
            size += n
        if damaged:
            await self.engine.bury_damaged(damaged)
        if overflow:
            await self.engine.release(overflow, "did not fit in the reserve response (max_message_bytes)")
        held = {id(rec) for rec, _ in damaged} | {id(rec) for rec in overflow}
        self._give_back_if_cancelled(context, [rec for rec in jobs if id(rec) not in held])
        return resp

    def _result_limits(self, jobs: list[JobRecord]) -> wpb.ReserveResponse:
        """A ``ReserveResponse`` holding only ``max_result_bytes``: the limit of each queue of
        ``jobs`` (one entry per queue). The answer's reservations are added to it, or its bytes
        appended to theirs (protobuf reads two messages one after the other as their merge)."""
        limits = wpb.ReserveResponse()
        if jobs:
            entries = limits.max_result_bytes
            policy_for = self._policy_for
            for queue in {rec.queue for rec in jobs}:
                if isinstance(queue, str):  # (a damaged row's queue is buried, never delivered)
                    entries[queue] = policy_for(queue).max_result_bytes
        return limits

    def _give_back_if_cancelled(self, context: Context, delivered: list[JobRecord]) -> None:
        """If the caller cancels the call after its jobs were leased and the answer built —
        a stopping Worker that stops waiting for a slow answer — its jobs would stay RESERVED by
        nobody until their lease expires. So when the call ends cancelled,
        the jobs of its answer are given back (released: attempt and place kept). A caller that
        took the answer never sees the call cancelled."""
        if not delivered:
            return
        engine = self.engine

        def done(ctx: Any) -> None:
            if ctx.cancelled():
                engine.give_back(delivered, "the reserve call was cancelled before its answer was taken")

        context.add_done_callback(done)

    async def StopReserving(self, request: wpb.StopReservingRequest,
                            context: Context) -> wpb.StopReservingResponse:
        """End the long-polls of ``request.worker_id``'s Reserves in progress on this node
        (``JobEngine.stop_reserving``): ``woken`` is how many this stopped;
        ``request.stopped`` records the worker's clean stop (the Workers page lists it stopped).
        An empty worker_id is INVALID_ARGUMENT (field ``worker_id``)."""
        try:
            woken = self.engine.stop_reserving(request.worker_id, request.stopped)
        except EngineError as exc:
            await abort_for(context, exc)
        return wpb.StopReservingResponse(woken=woken)

    async def DependencyOutcomes(self, request: wpb.DependencyOutcomesRequest,
                                 context: Context) -> wpb.DependencyOutcomesResponse:
        """The outcomes of the jobs ``request.job_id`` depends on, from ``request.offset``, for
        the holder of its lease (``JobEngine.dependency_outcomes``): LEASE_MISMATCH /
        JOB_NOT_FOUND as a settle's, INVALID_ARGUMENT for ids that are no UUIDs."""
        try:
            total, outcomes = await self.engine.dependency_outcomes(request.job_id, request.lease_id, request.offset)
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)
        return dependency_response(total, outcomes)

    async def Ack(self, request: wpb.AckRequest, context: Context) -> wpb.AckResponse:
        """Complete the job (``JobEngine.settle_one``), storing ``request.result`` with it. A
        result over the queue's ``max_result_bytes`` is refused: INVALID_ARGUMENT /
        RESULT_TOO_LARGE (field ``result.data``, limit, actual), the attempt failed instead."""
        try:
            params = settle_params(request, self._clock_now(), self.max_detail, self.max_delay, self.max_encoding)
            refused = None
            if request.children or request.HasField("then"):
                params, refused = await self._with_children(params, request)
            result = await self.engine.settle_one(params)
            if refused is not None or ((params.result is not None or params.children is not None)
                                       and result_refused(params, result)):
                raise JobRejected(self._refusal(params, result, refused))
            if params.children is not None:
                self.engine.children_told([params], [result])
        except (EngineError, StoreError) as exc:
            if request.worker_id and isinstance(exc, JobRejected):
                self.workers.called(request.worker_id, failed=1)
            await abort_for(context, exc)
        if request.worker_id:
            self.workers.called(request.worker_id, completed=1)
        return wpb.AckResponse()

    async def _with_children(self, params: SettleParams, ack: wpb.AckRequest
                             ) -> tuple[SettleParams, pb.Rejection | None]:
        """``params`` (an ack) with the children of ``ack`` (``JobEngine.attach_children``):
        the ack carrying them, or the failed attempt it becomes and the child's rejection."""
        then = ack.then if ack.HasField("then") else None
        return await self.engine.attach_children(params, ack.children, then)

    def _refusal(self, p: SettleParams, r: SettleResult, refused: pb.Rejection | None) -> pb.Rejection:
        """Why the ack ``p`` did not complete its job although applied (``r``): its result
        over the queue's max_result_bytes (RESULT_TOO_LARGE, judged first by the store), a
        child refused before the settle (``refused``), or its children refused by the store."""
        if p.result is not None:
            size, limit = len(p.result), self._policy_for(r.queue).max_result_bytes
            if size > limit:
                return pb.Rejection(code=_RESULT_TOO_LARGE_CODE,  # type: ignore[arg-type]
                                    field="result.data", limit=limit, actual=size,
                                    message=_refusal_text(r.queue, size, limit))
        return refused if refused is not None else store_refusal()

    async def Nack(self, request: wpb.NackRequest, context: Context) -> wpb.NackResponse:
        try:
            params = settle_params(request, self._clock_now(), self.max_detail, self.max_delay, self.max_encoding)
            result = await self.engine.settle_one(params)
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)
        if request.worker_id:
            self.workers.called(request.worker_id, failed=0 if params.kind is _RELEASE else 1)
        return wpb.NackResponse(state=result.state, run_at=ts(result.run_at))  # type: ignore[arg-type]

    async def ExtendLease(self, request: wpb.ExtendLeaseRequest,
                          context: Context) -> wpb.ExtendLeaseResponse:
        try:
            jid, lid = _ids(request.job_id, request.lease_id)
            extend_by = duration_arg(request.extend_by, "extend_by", MIN_LEASE, MAX_LEASE)
            progress = request.progress if request.HasField("progress") else None
            result = await self.engine.extend(jid, lid, extend_by, progress)
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)
        if request.worker_id:
            self.workers.called(request.worker_id)
        return wpb.ExtendLeaseResponse(lease_expires_at=ts(result.lease_expires_at),
                                       cancel_requested=result.cancel_requested)

    async def Settle(self, request: wpb.SettleRequest,  # type: ignore[override]
                     context: Context) -> wpb.SettleResponse | bytes:
        """Apply a batch of acks and nacks (at most ``MAX_SETTLE_BATCH`` items, else
        INVALID_ARGUMENT whole): one result per item, in order; an item that does not parse is
        INVALID_ARGUMENT in its own result. A batch of acks that all completed their jobs is
        answered already serialized (``ALL_COMPLETED``; the registration sends bytes as they are)."""
        n = len(request.items)
        if n > MAX_SETTLE_BATCH:  # refused whole, before any item is looked at
            await abort_for(context, InvalidRequest(f"a settle holds at most {MAX_SETTLE_BATCH} items (got {n})",
                                                    "items", MAX_SETTLE_BATCH, n))
        now = self._clock_now()
        ids = all_ack_ids(request)
        if ids is not None:  # the common case: only acks, every id canonical
            params = ack_params_of(ids, now)
            try:
                results = await self.engine.settle(params) if params else []
            except (EngineError, StoreError) as exc:
                await abort_for(context, exc)
            done = sum(1 for r in results if r.error is None and r.state == _COMPLETED)
            if done == len(results):  # every ack completed its job: none failed, none refused
                if request.worker_id:
                    self.workers.called(request.worker_id, completed=done, failed=0)
                return ALL_COMPLETED * done  # already serialized (registration passes bytes)
            if request.worker_id:
                self._count_done(request.worker_id, results, params)
            return settle_response(results)
        resp = wpb.SettleResponse()
        params = []
        slots: list[int] = []
        bad: dict[int, str] = {}
        rejected: dict[int, pb.Rejection] = {}  # acks whose children were refused before the settle
        for i, item in enumerate(request.items):
            kind = item.WhichOneof("kind")
            if kind == "ack":  # the common case, inline: two id parses and a tuple
                a = item.ack
                jid, lid = job_id_bytes(a.job_id), job_id_bytes(a.lease_id)
                if a.children or a.HasField("then"):
                    jid = None  # the full path below, then its children
                if jid is not None and lid is not None:
                    if not a.HasField("result"):
                        params.append(ack_params(jid, lid, now))
                        slots.append(i)
                        continue
                    result = a.result
                    label = result.encoding
                    if label in self._good_labels:  # checked before (settle_params's rules)
                        params.append(result_ack_params(jid, lid, now, result.data, label))
                        slots.append(i)
                        continue
            try:
                if kind is None:
                    raise InvalidRequest("settle item has neither ack nor nack", "items")
                p = settle_params(getattr(item, kind), now, self.max_detail, self.max_delay, self.max_encoding)
            except InvalidRequest as exc:
                bad[i] = str(exc)
                continue
            if kind == "ack" and (item.ack.children or item.ack.HasField("then")):
                p, refused = await self._with_children(p, item.ack)
                if refused is not None:
                    rejected[i] = refused
            params.append(p)
            slots.append(i)
            if p.result is not None and len(self._good_labels) < _LABELS_KEPT:
                self._good_labels.add(p.result_encoding)  # settle_params accepted it
        try:
            results = await self.engine.settle(params) if params else []
        except (EngineError, StoreError) as exc:
            await abort_for(context, exc)
        if rejected or any(p.children is not None for p in params):
            self.engine.children_told(params, results)
        if not bad:
            done = sum(1 for r in results if r.error is None and r.state == _COMPLETED)
            if done == len(results):  # every item an ack that completed its job (none refused)
                if request.worker_id:
                    self.workers.called(request.worker_id, completed=done, failed=0)
                return ALL_COMPLETED * done  # the bytes the loop below would build
        add = resp.results.add
        if not bad:
            by_slot: Any = results  # every item parsed: slot i is results[i]
        else:
            by_slot = dict(zip(slots, results, strict=True))
        by_param: Any = params if not bad else dict(zip(slots, params, strict=True))
        for i in range(len(request.items)):
            if i in bad:
                add(ok=False, error_reason=Reason.INVALID_ARGUMENT, error_message=bad[i])
                continue
            r = by_slot[i]
            p = by_param[i]
            if (i in rejected and r.error is None) or ((p.result is not None or p.children is not None)
                                                       and result_refused(p, r)):
                # The attempt failed instead: why, and where it went.
                why = self._refusal(p, r, rejected.get(i))
                res = add(ok=False, error_reason=RejectionCode.from_wire(why.code).reason,
                          error_message=why.message, state=r.state)
                if r.state in BACK:
                    set_ts(res.run_at, r.run_at)
                continue
            add_result(add, r)
        if request.worker_id:
            self._count_done(request.worker_id, results, params)
        return resp

    def _count_done(self, worker_id: str, results: list[SettleResult], params: list[SettleParams]) -> None:
        """The Workers page: jobs done and failed per worker, from one Settle's
        results (``params[i]`` is what ``results[i]`` answers). A release (a stopping worker
        giving a job back, nothing failed) counts as neither."""
        done = failed = 0
        for r, p in zip(results, params, strict=True):
            if r.error is not None:
                continue
            if r.state == _COMPLETED:
                done += 1
            elif p.kind is not _RELEASE:
                failed += 1
        self.workers.called(worker_id, completed=done, failed=failed)


_COMPLETED = int(State.COMPLETED)
_RELEASE = SettleKind.RELEASE
#: Result encoding labels a ``WorkerServicer`` keeps as checked, at most.
_LABELS_KEPT = 64
#: The wire code number of a refused result (the rejection catalogue's ResultTooLarge).
_RESULT_TOO_LARGE_CODE = RejectionCode.RESULT_TOO_LARGE.to_wire()


def _refusal_text(queue: str, size: int, limit: int) -> str:
    """The message of an ack refused for its result of ``size`` bytes (``limit``: the queue's
    max_result_bytes): what happened to the attempt, and how to raise the limit."""
    text = result_too_large_message(size, limit).removeprefix(f"{RejectionCode.RESULT_TOO_LARGE.value}: ")
    return text + queue_fix(queue, "max-result-bytes")


_ = pb  # re-exported proto module used in type hints above
