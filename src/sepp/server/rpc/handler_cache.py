"""``CachedWrap``: the base of the grpc.aio server interceptors that wrap a method's handler
the same way on every call (``InternalErrors``, ``RpcMetrics``): each method's wrapped
handler is built once and then served from a dictionary (one lookup per call)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

#: Most method names whose wrapped handler is kept (names come from callers; unknown ones
#: have no handler and are never cached; past the bound, handlers are wrapped per call).
CACHE_MAX = 1024


class CachedWrap(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """A server interceptor serving ``wrap(method, handler)`` for every method, built on the
    method's first call and kept (up to ``CACHE_MAX`` methods). Subclasses give ``wrap``."""

    def __init__(self) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler | None:
        """The handler to serve for ``method`` (the full path, ``/package.Service/Method``)
        instead of ``handler``; ``None``: serve ``handler`` itself, and keep nothing."""
        raise NotImplementedError

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        """The method's wrapped handler (None for an unknown method: grpc answers UNIMPLEMENTED)."""
        method: str = details.method  # type: ignore[attr-defined]
        cached = self._handlers.get(method)
        if cached is not None:
            return cached
        handler = await continuation(details)
        if handler is None:
            return None
        wrapped = self.wrap(method, handler)
        if wrapped is None:
            return handler
        if len(self._handlers) < CACHE_MAX:
            self._handlers[method] = wrapped
        return wrapped
