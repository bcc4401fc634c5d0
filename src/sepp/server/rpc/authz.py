"""Tokens and roles on every gRPC service: the server interceptor ``Authorize``.

Each sepp service needs one role: ``sepp.api.v1.ProducerService`` (``GetServerInfo`` is in
it) ``produce``, ``WorkerService`` ``work``, ``AdminService`` ``admin``; a method in
``METHOD_ROLES`` takes more (``WaitJobs``, ``WatchJobs``: ``produce`` or ``admin``). gRPC health and
reflection (and any method that is not sepp's) stay open. A call presents its token as the
metadata ``authorization: Bearer <secret>``; the ``Authenticator`` hashes it and compares the
digest with the configured ones in constant time.

* no token, or one that is not configured → ``UNAUTHENTICATED``, ErrorInfo reason
  ``UNAUTHENTICATED`` (metadata ``role``, ``method``); an ``authorization`` entry that is
  not ``Bearer <token>`` (the secret alone, another scheme) is told so, counted ``missing``;
* a configured token without the role → ``PERMISSION_DENIED``, reason ``PERMISSION_DENIED``
  (metadata ``role``, ``method``, ``token``: its name).

Neither is ever a rejection (no per-job verdict: nothing was looked at). Each failure is
counted on the authenticator (``missing``, ``unknown``, ``forbidden``) and logged on
``sepp.auth``, rate-limited, and — given ``observe`` — timed in ``sepp_rpc_duration_seconds``
with its code (``UNAUTHENTICATED``, ``PERMISSION_DENIED``): the timing interceptor behind this
one never sees a refused call. A denied call is answered before its request is decoded.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.rpc import code_pb2

from sepp import wire
from sepp.api.v1 import admin_pb2, producer_pb2, worker_pb2
from sepp.rejections import Reason
from sepp.server.auth import Authenticator, bearer, malformed_authorization
from sepp.server.rpc.status import abort_with
from sepp.server.rpc.timing import Observe, code_name

#: The role each sepp service needs (full service name → role).
SERVICE_ROLES: dict[str, str] = {
    producer_pb2.DESCRIPTOR.services_by_name["ProducerService"].full_name: "produce",
    worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name: "work",
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name: "admin",
}

#: Methods that more roles than their service's may call (full method name → every role
#: that may): a producer waits for its jobs and watches their events, and so may an operator
#: (``sepp jobs result``, ``sepp jobs watch``).
METHOD_ROLES: dict[str, frozenset[str]] = {
    f"/{producer_pb2.DESCRIPTOR.services_by_name['ProducerService'].full_name}/WaitJobs":
        frozenset({"produce", "admin"}),
    f"/{producer_pb2.DESCRIPTOR.services_by_name['ProducerService'].full_name}/WatchJobs":
        frozenset({"produce", "admin"}),
}

#: Where the refusal tells the caller to look.
HINT = "check --token / SEPP_TOKEN / token="


def role_for(method: str) -> str | None:
    """The role ``/pkg.Service/Method`` needs, or None for an open one (health, reflection)."""
    service = method.lstrip("/").partition("/")[0]
    return SERVICE_ROLES.get(service)


def _ignore(_data: bytes) -> None:
    """The request deserializer of a denied call: the request is never decoded."""
    return None


def _denied(handler: grpc.RpcMethodHandler, status: Any) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind that answers ``status`` without running anything."""

    async def unary(_request: Any, context: Any) -> Any:
        await abort_with(context, status)

    async def streaming(_request: Any, context: Any) -> AsyncIterator[Any]:
        await abort_with(context, status)
        yield  # pragma: no cover - unreachable, makes this an async generator

    replace: Any = handler._replace  # type: ignore[attr-defined]
    if handler.unary_unary is not None:
        return replace(unary_unary=unary, request_deserializer=_ignore)  # type: ignore[no-any-return]
    if handler.stream_unary is not None:
        return replace(stream_unary=unary, request_deserializer=_ignore)  # type: ignore[no-any-return]
    if handler.unary_stream is not None:
        return replace(unary_stream=streaming, request_deserializer=_ignore)  # type: ignore[no-any-return]
    return replace(stream_stream=streaming, request_deserializer=_ignore)  # type: ignore[no-any-return]


class Authorize(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The interceptor of the module docstring; put it first in ``grpc.aio.server(interceptors=)``.

    With auth off (no token configured) every call passes through untouched. ``observe(method,
    code, seconds)`` (``Metrics.observe_rpc``), when given, records each refused call: its
    short method name, ``UNAUTHENTICATED`` or ``PERMISSION_DENIED``, and the seconds the check
    took."""

    def __init__(self, auth: Authenticator, observe: Observe | None = None) -> None:
        self.auth = auth
        self.observe = observe

    def verdict(self, method: str, metadata: Any) -> Any:
        """None when the call may proceed, else the ``google.rpc.Status`` to answer with."""
        role = role_for(method)
        if role is None or not self.auth.required(role):
            return None
        secret = bearer(metadata)
        token = self.auth.identify(secret)
        meta = {"role": role, "method": wire.clip(method)}
        if token is None:
            reason = "missing" if secret is None else "unknown"
            malformed = malformed_authorization(metadata) if secret is None else None
            what = malformed or ("no token" if secret is None else "an unknown token")
            self.auth.failed(reason, f"{method} called with {what}; it needs role {role}", method=meta["method"],
                             role=role)
            if malformed is not None:  # a token was probably there, written the wrong way
                message = (f"{method} needs a token with role '{role}' and the call carried {malformed}: the "
                           f"header must be 'authorization: Bearer <token>'; {HINT}")
            else:
                message = (f"{method} needs a token with role '{role}' and the call carried {what} "
                           f"(metadata authorization: Bearer <secret>); {HINT}")
            return wire.plain_status(code_pb2.UNAUTHENTICATED, Reason.UNAUTHENTICATED, message, meta)
        if role in token.roles or not token.roles.isdisjoint(METHOD_ROLES.get(method, ())):
            return None
        has = ", ".join(sorted(token.roles))
        self.auth.failed("forbidden", f"token {token.name!r} (roles: {has}) called {method}; it needs role {role}",
                         method=meta["method"], role=role, token=token.name)
        return wire.plain_status(
            code_pb2.PERMISSION_DENIED, Reason.PERMISSION_DENIED,
            f"token {token.name!r} may not call {method}: it needs role '{role}' and has {has}; {HINT}",
            {**meta, "token": token.name})

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        """The method's handler, or one that answers the refusal (see the module docstring)."""
        handler = await continuation(details)
        if handler is None or not self.auth.on:
            return handler
        started = time.perf_counter()
        method: str = details.method  # type: ignore[attr-defined]
        status = self.verdict(method, details.invocation_metadata)  # type: ignore[attr-defined]
        if status is None:
            return handler
        if self.observe is not None:
            self.observe(method.rpartition("/")[2], code_name(status.code), time.perf_counter() - started)
        return _denied(handler, status)


__all__ = ["METHOD_ROLES", "SERVICE_ROLES", "Authorize", "role_for"]
