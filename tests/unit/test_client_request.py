"""The producer value types: building requests, what fails at construction, wire form."""

from __future__ import annotations

import datetime as dt
import math
from types import MappingProxyType

import pytest

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.limits import QueueLimits, ServerLimits
from sepp.rejections import RejectionCode
from sepp.request import (
    INT64_MAX,
    INT64_MIN,
    EnqueueAck,
    EnqueueRequest,
    IndexedRejection,
    Payload,
    Rejection,
    ServerInfo,
)
from sepp.validation import Validator

UTC = dt.UTC


def _validate(req: EnqueueRequest, now: dt.datetime | None = None) -> pb.Rejection | None:
    validator = Validator(ServerLimits(), lambda _q: QueueLimits())
    at = now or dt.datetime.now(UTC)
    return validator.validate(req.to_proto(), int(at.timestamp() * 1e9))


# ----------------------------------------------------------------- payload


def test_payload_json_is_compact_utf8_labelled_application_json() -> None:
    payload = Payload.json({"user_id": 42, "name": "Zoë"})
    assert payload.data == '{"user_id":42,"name":"Zoë"}'.encode()
    assert payload.encoding == "application/json"
    assert payload.decode_json() == {"user_id": 42, "name": "Zoë"}
    assert len(payload) == len(payload.data)


def test_payload_json_refuses_nan_because_it_is_not_json() -> None:
    with pytest.raises(ValueError):
        Payload.json({"x": math.nan})


def test_payload_refuses_str_data_and_normalizes_bytearray() -> None:
    with pytest.raises(TypeError, match="encode text first"):
        Payload("text")  # type: ignore[arg-type]
    assert Payload(bytearray(b"ab")).data == b"ab"  # type: ignore[arg-type]
    assert type(Payload(memoryview(b"ab")).data) is bytes  # type: ignore[arg-type]


# ----------------------------------------------------------------- request basics


def test_minimal_request_sends_only_queue_and_job_type() -> None:
    msg = EnqueueRequest("emails", "welcome").to_proto()
    assert msg.queue == "emails" and msg.job_type == "welcome"
    for name in ("payload", "priority", "max_attempts", "scheduled_at"):
        assert not msg.HasField(name)
    assert not msg.custom and not msg.trace_context and msg.idempotency_key == ""


