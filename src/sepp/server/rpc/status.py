"""Engine errors → gRPC status with rich details (docs/errors.md).

Used by every servicer: ``await abort_for(context, exc)`` never returns.
"""

from __future__ import annotations

from typing import Any, NoReturn

import grpc
from google.rpc import code_pb2, status_pb2

from sepp import wire
from sepp.domain.params import SettleError
from sepp.domain.store_errors import StoreClosed, StoreError, StoreFailed, StoreUnavailable
from sepp.limits import fmt_number
from sepp.rejections import Reason
from sepp.server.errors import (
    AtomicRejected,
    BacklogFull,
    EngineError,
    InvalidRequest,
    JobRejected,
    LeaseRefused,
    NotFound,
    PeriodicInvalid,
    QueueLimitReached,
    ShuttingDown,
)


def status_for(exc: BaseException) -> status_pb2.Status:
    """The ``google.rpc.Status`` for an engine (or store) error."""
    if isinstance(exc, JobRejected):
        return wire.rejection_status(exc.rejection)
    if isinstance(exc, AtomicRejected):
        return wire.atomic_status(exc.rejections)
    if isinstance(exc, BacklogFull):
        return wire.overloaded_status(exc.retry_after, exc.backlog)
    if isinstance(exc, InvalidRequest):
        meta = {"field": exc.field}
        if exc.limit is not None:
            meta["limit"] = exc.limit if isinstance(exc.limit, str) else fmt_number(exc.limit)
        if exc.actual is not None:
            meta["actual"] = exc.actual if isinstance(exc.actual, str) else fmt_number(exc.actual)
        return wire.plain_status(code_pb2.INVALID_ARGUMENT, Reason.INVALID_ARGUMENT, f"InvalidArgument: {exc}", meta)
    if isinstance(exc, LeaseRefused):
        code = code_pb2.NOT_FOUND if exc.error is SettleError.NOT_FOUND else code_pb2.FAILED_PRECONDITION
        return wire.plain_status(code, exc.error.value, str(exc), {"job_id": exc.job_id})
    if isinstance(exc, NotFound):
        return wire.plain_status(code_pb2.NOT_FOUND, exc.reason, str(exc), exc.metadata)
    if isinstance(exc, QueueLimitReached):
        return wire.plain_status(code_pb2.FAILED_PRECONDITION, Reason.QUEUE_LIMIT_REACHED, str(exc),
                                 {"field": "name", "limit": str(exc.limit), "actual": str(exc.actual)})
    if isinstance(exc, PeriodicInvalid):
        return wire.plain_status(code_pb2.INVALID_ARGUMENT, Reason.PERIODIC_INVALID, str(exc),
                                 {"field": exc.field, "schedule": wire.clip(exc.schedule)})
    if isinstance(exc, ShuttingDown | StoreClosed):
        return wire.plain_status(code_pb2.UNAVAILABLE, Reason.SHUTTING_DOWN, "the server is shutting down")
    if isinstance(exc, StoreFailed):
        # The writer died while the call waited: its write may have been committed or not.
        return wire.plain_status(code_pb2.UNAVAILABLE, Reason.STORE_UNAVAILABLE,
                                 f"the server's writer stopped while this call was being stored; it may or may "
                                 f"not have been stored (an idempotency key makes a retry safe): {exc}")
    if isinstance(exc, StoreUnavailable):
        # The database went away (PostgreSQL restarting): a commit in flight may have landed.
        return wire.plain_status(code_pb2.UNAVAILABLE, Reason.STORE_UNAVAILABLE,
                                 f"the server cannot reach its database right now; a write in flight may or may "
                                 f"not have been stored (an idempotency key makes a retry safe): {exc}")
    if isinstance(exc, StoreError):
        # Nothing of the call was committed (the write transaction failed as a whole).
        return wire.plain_status(code_pb2.UNAVAILABLE, Reason.STORE_UNAVAILABLE,
                                 f"the server could not write to its store; nothing was stored: {exc}")
    # Nothing else is expected: INTERNAL with reason INTERNAL_ERROR, as the interceptor answers
    # (rpc.interceptor). The text of an engine error is the server's own.
    if isinstance(exc, EngineError):
        return wire.plain_status(code_pb2.INTERNAL, Reason.INTERNAL_ERROR, wire.clip(str(exc)))
    return wire.plain_status(code_pb2.INTERNAL, Reason.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")


_CODES = {c.value[0]: c for c in grpc.StatusCode}


async def abort_with(context: Any, status: status_pb2.Status) -> NoReturn:
    """Abort the RPC with ``status`` (code, message, details in ``grpc-status-details-bin``)."""
    await context.abort(_CODES[status.code], status.message,
                        trailing_metadata=((wire.STATUS_DETAILS_KEY, status.SerializeToString()),))
    raise AssertionError("unreachable")  # context.abort raises


async def abort_for(context: Any, exc: BaseException) -> NoReturn:
    """Abort the RPC with the rich status of ``exc``."""
    await abort_with(context, status_for(exc))
