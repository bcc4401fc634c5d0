"""Unit tests of the shared validator, no server (SPEC §2 "Rejection catalogue").

``sepp.validation.Validator`` is what both the server and the client run, so its
verdicts are the catalogue. Covered here: the UTF-8 measures (``utf8_len``,
``custom_value_size``), ``traceparent_valid`` against W3C Trace Context, every check
at its exact boundary with small custom limits (including ``ScheduledTooFar`` to the
nanosecond, which the integration tests cannot pin), the fixed order, deterministic
choice among several bad custom keys, the queue lookup being consulted only once
the request is well-formed, and — by property tests — that a long-lived validator
(which caches names that passed) agrees with a fresh one and that byte limits are
measured in UTF-8 bytes for arbitrary text.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import validation_cases

from sepp.api.v1 import common_pb2 as pb
from sepp.limits import QueueLimits, ServerLimits
from sepp.validation import Validator, custom_value_size, traceparent_valid, utf8_len
from sepp.wire import custom_to_proto

NOW = 1_700_000_000 * 10**9  # a fixed "now", ns
LIM = ServerLimits(max_attempts_ceiling=20, max_queue_name_bytes=8, max_job_type_bytes=6,
                   max_schedule_horizon=100.0, max_idempotency_key_bytes=4, max_encoding_bytes=5,
                   max_trace_entries=2, max_trace_value_bytes=60)
QLIM = QueueLimits(max_payload_bytes=10, allowed_encodings=("a/b", "c"), max_custom_entries=3,
                   max_custom_key_bytes=4, max_custom_bytes=20)
OPEN = QueueLimits(max_payload_bytes=10, max_custom_entries=3, max_custom_key_bytes=4, max_custom_bytes=20)
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def lookup(name: str) -> QueueLimits | None:
    """``enc`` restricts encodings, ``open`` does not, anything else is unknown (strict)."""
    return {"enc": QLIM, "open": OPEN}.get(name)


def req(queue: str = "open", job_type: str = "t", *, data: bytes = b"", encoding: str = "",
        custom: Mapping[str, Any] | None = None, trace: Mapping[str, str] | None = None, at_ns: int | None = None,
        **fields: Any) -> pb.EnqueueRequest:
    """A request; ``custom`` values are Python primitives (or CustomValue), ``at_ns`` sets
    scheduled_at, other keywords are EnqueueRequest fields."""
    r = pb.EnqueueRequest(queue=queue, job_type=job_type, payload=pb.Payload(data=data, encoding=encoding),
                          **fields)
    for k, v in (custom or {}).items():
        r.custom[k].CopyFrom(v if isinstance(v, pb.CustomValue) else custom_to_proto(v))
    for k, s in (trace or {}).items():
        r.trace_context[k] = s
    if at_ns is not None:
        r.scheduled_at.seconds, r.scheduled_at.nanos = divmod(at_ns, 10**9)
    return r


def verdict(r: pb.EnqueueRequest, validator: Validator | None = None, now: int = NOW) -> tuple[object, ...] | None:
    """(reason, field, limit, actual) of the rejection, or None."""
    rej = (validator or Validator(LIM, lookup)).validate(r, now)
    if rej is None:
        return None
    return (pb.RejectionCode.Name(rej.code), rej.field, rej.limit if rej.HasField("limit") else None,
            rej.actual if rej.HasField("actual") else None)


# ---------------------------------------------------------------- measures


def test_utf8_len_counts_bytes_not_characters() -> None:
    assert [utf8_len(s) for s in ("", "abc", "é", "€", "😀", "aé€😀")] == [0, 3, 2, 3, 4, 10]


def test_custom_value_size_is_utf8_bytes_for_strings_8_for_numbers_1_for_bool() -> None:
    sizes = [custom_value_size(custom_to_proto(v)) for v in ("", "é€", 0, -(2**63), 1.5, float("nan"), True, False)]
    assert sizes == [0, 5, 8, 8, 8, 8, 1, 1]


@pytest.mark.parametrize(("value", "valid"), [
    (TP, True),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", True),
    ("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more-fields", True),
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", False),
    ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
    (TP.upper(), False),
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", False),
    (TP + "-extra", False),
    (TP[:-1], False),
    (TP + "0", False),
    ("00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", False),
    ("0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
    ("", False),
    (" " + TP, False),
])
def test_traceparent_follows_w3c_trace_context(value: str, valid: bool) -> None:
    assert traceparent_valid(value) is valid


# ---------------------------------------------------------------- every check at its boundary
# The cases live in tests/data/validation_cases.json, shared with the clients' live tests
# (tests/integration/test_validation_table.py, clients/rust/tests/validation_table.rs).


def test_the_shared_table_is_judged_under_these_limits() -> None:
    server = validation_cases.SERVER
    assert server["strict"] is True
    assert LIM == ServerLimits(**server["limits"])
    assert QLIM == QueueLimits(**server["queues"]["enc"]["limits"])
    assert OPEN == QueueLimits(**server["queues"]["open"]["limits"])


@pytest.mark.parametrize("case", validation_cases.CASES, ids=[c["id"] for c in validation_cases.CASES])
def test_each_check_at_its_boundary(case: dict[str, Any]) -> None:
    assert verdict(validation_cases.wire_request(case, NOW)) == validation_cases.expected(case)


# ---------------------------------------------------------------- order and determinism


def test_catalogue_order_walks_down_as_each_failure_is_fixed() -> None:
    """A request failing all twelve checks reports them in catalogue order as each is fixed."""
    r = req(".x", "", priority=10, data=b"x" * 11, encoding="zz",
            custom={"a": 1, "b": 2, "c": 3, "ddddd": "x" * 30}, at_ns=NOW + 10**12, idempotency_key="kkkkk",
            trace={"a": "1", "b": "2", "c": "3"})
    r.depends_on.extend(str(uuid.UUID(int=i)) for i in range(257))

    def long_key_to_big_value() -> None:
        r.custom.pop("ddddd")
        r.custom["d"].CopyFrom(custom_to_proto("x" * 30))

    fixes: list[Callable[[], object]] = [
        lambda: r.ClearField("priority"),
        lambda: setattr(r, "queue", "nope"),
        lambda: setattr(r, "job_type", "t"),
        lambda: setattr(r, "queue", "enc"),
        lambda: setattr(r.payload, "data", b""),
        lambda: setattr(r.payload, "encoding", "c"),
        lambda: r.custom.pop("a"),
        long_key_to_big_value,
        lambda: r.custom.pop("d"),
        lambda: r.ClearField("scheduled_at"),
        lambda: setattr(r, "idempotency_key", "k"),
        lambda: r.trace_context.pop("c"),
        lambda: r.depends_on.pop(),
    ]
    order = []
    for fix in fixes:
        v = verdict(r)
        assert v is not None
        order.append(v[0])
        fix()
    assert verdict(r) is None
    # Every enqueue check in catalogue order; RESULT_TOO_LARGE is an ack's, not a job's, and
    # DEPENDENCY_NOT_FOUND the store's (whether a job exists is known only in the enqueue's commit).
    assert order == [c for c in list(pb.RejectionCode.keys())[1:]
                     if c not in ("RESULT_TOO_LARGE", "DEPENDENCY_NOT_FOUND")]


def test_among_several_bad_keys_the_smallest_is_reported_whatever_the_insertion_order() -> None:
    keys = ["zzzzz", "bbbbbb", "aaaaaaa"]
    for order in (keys, keys[::-1], keys[1:] + keys[:1]):
        assert verdict(req(custom={k: 1 for k in order})) == ("CUSTOM_KEY_TOO_LONG", "custom[aaaaaaa]", 4, 7)
    assert verdict(req(custom={"z": math.nan, "y": math.inf, "": 1})) == ("INVALID_ARGUMENT", "custom[]", None, None)


def test_the_queue_lookup_runs_only_for_a_well_formed_request() -> None:
    """The lookup (which in non-strict mode may create the queue) is not consulted for a
    request refused by checks 1–3."""
    seen: list[str] = []

    def recording(name: str) -> QueueLimits | None:
        seen.append(name)
        return OPEN

    v = Validator(LIM, recording)
    for bad in (req(priority=10), req(queue=".x"), req(job_type="")):
        assert v.validate(bad, NOW) is not None
    assert seen == []
    assert v.validate(req(queue="good"), NOW) is None
    assert seen == ["good"]


# ---------------------------------------------------------------- properties

names = st.text(alphabet=st.sampled_from("ab.:-_é 0\n"), max_size=10)
types = st.text(st.characters(codec="utf-8"), max_size=8)
small = st.one_of(st.none(), st.integers(-2, 25))


custom_values = st.one_of(st.integers(-(2**63), 2**63 - 1), st.booleans(), st.text(max_size=8),
                          st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def requests(draw: st.DrawFn) -> pb.EnqueueRequest:
    kw: dict[str, Any] = {}
    if (p := draw(small)) is not None:
        kw["priority"] = p
    if (m := draw(small)) is not None:
        kw["max_attempts"] = m
    return req(draw(st.one_of(names, st.sampled_from(["open", "enc", "nope"]))), draw(types),
               encoding=draw(st.sampled_from(["", "a/b", "c", "zzzzzz", "é€"])),
               data=b"x" * draw(st.integers(0, 12)),
               custom=draw(st.dictionaries(st.text(max_size=6), custom_values, max_size=4)),
               idempotency_key=draw(st.text(max_size=6)), **kw)


@settings(max_examples=300, deadline=None)
@given(st.lists(requests(), min_size=1, max_size=8))
def test_a_long_lived_validator_agrees_with_a_fresh_one(reqs: list[pb.EnqueueRequest]) -> None:
    """The validator remembers names/types/encodings that passed; that must never change a verdict."""
    shared = Validator(LIM, lookup)
    for r in reqs + reqs[::-1]:
        assert verdict(r, shared) == verdict(r, Validator(LIM, lookup))


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=1, max_size=10))
def test_job_type_length_is_measured_in_utf8_bytes(text: str) -> None:
    size = len(text.encode("utf-8"))
    expected = None if size <= LIM.max_job_type_bytes else ("JOB_TYPE_INVALID", "job_type", 6, size)
    assert verdict(req(job_type=text)) == expected


def test_a_long_key_is_quoted_and_clipped_in_the_verdict() -> None:
    # A refusal names a caller's value with at most 200 bytes of it.
    v = Validator(LIM, lookup)
    key = "k" * 10_240
    untyped = req(custom={key: pb.CustomValue()})
    rejection = v.validate(untyped, NOW)
    assert rejection is not None
    assert rejection.field == "custom[" + "k" * 200 + "…]"
    assert rejection.message == "custom value '" + "k" * 200 + "…' (10240 bytes) has no type"
    too_long = v.validate(req(custom={key: 1}), NOW)
    assert too_long is not None and too_long.field == "custom[" + "k" * 200 + "…]" and too_long.actual == 10_240
    trace = v.validate(req(trace={key: "v" * 61}), NOW)
    assert trace is not None and trace.field == "trace_context[" + "k" * 200 + "…]"
    # At the limit the key is named whole.
    at_limit = v.validate(req(custom={"k" * 200: pb.CustomValue()}), NOW)
    assert at_limit is not None and at_limit.field == f"custom[{'k' * 200}]"


def test_the_dependency_failure_policy_is_one_of_the_enum_values() -> None:
    for known in pb.DependencyFailure.values():
        assert verdict(req(on_dependency_failure=known)) is None
    assert verdict(req(on_dependency_failure=4)) == ("INVALID_ARGUMENT", "on_dependency_failure", None, None)
    assert verdict(req(on_dependency_failure=-1)) == ("INVALID_ARGUMENT", "on_dependency_failure", None, None)