def test_every_field_reaches_the_wire() -> None:
    when = dt.datetime(2030, 1, 2, 3, 4, 5, 600_000, tzinfo=UTC)
    req = EnqueueRequest(
        "emails", "welcome", payload=Payload(b"\x00\x01", "application/octet-stream"),
        custom={"n": 1}, priority=7, max_attempts=5, scheduled_at=when, idempotency_key="welcome-42",
        trace_context={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
    msg = req.to_proto()
    assert msg.payload.data == b"\x00\x01" and msg.payload.encoding == "application/octet-stream"
    assert msg.priority == 7 and msg.max_attempts == 5
    assert msg.scheduled_at.seconds == int(when.timestamp()) and msg.scheduled_at.nanos == 600_000_000
    assert msg.idempotency_key == "welcome-42"
    assert dict(msg.trace_context) == dict(req.trace_context)


def test_priority_zero_is_sent_as_an_explicit_override() -> None:
    msg = EnqueueRequest("q", "t", priority=0).to_proto()
    assert msg.HasField("priority") and msg.priority == 0


def test_empty_idempotency_key_means_none() -> None:
    req = EnqueueRequest("q", "t", idempotency_key="")
    assert req.idempotency_key is None
    assert req.to_proto().idempotency_key == ""


def test_requests_are_frozen_hashable_and_compare_by_value() -> None:
    a = EnqueueRequest("q", "t", custom={"k": 1})
    b = EnqueueRequest("q", "t", custom={"k": 1})
    assert a == b and hash(a) == hash(b)
    assert a != EnqueueRequest("q", "t", custom={"k": 2})
    with pytest.raises(AttributeError):
        a.queue = "other"  # type: ignore[misc]


def test_custom_map_is_a_read_only_copy() -> None:
    source: dict[str, str | int | float | bool] = {"k": 1}
    req = EnqueueRequest("q", "t", custom=source)
    source["k"] = 2
    assert req.custom["k"] == 1
    assert isinstance(req.custom, MappingProxyType)
    with pytest.raises(TypeError):
        req.custom["x"] = 1  # type: ignore[index]


def test_builders_return_new_copies_and_leave_the_original_alone() -> None:
    base = EnqueueRequest("emails", "welcome")
    when = dt.datetime(2030, 1, 1, tzinfo=UTC)
    built = (base.with_payload(b"{}", "application/json")
             .with_priority(7)
             .with_max_attempts(5)
             .with_custom_entry("user_id", 42)
             .with_custom_entry("locale", "en-US")
             .with_custom_entry("vip", True)
             .with_scheduled_at(when)
             .with_idempotency_key("welcome-user-42")
             .with_trace_context({"tracestate": "a=b"}))
    assert base == EnqueueRequest("emails", "welcome")
    assert built.payload == Payload(b"{}", "application/json")
    assert (built.priority, built.max_attempts, built.scheduled_at) == (7, 5, when)
    assert dict(built.custom) == {"user_id": 42, "locale": "en-US", "vip": True}
    assert built.idempotency_key == "welcome-user-42"
    assert built.with_json_payload([1]).payload == Payload(b"[1]", "application/json")
    assert built.with_custom({}).custom == {}


def test_with_delay_schedules_relative_to_now() -> None:
    before = dt.datetime.now(UTC)
    req = EnqueueRequest("q", "t").with_delay(60)
    assert req.scheduled_at is not None
    assert before + dt.timedelta(seconds=59) < req.scheduled_at < before + dt.timedelta(seconds=62)
    assert EnqueueRequest("q", "t").with_delay(dt.timedelta(hours=1)).scheduled_at is not None


# ----------------------------------------------------------------- scheduled_at (SPEC §6)


def test_naive_scheduled_at_raises_type_error_at_construction() -> None:
    with pytest.raises(TypeError, match="timezone-aware"):
        EnqueueRequest("q", "t", scheduled_at=dt.datetime(2030, 1, 1))
    with pytest.raises(TypeError, match="timezone-aware"):
        EnqueueRequest("q", "t").with_scheduled_at(dt.datetime.now())


def test_scheduled_at_that_is_not_a_datetime_raises_type_error() -> None:
    with pytest.raises(TypeError, match="datetime"):
        EnqueueRequest("q", "t", scheduled_at="2030-01-01T00:00:00Z")  # type: ignore[arg-type]


def test_scheduled_at_in_another_zone_is_sent_as_the_same_instant_in_utc() -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))
    local = dt.datetime(2030, 1, 1, 2, 0, tzinfo=plus_two)
    msg = EnqueueRequest("q", "t", scheduled_at=local).to_proto()
    assert msg.scheduled_at.ToDatetime(tzinfo=UTC) == dt.datetime(2030, 1, 1, 0, 0, tzinfo=UTC)


def test_scheduled_at_before_year_one_utc_is_sent_and_rejected_as_invalid_argument() -> None:
    # 0001-01-01T00:00+02:00 is still year 0 in UTC: outside Timestamp's range.
    early = dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    rejection = _validate(EnqueueRequest("q", "t", scheduled_at=early))
    assert rejection is not None
    assert (RejectionCode.from_wire(rejection.code), rejection.field) == (RejectionCode.INVALID_ARGUMENT,
                                                                          "scheduled_at")


# ----------------------------------------------------------------- custom map typing


def test_custom_values_keep_their_type_on_the_wire_and_bool_is_not_int() -> None:
    msg = EnqueueRequest("q", "t", custom={"b": True, "i": 1, "f": 1.0, "s": "1"}).to_proto()
    kinds = {key: value.WhichOneof("kind") for key, value in msg.custom.items()}
    assert kinds == {"b": "bool_value", "i": "int_value", "f": "float_value", "s": "string_value"}
    assert msg.custom["b"].bool_value is True and msg.custom["i"].int_value == 1


@pytest.mark.parametrize("value", [INT64_MAX, INT64_MIN, 0, -1])
def test_custom_ints_at_the_int64_edges_round_trip_exactly(value: int) -> None:
    msg = EnqueueRequest("q", "t", custom={"n": value}).to_proto()
    assert msg.custom["n"].int_value == value


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 10**30])
def test_custom_int_outside_int64_raises_overflow_error(value: int) -> None:
    with pytest.raises(OverflowError, match="int64"):
        EnqueueRequest("q", "t", custom={"n": value})


