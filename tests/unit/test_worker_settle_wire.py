"""``Settler._request`` writes ``SettleRequest`` wire bytes itself for the common ack: the
message it builds must be the one protobuf builds item by item (``Outcome.fill``)."""

from __future__ import annotations

import uuid

import pytest

from sepp.api.v1 import worker_pb2 as wpb
from sepp.wire import varint as _varint
from sepp.worker._settler import Settler
from sepp.worker.outcome import COMPLETED, DeadLetter, Outcome, Retry, outcome_for_exception, released


def _expected(items: list[tuple[Outcome, str, str]]) -> wpb.SettleRequest:
    request = wpb.SettleRequest()
    for outcome, job_id, lease_id in items:
        outcome.fill(request.items.add(), job_id, lease_id)
    return request


def _built(items: list[tuple[Outcome, str, str]]) -> wpb.SettleRequest:
    return Settler._request([(outcome, job_id, lease_id, None, None) for outcome, job_id, lease_id in items])


def _uuid() -> str:
    return str(uuid.uuid4())


#: A fixed UUID text for parameters (test ids must be the same in every pytest-xdist worker).
_FIXED = "0d204fd5-f558-44c1-8ac2-d30d4ee7254e"


def test_acks_of_uuid_ids_are_the_messages_protobuf_builds() -> None:
    items = [(COMPLETED, _uuid(), _uuid()) for _ in range(300)]
    request = _built(items)
    assert request == _expected(items)
    # The same bytes on the wire as before (the server reads canonical acks' ids from them).
    assert request.SerializeToString() == _expected(items).SerializeToString()
    assert [(i.ack.job_id, i.ack.lease_id) for i in request.items] == [(j, le) for _, j, le in items]
    assert all(i.WhichOneof("kind") == "ack" for i in request.items)


@pytest.mark.parametrize("job_id, lease_id", [
    ("", ""),                                  # empty ids: the server refuses them, the wire carries them
    ("j-1", _FIXED),                           # a job id of another length
    (_FIXED, "lease"),                         # a lease id of another length
    ("é" * 18, _FIXED),                        # 18 characters, 36 UTF-8 bytes: fast path, bytes counted
    ("x" * 35 + "é", _FIXED),                  # 36 characters, 37 bytes: not the fast path
    ("k" * 300, "l" * 200),                    # lengths that take a two-byte varint
])
def test_acks_of_other_ids_are_written_by_protobuf(job_id: str, lease_id: str) -> None:
    items = [(COMPLETED, _uuid(), _uuid()), (COMPLETED, job_id, lease_id), (COMPLETED, _uuid(), _uuid())]
    request = _built(items)
    assert request == _expected(items)
    assert (request.items[1].ack.job_id, request.items[1].ack.lease_id) == (job_id, lease_id)


def test_nacks_keep_their_place_among_acks() -> None:
    try:
        raise ValueError("boom")
    except ValueError as exc:
        failure = outcome_for_exception(exc)
    outcomes = [COMPLETED, failure, outcome_for_exception(Retry("later", after=2.5)),
                outcome_for_exception(DeadLetter("bad")), released("stopping"), COMPLETED]
    items = [(outcome, _uuid(), _uuid()) for outcome in outcomes]
    request = _built(items)
    assert request == _expected(items)
    assert [i.WhichOneof("kind") for i in request.items] == ["ack", "nack", "nack", "nack", "nack", "ack"]
    assert request.items[2].nack.retry_after.seconds == 2 and request.items[2].nack.retry_after.nanos == 500_000_000


def test_empty_batch_is_an_empty_request() -> None:
    assert _built([]) == wpb.SettleRequest()


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16_384, 2**31])
def test_varint(n: int) -> None:
    encoded = _varint(n)
    value = shift = 0
    for i, byte in enumerate(encoded):
        value |= (byte & 0x7F) << shift
        shift += 7
        assert (byte & 0x80 != 0) == (i < len(encoded) - 1)
    assert value == n


def _result_outcome(value: object, limit: int | None = None) -> Outcome:
    from sepp.worker.outcome import returned

    return returned(value, limit)


#: The worker's check of a result against a queue's max_result_bytes (the local refusal).
_LIMIT = 1000


