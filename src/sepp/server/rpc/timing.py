"""``sepp_rpc_duration_seconds{method,code}``: a grpc.aio server interceptor that
times every call of sepp's own services (``/sepp.…``; gRPC health and reflection are left
out) from the handler's start to its answer.

``method`` is the short method name (``Enqueue``), ``code`` the gRPC status name of the
answer (``OK``, ``INVALID_ARGUMENT``, …): the code a handler aborted with or set, ``OK`` when
it returned without setting one, ``CANCELLED`` when the call was cancelled. It is installed
before ``InternalErrors`` (``rpc.server``), so an unexpected exception is seen as the
``INTERNAL`` that one answers. Wrapped handlers are cached per method (one dictionary
lookup per call, like ``InternalErrors``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from sepp.server.rpc.handler_cache import CachedWrap

_perf = time.perf_counter
_NAMES: dict[grpc.StatusCode, str] = {code: code.name for code in grpc.StatusCode}
_BY_NUMBER: dict[int, str] = {code.value[0]: code.name for code in grpc.StatusCode}

Observe = Callable[[str, str, float], None]


def code_name(code: Any) -> str:
    """The status name of what ``context.code()`` returned (a ``StatusCode``, its number,
    or None = ``OK``)."""
    if code is None:
        return "OK"
    if isinstance(code, grpc.StatusCode):
        return _NAMES[code]
    if isinstance(code, int):
        return _BY_NUMBER.get(code, str(code))
    return str(code)


def _timed(behaviour: Callable[[Any, Any], Awaitable[Any]], method: str, observe: Observe
           ) -> Callable[[Any, Any], Awaitable[Any]]:
    async def timed(request: Any, context: Any) -> Any:
        started = _perf()
        try:
            response = await behaviour(request, context)
        except asyncio.CancelledError:
            observe(method, "CANCELLED", _perf() - started)
            raise
        except BaseException:
            code = context.code()
            observe(method, "UNKNOWN" if code is None else code_name(code), _perf() - started)
            raise
        observe(method, code_name(context.code()), _perf() - started)
        return response

    return timed


class RpcMetrics(CachedWrap):
    """The interceptor of the module docstring; ``observe(method, code, seconds)`` records one
    call (``Metrics.observe_rpc``). Only unary-response handlers are timed (every sepp method
    is unary); others pass through."""

    def __init__(self, observe: Observe) -> None:
        super().__init__()
        self._observe = observe

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler | None:
        """``handler`` timed when ``method`` is one of sepp's services (None, served as it is,
        for the others)."""
        if not method.startswith("/sepp."):
            return None
        name = method.rpartition("/")[2]
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=_timed(handler.unary_unary, name, self._observe))  # type: ignore[attr-defined, no-any-return]
        if handler.stream_unary is not None:
            return handler._replace(stream_unary=_timed(handler.stream_unary, name, self._observe))  # type: ignore[attr-defined, no-any-return]
        return handler
