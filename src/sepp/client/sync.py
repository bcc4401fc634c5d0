"""The blocking producer client over a grpc channel (same methods as ``AsyncClient``)."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterable, Sized
from concurrent.futures import Future
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc

from sepp import tracing
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import _core, _fastwire, _info, _many, _sync_many
from sepp.client._wait_methods import SyncWaits
from sepp.client._workflow_methods import SyncWorkflows
from sepp.client.auth import token_metadata
from sepp.client.options import ClientOptions
from sepp.client.tls import PathArg, with_tls
from sepp.client.watch import JobWatch, stream_method, watch_request
from sepp.errors import RejectedError, TransportError
from sepp.request import BatchResult, EnqueueAck, EnqueueRequest, Rejection, ServerInfo

if TYPE_CHECKING:
    from sepp._otel import Send


class Client(SyncWaits, SyncWorkflows):
    """Blocking sepp producer client.

    ::

        with Client("127.0.0.1:7700") as client:
            ack = client.enqueue(EnqueueRequest("emails", "welcome"))

    The channel connects lazily, so constructing a client never fails on the network.
    A client is safe to share between threads.

    The first contact fails fast: when this process never reached a server at ``target``
    and nothing there can be connected to (refused, no such host, sepp's HTTP port, a
    failed TLS handshake), a call raises :class:`~sepp.errors.Unavailable` (``not_sent``)
    at once, naming the address and the cause (``connection refused: is sepp running on
    127.0.0.1:7799?``). Once a call reached the server, a server restart is ridden out: a
    call that finds no connection waits for one within its ``timeout``
    (``ClientOptions.wait_for_ready``, ``ClientOptions.wait_for_server_start``).

    With ``validate_locally`` (the default) the first enqueue fetches ``GetServerInfo`` once
    and checks every request against the advertised limits before sending.

    Every method raises :class:`~sepp.errors.RejectedError` for a deterministic refusal
    (local or from the server) and :class:`~sepp.errors.TransportError` when no verdict
    was reached (after the retries the :class:`RetryPolicy` allows).

    Waiting for jobs (``result``, ``wait``, ``as_completed``: ``SyncWaits``) needs a token
    with role ``produce`` or ``admin``.

    Args:
        target: ``host:port`` of the server's gRPC listener (``grpc://`` or ``http://`` before
            it is accepted and removed; ``grpcs://`` / ``https://`` only with TLS configured;
            gRPC's own ``ipv4:…`` / ``dns:///…`` forms pass as they are: ``sepp.client.target``).
            ``None`` (not given): ``$SEPP_SERVER`` when set, else ``127.0.0.1:7700``; a target
            given always wins over the variable.
        options: Timeouts, retries, local validation, TLS; defaults when ``None``.
        token: The secret of a token with role ``produce``, sent as ``authorization: Bearer``
            on every call; ``None`` reads ``$SEPP_TOKEN``, ``""`` sends none.
            Raises ``ValueError`` when it is not printable ASCII.
        tls_ca, tls_cert, tls_key: TLS from PEM files (``sepp.client.tls``): the CA
            the server's certificate must chain to, and the client's certificate and key for
            mutual TLS. A TLS failure (unknown CA, no client certificate) is ``Unavailable``.
        tracer_provider: An OpenTelemetry ``TracerProvider`` to record spans with
            (``pip install sepp[otel]``); ``None`` = the global one, used only once the
            application set one. Each enqueue then records a producer span and sends its
            context as the job's ``trace_context`` when the request has none
            (``sepp._otel``, docs/operations.md "Tracing"). Without it nothing is recorded
            and OpenTelemetry is not imported.

    Raises ``ValueError`` for a TLS file that cannot be read or used (one line, naming it),
    and for a ``target`` with a URL path, a prefixed one without a port, or ``https://``
    without TLS configured (one line naming the expected ``HOST:PORT``).
    """

    def __init__(self, target: str | None = None, *, options: ClientOptions | None = None,
                 token: str | None = None, tls_ca: PathArg | None = None, tls_cert: PathArg | None = None,
                 tls_key: PathArg | None = None, tracer_provider: Any = None) -> None:
        self.options = with_tls(options or ClientOptions(), tls_ca, tls_cert, tls_key)
        #: The address dialled: ``target`` without a ``grpc://`` / ``http://`` prefix.
        self.target = _core.client_target(target, self.options)
        #: ``options.metadata`` plus the token's ``authorization`` entry.
        self._metadata = (*self.options.metadata, *token_metadata(token))
        #: The OpenTelemetry ``TracerProvider`` of this client's spans; ``None`` = the global one.
        self.tracer_provider = tracer_provider
        channel_args = _core.channel_options(self.options)
        if self.options.credentials is not None:
            self._channel = grpc.secure_channel(self.target, self.options.credentials, options=channel_args)
        else:
            self._channel = grpc.insecure_channel(self.target, options=channel_args)
        self._stub: Any = _fastwire.producer_stub(self._channel)
        self._lock = threading.Lock()
        self._cached: _info.CachedInfo | None = None
        self._closed = False
        #: Whether a call of this client got an answer from a server (``_core.mark_reached``).
        self._reached = False

    # ------------------------------------------------------------ enqueue

    def enqueue(self, request: EnqueueRequest) -> EnqueueAck:
        """Enqueue one job; return once it is durably stored (or deduplicated).

        Raises:
            RejectedError: the request breaks a catalogue rule (``.rejection`` says which).
            TransportError: no verdict (``Unavailable``, ``DeadlineExceeded``,
                ``Overloaded``, ``MessageTooLarge``, ``ServerError``).
            TypeError: ``request`` is not an ``EnqueueRequest``.
        """
        proto = _core.to_protos([request])[0]
        tracer = tracing.tracer(self.tracer_provider)
        send = None if tracer is None else tracer.send([request], batch=False)
        try:
            if self.options.validate_locally:
                rejection = self._validate_protos([proto])[0]
                if rejection is not None:
                    raise RejectedError(rejection)
            message = proto if send is None else _core.with_trace(proto, send.carriers[0])
            response = self._call(self._stub.Enqueue, message, idempotent=bool(proto.idempotency_key))
            ack = EnqueueAck.from_proto(response)
        except BaseException as exc:
            if send is not None:
                send.fail(exc)
            raise
        if send is not None:
            send.done([ack])
        return ack

    def enqueue_batch(self, requests: Iterable[EnqueueRequest]) -> list[BatchResult]:
        """Enqueue 1..``max_enqueue_batch`` jobs best-effort, in one round trip.

        Returns one result per job in request order: an :class:`EnqueueAck` or the
        job's :class:`Rejection`. Jobs rejected locally are not sent.

        Raises:
            RejectedError: the batch as a whole is empty or over the cap
                (``InvalidArgument``, field ``jobs``).
            TransportError: no verdict; then nothing is known about any job. A batch larger
                than ``ClientOptions.max_message_bytes`` is ``MessageTooLarge`` before it is
                sent (nothing was; :meth:`enqueue_many` splits such a batch).
        """
        # Plain requests are validated from a memo of their shape (``_info.validate_requests``);
        # a batch of only plain, valid ones is written as bytes in the same pass (``lean_batch``).
        reqs = _info.check_requests(requests)
        tracer = tracing.tracer(self.tracer_provider) if reqs else None
        if tracer is None:
            return self._enqueue_batch(reqs, None)
        send = tracer.send(reqs, batch=True)
        try:
            results = self._enqueue_batch(reqs, send)
        except BaseException as exc:
            send.fail(exc)
            raise
        send.done(results)
        return results

    def _enqueue_batch(self, reqs: list[EnqueueRequest], send: Send | None) -> list[BatchResult]:
        verdicts: list[Rejection | None] = [None] * len(reqs)
        if self.options.validate_locally:
            self._check_batch_size(len(reqs))
            if send is None:
                # The common batch: every job plain and valid, written as bytes in one pass.
                wire = _info.lean_batch(self._cached_info(), reqs)
                if wire is not None:
                    _many.check_size(len(wire), self.options, self.target)
                    return _core.merge_batch(verdicts, self._call(self._stub.EnqueueBatch, wire, idempotent=False))
            verdicts = self._validate_requests(reqs)
            to_send = [r for r, v in zip(reqs, verdicts, strict=True) if v is None]
        else:
            to_send = reqs
        response = None
        if to_send or not self.options.validate_locally:
            message = _core.batch_message(to_send)
            if send is not None:
                _core.stamp_traces(message, send.sent(verdicts))
            _many.check_size(message.ByteSize(), self.options, self.target)
            response = self._call(self._stub.EnqueueBatch, message,
                                  idempotent=all(r.idempotency_key for r in to_send))
        return _core.merge_batch(verdicts, response)

    def enqueue_many(self, requests: Iterable[EnqueueRequest], *, in_flight: int = 4,
                     progress: _many.Progress | None = None, on_batch: _many.OnBatch | None = None
                     ) -> list[BatchResult]:
        """Enqueue any number of jobs best-effort: ``requests`` (any iterable, read lazily) is
        cut into batches of the server's ``max_enqueue_batch``, sent with up to ``in_flight``
        batches in flight (each an :meth:`enqueue_batch`, with its local validation and
        retries), and every job's result comes back in request order.
        A batch larger than ``ClientOptions.max_message_bytes`` (big payloads) is not sent
        as it is but in parts that fit (``_many.split_by_size``); set the option to the
        server's ``max_message_bytes`` when that is smaller than the default.

        After each batch is answered (a batch sent in parts: once all are), in request order,
        from the calling thread: ``on_batch(start, results)``, if given — ``start`` the index
        of the batch's first request, ``results`` its results in order — then
        ``progress(done, total)``, if given — ``done`` jobs answered so far (acked or
        rejected), ``total`` = ``len(requests)`` when it has one, else ``None``. An exception
        a callback raises stops the run like a transport error's (the batches in flight are
        waited for) and is raised as it is.

        Raises:
            TransportError: a batch got no verdict (``MessageTooLarge``: one job alone is
                larger than ``max_message_bytes``). Batches already sent are waited for
                first. ``answered`` holds the results of the requests before the first one
                without a verdict (a prefix, in order: the ids to keep), ``maybe_stored`` the
                range of the requests that may or may not be stored (sent, no verdict; no key:
                not retried, as for enqueue_batch), and the requests from
                ``maybe_stored.stop`` on were never sent; the message says the same.
            EnqueueInterrupted: a ``KeyboardInterrupt`` (Ctrl-C) came while it ran. It waits
                up to ``ClientOptions.interrupt_grace`` seconds (a second Ctrl-C: no longer)
                for the verdicts of the batches in flight, passing each one answered to
                ``on_batch`` and ``progress`` as before, in order, then raises this
                ``KeyboardInterrupt`` with the same ``answered`` and ``maybe_stored``: the
                results passed to ``on_batch`` are exactly ``answered`` (a batch sent in
                parts may be passed cut short, its answered parts). Unless a callback raised
                during that wait (it is not called again: a note on the exception says so) or
                a second Ctrl-C came (no callback after it): then ``answered[done:]`` holds
                what they did not see, ``done`` the last count ``progress`` got. Batches still
                in flight then go on in the background until answered or until the client is
                closed (which cancels them).
            ValueError: ``in_flight`` < 1.
            TypeError: an item is not an ``EnqueueRequest``.

        Any other exception (a callback's, the iterable's, that ``TypeError``) is raised as it
        is once the batches in flight are done, with a note (``add_note``: shown in its
        traceback) saying which requests were answered (passed to ``on_batch``), which may be
        stored (the batches in flight: their results are not passed on) and which were never
        sent.
        """
        _many.check_in_flight(in_flight)
        total = len(requests) if isinstance(requests, Sized) else None
        run = _many.ManyRun()
        senders = _sync_many.Senders(in_flight)
        report = partial(run.report, on_batch, progress, total)
        try:
            size = self._cached_info().info.limits.max_enqueue_batch
            for chunk in _many.chunked(requests, size):
                if len(run.batches) >= in_flight:
                    _sync_many.collect(run, progress, on_batch, total)
                start = run.handed
                sent = _many.Sent(start, start + len(chunk), Future())
                run.batches.append(sent)  # known before it is handed over: a Ctrl-C from here on finds it
                # each batch runs in the caller's context (its current span: tracing)
                senders.submit(sent.handle, partial(contextvars.copy_context().run, self._enqueue_part, chunk))
            run.exhausted = True
            while run.batches:
                _sync_many.collect(run, progress, on_batch, total)
        except KeyboardInterrupt:
            options = self.options
            raise _sync_many.interrupted(run, senders, report, options.clock, options.interrupt_grace) from None
        except BaseException as exc:
            try:
                for sent in run.batches:
                    sent.handle.cancel()  # those not started yet are never sent
                _sync_many.wait_done([sent.handle for sent in run.batches])
            except KeyboardInterrupt:  # Ctrl-C while the batches in flight are waited for
                senders.stop()
                raise run.interrupted(_sync_many.unsent) from None
            senders.stop()
            if isinstance(exc, TransportError):  # what was answered and what may be stored, in order
                run.account(exc, _sync_many.unsent)
            elif (note := run.stopped_note(_sync_many.unsent)) is not None:  # a callback's or the iterable's own
                exc.add_note(note)
            raise
        senders.stop()
        return run.out

    def _enqueue_part(self, chunk: list[EnqueueRequest]) -> list[BatchResult]:
        """``enqueue_batch(chunk)``; a chunk too large to send (``UnsentTooLarge``: nothing was
        sent) goes in parts instead, their results concatenated (order kept)."""
        try:
            return self.enqueue_batch(chunk)
        except _many.UnsentTooLarge:
            if len(chunk) < 2:
                raise
        out: list[BatchResult] = []
        for part in _many.split_by_size(chunk, self.options.max_message_bytes):
            try:
                out.extend(self._enqueue_part(part))
            except TransportError as exc:  # the parts before it were answered (enqueue_many's ``answered``)
                exc.answered_after(out)
                raise
        return out

    def enqueue_atomic(self, requests: Iterable[EnqueueRequest]) -> list[EnqueueAck]:
        """Enqueue 1..``max_enqueue_batch`` jobs all-or-nothing; return every ack in order.

        A deduplicated job counts as a success (its ack says ``deduplicated``).

        Raises:
            AtomicEnqueueError: one or more jobs were refused; ``.errors`` lists every
                ``(index, rejection)`` and nothing was enqueued.
            RejectedError: the batch is empty or over the cap.
            TransportError: no verdict.
        """
        reqs = _info.check_requests(requests)
        protos = _core.to_protos(reqs)
        tracer = tracing.tracer(self.tracer_provider) if reqs else None
        send = None if tracer is None else tracer.send(reqs, batch=True)
        try:
            if self.options.validate_locally:
                self._check_batch_size(len(protos))
                error = _info.atomic_local_error(self._validate_protos(protos))
                if error is not None:
                    raise error
            message = ppb.EnqueueBatchRequest(jobs=protos)
            if send is not None:
                _core.stamp_traces(message, send.carriers)
            response = self._call(self._stub.EnqueueAtomic, message, idempotent=_core.all_keyed(protos))
            acks = _core.atomic_acks(response, len(protos))
        except BaseException as exc:
            if send is not None:
                send.fail(exc)
            raise
        if send is not None:
            send.done(acks)
        return acks

    # ------------------------------------------------------------ server info

    def get_server_info(self, *, cached: bool = False) -> ServerInfo:
        """The server's version, features, modes and limits.

        With ``cached=True`` the copy local validation uses is returned (fetched if
        absent or older than ``server_info_ttl``); otherwise it is fetched now and
        replaces that copy.

        Raises:
            TransportError: the server could not be asked.
        """
        if cached:
            return self._cached_info().info
        return self.refresh_server_info()

    def refresh_server_info(self) -> ServerInfo:
        """Fetch ``GetServerInfo`` now and replace the cached copy; return it."""
        with self._lock:
            self._cached = self._fetch_info()
            return self._cached.info

    def validate(self, request: EnqueueRequest) -> Rejection | None:
        """The local verdict on ``request`` against the advertised limits, without sending.

        Returns the :class:`Rejection` the server would give, or ``None``.
        Raises ``TransportError`` if ``ServerInfo`` must be fetched and cannot be.
        """
        return self._validate_protos(_core.to_protos([request]))[0]

    # ------------------------------------------------------------ lifecycle

    def watch(self, *, queues: Iterable[str] = (), job_ids: Iterable[str] = (),
              job_types: Iterable[str] = ()) -> JobWatch:
        """Live job events: an iterator of :class:`~sepp.client.watch.JobEvent`, one per state
        change (enqueued, promoted, reserved, progress, completed, retry_scheduled,
        dead_lettered, cancelled, requeued) of the jobs the filters select — every filter
        given must hold, an empty one means any — on any node sharing the server's store,
        from when the server accepted the watch on.

        ::

            with client.watch(queues=["emails"]) as events:
                for event in events:
                    print(event.kind, event.job_id, event.state)

        At-most-once and live (docs/decisions.md "Live job events"): nothing is replayed,
        and a consumer slower than the server's buffer (``watch_buffer`` events) is cut off
        with :class:`~sepp.errors.WatchBehind`; a server that stops ends it with
        ``Unavailable``. Watch again and read the jobs' state for what happened between. For
        a job's outcome use its stored state, not the events. ``close()`` ends the watch.

        Raises ``TypeError`` for a filter given as one string; iterating raises the
        watch's end (``RejectedError`` for bad filters: at most 1,000 job ids, 100 queues,
        100 job types).
        """
        if self._closed:
            raise RuntimeError("this sepp Client is closed")
        request = watch_request(queues, job_ids, job_types)
        call = stream_method(self._channel)(request, metadata=self._metadata or None)
        return JobWatch(call, self.target)

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled and raise ``RuntimeError`` (they
        may or may not have been stored; later calls raise it too). Closing twice is fine."""
        if not self._closed:
            self._closed = True
            self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Client {self.target} {state}>"

    # ------------------------------------------------------------ internals

    def _fetch_info(self) -> _info.CachedInfo:
        msg = self._call(self._stub.GetServerInfo, ppb.GetServerInfoRequest(), idempotent=True)
        return _info.CachedInfo.build(msg, self.options.clock)

    def _cached_info(self) -> _info.CachedInfo:
        with self._lock:
            if self._cached is None or not self._cached.fresh(self.options.server_info_ttl):
                self._cached = self._fetch_info()
            return self._cached

    def _check_batch_size(self, count: int) -> None:
        rejection = _info.batch_size_rejection(count, self._cached_info().info.limits.max_enqueue_batch)
        if rejection is not None:
            raise RejectedError(rejection)

    def _validate_requests(self, reqs: list[EnqueueRequest]) -> list[Rejection | None]:
        cached = self._cached_info()
        verdicts = _info.validate_requests(cached, reqs)
        if _info.needs_refresh(verdicts, cached):
            self.refresh_server_info()
            verdicts = _info.validate_requests(self._cached_info(), reqs)
        return verdicts

    def _validate_protos(self, protos: list[Any]) -> list[Rejection | None]:
        cached = self._cached_info()
        verdicts = _info.validate_all(cached, protos)
        if _info.needs_refresh(verdicts, cached):
            self.refresh_server_info()
            verdicts = _info.validate_all(self._cached_info(), protos)
        return verdicts

    def _call(self, method: Any, request: Any, *, idempotent: bool, extra_time: float = 0.0) -> Any:
        """Call ``method`` with the client's metadata and deadline, waiting for the connection
        and retrying per ``options`` (``_core.waits_for_connection``, ``_core.retry_delay``).

        Each gRPC try is sent with gRPC's ``wait_for_ready`` off, so a try that finds no
        connection fails at once and provably unsent; this loop waits (sleeping
        ``CONNECT_POLL`` between tries) within the attempt's deadline instead — unlike
        gRPC's own wait, a deadline spent that way is known to have sent nothing. Except on
        the first contact: when this process never reached a server at ``target`` and the
        try shows that nothing there can be connected to, the call fails at once
        (``_core.first_contact``; ``ClientOptions.wait_for_server_start``).
        """
        if self._closed:
            raise RuntimeError("this sepp Client is closed")
        options = self.options
        metadata = self._metadata or None
        attempt = 1
        maybe_sent = False  # whether an earlier try of this call may have reached a server
        deadline = _core.deadline(options, extra_time)
        timeout = _core.attempt_timeout(options, extra_time)
        while True:
            try:
                response = method(request, timeout=timeout, metadata=metadata, wait_for_ready=False)
            except grpc.RpcError as exc:
                if self._closed:  # close() cancelled it: neither retried nor "never sent"
                    raise RuntimeError("this sepp Client was closed while the call was in flight; "
                                       "it may or may not have been stored") from exc
                error = _core.error_from_rpc(exc, self.target)
                cause = exc
            else:
                if not self._reached:
                    self._reached = True
                    _core.mark_reached(self.target)
                return response
            self._reached = _core.after_failed_try(self._reached, error, cause, self.target, options)
            if _core.waits_for_connection(error, options):
                pause = _core.connect_pause(deadline, _core.CONNECT_POLL, options.clock)
                if pause is not None:
                    time.sleep(pause)
                    timeout = _core.time_left(deadline, options.clock)
                if pause is None or (timeout is not None and timeout < _core.MIN_ATTEMPT_TIME):
                    raise _core.no_connection(options, self.target, maybe_sent, cause) from cause
                continue
            maybe_sent = maybe_sent or not _core.not_sent(error)
            delay = _core.retry_delay(error, attempt, options, idempotent=idempotent)
            if delay is None:
                raise error from cause
            time.sleep(delay)
            attempt += 1
            deadline = _core.deadline(options, extra_time)
            timeout = _core.attempt_timeout(options, extra_time)
