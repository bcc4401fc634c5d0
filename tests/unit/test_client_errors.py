"""Error classification: a hand-built ``google.rpc.Status`` in trailing metadata → sepp exception.

These are codec tests: the statuses are built with the same ``sepp.wire`` helpers the
server uses, serialized as ``grpc-status-details-bin`` exactly as gRPC carries them.
"""

from __future__ import annotations

import pickle

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from sepp import errors, wire
from sepp.api.v1 import common_pb2 as pb
from sepp.client import _core
from sepp.rejections import RejectionCode
from sepp.request import IndexedRejection, Rejection


def _trailing(status: status_pb2.Status) -> list[tuple[str, str | bytes]]:
    return [("some-other-key", "x"), (wire.STATUS_DETAILS_KEY, status.SerializeToString())]


def _classify(status: status_pb2.Status) -> errors.SeppError:
    code = grpc.StatusCode(_grpc_code(status.code))
    return _core.error_from_status(code, status.message, _trailing(status))


def _grpc_code(number: int) -> tuple[int, str]:
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code.value  # type: ignore[no-any-return]
    raise AssertionError(number)


PAYLOAD_TOO_LARGE = Rejection(RejectionCode.PAYLOAD_TOO_LARGE,
                              "payload is larger than the queue's max_payload_bytes",
                              "payload.data", 1_048_576, 2_000_000)


def test_a_rejection_status_becomes_rejected_error_with_the_packed_rejection() -> None:
    error = _classify(wire.rejection_status(PAYLOAD_TOO_LARGE.to_proto()))
    assert type(error) is errors.RejectedError
    assert error.rejection == PAYLOAD_TOO_LARGE
    assert error.code is RejectionCode.PAYLOAD_TOO_LARGE
    assert str(error) == str(PAYLOAD_TOO_LARGE)


def test_unknown_queue_arrives_as_not_found_and_is_still_a_rejection() -> None:
    status = wire.rejection_status(Rejection(RejectionCode.UNKNOWN_QUEUE, "queue 'x' is not declared",
                                             "queue").to_proto())
    assert status.code == code_pb2.NOT_FOUND
    error = _classify(status)
    assert isinstance(error, errors.RejectedError) and error.code is RejectionCode.UNKNOWN_QUEUE


def test_an_error_info_without_a_packed_rejection_is_rebuilt_from_its_metadata() -> None:
    full = wire.rejection_status(PAYLOAD_TOO_LARGE.to_proto())
    only_info = status_pb2.Status(code=full.code, message=full.message, details=[full.details[0]])
    error = _classify(only_info)
    assert isinstance(error, errors.RejectedError)
    assert error.rejection == PAYLOAD_TOO_LARGE  # message prefix "PayloadTooLarge: " stripped


def test_a_batch_level_invalid_argument_is_a_rejection_of_field_jobs() -> None:
    status = wire.plain_status(code_pb2.INVALID_ARGUMENT, "INVALID_ARGUMENT",
                               "a batch holds at most 256 jobs",
                               {"field": "jobs", "limit": "256", "actual": "300"})
    error = _classify(status)
    assert isinstance(error, errors.RejectedError) and not isinstance(error, errors.AtomicEnqueueError)
    assert (error.code, error.rejection.field, error.rejection.limit, error.rejection.actual) == (
        RejectionCode.INVALID_ARGUMENT, "jobs", 256, 300)


def test_an_atomic_rejection_lists_every_failure_by_index() -> None:
    failures = [IndexedRejection(4, PAYLOAD_TOO_LARGE),
                IndexedRejection(1, Rejection(RejectionCode.QUEUE_NAME_INVALID, "empty", "queue"))]
    status = wire.atomic_status([pb.IndexedRejection(index=f.index, rejection=f.rejection.to_proto())
                                 for f in failures])
    error = _classify(status)
    assert isinstance(error, errors.AtomicEnqueueError)
    assert isinstance(error, errors.RejectedError)
    assert [e.index for e in error.errors] == [1, 4]
    assert error.errors[1].rejection == PAYLOAD_TOO_LARGE
    assert error.rejection == error.errors[0].rejection
    assert "nothing enqueued" in str(error)


