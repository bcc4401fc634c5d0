"""Calling and judging: ``Caller`` sends one fuzzed request, ``judge`` holds its answer
to the contract (``support.fuzz.rpcs.ALLOWED_CODES``), ``Verdict`` is the result and
``show`` writes a request as text-format proto for a report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory, text_format
from google.rpc import error_details_pb2, status_pb2

from sepp.rejections import ERROR_DOMAIN
from sepp.wire import STATUS_DETAILS_KEY
from support.fuzz.pool import Pool
from support.fuzz.rpcs import ALLOWED_CODES, CALL_TIMEOUT, MAX_MESSAGE_BYTES, MAX_TRAILER_BYTES, Code, Message, Rpc


@dataclass(frozen=True)
class Verdict:
    """The answer to one fuzzed call: its status, ErrorInfo reason, message, and ``problem``
    (``None`` when the answer keeps the contract, else what is wrong)."""

    rpc: str
    code: str
    reason: str
    message: str
    problem: str | None
    #: The ErrorInfo's ``field`` metadata, if any.
    field: str = ""

    @property
    def failure_class(self) -> tuple[str, str, str, str]:
        """(rpc, code, reason, message shape): digits and long tails folded, so one cause is one class."""
        shape = "".join("#" if c.isdigit() else c for c in self.message[:90])
        return (self.rpc, self.code, self.reason, shape)


def judge(rpc: Rpc, request: Message, error: grpc.RpcError | None, *, max_message_bytes: int = MAX_MESSAGE_BYTES,
          ) -> Verdict:
    """Hold one answer to the contract: a status from :data:`ALLOWED_CODES`; for a non-OK
    answer a ``google.rpc.Status`` in ``grpc-status-details-bin`` whose code matches and that
    carries an ``ErrorInfo`` in domain ``sepp`` with a reason (except the client's own
    DEADLINE_EXCEEDED, and gRPC's RESOURCE_EXHAUSTED for a request over ``max_message_bytes``);
    trailers within :data:`MAX_TRAILER_BYTES`."""
    if error is None:
        return Verdict(rpc.label, "OK", "", "", None)
    code: Any = error.code()  # a grpc.StatusCode
    text: str = error.details() or ""  # type: ignore[attr-defined]
    trailers = error.trailing_metadata() or ()  # type: ignore[attr-defined]
    reason = field = ""
    problems: list[str] = []
    status: status_pb2.Status | None = None
    for key, value in trailers:
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            try:
                status = status_pb2.Status.FromString(value)
            except Exception as exc:  # a broken trailer is a broken answer
                problems.append(f"grpc-status-details-bin does not parse: {exc}")
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = info.reason
                field = info.metadata.get("field", "")
                if info.domain != ERROR_DOMAIN:
                    problems.append(f"ErrorInfo domain {info.domain!r}, not {ERROR_DOMAIN!r}")
        if status.code != code.value[0]:
            problems.append(f"google.rpc.Status code {status.code} differs from the gRPC status {code.name}")
    if code not in ALLOWED_CODES:
        problems.insert(0, f"status {code.name} is not in the documented set")
    needs_details = ALLOWED_CODES.get(code, True)
    if code == Code.RESOURCE_EXHAUSTED and status is None and request.ByteSize() > max_message_bytes:
        needs_details = False  # gRPC's own message cap
    if needs_details and not reason:
        problems.append("no ErrorInfo with a reason in grpc-status-details-bin")
    size = sum(len(k) + len(v) for k, v in trailers) + len(text.encode())
    if size > MAX_TRAILER_BYTES:
        problems.append(f"{size} bytes of trailers and message (> {MAX_TRAILER_BYTES})")
    return Verdict(rpc.label, code.name, reason, text, "; ".join(problems) or None, field[:40])


class Caller:
    """Calls :class:`Rpc` s on one channel with their generated (de)serializers."""

    def __init__(self, channel: grpc.Channel, timeout: float = CALL_TIMEOUT) -> None:
        self.channel = channel
        self.timeout = timeout
        self._methods: dict[str, Any] = {}

    def method(self, rpc: Rpc) -> Any:
        """The unary-unary multicallable of ``rpc``."""
        if rpc.path not in self._methods:
            out = message_factory.GetMessageClass(rpc.output)
            self._methods[rpc.path] = self.channel.unary_unary(
                rpc.path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=out.FromString)
        return self._methods[rpc.path]

    def call(self, rpc: Rpc, request: Message, pool: Pool | None = None) -> Verdict:
        """One blocking call, judged; the answer's ids go to ``pool``."""
        try:
            answer = self.method(rpc)(request, timeout=self.timeout)
        except grpc.RpcError as err:
            return judge(rpc, request, err)
        if pool is not None:
            pool.learn(answer)
            pool.keep(rpc, request)
        return judge(rpc, request, None)


def show(request: Message, limit: int = 600) -> str:
    """``request`` as one-line text-format proto, cut to ``limit`` characters (with its size)."""
    text = text_format.MessageToString(request, as_one_line=True, as_utf8=True)
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text)} chars, {request.ByteSize()} bytes serialized)"
    return text
