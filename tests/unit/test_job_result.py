"""What a handler's return value becomes (``sepp.job_result``, ``sepp.worker.outcome.returned``)
and how the worker puts it on the wire: ``None`` no result, ``bytes`` octet-stream, a
``sepp.Result`` as given, anything else JSON; a value JSON cannot encode, or one over the
queue's ``max_result_bytes`` (at the limit and one past it), fails the attempt instead with
the reason in its error message. No server: the outcomes and their wire items."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import sepp
from sepp.api.v1 import common_pb2 as pb
from sepp.job_result import JSON_ENCODING, OCTET_STREAM, Result, result_of, result_parts, result_value
from sepp.worker._settler import Settler
from sepp.worker.outcome import COMPLETED, Outcome, returned


@pytest.mark.parametrize(("value", "data", "encoding"), [
    (b"\x00\xffraw", b"\x00\xffraw", OCTET_STREAM),
    (bytearray(b"ba"), b"ba", OCTET_STREAM),
    (memoryview(b"mv"), b"mv", OCTET_STREAM),
    (Result(b"<p>hi</p>", "text/html"), b"<p>hi</p>", "text/html"),
    (sepp.Payload(b"a,b", "text/csv"), b"a,b", "text/csv"),
    ({"sent": True, "n": 3, "name": "Ådå"}, '{"sent":true,"n":3,"name":"Ådå"}'.encode(), JSON_ENCODING),
    ("text", b'"text"', JSON_ENCODING),
    (0, b"0", JSON_ENCODING),
    (False, b"false", JSON_ENCODING),
    ([1, 2.5], b"[1,2.5]", JSON_ENCODING),
])
def test_a_return_value_becomes_a_result_by_its_type(value: Any, data: bytes, encoding: str) -> None:
    result = result_of(value)
    assert result == Result(data, encoding) and type(result.data) is bytes
    # The Worker's shortcut (no Result built for a dict, list or bytes) says the same.
    assert result_parts(value) == (data, encoding)
    assert returned(value, None) == Outcome("completed", result=data, result_encoding=encoding)


class _Dict(dict[str, Any]):
    pass


@pytest.mark.parametrize("value", [
    None, {}, [], {"a": (1, 2)}, (1, "x"), _Dict(a=1), "é", 1.5, True, b"", b"\x00",
    Result(b"", "x/y"), sepp.Payload(b"p", "text/plain"), {"s": "\u2603", "n": None},
])
def test_the_workers_shortcut_gives_what_result_of_gives(value: Any) -> None:
    result = result_of(value)
    assert result_parts(value) == (None if result is None else (result.data, result.encoding))


def test_none_is_no_result_and_a_completed_ack_without_one() -> None:
    assert result_of(None) is None
    assert returned(None, 10) is COMPLETED
    item = COMPLETED.to_settle_item("j", "l")
    assert not item.ack.HasField("result")


def test_sepp_exports_result_and_what_is_stored_reads_back_as_it_was_returned() -> None:
    assert sepp.Result is Result
    for value in ({"a": [1, None]}, b"\x01\x02", Result(b"x", "text/plain")):
        stored = result_of(value)
        assert stored is not None
        assert result_value(stored.data, stored.encoding) == value
    assert result_value(b"", OCTET_STREAM) == b""


@pytest.mark.parametrize(("value", "why"), [
    (object(), "TypeError: Object of type object is not JSON serializable"),
    ({"x": math.nan}, "ValueError: Out of range float values are not JSON compliant"),
    ({1j: 1}, "TypeError: keys must be str, int, float, bool or None"),
])
def test_a_value_json_cannot_encode_dead_letters_the_job_with_the_reason(value: Any, why: str) -> None:
    with pytest.raises((TypeError, ValueError)):
        result_of(value)
    outcome = returned(value, 1024)
    assert outcome.kind == "dead_letter" and outcome.result is None and outcome.reason == outcome.error_message
    assert outcome.error_message.startswith("ResultError: the handler's return value cannot be stored as the "
                                            "job's result: ")
    assert why in outcome.error_message and "JSON-encodable" in outcome.error_message
    assert "The above exception was the direct cause" in outcome.error_detail  # the encoder's error, kept


def test_a_circular_value_dead_letters_the_job_too() -> None:
    loop: list[Any] = []
    loop.append(loop)
    outcome = returned(loop, None)
    assert outcome.kind == "dead_letter" and "Circular reference" in outcome.error_message


def test_the_queues_limit_is_checked_at_the_limit_and_one_past_it() -> None:
    at = returned(b"x" * 64, 64)
    assert at == Outcome("completed", result=b"x" * 64, result_encoding=OCTET_STREAM)
    past = returned(b"x" * 65, 64)
    assert past.kind == "retry" and past.result is None
    assert past.error_message == ("ResultTooLarge: the handler's result is 65 bytes, more than the queue's "
                                  "max_result_bytes (64); the attempt failed and is retried per the queue's policy")
    # JSON is measured as encoded: '"xx"' is 4 bytes.
    assert returned("xx", 4).kind == "completed" and returned("xx", 3).kind == "retry"
    assert returned(b"x" * 10_000, None).kind == "completed"  # no limit known: the server checks


@pytest.mark.parametrize(("data", "encoding", "error"), [
    ("text", "text/plain", TypeError),
    (b"x", 7, TypeError),
    (b"x", "e" * 129, ValueError),
    (b"x", "a\x00b", ValueError),
    (b"x", "bad \udcff", ValueError),
])
def test_a_result_refuses_what_cannot_be_stored(data: Any, encoding: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        Result(data, encoding)
    assert Result(b"x", "e" * 128).encoding == "e" * 128  # at the label limit


def test_a_completed_outcome_carries_its_result_on_the_wire_and_off_the_fast_path() -> None:
    outcome = returned({"ok": 1}, None)
    item = outcome.to_settle_item("job", "lease")
    assert item.ack.result.data == b'{"ok":1}' and item.ack.result.encoding == JSON_ENCODING
    job, lease = "0" * 8 + "-0000-7000-8000-" + "0" * 12, "1" * 8 + "-1111-4111-8111-" + "1" * 12
    request = Settler._request([(COMPLETED, job, lease, None, None), (outcome, job, lease, None, None),
                                (returned(b"", None), job, lease, None, None)])
    plain, with_result, empty = request.items
    assert not plain.ack.HasField("result")
    assert (with_result.ack.job_id, with_result.ack.lease_id) == (job, lease)
    assert json.loads(with_result.ack.result.data) == {"ok": 1}
    assert empty.ack.HasField("result") and empty.ack.result == pb.Payload(data=b"", encoding=OCTET_STREAM)


def test_the_domains_refusal_names_the_catalogue_code() -> None:
    # The domain may not import the catalogue (it imports grpc): the name is spelled twice.
    from sepp.domain.transitions import RESULT_TOO_LARGE
    from sepp.rejections import CATALOGUE, RejectionCode

    assert RESULT_TOO_LARGE == RejectionCode.RESULT_TOO_LARGE.value
    assert RejectionCode.from_wire("RESULT_TOO_LARGE") is RejectionCode.RESULT_TOO_LARGE
    assert CATALOGUE[RejectionCode.RESULT_TOO_LARGE].status.name == "INVALID_ARGUMENT"


@pytest.mark.parametrize("value", [
    {}, [], {"a": [1, 2.5, None, True, "é\u2603"], "b": {"c": -(2**70)}}, [{"k": "v"}] * 3,
    {1: "int key", 2.5: "float key", False: "bool key", None: "none key"}, ["\x00\x1f\"\\"],
])
def test_the_json_shortcut_writes_what_json_dumps_writes(value: Any) -> None:
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    assert result_parts(value) == (expected, JSON_ENCODING)


def test_a_failed_json_encoding_leaves_the_next_one_unharmed() -> None:
    shared = [1]
    loop: list[Any] = [shared]
    loop.append(loop)
    for bad, error in (({"x": math.inf}, ValueError), ([shared, object()], TypeError), (loop, ValueError)):
        with pytest.raises(error):
            result_parts(bad)
        # The same objects again, in a value that is fine: no stale circular-reference marks.
        assert result_parts([shared, shared, {"s": shared}]) == (b"[[1],[1],{\"s\":[1]}]", JSON_ENCODING)


def test_the_json_shortcut_raises_what_json_dumps_raises_for_a_circular_or_too_deep_value() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = {"again": loop}
    deep: list[Any] = []
    for _ in range(2 * sys.getrecursionlimit()):
        deep = [deep]
    for value, error in ((loop, ValueError), ([1, loop], ValueError), (deep, RecursionError)):
        with pytest.raises(error) as expected:
            json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        with pytest.raises(error) as got:
            result_parts(value)
        assert str(got.value) == str(expected.value)
    assert result_parts([[[1]]]) == (b"[[[1]]]", JSON_ENCODING)  # just under any limit: fine


def test_the_json_shortcut_is_safe_from_many_threads_at_once() -> None:
    values = [{"n": n, "items": [{"k": "é" * (n % 7)}] * (n % 5)} for n in range(200)]
    expected = [json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode() for v in values]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(5):
            assert [parts[0] for parts in pool.map(result_parts, values) if parts] == expected


def test_a_completed_outcome_with_a_result_is_the_frozen_outcome_the_constructor_makes() -> None:
    for value, data, encoding in (({"a": 1}, b'{"a":1}', JSON_ENCODING), (b"", b"", OCTET_STREAM)):
        outcome = returned(value, 1024)
        made = Outcome("completed", result=data, result_encoding=encoding)
        assert type(outcome) is Outcome and outcome == made and hash(outcome) == hash(made)
        assert repr(outcome) == repr(made)
        with pytest.raises(dataclasses.FrozenInstanceError):
            outcome.result = b"other"  # type: ignore[misc]