def test_overloaded_is_transient_and_carries_retry_after() -> None:
    error = _classify(wire.overloaded_status(0.25, backlog=50_000))
    assert isinstance(error, errors.Overloaded)
    assert error.retry_after == pytest.approx(0.25)
    assert error.transient and error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert not isinstance(error, errors.RejectedError)


def test_overloaded_without_retry_info_has_no_retry_after() -> None:
    full = wire.overloaded_status(0.25, backlog=1)
    status = status_pb2.Status(code=full.code, message=full.message, details=[full.details[0]])
    error = _classify(status)
    assert isinstance(error, errors.Overloaded) and error.retry_after is None


def test_resource_exhausted_without_details_is_message_too_large_and_not_transient() -> None:
    error = _core.error_from_status(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    "Sent message larger than max (17825812 vs. 16777216)", None)
    assert isinstance(error, errors.MessageTooLarge)
    assert not error.transient
    assert "larger than max" in str(error)


@pytest.mark.parametrize(("code", "cls", "transient"), [
    (grpc.StatusCode.UNAVAILABLE, errors.Unavailable, True),
    (grpc.StatusCode.CANCELLED, errors.Unavailable, True),  # cancelled by a stopping server
    (grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceeded, True),
    (grpc.StatusCode.INTERNAL, errors.ServerError, False),
    (grpc.StatusCode.UNIMPLEMENTED, errors.ServerError, False),
    (grpc.StatusCode.INVALID_ARGUMENT, errors.ServerError, False),  # no sepp ErrorInfo: not a known rejection
])
def test_plain_statuses_map_to_transport_errors(code: grpc.StatusCode, cls: type[errors.TransportError],
                                                transient: bool) -> None:
    error = _core.error_from_status(code, "boom", [], target="127.0.0.1:7700")
    assert type(error) is cls
    assert isinstance(error, errors.TransportError) and error.transient is transient
    assert error.code == code


def test_a_non_catalogue_reason_is_a_server_error_that_keeps_the_reason() -> None:
    status = wire.plain_status(code_pb2.FAILED_PRECONDITION, "LEASE_MISMATCH", "lease id does not match")
    error = _classify(status)
    assert isinstance(error, errors.ServerError)
    assert error.reason == "LEASE_MISMATCH" and error.code == grpc.StatusCode.FAILED_PRECONDITION


def test_error_info_from_a_foreign_domain_is_not_trusted_as_a_rejection() -> None:
    info = error_details_pb2.ErrorInfo(reason="PAYLOAD_TOO_LARGE", domain="proxy.example.com")
    packed = any_pb2.Any()
    packed.Pack(info)
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="nope", details=[packed])
    assert type(_classify(status)) is errors.ServerError


def test_the_two_families_never_mix() -> None:
    transport = [errors.Unavailable, errors.DeadlineExceeded, errors.Overloaded, errors.MessageTooLarge,
                 errors.ServerError]
    for cls in transport:
        assert issubclass(cls, errors.TransportError) and not issubclass(cls, errors.RejectedError)
    assert not issubclass(errors.RejectedError, errors.TransportError)
    assert not issubclass(errors.AtomicEnqueueError, errors.TransportError)
    assert all(issubclass(cls, errors.SeppError) for cls in [*transport, errors.AtomicEnqueueError])


def test_the_docstring_is_the_default_message() -> None:
    assert str(errors.Unavailable()) == "The server is unreachable or the connection dropped."
    assert errors.Overloaded().message.startswith("The server is shedding load")
    assert str(errors.SeppError("custom")) == "custom"


def test_errors_survive_pickling_with_their_details() -> None:
    atomic = errors.AtomicEnqueueError([IndexedRejection(2, PAYLOAD_TOO_LARGE)])
    for error in (errors.RejectedError(PAYLOAD_TOO_LARGE), atomic,
                  errors.Overloaded("busy", retry_after=0.5, code=grpc.StatusCode.RESOURCE_EXHAUSTED)):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
    assert pickle.loads(pickle.dumps(atomic)).errors == atomic.errors
    overloaded = pickle.loads(pickle.dumps(errors.Overloaded(retry_after=0.5)))
    assert overloaded.retry_after == 0.5


def test_atomic_error_needs_at_least_one_rejection() -> None:
    with pytest.raises(ValueError):
        errors.AtomicEnqueueError([])