def test_custom_floats_are_float64_and_nan_is_left_to_validation() -> None:
    req = EnqueueRequest("q", "t", custom={"x": math.nan, "y": 0.1})
    assert req.to_proto().custom["y"].float_value == 0.1
    rejection = _validate(req)
    assert rejection is not None
    assert RejectionCode.from_wire(rejection.code) is RejectionCode.INVALID_ARGUMENT
    assert rejection.field == "custom[x]"


@pytest.mark.parametrize("value", [None, [1], {"a": 1}, b"bytes", 1j])
def test_custom_values_of_other_types_raise_type_error(value: object) -> None:
    with pytest.raises(TypeError, match=r"custom\[k\]"):
        EnqueueRequest("q", "t", custom={"k": value})  # type: ignore[dict-item]


def test_custom_key_must_be_str() -> None:
    with pytest.raises(TypeError, match="custom key"):
        EnqueueRequest("q", "t", custom={1: "x"})  # type: ignore[dict-item]


# ----------------------------------------------------------------- other construction errors


@pytest.mark.parametrize("field", ["priority", "max_attempts"])
def test_priority_and_max_attempts_must_be_int32(field: str) -> None:
    with pytest.raises(OverflowError, match="int32"):
        EnqueueRequest("q", "t", **{field: 2**31})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        EnqueueRequest("q", "t", **{field: True})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        EnqueueRequest("q", "t", **{field: 1.5})  # type: ignore[arg-type]


def test_priority_out_of_range_is_a_rejection_not_a_construction_error() -> None:
    req = EnqueueRequest("q", "t", priority=10)
    rejection = _validate(req)
    assert rejection is not None and rejection.field == "priority"


def test_strings_with_lone_surrogates_raise_value_error() -> None:
    with pytest.raises(ValueError, match="UTF-8"):
        EnqueueRequest("q\udc80", "t")
    with pytest.raises(ValueError, match="UTF-8"):
        EnqueueRequest("q", "t", custom={"k": "\ud800"})


