"""Nothing answers ``UNKNOWN``: the server interceptor that catches what a
handler did not.

grpc answers an exception that escapes a handler with ``UNKNOWN`` and the exception's text.
``InternalErrors`` wraps every method handler of the server — unary and streaming, sepp's
services and grpc's own (health, reflection) — so that instead:

* an engine or store error (``EngineError``, ``StoreError``) a servicer forgot to map gets
  its catalogued status (``rpc.status.status_for``);
* anything else is logged at ERROR with its traceback and answered ``INTERNAL`` with an
  ErrorInfo reason ``INTERNAL_ERROR`` (metadata ``method``) and a short message naming the
  method and the exception type only (the exception text may quote input or internals).

Aborts (``context.abort``) and cancellations pass through untouched. Wrapped handlers are
cached per method name, so a call costs one dictionary lookup more.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.rpc import code_pb2

from sepp import wire
from sepp.domain.store_errors import StoreError
from sepp.rejections import Reason
from sepp.server.errors import EngineError
from sepp.server.rpc.handler_cache import CachedWrap
from sepp.server.rpc.status import abort_for, abort_with

log = logging.getLogger("sepp.rpc")

#: The ErrorInfo reason of an unexpected server error (exactly this name).
INTERNAL_ERROR = Reason.INTERNAL_ERROR

async def answer_unexpected(context: Any, method: str, exc: Exception) -> None:
    """Abort the call for an exception its handler did not map (see the module docstring);
    never returns normally (``context.abort`` raises)."""
    if isinstance(exc, EngineError | StoreError):
        await abort_for(context, exc)
    log.error("unexpected error in %s; answered INTERNAL (INTERNAL_ERROR)", method, exc_info=exc)
    status = wire.plain_status(code_pb2.INTERNAL, INTERNAL_ERROR,
                               f"internal error in {method}: {type(exc).__name__} (the server logged it)",
                               {"method": wire.clip(method)})
    await abort_with(context, status)


def _unary(behaviour: Callable[[Any, Any], Awaitable[Any]], method: str) -> Callable[[Any, Any], Awaitable[Any]]:
    async def guarded(request: Any, context: Any) -> Any:
        try:
            return await behaviour(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await answer_unexpected(context, method, exc)

    return guarded


def _streaming(behaviour: Callable[[Any, Any], Any], method: str) -> Callable[[Any, Any], AsyncIterator[Any]]:
    async def guarded(request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            result = behaviour(request, context)
            if hasattr(result, "__aiter__"):
                async for response in result:
                    yield response
            else:  # a coroutine that answers with context.write()
                await result
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await answer_unexpected(context, method, exc)

    return guarded


def guard(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """``handler`` with its behaviour wrapped (see the module docstring)."""
    if handler.unary_unary is not None:
        return handler._replace(unary_unary=_unary(handler.unary_unary, method))  # type: ignore[attr-defined, no-any-return]
    if handler.stream_unary is not None:
        return handler._replace(stream_unary=_unary(handler.stream_unary, method))  # type: ignore[attr-defined, no-any-return]
    if handler.unary_stream is not None:
        return handler._replace(unary_stream=_streaming(handler.unary_stream, method))  # type: ignore[attr-defined, no-any-return]
    if handler.stream_stream is not None:
        return handler._replace(stream_stream=_streaming(handler.stream_stream, method))  # type: ignore[attr-defined, no-any-return]
    return handler


class InternalErrors(CachedWrap):
    """The grpc.aio server interceptor of the module docstring; pass it to ``grpc.aio.server``."""

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """``handler`` guarded (``guard``)."""
        return guard(handler, method)
