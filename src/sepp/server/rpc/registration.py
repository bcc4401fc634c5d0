"""Service registration with hardened request decoding.

gRPC's generated ``add_*Servicer_to_server`` decodes requests before any sepp code
runs, so a malformed message (corrupt wire format, invalid UTF-8 in a string) would
come back as ``UNKNOWN`` with a Python exception text. Here each method (each part of a
client stream too) gets a
deserializer that never raises and a thin wrapper that answers such a request with
the catalogued ``INVALID_ARGUMENT`` (ErrorInfo reason ``INVALID_ARGUMENT``) — the server keeps serving.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import descriptor, message_factory
from google.rpc import code_pb2

from sepp import wire
from sepp.rejections import Reason
from sepp.server.rpc.status import abort_with


class Malformed:
    """Stands in for a request that could not be decoded; ``error`` says why."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


def _safe(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as exc:  # DecodeError, UnicodeDecodeError, …: all mean "malformed"
            return Malformed(str(exc) or type(exc).__name__)

    return deserialize


def _passing_bytes(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """``serialize``, except that a handler's answer already serialized (``bytes``, e.g.
    ``rpc.producer.acks_wire``) is sent as it is."""
    def serializer(message: Any) -> bytes:
        if type(message) is bytes:
            return message
        return serialize(message)

    return serializer


def _guarded(method: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    async def behaviour(request: Any, context: Any) -> Any:
        if type(request) is Malformed:
            status = wire.plain_status(code_pb2.INVALID_ARGUMENT, Reason.INVALID_ARGUMENT,
                                       f"InvalidArgument: malformed request: {request.error}", {"field": ""})
            await abort_with(context, status)
        return await method(request, context)

    return behaviour


#: The methods served as grpc "registered methods" (``add_registered_method_handlers``): the
#: hot path only. grpc.aio's server keeps one pending request-call future per registered
#: method and waits on all of them (``asyncio.wait``) once per incoming call, so each one costs
#: every call: with all ~40 sepp methods registered that wait took ~14 µs, against ~7 µs
#: with a handful (measured on this machine, uvloop). Names are matched in every service
#: (none of the other services has a method of these names). Every other method is served
#: through the generic handler (a dictionary lookup by name): same behaviour, same decoding.
HOT_METHODS = frozenset({"Enqueue", "EnqueueBatch", "Reserve", "Settle", "ExtendLease"})


def _guarded_stream(method: Callable[[Any, Any], AsyncIterator[Any]]) -> Callable[[Any, Any], AsyncIterator[Any]]:
    """``_guarded`` for a server-streaming method (an async iterator of answers)."""
    async def behaviour(request: Any, context: Any) -> AsyncIterator[Any]:
        if type(request) is Malformed:
            status = wire.plain_status(code_pb2.INVALID_ARGUMENT, Reason.INVALID_ARGUMENT,
                                       f"InvalidArgument: malformed request: {request.error}", {"field": ""})
            await abort_with(context, status)
        async for answer in method(request, context):
            yield answer

    return behaviour


class MalformedPart(Exception):
    """A part of a client stream could not be decoded (``Malformed``); answered
    INVALID_ARGUMENT by ``_guarded_parts``."""


async def _checked_parts(parts: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """The decoded parts of a client stream; raises ``MalformedPart`` at the first that is not."""
    async for part in parts:
        if type(part) is Malformed:
            raise MalformedPart(part.error)
        yield part


def _guarded_parts(method: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    """``_guarded`` for a client-streaming method (a stream of parts, one answer): a part that
    cannot be decoded ends the call with the catalogued INVALID_ARGUMENT."""
    async def behaviour(parts: AsyncIterator[Any], context: Any) -> Any:
        try:
            return await method(_checked_parts(parts), context)
        except MalformedPart as exc:
            status = wire.plain_status(code_pb2.INVALID_ARGUMENT, Reason.INVALID_ARGUMENT,
                                       f"InvalidArgument: malformed request part: {exc}", {"field": ""})
            await abort_with(context, status)

    return behaviour


def register(server: grpc.aio.Server, service: descriptor.ServiceDescriptor, servicer: object) -> None:
    """Register ``servicer``'s unary, server-streaming and client-streaming methods for
    ``service`` on ``server`` (hardened decoding); the ``HOT_METHODS`` among them also as
    registered methods.

    Raises ``ValueError`` for a bidirectional method (sepp's services have none).
    """
    handlers = {}
    for method in service.methods:
        if method.client_streaming and method.server_streaming:
            raise ValueError(f"{method.full_name} is bidirectional; register it by hand")
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        if method.client_streaming:
            handlers[method.name] = grpc.stream_unary_rpc_method_handler(
                _guarded_parts(getattr(servicer, method.name)),
                request_deserializer=_safe(request_cls.FromString),
                response_serializer=_passing_bytes(response_cls.SerializeToString),
            )
            continue
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _guarded_stream(getattr(servicer, method.name)),
                request_deserializer=_safe(request_cls.FromString),
                response_serializer=_passing_bytes(response_cls.SerializeToString),
            )
            continue
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            _guarded(getattr(servicer, method.name)),
            request_deserializer=_safe(request_cls.FromString),
            response_serializer=_passing_bytes(response_cls.SerializeToString),
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    hot = {name: handler for name, handler in handlers.items() if name in HOT_METHODS}
    if hot:
        server.add_registered_method_handlers(service.full_name, hot)
