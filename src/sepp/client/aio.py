"""The asyncio producer client over a grpc.aio channel (same methods as ``Client``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sized
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from sepp import tracing
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import _core, _fastwire, _info, _many
from sepp.client._wait_methods import AsyncWaits
from sepp.client._workflow_methods import AsyncWorkflows
from sepp.client.auth import token_metadata
from sepp.client.options import ClientOptions
from sepp.client.tls import PathArg, with_tls
from sepp.client.watch import AsyncJobWatch, stream_method, watch_request
from sepp.errors import RejectedError, TransportError
from sepp.request import BatchResult, EnqueueAck, EnqueueRequest, Rejection, ServerInfo

if TYPE_CHECKING:
    from sepp._otel import Send


def _unsent(task: asyncio.Task[list[BatchResult]]) -> bool:
    """Whether the batch ``task`` sends provably never reached a server: it failed with an error
    that says so (``_many.provably_unsent``). A cancelled one may have been sent."""
    return task.done() and not task.cancelled() and _many.provably_unsent(task.exception())


class AsyncClient(AsyncWaits, AsyncWorkflows):
    """asyncio sepp producer client; every method of :class:`~sepp.Client`, awaited.

    ::

        async with AsyncClient("127.0.0.1:7700") as client:
            ack = await client.enqueue(EnqueueRequest("emails", "welcome"))

    The grpc.aio channel is created on first use inside the running event loop, so the
    client may be constructed anywhere; use it from that event loop only: a call from
    another loop (a second ``asyncio.run``, another thread's loop) raises ``RuntimeError``
    saying so (a grpc.aio channel cannot move between loops).

    Like :class:`~sepp.Client`, a first contact fails fast (``Unavailable``, ``not_sent``,
    e.g. ``connection refused: is sepp running on 127.0.0.1:7799?``) and a server restart
    after a call got through is waited out within ``ClientOptions.timeout``.

    Args:
        target: ``host:port`` of the server's gRPC listener (the forms of :class:`~sepp.Client`);
            ``None``: ``$SEPP_SERVER`` when set, else ``127.0.0.1:7700``.
        options: Timeouts, retries, local validation, TLS; defaults when ``None``.
        token: The secret of a token with role ``produce``, sent as ``authorization: Bearer``
            on every call; ``None`` reads ``$SEPP_TOKEN``, ``""`` sends none.
            Raises ``ValueError`` when it is not printable ASCII.
        tls_ca, tls_cert, tls_key: TLS from PEM files (``sepp.client.tls``): the CA
            the server's certificate must chain to, and the client's certificate and key for
            mutual TLS. A TLS failure (unknown CA, no client certificate) is ``Unavailable``.
        tracer_provider: An OpenTelemetry ``TracerProvider`` to record spans with; ``None``
            = the global one, if the application set one (see :meth:`sepp.Client`).

    Raises ``ValueError`` for a TLS file that cannot be read or used (one line, naming it),
    and for a ``target`` that is not ``HOST:PORT`` (as :class:`~sepp.Client`).
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
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self._lock: asyncio.Lock | None = None
        #: The event loop of the first call; the channel and the lock belong to it.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cached: _info.CachedInfo | None = None
        self._closed = False
        #: Whether a call of this client got an answer from a server (``_core.mark_reached``).
        self._reached = False

    # ------------------------------------------------------------ enqueue

    async def enqueue(self, request: EnqueueRequest) -> EnqueueAck:
        """Enqueue one job; see :meth:`sepp.Client.enqueue` (same errors)."""
        proto = _core.to_protos([request])[0]
        tracer = tracing.tracer(self.tracer_provider)
        send = None if tracer is None else tracer.send([request], batch=False)
        try:
            if self.options.validate_locally:
                rejection = (await self._validate_protos([proto]))[0]
                if rejection is not None:
                    raise RejectedError(rejection)
            message = proto if send is None else _core.with_trace(proto, send.carriers[0])
            response = await self._call("Enqueue", message, idempotent=bool(proto.idempotency_key))
            ack = EnqueueAck.from_proto(response)
        except BaseException as exc:
            if send is not None:
                send.fail(exc)
            raise
        if send is not None:
            send.done([ack])
        return ack

    async def enqueue_batch(self, requests: Iterable[EnqueueRequest]) -> list[BatchResult]:
        """Enqueue jobs best-effort; see :meth:`sepp.Client.enqueue_batch`."""
        # Plain requests are validated from a memo of their shape and a batch of only plain,
        # valid ones written as bytes (``_info.lean_batch``), as in Client.
        reqs = _info.check_requests(requests)
        tracer = tracing.tracer(self.tracer_provider) if reqs else None
        if tracer is None:
            return await self._enqueue_batch(reqs, None)
        send = tracer.send(reqs, batch=True)
        try:
            results = await self._enqueue_batch(reqs, send)
        except BaseException as exc:
            send.fail(exc)
            raise
        send.done(results)
        return results

    async def _enqueue_batch(self, reqs: list[EnqueueRequest], send: Send | None) -> list[BatchResult]:
        verdicts: list[Rejection | None] = [None] * len(reqs)
        if self.options.validate_locally:
            await self._check_batch_size(len(reqs))
            if send is None:
                # The common batch: every job plain and valid, written as bytes in one pass.
                wire = _info.lean_batch(await self._cached_info(), reqs)
                if wire is not None:
                    _many.check_size(len(wire), self.options, self.target)
                    return _core.merge_batch(verdicts, await self._call("EnqueueBatch", wire, idempotent=False))
            verdicts = await self._validate_requests(reqs)
            to_send = [r for r, v in zip(reqs, verdicts, strict=True) if v is None]
        else:
            to_send = reqs
        response = None
        if to_send or not self.options.validate_locally:
            message = _core.batch_message(to_send)
            if send is not None:
                _core.stamp_traces(message, send.sent(verdicts))
            _many.check_size(message.ByteSize(), self.options, self.target)
            response = await self._call("EnqueueBatch", message,
                                        idempotent=all(r.idempotency_key for r in to_send))
        return _core.merge_batch(verdicts, response)

    async def enqueue_many(self, requests: Iterable[EnqueueRequest], *, in_flight: int = 4,
                           progress: _many.Progress | None = None, on_batch: _many.OnBatch | None = None
                           ) -> list[BatchResult]:
        """Enqueue any number of jobs best-effort, ``in_flight`` batches of
        ``max_enqueue_batch`` at a time (a batch too large to send goes in parts), results in
        request order; see :meth:`sepp.Client.enqueue_many` (same arguments, callbacks —
        called on the event loop — and ``TransportError``).

        Cancelled (``task.cancel()``, ``asyncio.timeout``, Ctrl-C under ``asyncio.run``), it
        cancels the batches in flight at once (they may or may not be stored) and raises the
        ``CancelledError`` itself — not a subclass, which ``asyncio.timeout`` would not
        recognise — with a note (``add_note``: shown with its traceback) saying which requests
        were answered, which may be stored and which were never sent. The results of the
        answered ones are exactly those passed to ``on_batch``, the requests past them that
        the iterable yielded may or may not be stored, the rest were never sent. A
        ``KeyboardInterrupt`` raised in the loop itself becomes ``EnqueueInterrupted``, as in
        ``Client`` but without waiting for the batches in flight: its ``answered`` are those
        passed to the callbacks too (the batch answered just before the interruption is passed
        to them first, if they did not get it all). Any other exception (a callback's, the
        iterable's) cancels the batches in flight too and is raised as it is, with the same
        account as a note (``enqueue_many stopped: …``).
        """
        _many.check_in_flight(in_flight)
        total = len(requests) if isinstance(requests, Sized) else None
        run = _many.ManyRun()

        async def collect() -> None:
            results = await run.batches[0].handle  # it leaves ``batches`` once its results are in ``out``
            run.out.extend(results)
            run.batches.popleft()
            run.report(on_batch, progress, total)

        try:
            size = (await self._cached_info()).info.limits.max_enqueue_batch
            for chunk in _many.chunked(requests, size):
                if len(run.batches) >= in_flight:
                    await collect()
                task = asyncio.ensure_future(self._enqueue_part(chunk))
                run.batches.append(_many.Sent(run.handed, run.handed + len(chunk), task))
            run.exhausted = True
            while run.batches:
                await collect()
        except BaseException as exc:
            tasks = [sent.handle for sent in run.batches]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if isinstance(exc, TransportError):  # what was answered and what may be stored (Client.enqueue_many)
                run.account(exc, _unsent)
            elif isinstance(exc, asyncio.CancelledError):
                exc.add_note(run.cancelled_note(_unsent))
            elif isinstance(exc, KeyboardInterrupt):  # the batch answered just before it, if not reported yet
                try:
                    run.report(on_batch, progress, total)
                except Exception as error:
                    run.callbacks_failed(error)
                except KeyboardInterrupt:
                    pass
                raise run.interrupted(_unsent) from None
            elif (note := run.stopped_note(_unsent)) is not None:  # a callback's or the iterable's own
                exc.add_note(note)
            raise
        return run.out

    async def _enqueue_part(self, chunk: list[EnqueueRequest]) -> list[BatchResult]:
        """``enqueue_batch(chunk)``, in parts when it is too large to send (``Client._enqueue_part``)."""
        try:
            return await self.enqueue_batch(chunk)
        except _many.UnsentTooLarge:
            if len(chunk) < 2:
                raise
        out: list[BatchResult] = []
        for part in _many.split_by_size(chunk, self.options.max_message_bytes):
            try:
                out.extend(await self._enqueue_part(part))
            except TransportError as exc:  # the parts before it were answered (``answered``)
                exc.answered_after(out)
                raise
        return out

    async def enqueue_atomic(self, requests: Iterable[EnqueueRequest]) -> list[EnqueueAck]:
        """Enqueue jobs all-or-nothing; see :meth:`sepp.Client.enqueue_atomic`."""
        reqs = _info.check_requests(requests)
        protos = _core.to_protos(reqs)
        tracer = tracing.tracer(self.tracer_provider) if reqs else None
        send = None if tracer is None else tracer.send(reqs, batch=True)
        try:
            if self.options.validate_locally:
                await self._check_batch_size(len(protos))
                error = _info.atomic_local_error(await self._validate_protos(protos))
                if error is not None:
                    raise error
            message = ppb.EnqueueBatchRequest(jobs=protos)
            if send is not None:
                _core.stamp_traces(message, send.carriers)
            response = await self._call("EnqueueAtomic", message, idempotent=_core.all_keyed(protos))
            acks = _core.atomic_acks(response, len(protos))
        except BaseException as exc:
            if send is not None:
                send.fail(exc)
            raise
        if send is not None:
            send.done(acks)
        return acks

    # ------------------------------------------------------------ server info

    async def get_server_info(self, *, cached: bool = False) -> ServerInfo:
        """The server's version, features, modes and limits; see :meth:`sepp.Client.get_server_info`."""
        if cached:
            return (await self._cached_info()).info
        return await self.refresh_server_info()

    async def refresh_server_info(self) -> ServerInfo:
        """Fetch ``GetServerInfo`` now and replace the cached copy; return it."""
        async with self._get_lock():
            self._cached = await self._fetch_info()
            return self._cached.info

    async def validate(self, request: EnqueueRequest) -> Rejection | None:
        """The local verdict on ``request``; see :meth:`sepp.Client.validate`."""
        return (await self._validate_protos(_core.to_protos([request])))[0]

    # ------------------------------------------------------------ lifecycle

    def watch(self, *, queues: Iterable[str] = (), job_ids: Iterable[str] = (),
              job_types: Iterable[str] = ()) -> AsyncJobWatch:
        """Live job events, as :meth:`sepp.Client.watch`: ``async for event in client.watch(…)``;
        ``await watch.close()`` (or ``async with``) ends it. Raises ``TypeError`` for a filter
        given as one string; iterating raises the watch's end."""
        request = watch_request(queues, job_ids, job_types)
        self._get_stub()
        call = stream_method(self._channel)(request, metadata=self._metadata or None)
        return AsyncJobWatch(call, self.target)

    async def close(self) -> None:
        """Close the channel; calls in flight are cancelled. Closing twice is fine."""
        if not self._closed:
            self._closed = True
            if self._channel is not None:
                await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<AsyncClient {self.target} {state}>"

    # ------------------------------------------------------------ internals

    def _check_loop(self) -> None:
        """Raise ``RuntimeError`` when called from another event loop than the first call's."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError("this sepp AsyncClient belongs to the event loop it was first used on (a grpc.aio "
                               "channel cannot move between loops): make one AsyncClient per event loop")

    def _get_lock(self) -> asyncio.Lock:
        self._check_loop()
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def _get_stub(self) -> Any:
        if self._closed:
            raise RuntimeError("this sepp AsyncClient is closed")
        self._check_loop()
        if self._stub is None:
            channel_args = _core.channel_options(self.options)
            if self.options.credentials is not None:
                self._channel = grpc.aio.secure_channel(self.target, self.options.credentials,
                                                        options=channel_args)
            else:
                self._channel = grpc.aio.insecure_channel(self.target, options=channel_args)
            self._stub = _fastwire.producer_stub(self._channel)
        return self._stub

    async def _fetch_info(self) -> _info.CachedInfo:
        msg = await self._call("GetServerInfo", ppb.GetServerInfoRequest(), idempotent=True)
        return _info.CachedInfo.build(msg, self.options.clock)

    async def _cached_info(self) -> _info.CachedInfo:
        async with self._get_lock():
            if self._cached is None or not self._cached.fresh(self.options.server_info_ttl):
                self._cached = await self._fetch_info()
            return self._cached

    async def _check_batch_size(self, count: int) -> None:
        limit = (await self._cached_info()).info.limits.max_enqueue_batch
        rejection = _info.batch_size_rejection(count, limit)
        if rejection is not None:
            raise RejectedError(rejection)

    async def _validate_requests(self, reqs: list[EnqueueRequest]) -> list[Rejection | None]:
        cached = await self._cached_info()
        verdicts = _info.validate_requests(cached, reqs)
        if _info.needs_refresh(verdicts, cached):
            await self.refresh_server_info()
            verdicts = _info.validate_requests(await self._cached_info(), reqs)
        return verdicts

    async def _validate_protos(self, protos: list[Any]) -> list[Rejection | None]:
        cached = await self._cached_info()
        verdicts = _info.validate_all(cached, protos)
        if _info.needs_refresh(verdicts, cached):
            await self.refresh_server_info()
            verdicts = _info.validate_all(await self._cached_info(), protos)
        return verdicts

    async def _call(self, method_name: str, request: Any, *, idempotent: bool, extra_time: float = 0.0) -> Any:
        """Call the stub's ``method_name`` like ``Client._call``: every try has gRPC's
        ``wait_for_ready`` off, and a try that found no connection waits here for the
        channel's state to change (at most ``CONNECT_WAIT_MAX`` per wait) within the
        attempt's deadline, then is sent again — except on a first contact that shows
        nothing can be connected to at ``target``: that fails at once (``_core.first_contact``)."""
        method = getattr(self._get_stub(), method_name)
        options = self.options
        metadata = self._metadata or None
        attempt = 1
        maybe_sent = False  # whether an earlier try of this call may have reached a server
        deadline = _core.deadline(options, extra_time)
        timeout = _core.attempt_timeout(options, extra_time)
        while True:
            try:
                response = await method(request, timeout=timeout, metadata=metadata, wait_for_ready=False)
            except grpc.RpcError as exc:
                error = _core.error_from_rpc(exc, self.target)
                cause = exc
            else:
                if not self._reached:
                    self._reached = True
                    _core.mark_reached(self.target)
                return response
            self._reached = _core.after_failed_try(self._reached, error, cause, self.target, options)
            if _core.waits_for_connection(error, options):
                pause = _core.connect_pause(deadline, _core.CONNECT_WAIT_MAX, options.clock)
                if pause is not None:
                    await self._state_change(pause)
                    timeout = _core.time_left(deadline, options.clock)
                if pause is None or (timeout is not None and timeout < _core.MIN_ATTEMPT_TIME):
                    raise _core.no_connection(options, self.target, maybe_sent, cause) from cause
                continue
            maybe_sent = maybe_sent or not _core.not_sent(error)
            delay = _core.retry_delay(error, attempt, options, idempotent=idempotent)
            if delay is None:
                raise error from cause
            await asyncio.sleep(delay)
            attempt += 1
            deadline = _core.deadline(options, extra_time)
            timeout = _core.attempt_timeout(options, extra_time)

    async def _state_change(self, longest: float) -> None:
        """Wait until the channel's connectivity changes (it asks to connect), at most
        ``longest`` seconds; at once when it is READY already."""
        channel = self._channel
        assert channel is not None
        state = channel.get_state(try_to_connect=True)
        if state is grpc.ChannelConnectivity.READY:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(channel.wait_for_state_change(state), longest)
