"""The worker's side of ``sepp.api.v1.WorkerService`` over one grpc.aio channel.

Converts ``grpc.RpcError`` into sepp exceptions: lease refusals become
``LeaseError``; everything else goes through the producer client's converter, so a
transport failure is the same ``TransportError`` family on both sides (transient
ones have ``.transient = True``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio

from sepp.api.v1 import worker_pb2 as wpb
from sepp.api.v1 import worker_pb2_grpc
from sepp.client._status import USER_AGENT, error_from_rpc, reconnect_options
from sepp.client.target import first_contact_error, mark_reached, reached_a_server, rpc_details
from sepp.errors import SeppError, ServerError
from sepp.wire import seconds_to_duration
from sepp.worker.errors import LEASE_REASONS, LeaseError

#: Channel arguments: reservations may carry many large payloads, so receive without a cap
#: (the server bounds what it sends by its own max_message_bytes). The reconnect backoff is
#: the clients' (100 ms, at most 1 s between tries, and a subchannel pool of the channel's
#: own; ``sepp.client._core.reconnect_options``): gRPC's default, 1 s growing to 120 s, kept
#: a worker pinned to a restarted node idle for seconds to minutes after it was back.
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.primary_user_agent", USER_AGENT),
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.keepalive_time_ms", 30_000),
    *reconnect_options(),
]


def convert_error(exc: grpc.RpcError, target: str, job_id: str = "") -> SeppError:
    """A worker call's gRPC error as a sepp exception (``LeaseError`` for lease refusals)."""
    err = error_from_rpc(exc, target)
    if isinstance(err, ServerError) and err.reason in LEASE_REASONS:
        return LeaseError(err.reason, job_id, err.message)
    return err


#: What the Worker runtime reports as its client on Reserve (the Workers page).
CLIENT_VERSION = USER_AGENT


