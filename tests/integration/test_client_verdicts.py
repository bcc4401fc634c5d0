"""Property: the client's local verdict equals the server's, for requests near every limit.

The server runs with small limits so that random requests land on both sides of each
boundary (multi-byte UTF-8 names and keys, NaN and ±inf, priorities −1..10, …). One
client validates locally only; the other sends with ``validate_locally=False`` so the
verdict is the server's. Code, field, limit and actual must agree (actual is skipped
for ScheduledTooFar, whose measured value depends on the moment of checking).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.servers import module_server

from sepp import (
    AtomicEnqueueError,
    Client,
    ClientOptions,
    EnqueueAck,
    EnqueueRequest,
    Payload,
    RejectedError,
    Rejection,
    RejectionCode,
)
from sepp.request import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from sepp.testing import ServerProcess

UTC = dt.UTC
HORIZON = 3600
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

LIMITS = {
    "max_enqueue_batch": 4, "max_attempts_ceiling": 5, "max_queue_name_bytes": 8, "max_job_type_bytes": 8,
    "max_schedule_horizon": float(HORIZON), "max_idempotency_key_bytes": 8, "max_encoding_bytes": 8,
    "max_trace_entries": 2, "max_trace_value_bytes": 60,
}
DEFAULT_LIMITS = {"max_payload_bytes": 8, "max_custom_entries": 3, "max_custom_key_bytes": 4,
                  "max_custom_bytes": 24}
QUEUES = {"small": {"limits": {**DEFAULT_LIMITS, "max_payload_bytes": 4, "allowed_encodings": ["", "a", "é"]}},
          "q.2": {"limits": DEFAULT_LIMITS}}

SETTINGS = settings(max_examples=250, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ----------------------------------------------------------------- strategies
# Each field has a "tame" strategy (valid, often exactly at a limit) and a "wild" one
# (anything near or past the limits). Every request stresses at most two fields, so the
# later checks of the catalogue are reached instead of always failing on the first.

NAME_CHARS = "aZ09._:-é€😀 /\x00\x07\x7f\x85"
TAME: dict[str, st.SearchStrategy[Any]] = {
    "queue": st.sampled_from(["small", "q.2"]),
    "job_type": st.sampled_from(["t", "abcdefgh", "éééé", "a b/c", "😀😀"]),
    "payload": st.none() | st.builds(Payload, st.binary(max_size=4), st.sampled_from(["a", "é"])),
    "custom": st.dictionaries(st.text("abé", min_size=1, max_size=2),
                              st.integers(INT64_MIN, INT64_MAX) | st.booleans() | st.text("xé", max_size=3)
                              | st.floats(allow_nan=False, allow_infinity=False), max_size=3),
    "priority": st.none() | st.integers(0, 9),
    "max_attempts": st.none() | st.integers(1, 5),
    "scheduled_at": st.none() | st.sampled_from([-10**9, -60, 0, 60, HORIZON - 120]).map(
        lambda s: dt.datetime.now(UTC) + dt.timedelta(seconds=s)),
    "idempotency_key": st.none() | st.text("ké", max_size=4),
    "trace_context": st.none() | st.just({"traceparent": TRACEPARENT}) | st.just({"tracestate": "a=b"}),
}
WILD: dict[str, st.SearchStrategy[Any]] = {
    "queue": st.one_of(
        st.sampled_from(["other", "abcdefgh", "abcdéfg", "Z9:-_.", "", ".", "-a", "a..b", "é", "abcdefghi",
                         "abcdéfgh", "a/b"]),
        st.text(NAME_CHARS, max_size=10)),
    "job_type": st.one_of(st.sampled_from(["", "abcdefghi", "ééééa", "a\tb", "a\x85", "a\x7f"]),
                          st.text(NAME_CHARS, max_size=10)),
    "payload": st.builds(Payload, st.binary(max_size=10),
                         st.sampled_from(["", "a", "é", "b", "abcdefgh", "abcdefghi", "éééé", "ééééa"])),
    "custom": st.dictionaries(
        st.text("abé😀\x00", max_size=6),
        st.one_of(st.text("xé😀", max_size=12), st.integers(INT64_MIN, INT64_MAX),
                  st.floats(allow_nan=True, allow_infinity=True), st.booleans()),
        max_size=5),
    "priority": st.integers(-1, 10) | st.sampled_from([INT32_MIN, INT32_MAX]),
    "max_attempts": st.integers(-1, 7) | st.sampled_from([INT32_MIN, INT32_MAX]),
    "scheduled_at": st.one_of(
        st.sampled_from([HORIZON + 120, 10**7]).map(lambda s: dt.datetime.now(UTC) + dt.timedelta(seconds=s)),
        st.sampled_from([dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2))),
                         dt.datetime(9999, 12, 31, 23, 59, tzinfo=dt.timezone(dt.timedelta(hours=-2)))])),
    "idempotency_key": st.text("ké😀", max_size=10),
    "trace_context": st.dictionaries(
        st.sampled_from(["traceparent", "tracestate", "x"]),
        st.one_of(st.sampled_from([TRACEPARENT, "00-" + "0" * 32 + "-b7ad6b7169203331-01",
                                   "ff-" + TRACEPARENT[3:], TRACEPARENT + "-x", "junk"]),
                  st.text("ab", max_size=70)),
        max_size=3),
}


@st.composite
def requests(draw: st.DrawFn) -> EnqueueRequest:
    """A random request: tame fields, except one or two wild ones."""
    wild = draw(st.sets(st.sampled_from(sorted(WILD)), min_size=1, max_size=2))
    fields = {name: draw(WILD[name] if name in wild else TAME[name]) for name in TAME}
    queue, job_type = fields.pop("queue"), fields.pop("job_type")
    return EnqueueRequest(queue, job_type, **fields)


# ----------------------------------------------------------------- helpers


def _key(rejection: Rejection | None) -> tuple[Any, ...] | None:
    if rejection is None:
        return None
    actual = None if rejection.code is RejectionCode.SCHEDULED_TOO_FAR else rejection.actual
    return (rejection.code, rejection.field, rejection.limit, actual)


def _shape(results: list[EnqueueAck | Rejection]) -> list[tuple[Any, ...] | None]:
    return [None if isinstance(r, EnqueueAck) else _key(r) for r in results]


@pytest.fixture(scope="module", params=[True, False], ids=["strict", "relaxed"])
def small_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 backend: str) -> Iterator[ServerProcess]:
    """A server with small limits, strict or not; one of each for the whole module."""
    yield from module_server(tmp_path_factory, backend, strict=request.param, limits=LIMITS,
                             queue_defaults={"limits": DEFAULT_LIMITS}, queues=QUEUES)


@pytest.fixture
def clients(small_server: ServerProcess) -> Iterator[tuple[Client, Client]]:
    """(local-only verdicts, server verdicts) against a server with small limits."""
    with Client(small_server.grpc_target) as local, \
            Client(small_server.grpc_target, options=ClientOptions(validate_locally=False)) as remote:
        yield local, remote


# ----------------------------------------------------------------- properties


def test_local_verdict_equals_server_verdict_for_single_enqueues(clients: tuple[Client, Client]) -> None:
    local, remote = clients

    @SETTINGS
    @given(requests())
    def check(request: EnqueueRequest) -> None:
        mine = local.validate(request)
        try:
            remote.enqueue(request)
            theirs = None
        except RejectedError as exc:
            theirs = exc.rejection
        assert _key(mine) == _key(theirs), (mine, theirs)

    check()


def test_local_batch_results_equal_server_batch_results(clients: tuple[Client, Client]) -> None:
    local, remote = clients

    @SETTINGS
    @given(st.lists(requests(), min_size=0, max_size=5))
    def check(batch: list[EnqueueRequest]) -> None:
        outcomes: list[Any] = []
        for client in (local, remote):
            try:
                outcomes.append(_shape(client.enqueue_batch(batch)))
            except RejectedError as exc:
                outcomes.append(("whole batch", _key(exc.rejection)))
        assert outcomes[0] == outcomes[1]

    check()


def test_local_atomic_verdict_equals_server_atomic_verdict(clients: tuple[Client, Client]) -> None:
    local, remote = clients

    @SETTINGS
    @given(st.lists(requests(), min_size=0, max_size=5))
    def check(batch: list[EnqueueRequest]) -> None:
        outcomes: list[Any] = []
        for client in (local, remote):
            try:
                outcomes.append(("acks", len(client.enqueue_atomic(batch))))
            except AtomicEnqueueError as exc:
                outcomes.append(("atomic", [(e.index, _key(e.rejection)) for e in exc.errors]))
            except RejectedError as exc:
                outcomes.append(("whole batch", _key(exc.rejection)))
        assert outcomes[0] == outcomes[1]

    check()