def test_queue_and_job_type_must_be_str() -> None:
    with pytest.raises(TypeError, match="queue"):
        EnqueueRequest(b"q", "t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="payload"):
        EnqueueRequest("q", "t", payload=b"raw")  # type: ignore[arg-type]


# ----------------------------------------------------------------- results


def test_rejection_str_shows_code_message_and_details() -> None:
    rejection = Rejection(RejectionCode.PAYLOAD_TOO_LARGE, "payload is too large", "payload.data", 1024, 2048)
    expected = "PayloadTooLarge: payload is too large (field payload.data, limit 1024, actual 2048)"
    assert str(rejection) == expected
    assert str(Rejection(RejectionCode.UNKNOWN_QUEUE)) == "UnknownQueue"
    indexed = IndexedRejection(3, rejection)
    assert str(indexed).startswith("job 3: PayloadTooLarge")


def test_rejection_round_trips_through_the_wire_form() -> None:
    rejection = Rejection(RejectionCode.CUSTOM_KEY_TOO_LONG, "too long", "custom[é]", 64, 65)
    assert Rejection.from_proto(rejection.to_proto()) == rejection
    bare = Rejection(RejectionCode.QUEUE_NAME_INVALID, "empty", "queue")
    assert Rejection.from_proto(bare.to_proto()) == bare


def test_a_rejection_code_from_a_newer_server_still_reads_as_a_rejection() -> None:
    msg = pb.Rejection(code=99, message="new rule", field="x")  # type: ignore[arg-type]
    rejection = Rejection.from_proto(msg)
    assert rejection.code is RejectionCode.INVALID_ARGUMENT
    assert "99" in rejection.message and rejection.field == "x"


def test_ack_from_proto() -> None:
    ack = EnqueueAck.from_proto(pb.EnqueueAck(job_id="abc", deduplicated=True))
    assert ack == EnqueueAck("abc", True)


# ----------------------------------------------------------------- server info


def _info(strict: bool) -> ServerInfo:
    msg = ppb.ServerInfo(version="0.1.0", features=["enqueue_atomic"], persist_mode=pb.SYNC, strict=strict)
    msg.limits.CopyFrom(pb.ServerLimits(
        max_enqueue_batch=10, max_attempts_ceiling=50, max_queue_name_bytes=128, max_job_type_bytes=256,
        max_idempotency_key_bytes=256, max_encoding_bytes=128, max_trace_entries=8,
        max_trace_value_bytes=512))
    msg.limits.max_schedule_horizon.seconds = 3600
    msg.queue_defaults.default_priority = 5
    msg.queue_defaults.default_max_attempts = 10
    msg.queue_defaults.lease_duration.seconds = 30
    msg.queue_defaults.limits.CopyFrom(pb.QueueLimits(max_payload_bytes=100, max_custom_entries=4,
                                                      max_custom_key_bytes=8, max_custom_bytes=64))
    queue = msg.queues.add(name="emails", declared=True)
    queue.settings.CopyFrom(msg.queue_defaults)
    queue.settings.limits.max_payload_bytes = 7
    queue.settings.limits.allowed_encodings.append("application/json")
    return ServerInfo.from_proto(msg)


def test_server_info_from_proto_reads_limits_modes_and_queues() -> None:
    info = _info(strict=False)
    assert info.version == "0.1.0" and info.persist_mode == "sync" and not info.strict
    assert info.has_feature("enqueue_atomic") and not info.has_feature("nope")
    assert info.limits.max_enqueue_batch == 10 and info.limits.max_schedule_horizon == 3600.0
    assert info.queue_defaults.lease_duration == 30.0
    assert list(info.queues) == ["emails"]
    assert info.queues["emails"].settings.limits.allowed_encodings == ("application/json",)


def test_server_info_queue_limits_follow_the_strict_rule() -> None:
    relaxed, strict = _info(strict=False), _info(strict=True)
    assert relaxed.queue_limits("emails") == strict.queue_limits("emails")
    assert relaxed.queue_limits("emails") is not None
    assert relaxed.queue_limits("emails").max_payload_bytes == 7  # type: ignore[union-attr]
    assert relaxed.queue_limits("other") == relaxed.queue_defaults.limits
    assert strict.queue_limits("other") is None


def test_payload_json_after_an_error_starts_clean() -> None:
    """``Payload.json`` reuses one C encoder for every call and thread: a call that raised
    leaves nothing behind (a stale circular-reference marker would refuse a later object)."""
    import threading

    for bad in ({"a": {"b": object()}}, [[float("nan")]]):
        with pytest.raises((TypeError, ValueError)):
            Payload.json(bad)
    for i in range(1000):
        assert Payload.json({"a": [{"i": i}]}).data == b'{"a":[{"i":%d}]}' % i
    seen: list[bytes] = []
    threads = [threading.Thread(target=lambda: seen.append(Payload.json({"x": [1, {"y": "é"}]}).data))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == ['{"x":[1,{"y":"é"}]}'.encode()] * 4


def test_values_filled_in_as_drafts_are_ordinary_frozen_instances() -> None:
    """``EnqueueRequest``, ``Payload`` and ``fresh_acks`` fill their instances in through a
    draft class of the same layout (``_fill`` in ``sepp.request.payload``): what comes out is an instance of
    the frozen class itself — same type, repr, eq, hash, and still frozen — and a subclass's
    instance (filled with slot setters) keeps its own class."""
    import dataclasses

    from sepp.request import fresh_acks

    req = EnqueueRequest("q", "t", payload=Payload.json({"i": 1}), priority=3)
    assert type(req) is EnqueueRequest and type(req.payload) is Payload
    assert type(Payload(b"x", "e")) is Payload
    assert req == EnqueueRequest("q", "t", payload=Payload(b'{"i":1}', "application/json"), priority=3)
    assert hash(req) == hash(dataclasses.replace(req))
    assert repr(req).startswith("EnqueueRequest(queue='q', job_type='t', payload=Payload(data=b'{\"i\":1}'")
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.queue = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.payload.data = b""  # type: ignore[misc, union-attr]

    class MyRequest(EnqueueRequest):
        __slots__ = ()

    class MyPayload(Payload):
        __slots__ = ()

    mine = MyRequest("q", "t", payload=MyPayload(b"x"))
    assert type(mine) is MyRequest and type(mine.payload) is MyPayload and mine.queue == "q"
    assert type(MyPayload.json([1])) is MyPayload and MyPayload.json([1]).data == b"[1]"

    acks = fresh_acks(["a", "b"])
    assert acks == [EnqueueAck("a"), EnqueueAck("b")] and all(type(a) is EnqueueAck for a in acks)
    with pytest.raises(dataclasses.FrozenInstanceError):
        acks[0].job_id = "c"  # type: ignore[misc]
