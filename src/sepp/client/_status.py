"""gRPC status → sepp exception, and the channel arguments every sepp channel shares.

Split out of ``sepp.client._core`` (which re-exports all of it) so the ``Worker`` runtime
imports the one decoder of server answers without the producer's request types, validation
and pydantic models: a worker process starts a few hundred milliseconds sooner on a small
machine (docs/decisions.md "A worker imports no pydantic"). Keep this module's imports light:
``tests/unit/test_imports.py`` checks that ``import sepp.worker`` loads no pydantic.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

from sepp import wire
from sepp._version import __version__
from sepp.errors import (
    AdminRefused,
    AtomicEnqueueError,
    DeadlineExceeded,
    MessageTooLarge,
    Overloaded,
    PermissionDenied,
    RejectedError,
    SeppError,
    ServerError,
    TransportError,
    Unauthenticated,
    Unavailable,
    WatchBehind,
)
from sepp.rejections import ERROR_DOMAIN, Reason, RejectionCode

#: Sent as the primary user agent of every channel.
USER_AGENT = f"sepp-python/{__version__}"


#: Reconnect backoff of a client's channel, milliseconds: first retry after 100 ms, at most
#: 1 s between tries (gRPC's defaults are 1 s and 120 s, which outlast a server restart and
#: the client's deadline).
RECONNECT_BACKOFF_MS = (100, 1000)


def reconnect_options() -> list[tuple[str, Any]]:
    """The gRPC channel arguments of ``RECONNECT_BACKOFF_MS`` and a subchannel pool of the
    channel's own (so a new channel never inherits the backoff another channel to the same
    address is sitting in). Shared by the clients' channels and the ``Worker``'s."""
    first, most = RECONNECT_BACKOFF_MS
    return [
        ("grpc.initial_reconnect_backoff_ms", first),
        ("grpc.min_reconnect_backoff_ms", first),
        ("grpc.max_reconnect_backoff_ms", most),
        ("grpc.use_local_subchannel_pool", 1),
    ]


#: Statuses the admin client reports as ``AdminRefused`` (a deterministic refusal).
ADMIN_REFUSALS = frozenset({grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
                            grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ALREADY_EXISTS})
#: The auth statuses and the transport-family exception each becomes, from every
#: client; ``transient`` is false, so they are never retried.
AUTH_ERRORS: dict[grpc.StatusCode, type[TransportError]] = {
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated, grpc.StatusCode.PERMISSION_DENIED: PermissionDenied}


def error_from_rpc(exc: grpc.RpcError, target: str = "", *, admin: bool = False) -> SeppError:
    """Convert a gRPC error (sync or aio) into a sepp exception of the right family: the one
    decoder of ``Client``, ``AsyncClient``, ``Worker`` (``worker._rpc.convert_error``) and
    ``AdminClient`` (``admin=True``; see ``error_from_status``)."""
    code = exc.code() if callable(getattr(exc, "code", None)) else grpc.StatusCode.UNKNOWN
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    trailing = exc.trailing_metadata() if callable(getattr(exc, "trailing_metadata", None)) else None
    return error_from_status(code, details or "", trailing, target=target, admin=admin)


def error_from_status(code: grpc.StatusCode, details: str,
                      trailing: Iterable[tuple[str, str | bytes]] | None, *, target: str = "",
                      admin: bool = False) -> SeppError:
    """Classify a status (code, details, trailing metadata with ``grpc-status-details-bin``).
    Which reason becomes which exception is listed in ``sepp.rejections.REASONS``.

    * UNAUTHENTICATED → ``Unauthenticated``, PERMISSION_DENIED → ``PermissionDenied`` (the
      transport family, never retried; the server's message plus where to set the token)
    * ``admin`` and a status in ``ADMIN_REFUSALS`` → ``AdminRefused`` (an ``AdminError``;
      ``reason`` the ErrorInfo reason or the status name, ``metadata`` the ErrorInfo's)
    * ErrorInfo ``ATOMIC_BATCH_REJECTED`` + ``AtomicRejections`` → ``AtomicEnqueueError``
    * ErrorInfo reason = a catalogue code → ``RejectedError`` (the packed ``Rejection``
      detail when present, else rebuilt from the ErrorInfo metadata)
    * RESOURCE_EXHAUSTED + ``OVERLOADED`` → ``Overloaded`` (``retry_after`` from RetryInfo)
    * RESOURCE_EXHAUSTED + ``WATCH_BEHIND`` → ``WatchBehind`` (``behind`` from the metadata)
    * RESOURCE_EXHAUSTED without ErrorInfo → ``MessageTooLarge``
    * UNAVAILABLE, or CANCELLED by the server (shutdown) → ``Unavailable``;
      DEADLINE_EXCEEDED → ``DeadlineExceeded``
    * anything else → ``ServerError`` (with ``code`` and the ErrorInfo ``reason``)
    """
    status = wire.status_from_metadata(trailing)
    found = wire.unpack_details(status) if status is not None else {}
    info = found.get("error_info")
    if info is not None and info.domain not in (ERROR_DOMAIN, ""):
        info = None
    reason: str = info.reason if info is not None else ""
    message = (status.message if status is not None and status.message else details) or ""

    if code in AUTH_ERRORS:  # the transport family, whichever client (admin too)
        said = message or code.name
        return AUTH_ERRORS[code](f"{said}{'' if 'SEPP_TOKEN' in said else '; check --token / SEPP_TOKEN / token='}",
                                 code=code, reason=reason or code.name)
    if admin and code in ADMIN_REFUSALS:
        meta = dict(info.metadata) if info is not None else {}
        return AdminRefused(details or code.name, code=code, reason=reason or code.name, metadata=meta)
    if reason == Reason.ATOMIC_BATCH_REJECTED and "atomic" in found:
        from sepp.request import IndexedRejection  # lazily: a Worker never needs the producer types

        errors = [IndexedRejection.from_proto(r) for r in found["atomic"].rejections]
        if errors:
            count = info.metadata.get("count", "") if info is not None else ""
            return AtomicEnqueueError(errors, total=int(count) if count.isdigit() else None)
    if reason in RejectionCode.__members__:
        from sepp.request import Rejection

        if "rejection" in found:
            return RejectedError(Rejection.from_proto(found["rejection"]))
        catalogue = RejectionCode[reason]
        text = message.removeprefix(f"{catalogue.value}: ")
        return RejectedError(Rejection.from_proto(wire.rejection_from_error_info(info, text)))

    where = f" ({target})" if target else ""
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if reason == Reason.OVERLOADED:
            retry = found.get("retry_info")
            retry_after = wire.duration_to_seconds(retry.retry_delay) if retry is not None else None
            return Overloaded(message or None, retry_after=retry_after, code=code)
        if reason == Reason.WATCH_BEHIND:
            behind = info.metadata.get("behind", "") if info is not None else ""
            return WatchBehind(message or None, behind=int(behind) if behind.isdigit() else 0, code=code)
        if info is None:
            text = f"the request exceeds the gRPC message cap{where}: {details}" if details else None
            return MessageTooLarge(text, code=code)
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unavailable(f"server unavailable{where}: {details}" if details else None, code=code,
                           not_sent=never_sent(details))
    if code == grpc.StatusCode.CANCELLED:
        # The client did not cancel (that raises asyncio.CancelledError / is never classified)
        # and sepp's handlers never answer CANCELLED: gRPC core cancelled a call that reached
        # a server whose shutdown had begun before any handler took it (a handler still
        # running when the shutdown grace ends gets UNAVAILABLE "Cancelling all calls"
        # instead). So it was never processed: not_sent
        # (tests/integration/test_client_restart.py checks that no such call was stored).
        return Unavailable(f"the server cancelled the call while shutting down{where}", code=code,
                           not_sent=True)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(f"{DeadlineExceeded.__doc__}{where}" if where else None, code=code,
                                reason=reason)
    text = f"{code.name}{where}: {message}" if message else f"{code.name}{where}"
    return ServerError(text, code=code, reason=reason)


#: What gRPC core says in an UNAVAILABLE when the call got no connection at all — the
#: channel's pick failed ("failed to connect to all addresses; last error: ...") or the name
#: did not resolve ("errors resolving NAME: ..." in gRPC 1.6x, "DNS resolution failed"
#: before): it was never written to any server (lower-case substrings of the status
#: details). A call that was on a connection when it broke says "Stream removed", "Socket
#: closed", "Connection reset by peer" or "GOAWAY received" instead.
_NOT_SENT = ("failed to connect", "connection refused", "connect failed", "no route to host",
             "network is unreachable", "dns resolution failed", "errors resolving")


def never_sent(details: str) -> bool:
    """Whether an ``UNAVAILABLE`` with these status details provably never reached a server
    (no connection could be made), so it may be sent again without an idempotency key."""
    text = details.lower()
    return any(marker in text for marker in _NOT_SENT)