@pytest.mark.parametrize("outcome", [
    COMPLETED,                                                                     # no result
    _result_outcome(b""),                                                          # empty bytes: an empty Payload
    _result_outcome(b"r" * 100),                                                   # bytes
    _result_outcome({"status": "sent", "user_id": 42, "message_id": "m" * 54}),   # JSON, 100 bytes
    _result_outcome(["Ådå", 1, None, "\u2603"]),                                  # JSON, non-ASCII
    _result_outcome(b"x" * 127), _result_outcome(b"x" * 128),                      # one- and two-byte lengths
    _result_outcome(b"x" * (16_384 - 10)), _result_outcome(b"x" * 16_384),        # two- and three-byte lengths
    _result_outcome(b"x" * _LIMIT, _LIMIT),                                        # at max_result_bytes
    _result_outcome(b"x" * 1_048_576, 1_048_576),                                 # at the default limit
    Outcome("completed", result=b"", result_encoding=""),                          # Payload() present, all fields empty
    Outcome("completed", result=b"data", result_encoding=""),                      # no label
    Outcome("completed", result=b"", result_encoding="text/plain"),                # a label, no data
    Outcome("completed", result=b"x", result_encoding="é" * 64),                   # 128-byte UTF-8 label
    Outcome("completed", result=b"x", result_encoding="e" * 128),                  # longest label, two-byte varint
], ids=lambda o: f"{o.result_encoding or 'none'}-{len(o.result) if o.result is not None else 'no result'}")
def test_acks_with_results_are_the_bytes_protobuf_writes(outcome: Outcome) -> None:
    assert outcome.kind == "completed"
    items = [(COMPLETED, _uuid(), _uuid()), (outcome, _uuid(), _uuid()), (outcome, "j-1", _FIXED),
             (outcome, _uuid(), _uuid())]
    request = _built(items)
    expected = _expected(items)
    assert request.SerializeToString() == expected.SerializeToString()  # byte-identical on the wire
    assert request == expected
    for item, (_, job_id, lease_id) in zip(request.items, items, strict=True):
        assert (item.ack.job_id, item.ack.lease_id) == (job_id, lease_id)
    assert request.items[1].ack.HasField("result") == (outcome.result is not None)
    if outcome.result is not None:
        assert request.items[1].ack.result.data == outcome.result
        assert request.items[1].ack.result.encoding == outcome.result_encoding


def test_each_ack_of_a_batch_is_framed_by_its_own_lengths() -> None:
    outcomes = [_result_outcome(b"y" * n) for n in (0, 1, 100, 127, 128, 300, 20_000)]
    outcomes += [_result_outcome({"i": i, "pad": "p" * i}) for i in range(0, 400, 37)]
    items = [(o, _uuid(), _uuid()) for o in outcomes]
    assert _built(items).SerializeToString() == _expected(items).SerializeToString()


def test_one_past_max_result_bytes_is_refused_before_the_wire() -> None:
    from sepp.worker.outcome import returned

    at = returned(b"x" * _LIMIT, _LIMIT)
    assert at.kind == "completed" and at.result == b"x" * _LIMIT
    past = returned(b"x" * (_LIMIT + 1), _LIMIT)
    assert past.kind == "retry" and past.result is None
    assert past.error_message.startswith("ResultTooLarge: the handler's result is 1001 bytes, more than the queue's "
                                         "max_result_bytes (1000)")
    # JSON is measured as encoded, at the limit and one past it.
    record = {"k": "v" * (_LIMIT - 10)}  # '{"k":"' + value + '"}' is 8 bytes of framing
    assert returned(record, _LIMIT - 2).kind == "completed" and returned(record, _LIMIT - 3).kind == "retry"
    # The refused one goes out as a nack (retry), written by protobuf; the accepted one as an ack.
    items = [(at, _uuid(), _uuid()), (past, _uuid(), _uuid())]
    request = _built(items)
    assert request.SerializeToString() == _expected(items).SerializeToString()
    assert [i.WhichOneof("kind") for i in request.items] == ["ack", "nack"]
    assert request.items[1].nack.HasField("retry") and "ResultTooLarge" in request.items[1].nack.error.message
