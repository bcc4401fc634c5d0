"""The one decoder of a failed RPC (SPEC §2 "Wire form"): gRPC status, the
``google.rpc.Status`` of the ``grpc-status-details-bin`` trailer and its rich details."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from sepp.api.v1 import common_pb2 as pb
from sepp.wire import status_from_metadata, unpack_details


@dataclass(frozen=True)
class Failure:
    """A failed RPC: its gRPC status plus whatever rich details the trailer carried."""

    code: grpc.StatusCode
    message: str
    status: status_pb2.Status | None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def error_info(self) -> error_details_pb2.ErrorInfo | None:
        """The ``google.rpc.ErrorInfo`` detail, if any."""
        return self.details.get("error_info")

    @property
    def reason(self) -> str:
        """The ErrorInfo reason ('' when none)."""
        info = self.error_info
        return str(info.reason) if info is not None else ""

    @property
    def metadata(self) -> dict[str, str]:
        """The ErrorInfo metadata ({} when none)."""
        info = self.error_info
        return dict(info.metadata) if info is not None else {}

    @property
    def retry_info(self) -> error_details_pb2.RetryInfo | None:
        """The ``google.rpc.RetryInfo`` detail, if any."""
        return self.details.get("retry_info")

    @property
    def rejection(self) -> pb.Rejection | None:
        """The ``sepp.api.v1.Rejection`` detail of a rejected ``Enqueue``, if any."""
        return self.details.get("rejection")

    @property
    def atomic(self) -> pb.AtomicRejections | None:
        """The ``AtomicRejections`` detail of a failed ``EnqueueAtomic``, if any."""
        return self.details.get("atomic")


def failure_of(err: grpc.RpcError) -> Failure:
    """Decode a ``grpc.RpcError`` raised by a unary call (sync or aio); the trailer's
    ``google.rpc.Status`` must agree with the gRPC status code."""
    trailers = err.trailing_metadata()  # type: ignore[attr-defined]
    status = status_from_metadata(trailers)
    details = unpack_details(status) if status is not None else {}
    code = err.code()  # type: ignore[attr-defined]
    if status is not None:
        assert status.code == code.value[0], "google.rpc.Status code differs from the gRPC status"
    return Failure(code, err.details() or "", status, details)  # type: ignore[attr-defined]


def fails(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Failure:
    """Run ``call`` expecting a ``grpc.RpcError``; return it decoded."""
    try:
        result = call(*args, **kwargs)
    except grpc.RpcError as err:
        return failure_of(err)
    raise AssertionError(f"call succeeded but a failure was expected: {result!r}")


def code_reason(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    """Run a call that must fail; returns (status code, ErrorInfo reason)."""
    failure = fails(call)
    return failure.code, failure.reason


def reason_of(err: grpc.RpcError) -> str:
    """The ErrorInfo reason of a failed call ('' when none)."""
    return failure_of(err).reason
