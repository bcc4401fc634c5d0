"""The rejection catalogue at its boundaries, over the wire (SPEC §2 "Rejection catalogue", "Wire form").

Against real ``sepp serve`` processes (one lax, one strict) and through the raw stubs:

* every row of the catalogue at its boundary — the limit itself is accepted, one past
  it is refused with the right code, gRPC status (NOT_FOUND for UnknownQueue,
  INVALID_ARGUMENT otherwise), ErrorInfo (reason UPPER_SNAKE, domain ``sepp``) and
  details (field, limit, actual); byte limits are measured in UTF-8 bytes with 2-, 3-
  and 4-byte characters;
* the fixed validation order when two checks fail, and a walk through all twelve
  checks failing at once, fixed one by one;
* the same verdicts per job in ``EnqueueBatch`` (a ``Rejection`` in the result) and as
  indexed ``AtomicRejections`` in a failed ``EnqueueAtomic``;
* determinism: the same request gets the same rejection again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from support.failures import fails
from support.producer import MiB, Stubs, assert_rejected, assert_rejection, connect, job
from support.servers import backend_config

from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess

H365 = 365 * 24 * 3600
ENCODINGS = ["application/json", "text/plain; charset=utf-8"]
QUEUES = {"q": {}, "enc": {"limits": {"allowed_encodings": ENCODINGS}}}
VALID_TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

E2, E3, E4 = "é", "€", "😀"  # 2-, 3- and 4-byte UTF-8 characters
assert [len(c.encode()) for c in (E2, E3, E4)] == [2, 3, 4]


# ---------------------------------------------------------------- servers


def _start(tmp_path_factory: pytest.TempPathFactory, backend: str, name: str,
           **config: object) -> Iterator[ServerProcess]:
    settings = {"sweep_interval": 0.05, **backend_config(backend), **config}
    proc = ServerProcess(Path(tmp_path_factory.mktemp(name)), settings)
    proc.start()
    try:
        yield proc
    finally:
        try:
            proc.terminate(timeout=15)
        finally:
            proc.kill()


@pytest.fixture(scope="module")
def lax(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[Stubs]:
    """A non-strict server with default limits and a queue ``enc`` that restricts encodings."""
    for proc in _start(tmp_path_factory, backend, "lax", strict=False, queues=QUEUES):
        with connect(proc.grpc_target) as stubs:
            yield stubs


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[Stubs]:
    """A strict server declaring ``q`` and ``enc`` (same settings as on ``lax``)."""
    for proc in _start(tmp_path_factory, backend, "strict", strict=True, queues=QUEUES):
        with connect(proc.grpc_target) as stubs:
            yield stubs


# ---------------------------------------------------------------- the case table


@dataclass(frozen=True)
class Case:
    """One request and its expected verdict: ``reason`` None = accepted."""

    id: str
    build: Callable[[], pb.EnqueueRequest]
    reason: str | None = None
    meta: dict[str, str] = field(default_factory=dict)
    strict: bool = False


def ok(id: str, build: Callable[[], pb.EnqueueRequest], strict: bool = False) -> Case:
    """A request that must be accepted."""
    return Case(id, build, strict=strict)


def bad(id: str, build: Callable[[], pb.EnqueueRequest], reason: str, strict: bool = False,
        **meta: object) -> Case:
    """A request that must be refused with ``reason`` and exactly the details ``meta``."""
    return Case(id, build, reason, {k: str(v) for k, v in meta.items()}, strict)


def _entries(n: int) -> dict[str, object]:
    return {f"k{i:02d}": i for i in range(n)}


def _trace(n: int) -> dict[str, str]:
    return {"traceparent": VALID_TP, **{f"vendor{i}": "v" for i in range(n - 1)}}


def _key() -> str:
    return uuid.uuid4().hex


def _bad_traceparent(name: str, traceparent: str) -> Case:
    return bad(f"traceparent {name}", lambda: job(trace={"traceparent": traceparent}), TCI,
               field="trace_context[traceparent]")


IA, QNI, JTI, UQ = "INVALID_ARGUMENT", "QUEUE_NAME_INVALID", "JOB_TYPE_INVALID", "UNKNOWN_QUEUE"
PTL, ENA, CETM = "PAYLOAD_TOO_LARGE", "ENCODING_NOT_ALLOWED", "CUSTOM_ENTRIES_TOO_MANY"
CKTL, CMTL, STF = "CUSTOM_KEY_TOO_LONG", "CUSTOM_MAP_TOO_LARGE", "SCHEDULED_TOO_FAR"
IKTL, TCI = "IDEMPOTENCY_KEY_TOO_LONG", "TRACE_CONTEXT_INVALID"

K64_E3 = E3 * 21 + "a"  # 63 + 1 = 64 bytes
K64_E4 = E4 * 16  # 64 bytes
MIXED = {"i": 1, "f": 1.5, "b": True}  # (1+8) + (1+8) + (1+1) = 20 bytes

CASES: list[Case] = [
    # ---- InvalidArgument: malformed fields
    ok("priority=0", lambda: job(priority=0)),
    ok("priority=9", lambda: job(priority=9)),
    bad("priority=-1", lambda: job(priority=-1), IA, field="priority", limit=0, actual=-1),
    bad("priority=10", lambda: job(priority=10), IA, field="priority", limit=9, actual=10),
    ok("max_attempts=1", lambda: job(max_attempts=1)),
    ok("max_attempts=1000", lambda: job(max_attempts=1000)),
    bad("max_attempts=0", lambda: job(max_attempts=0), IA, field="max_attempts", limit=1, actual=0),
    bad("max_attempts=-5", lambda: job(max_attempts=-5), IA, field="max_attempts", limit=1, actual=-5),
    bad("max_attempts=1001", lambda: job(max_attempts=1001), IA, field="max_attempts", limit=1000, actual=1001),
    bad("custom NaN", lambda: job(custom={"x": float("nan")}), IA, field="custom[x]"),
    bad("custom +inf", lambda: job(custom={"x": float("inf")}), IA, field="custom[x]"),
    bad("custom -inf", lambda: job(custom={"x": float("-inf")}), IA, field="custom[x]"),
    ok("custom finite extremes", lambda: job(custom={"max": 1.7976931348623157e308, "tiny": 5e-324,
                                                     "i": -(2**63), "j": 2**63 - 1})),
    bad("custom empty key", lambda: job(custom={"": 1}), IA, field="custom[]"),
    bad("custom value unset", lambda: job(custom={"x": pb.CustomValue()}), IA, field="custom[x]"),
    ok("encoding 128 bytes (é)", lambda: job(data=b"{}", encoding=E2 * 64)),
    bad("encoding 129 bytes (€)", lambda: job(data=b"{}", encoding=E3 * 43), IA,
        field="payload.encoding", limit=128, actual=129),
    bad("encoding 129 bytes (ascii)", lambda: job(encoding="e" * 129), IA,
        field="payload.encoding", limit=128, actual=129),
    bad("scheduled_at beyond year 9999", lambda: job(scheduled_at=253402300800.0), IA, field="scheduled_at"),
    # ---- QueueNameInvalid
    ok("queue 128 bytes", lambda: job(queue="q" * 128)),
    ok("queue with every allowed char", lambda: job(queue="Az09._:-x")),
    ok("queue starting with a digit", lambda: job(queue="0-queue")),
    bad("queue 129 bytes", lambda: job(queue="q" * 129), QNI, field="queue", limit=128, actual=129),
    bad("queue 130 bytes of é", lambda: job(queue=E2 * 65), QNI, field="queue", limit=128, actual=130),
    bad("queue empty", lambda: job(queue=""), QNI, field="queue"),
    bad("queue with a space", lambda: job(queue="a b"), QNI, field="queue"),
    bad("queue with a slash", lambda: job(queue="a/b"), QNI, field="queue"),
    bad("queue with a star", lambda: job(queue="a*"), QNI, field="queue"),
    bad("queue with non-ascii", lambda: job(queue="caf" + E2), QNI, field="queue"),
    bad("queue with a newline", lambda: job(queue="a\n"), QNI, field="queue"),
    bad("queue '.'", lambda: job(queue="."), QNI, field="queue"),
    bad("queue '..'", lambda: job(queue=".."), QNI, field="queue"),
    bad("queue '.hidden'", lambda: job(queue=".hidden"), QNI, field="queue"),
    bad("queue '-x'", lambda: job(queue="-x"), QNI, field="queue"),
    bad("queue ':x'", lambda: job(queue=":x"), QNI, field="queue"),
    bad("queue '_x'", lambda: job(queue="_x"), QNI, field="queue"),
    # ---- JobTypeInvalid
    ok("job_type 256 bytes (é)", lambda: job(job_type=E2 * 128)),
    ok("job_type 256 bytes (€)", lambda: job(job_type=E3 * 85 + "a")),
    ok("job_type 256 bytes (emoji)", lambda: job(job_type=E4 * 64)),
    ok("job_type with spaces and symbols", lambda: job(job_type="send email → user 😀")),
    bad("job_type 257 bytes (é)", lambda: job(job_type=E2 * 128 + "a"), JTI, field="job_type", limit=256,
        actual=257),
    bad("job_type 258 bytes (€)", lambda: job(job_type=E3 * 86), JTI, field="job_type", limit=256, actual=258),
    bad("job_type 257 bytes (emoji)", lambda: job(job_type=E4 * 64 + "a"), JTI, field="job_type", limit=256,
        actual=257),
    bad("job_type empty", lambda: job(job_type=""), JTI, field="job_type"),
    bad("job_type NUL", lambda: job(job_type="a\x00b"), JTI, field="job_type"),
    bad("job_type tab", lambda: job(job_type="a\tb"), JTI, field="job_type"),
    bad("job_type newline", lambda: job(job_type="line\n"), JTI, field="job_type"),
    bad("job_type ESC", lambda: job(job_type="\x1b[31mred"), JTI, field="job_type"),
    bad("job_type DEL", lambda: job(job_type="del\x7f"), JTI, field="job_type"),
    bad("job_type C1 NEL", lambda: job(job_type="c1\x85"), JTI, field="job_type"),
    # ---- UnknownQueue (strict server)
    ok("strict: declared queue", lambda: job(queue="q"), strict=True),
    bad("strict: undeclared queue", lambda: job(queue="undeclared"), UQ, strict=True, field="queue"),
    # ---- PayloadTooLarge
    ok("payload empty", lambda: job(data=b"")),
    ok("payload exactly 1 MiB", lambda: job(data=b"\xff" * MiB)),
    bad("payload 1 MiB + 1", lambda: job(data=b"\xff" * (MiB + 1)), PTL, field="payload.data", limit=MiB,
        actual=MiB + 1),
    # ---- EncodingNotAllowed (queue "enc" allows two labels, exact match)
    ok("allowed encoding", lambda: job(queue="enc", data=b"{}", encoding="application/json")),
    ok("allowed encoding with params", lambda: job(queue="enc", encoding="text/plain; charset=utf-8")),
    ok("any encoding on an unrestricted queue", lambda: job(encoding="x-custom/whatever")),
    bad("encoding differs in case", lambda: job(queue="enc", encoding="application/JSON"), ENA,
        field="payload.encoding"),
    bad("encoding with extra space", lambda: job(queue="enc", encoding=" application/json"), ENA,
        field="payload.encoding"),
    bad("encoding empty on a restricted queue", lambda: job(queue="enc", data=b"{}"), ENA,
        field="payload.encoding"),
    # ---- CustomEntriesTooMany
    ok("custom 32 entries", lambda: job(custom=_entries(32))),
    bad("custom 33 entries", lambda: job(custom=_entries(33)), CETM, field="custom", limit=32, actual=33),
    # ---- CustomKeyTooLong
    ok("custom key 64 bytes (€)", lambda: job(custom={K64_E3: 1})),
    ok("custom key 64 bytes (emoji)", lambda: job(custom={K64_E4: True})),
    bad("custom key 65 bytes (€)", lambda: job(custom={K64_E3 + "b": 1}), CKTL, field=f"custom[{K64_E3}b]",
        limit=64, actual=65),
    bad("custom key 68 bytes (emoji)", lambda: job(custom={K64_E4 + E4: 1}), CKTL, field=f"custom[{K64_E4}{E4}]",
        limit=64, actual=68),
    # ---- CustomMapTooLarge: Σ(key bytes + value size); str = UTF-8 bytes, int/float 8, bool 1
    ok("custom map 8192 bytes (ascii)", lambda: job(custom={"k": "a" * 8191})),
    ok("custom map 8192 bytes (é value)", lambda: job(custom={"k": E2 * 4095 + "a"})),
    ok("custom map 8192 bytes (é key)", lambda: job(custom={E2: "a" * 8190})),
    ok("custom map 8192 bytes (mixed types)", lambda: job(custom={**MIXED, "s": "a" * 8171})),
    ok("custom map 8192 bytes (bool false counts 1)", lambda: job(custom={**MIXED, "b": False, "s": "a" * 8171})),
    bad("custom map 8193 bytes (ascii)", lambda: job(custom={"k": "a" * 8192}), CMTL, field="custom",
        limit=8192, actual=8193),
    bad("custom map 8193 bytes (é value)", lambda: job(custom={"k": E2 * 4096}), CMTL, field="custom",
        limit=8192, actual=8193),
    bad("custom map 8193 bytes (é key)", lambda: job(custom={E2: "a" * 8191}), CMTL, field="custom",
        limit=8192, actual=8193),
    bad("custom map 8199 bytes (bool→int)", lambda: job(custom={**MIXED, "b": 7, "s": "a" * 8171}), CMTL,
        field="custom", limit=8192, actual=8199),
    bad("custom map 8199 bytes (bool→float)", lambda: job(custom={**MIXED, "b": 0.5, "s": "a" * 8171}), CMTL,
        field="custom", limit=8192, actual=8199),
    # ---- ScheduledTooFar (a few seconds either side of the 365-day horizon)
    ok("scheduled_at horizon - 5 s", lambda: job(scheduled_at=time.time() + H365 - 5)),
    ok("scheduled_at in the past", lambda: job(scheduled_at=time.time() - 3600)),
    ok("scheduled_at at the epoch", lambda: job(scheduled_at=0.0)),
    bad("scheduled_at horizon + 5 s", lambda: job(scheduled_at=time.time() + H365 + 5), STF, field="scheduled_at",
        limit=H365, actual=H365 + 5),
    bad("scheduled_at in year 9999", lambda: job(scheduled_at=253402300799.0), STF, field="scheduled_at",
        limit=H365),
    # ---- IdempotencyKeyTooLong
    ok("idempotency key 256 bytes (é)", lambda: job(key=E2 * 128)),
    ok("idempotency key 256 bytes (emoji)", lambda: job(key=E4 * 64)),
    bad("idempotency key 257 bytes", lambda: job(key=E2 * 128 + "a"), IKTL, field="idempotency_key", limit=256,
        actual=257),
    bad("idempotency key 259 bytes (€)", lambda: job(key=E3 * 86 + "a"), IKTL, field="idempotency_key",
        limit=256, actual=259),
    # ---- TraceContextInvalid
    ok("trace 8 entries", lambda: job(trace=_trace(8))),
    bad("trace 9 entries", lambda: job(trace=_trace(9)), TCI, field="trace_context", limit=8, actual=9),
    ok("trace value 512 bytes", lambda: job(trace={"tracestate": E2 * 256})),
    bad("trace value 513 bytes", lambda: job(trace={"tracestate": E2 * 256 + "a"}), TCI,
        field="trace_context[tracestate]", limit=512, actual=513),
    ok("traceparent valid", lambda: job(trace={"traceparent": VALID_TP, "tracestate": "rojo=00f067aa0ba902b7"})),
    ok("traceparent of a future version with more fields", lambda: job(trace={
        "traceparent": "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future"})),
    ok("no traceparent, other keys", lambda: job(trace={"baggage": "k=v"})),
    *[_bad_traceparent(name, tp) for name, tp in [
          ("all-zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
          ("all-zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),
          ("uppercase hex", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"),
          ("version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
          ("version 00 with extra field", VALID_TP + "-extra"),
          ("short trace id", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"),
          ("non-hex flags", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g"),
          ("empty", ""),
      ]],
]
_ids = [c.id for c in CASES]
assert len(set(_ids)) == len(_ids), "case ids must be unique"

# Cases whose ``actual`` depends on the clock: checked within a few seconds, then taken as reported.
_CLOCK_DEPENDENT = {"scheduled_at in year 9999"}


def _stubs(case: Case, lax: Stubs, strict: Stubs) -> Stubs:
    return strict if case.strict else lax


def _expected_meta(case: Case, got: dict[str, str]) -> dict[str, str]:
    if case.id in _CLOCK_DEPENDENT:
        ahead = int(got["actual"])
        assert abs(253402300799 - time.time() - ahead) <= 5, ahead
        return {**case.meta, "actual": got["actual"]}
    return case.meta


# ---------------------------------------------------------------- single Enqueue


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_enqueue_verdict_at_the_boundary(case: Case, lax: Stubs, strict: Stubs) -> None:
    """Each catalogue row: the limit passes, one past it fails with code, status and details."""
    stubs = _stubs(case, lax, strict)
    req = case.build()
    if case.reason is None:
        ack = stubs.enqueue(req)
        assert uuid.UUID(ack.job_id).version == 7
        return
    failure = fails(stubs.enqueue, req)
    assert failure.error_info is not None
    assert_rejected(failure, case.reason, _expected_meta(case, dict(failure.error_info.metadata)))


@pytest.mark.parametrize("case", [c for c in CASES if c.reason and c.id not in _CLOCK_DEPENDENT][::5],
                         ids=lambda c: c.id)
def test_the_same_request_gets_the_same_rejection(case: Case, lax: Stubs, strict: Stubs) -> None:
    """A rejection is deterministic: re-sending the request gives an identical status."""
    stubs = _stubs(case, lax, strict)
    req = case.build()
    first, second = fails(stubs.enqueue, req), fails(stubs.enqueue, req)
    assert first.status is not None and second.status is not None
    assert first.status.SerializeToString(deterministic=True) == second.status.SerializeToString(deterministic=True)


def test_a_rejected_key_is_not_claimed(lax: Stubs) -> None:
    """SPEC §6: a rejected request claims nothing — its idempotency key is still free."""
    key = _key()
    assert_rejected(fails(lax.enqueue, job(queue="claims", key=key, priority=10)), IA,
                    {"field": "priority", "limit": "9", "actual": "10"})
    first = lax.enqueue(job(queue="claims", key=key))
    assert first.deduplicated is False
    assert [j.id for j in lax.reserve_all(["claims"])] == [first.job_id]


# ---------------------------------------------------------------- validation order


def _big() -> bytes:
    return b"x" * (MiB + 1)


ORDER: list[Case] = [
    bad("priority 10 + empty queue", lambda: job(queue="", priority=10), IA, field="priority", limit=9,
        actual=10),
    bad("encoding too long + bad queue", lambda: job(queue=".x", encoding="e" * 200), IA,
        field="payload.encoding", limit=128, actual=200),
    bad("NaN custom + bad job type", lambda: job(job_type="", custom={"f": float("nan")}), IA, field="custom[f]"),
    bad("bad queue name + oversized payload", lambda: job(queue="bad name", data=_big()), QNI, field="queue"),
    bad("empty queue + empty job type", lambda: job(queue="", job_type=""), QNI, field="queue"),
    bad("bad job type + undeclared queue", lambda: job(queue="nope", job_type="a\nb"), JTI, strict=True,
        field="job_type"),
    bad("strict undeclared queue + payload too large", lambda: job(queue="nope", data=_big()), UQ, strict=True,
        field="queue"),
    bad("payload too large + encoding not allowed", lambda: job(queue="enc", data=_big(), encoding="x"), PTL,
        field="payload.data", limit=MiB, actual=MiB + 1),
    bad("encoding not allowed + too many entries", lambda: job(queue="enc", encoding="x", custom=_entries(40)),
        ENA, field="payload.encoding"),
    bad("too many entries + long key + big map", lambda: job(custom={**_entries(32), "k" * 70: "v" * 9000}),
        CETM, field="custom", limit=32, actual=33),
    bad("long key + big map", lambda: job(custom={"k" * 70: "v" * 9000}), CKTL, field=f"custom[{'k' * 70}]",
        limit=64, actual=70),
    bad("two long keys: the smallest is reported", lambda: job(custom={"b" * 65: 1, "a" * 70: 2, "c" * 66: 3}),
        CKTL, field=f"custom[{'a' * 70}]", limit=64, actual=70),
    bad("NaN and empty key: the smallest key is reported", lambda: job(custom={"z": float("nan"), "": 1}), IA,
        field="custom[]"),
    bad("big map + scheduled too far", lambda: job(custom={"k": "v" * 9000},
                                                   scheduled_at=time.time() + 2 * H365), CMTL, field="custom",
        limit=8192, actual=9001),
    bad("scheduled too far + long key", lambda: job(scheduled_at=time.time() + H365 + 3600, key="k" * 300), STF,
        field="scheduled_at", limit=H365, actual=H365 + 3600),
    bad("long key + bad trace", lambda: job(key="k" * 300, trace={"traceparent": "nope"}), IKTL,
        field="idempotency_key", limit=256, actual=300),
    bad("trace: too many entries + bad traceparent", lambda: job(trace={**_trace(9), "traceparent": "x"}), TCI,
        field="trace_context", limit=8, actual=9),
    bad("trace: long value + bad traceparent", lambda: job(trace={"traceparent": "x", "z": "v" * 600}), TCI,
        field="trace_context[z]", limit=512, actual=600),
]


@pytest.mark.parametrize("case", ORDER, ids=[c.id for c in ORDER])
def test_the_first_failing_check_in_catalogue_order_wins(case: Case, lax: Stubs, strict: Stubs) -> None:
    """When two checks fail, the one earlier in the catalogue is reported."""
    assert case.reason is not None
    assert_rejected(fails(_stubs(case, lax, strict).enqueue, case.build()), case.reason, case.meta)


def test_all_twelve_checks_failing_are_reported_one_at_a_time(strict: Stubs) -> None:
    """Start from a request that breaks every row, fix one row at a time: the reported code
    walks down the catalogue in order, and the fully fixed request is accepted."""
    req = job(queue=".bad", job_type="", priority=10, data=_big(), encoding="x/y",
              custom={**_entries(32), "k" * 65: "v" * 9000}, scheduled_at=time.time() + 2 * H365, key="k" * 257,
              trace=_trace(9))
    def long_key_to_big_value(r: pb.EnqueueRequest) -> None:
        r.custom.pop("k" * 65)
        r.custom["long"].CopyFrom(pb.CustomValue(string_value="v" * 9000))

    fixes: list[tuple[str, Callable[[pb.EnqueueRequest], object]]] = [
        (IA, lambda r: setattr(r, "priority", 5)),
        (QNI, lambda r: setattr(r, "queue", "undeclared")),
        (JTI, lambda r: setattr(r, "job_type", "t")),
        (UQ, lambda r: setattr(r, "queue", "enc")),
        (PTL, lambda r: setattr(r.payload, "data", b"{}")),
        (ENA, lambda r: setattr(r.payload, "encoding", "application/json")),
        (CETM, lambda r: r.custom.pop("k00")),
        (CKTL, long_key_to_big_value),
        (CMTL, lambda r: r.custom.pop("long")),
        (STF, lambda r: r.scheduled_at.CopyFrom(job(scheduled_at=time.time() + 60).scheduled_at)),
        (IKTL, lambda r: setattr(r, "idempotency_key", _key())),
        (TCI, lambda r: r.trace_context.pop("vendor0")),
    ]
    for reason, fix in fixes:
        failure = fails(strict.enqueue, req)
        assert failure.error_info is not None and failure.error_info.reason == reason, (reason, failure.message)
        fix(req)
    ack = strict.enqueue(req)
    assert ack.deduplicated is False


# ---------------------------------------------------------------- batch and atomic


def _split(cases: list[Case]) -> tuple[list[Case], list[Case]]:
    return [c for c in cases if not c.strict], [c for c in cases if c.strict]


def test_enqueue_batch_gives_each_job_its_own_verdict(lax: Stubs, strict: Stubs) -> None:
    """EnqueueBatch: one result per job in order — an ack, or the same Rejection a single
    Enqueue gets (code, field, limit, actual)."""
    for cases, stubs in zip(_split(CASES + ORDER), (lax, strict), strict=True):
        results = stubs.batch(c.build() for c in cases)
        assert len(results) == len(cases)
        for case, result in zip(cases, results, strict=True):
            kind = result.WhichOneof("outcome")
            if case.reason is None:
                assert kind == "ack", (case.id, result)
                assert uuid.UUID(result.ack.job_id).version == 7
            else:
                assert kind == "rejection", (case.id, result)
                meta = _expected_meta(case, {"actual": str(result.rejection.actual)})
                assert_rejection(result.rejection, case.reason, meta)


def _atomic_sized(cases: list[Case]) -> Iterator[list[Case]]:
    """``cases`` in runs of 30: every run's failures fit in the AtomicRejections detail whole
    (``sepp.wire.MAX_ATOMIC_DETAIL_BYTES``; all 79 failures at once would not, and would be
    listed without their messages past the first few: tests/integration/test_atomic_detail.py)."""
    for start in range(0, len(cases), 30):
        yield cases[start:start + 30]


def test_enqueue_atomic_lists_every_failure_by_index(lax: Stubs, strict: Stubs) -> None:
    """EnqueueAtomic with good and bad jobs: INVALID_ARGUMENT with an AtomicRejections detail
    naming every bad job's index (ascending) and its rejection; the good jobs alone succeed."""
    runs = [(run, stubs) for cases, stubs in zip(_split(CASES + ORDER), (lax, strict), strict=True)
            for run in _atomic_sized(cases)]
    for cases, stubs in runs:
        failure = fails(stubs.atomic, [c.build() for c in cases])
        assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
        assert failure.error_info is not None and failure.error_info.domain == "sepp"
        assert failure.atomic is not None, "AtomicRejections detail missing"
        listed = list(failure.atomic.rejections)
        assert [r.index for r in listed] == [i for i, c in enumerate(cases) if c.reason]
        for item in listed:
            case = cases[item.index]
            assert case.reason is not None
            assert_rejection(item.rejection, case.reason,
                             _expected_meta(case, {"actual": str(item.rejection.actual)}))
        good = [c.build() for c in cases if c.reason is None]
        assert len(stubs.atomic(good)) == len(good)