class WorkerRpc:
    """Reserve, settle, extend and stop reserving over a lazily opened grpc.aio channel to ``target``
    (TLS with ``credentials``); ``metadata`` goes with every call (the token)."""

    def __init__(self, target: str, channel_options: Sequence[tuple[str, Any]] = (), *,
                 credentials: grpc.ChannelCredentials | None = None, metadata: Sequence[tuple[str, str]] = (),
                 worker_id: str = "", concurrency: int = 0) -> None:
        self.target = target
        self._credentials = credentials
        #: Sent with every call: the token's ``authorization`` entry, if any.
        self._metadata = tuple(metadata) or None
        #: Sent with every call for the server's Workers page: who calls, and on
        #: Reserve its handler slots, host and client version.
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.host = socket.gethostname()
        self._options = [*CHANNEL_OPTIONS, *channel_options]
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        #: Whether a call got an answer from a server (``sepp.client.target.mark_reached``).
        self._reached = False

    def _get_stub(self) -> Any:
        if self._stub is None:
            if self._credentials is not None:
                self._channel = grpc.aio.secure_channel(self.target, self._credentials, options=self._options)
            else:
                self._channel = grpc.aio.insecure_channel(self.target, options=self._options)
            self._stub = worker_pb2_grpc.WorkerServiceStub(self._channel)
        return self._stub

    def answered(self) -> None:
        """Note that a call got an answer from the server at ``target`` (``mark_reached``)."""
        if not self._reached:
            self._reached = True
            mark_reached(self.target)

    def convert(self, exc: grpc.RpcError) -> SeppError:
        """``convert_error`` of a failed ``Reserve``: on a first contact with nothing at
        ``target`` (this process never reached it) the ``Unavailable`` that names the cause —
        ``connection refused: is sepp running on …?`` — for the worker's log; the worker keeps
        trying all the same (docs/decisions.md "A first contact fails fast")."""
        error = convert_error(exc, self.target)
        if not self._reached:
            if reached_a_server(error):
                self.answered()
            else:
                return first_contact_error(error, rpc_details(exc), self.target,
                                           tls=self._credentials is not None) or error
        return error

    def reserve_call(self, queues: Sequence[str], max_jobs: int, wait: float, worker_id: str,
                     lease_duration: float | None) -> Any:
        """Start a ``Reserve`` and return the call object (await it; ``cancel()`` it).

        The call's deadline is ``wait`` plus 10 s of slack.
        """
        req = wpb.ReserveRequest(queues=list(queues), max_jobs=max_jobs, worker_id=worker_id,
                                 concurrency=self.concurrency, client_version=CLIENT_VERSION, host=self.host)
        if wait > 0:
            req.wait.CopyFrom(seconds_to_duration(wait))
        if lease_duration is not None:
            req.lease_duration.CopyFrom(seconds_to_duration(lease_duration))
        return self._get_stub().Reserve(req, timeout=wait + 10.0, metadata=self._metadata)

    async def settle(self, request: wpb.SettleRequest) -> list[wpb.SettleResult]:
        """One batched ``Settle`` (deadline 30 s); one result per item, in order.

        Raises a ``TransportError`` (or ``ServerError`` for a count mismatch).
        """
        if self.worker_id and not request.worker_id:
            request.worker_id = self.worker_id
        try:
            resp = await self._get_stub().Settle(request, timeout=30.0, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise convert_error(exc, self.target) from None
        if len(resp.results) != len(request.items):
            raise ServerError(f"the server answered {len(resp.results)} results for {len(request.items)} items")
        return list(resp.results)

    async def extend(self, job_id: str, lease_id: str, extend_by: float, *,
                     progress: str | None = None) -> wpb.ExtendLeaseResponse:
        """``ExtendLease`` (deadline 10 s): new expiry = server now + ``extend_by`` seconds;
        ``progress`` (JSON text) is stored with it.

        Raises ``LeaseError`` when the lease no longer holds, else a ``TransportError``.
        """
        req = wpb.ExtendLeaseRequest(job_id=job_id, lease_id=lease_id,
                                     extend_by=seconds_to_duration(extend_by), worker_id=self.worker_id)
        if progress is not None:
            req.progress = progress
        try:
            return await self._get_stub().ExtendLease(req, timeout=10.0, metadata=self._metadata)  # type: ignore[no-any-return]
        except grpc.RpcError as exc:
            raise convert_error(exc, self.target, job_id) from None

    async def dependency_outcomes(self, job_id: str, lease_id: str, offset: int) -> wpb.DependencyOutcomesResponse:
        """``DependencyOutcomes`` (deadline 30 s): the outcomes of the jobs ``job_id`` depends
        on, from position ``offset`` of its ``depends_on``, for the holder of ``lease_id``.

        Raises ``LeaseError`` when the lease no longer holds (or the job is gone), else a
        ``TransportError`` (``ServerError`` UNIMPLEMENTED from a server older than the call).
        """
        req = wpb.DependencyOutcomesRequest(job_id=job_id, lease_id=lease_id, offset=offset)
        try:
            return await self._get_stub().DependencyOutcomes(req, timeout=30.0,  # type: ignore[no-any-return]
                                                             metadata=self._metadata)
        except grpc.RpcError as exc:
            raise convert_error(exc, self.target, job_id) from None

    async def stop_reserving(self, worker_id: str, deadline_s: float = 2.0, *, stopped: bool = False) -> int | None:
        """``StopReserving`` (deadline ``deadline_s`` seconds): the server ends the
        long-polls of ``worker_id``'s Reserves in progress; ``stopped``: the worker's session is
        over (its last call; the Workers page lists it stopped). Returns how many it stopped, or
        ``None`` when the server does not know the call (UNIMPLEMENTED: a server older than
        it). Raises a ``TransportError``, or ``RejectedError`` (``InvalidArgument``, field
        ``worker_id``) for an empty ``worker_id``."""
        req = wpb.StopReservingRequest(worker_id=worker_id, stopped=stopped)
        try:
            resp = await self._get_stub().StopReserving(req, timeout=deadline_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return None
            raise convert_error(exc, self.target) from None
        return int(resp.woken)

    async def pause(self, seconds: float) -> None:
        """Wait ``seconds`` before a call that failed is tried again — less when the channel has
        no connection: then only until it has one again (gRPC's reconnect backoff, 100 ms to
        1 s, paces the tries). A call that failed on a connected channel was answered by a
        server (an error of its own) and waits out the whole pause."""
        channel = self._channel
        if channel is None:
            await asyncio.sleep(seconds)
            return
        state = channel.get_state(try_to_connect=True)
        if state is grpc.ChannelConnectivity.READY:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while state is not grpc.ChannelConnectivity.READY:
                    await channel.wait_for_state_change(state)
                    state = channel.get_state(try_to_connect=True)

    @property
    def connected(self) -> bool:
        """Whether the channel holds a connection right now (READY; no new attempt is made)."""
        channel = self._channel
        return channel is not None and channel.get_state() is grpc.ChannelConnectivity.READY

    async def close(self) -> None:
        """Close the channel (idempotent)."""
        if self._channel is not None:
            channel, self._channel, self._stub = self._channel, None, None
            await channel.close()


__all__ = ["CHANNEL_OPTIONS", "WorkerRpc", "convert_error"]
