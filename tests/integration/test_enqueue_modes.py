"""Server modes and advertised limits, over the wire (seed "Build an enqueue request",
"Schedule a job", "Validating against server limits"; SPEC §2, §6).

Covers: strict mode (declared queue accepted, undeclared → UnknownQueue / NOT_FOUND,
nothing created) vs non-strict (undeclared queue created on demand with the queue
defaults and listed by GetServerInfo with declared=false, also after a restart);
scheduled vs ready (a future ``scheduled_at`` is not reservable until due and then
within 100 ms; a past or present one is READY at once with run_at = enqueue time);
GetServerInfo reports exactly the configured non-default limits and enforcement
follows the advertised numbers; ``max_message_bytes`` (16 MiB, not advertised) is
enforced by gRPC as RESOURCE_EXHAUSTED without ErrorInfo while a 15 MiB request passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from support.failures import fails
from support.producer import MiB, Stubs, assert_rejected, connect, job, to_seconds
from support.servers import ServerFactory
from support.waiting import with_lead

from sepp import __version__
from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess
from sepp.wire import duration_to_seconds

# ---------------------------------------------------------------- strict vs on demand


def test_strict_mode_accepts_declared_queues_and_refuses_the_rest(server_factory: ServerFactory) -> None:
    """Strict: a declared queue takes jobs; an undeclared one is UnknownQueue (NOT_FOUND) in
    every call, and is not created."""
    proc = server_factory(strict=True, queues={"emails": {}})
    with connect(proc.grpc_target) as s:
        info = s.info()
        assert info.strict is True
        assert s.enqueue(job("emails")).job_id
        assert_rejected(fails(s.enqueue, job("nope")), "UNKNOWN_QUEUE", {"field": "queue"})
        [res] = s.batch([job("nope")])
        assert pb.RejectionCode.Name(res.rejection.code) == "UNKNOWN_QUEUE"
        failure = fails(s.atomic, [job("emails"), job("nope")])
        assert failure.atomic is not None and [r.index for r in failure.atomic.rejections] == [1]
        assert [(q.name, q.declared) for q in s.info().queues] == [("emails", True)]
        assert s.reserve_all(["nope"]) == []


def test_non_strict_mode_creates_undeclared_queues_on_demand(server_factory: ServerFactory) -> None:
    """Non-strict: an undeclared queue is created on first enqueue with the queue defaults,
    listed by GetServerInfo with declared=false (the declared one with declared=true), and it
    is still known after a restart."""
    proc = server_factory(strict=False, queues={"declared-q": {"default_priority": 8}},
                          queue_defaults={"default_priority": 3, "default_max_attempts": 4})
    with connect(proc.grpc_target) as s:
        info = s.info()
        assert info.strict is False
        assert [q.name for q in info.queues] == ["declared-q"]
        s.enqueue(job("zz-on-demand"))
        s.batch([job("aa-on-demand")])
        s.atomic([job("mm-on-demand")])
        [j] = s.reserve_all(["zz-on-demand"])
        assert (j.priority, j.max_attempts) == (3, 4), "an on-demand queue gets the queue defaults"
        listed = {q.name: q for q in s.info().queues}
    expected = ["aa-on-demand", "declared-q", "mm-on-demand", "zz-on-demand"]
    assert list(listed) == expected, "sorted by name"
    assert {n: q.declared for n, q in listed.items()} == {n: n == "declared-q" for n in expected}
    assert listed["zz-on-demand"].settings == info.queue_defaults
    assert listed["declared-q"].settings.default_priority == 8
    proc.restart()
    with connect(proc.grpc_target) as s:
        assert [(q.name, q.declared) for q in s.info().queues] == [(n, n == "declared-q") for n in expected]


# ---------------------------------------------------------------- scheduled vs ready


def test_a_future_job_is_invisible_until_due_then_reservable_within_100ms(shared_server: ServerProcess) -> None:
    """scheduled_at ~1 s ahead: SCHEDULED (nothing to reserve), then a long-polling Reserve
    gets it no earlier than its time and promptly after it; run_at is the scheduled time."""
    def trial(lead: float) -> bool | None:
        queue = f"later-{lead:g}"
        with connect(shared_server.grpc_target) as s:
            at = time.time() + lead
            ack = s.enqueue(job(queue, "remind", scheduled_at=at))
            ready = s.enqueue(job(queue, "now"))
            [first] = s.reserve([queue])
            nothing = s.reserve([queue])
            if time.time() >= at:
                return None  # the machine outran the lead: both answers came after the job's time
            assert first.job.id == ready.job_id, "the scheduled job is not reservable before its time"
            assert nothing == []
            got = s.reserve([queue], wait=10.0)
            received = time.time()
            assert [r.job.id for r in got] == [ack.job_id]
            assert received >= at, f"handed out {at - received:.3f} s before its time"
            # Promptness is checked against the 10 s long-poll it would otherwise wait out; the
            # 100 ms figure of a quiet machine is benchmarks/due_latency.py's to measure.
            assert received - at <= 3.0, f"reservable only {received - at:.3f} s after its time"
            assert abs(to_seconds(got[0].job.run_at) - at) < 1e-5
        return True

    with_lead(trial, 1.0, what="two enqueues and two Reserves")


@pytest.mark.parametrize("offset", [-3600.0, -0.001, 0.0])
def test_a_past_or_present_scheduled_at_is_ready_at_once(shared_server: ServerProcess, offset: float) -> None:
    """scheduled_at in the past (or now): READY at once, and its run_at is its enqueue time
    (so it does not jump ahead of jobs already waiting, SPEC §6)."""
    with connect(shared_server.grpc_target) as s:
        queue = f"past{offset}"  # the module shares one server: a queue of its own per case
        earlier = s.enqueue(job(queue, "earlier"))
        ack = s.enqueue(job(queue, "back-dated", scheduled_at=time.time() + offset))
        jobs = s.reserve_all([queue])
        assert [j.id for j in jobs] == [earlier.job_id, ack.job_id]
        back = jobs[1]
        assert back.run_at == back.enqueued_at
        assert to_seconds(back.run_at) >= to_seconds(jobs[0].run_at)


# ---------------------------------------------------------------- advertised limits

LIMITS = {"max_enqueue_batch": 7, "max_attempts_ceiling": 20, "max_queue_name_bytes": 16,
          "max_job_type_bytes": 12, "max_schedule_horizon": 3600.0, "max_idempotency_key_bytes": 10,
          "max_encoding_bytes": 20, "max_trace_entries": 2, "max_trace_value_bytes": 100}
DEFAULT_QLIMITS = {"max_payload_bytes": 1000, "allowed_encodings": ["a/b"], "max_custom_entries": 3,
                   "max_custom_key_bytes": 5, "max_custom_bytes": 50}
TIGHT_QLIMITS = {"max_payload_bytes": 10, "allowed_encodings": [], "max_custom_entries": 1,
                 "max_custom_key_bytes": 2, "max_custom_bytes": 9}


@pytest.fixture
def custom_limits(server_factory: ServerFactory) -> Iterator[Stubs]:
    """A server with non-default limits everywhere: server-wide, queue defaults and a
    declared queue ``tight``."""
    proc = server_factory(persist_mode="sync", strict=False, limits=LIMITS,
                          queue_defaults={"limits": DEFAULT_QLIMITS},
                          queues={"tight": {"default_priority": 1, "limits": TIGHT_QLIMITS}})
    with connect(proc.grpc_target) as stubs:
        yield stubs


def _qlimits(lim: pb.QueueLimits) -> dict[str, object]:
    return {"max_payload_bytes": lim.max_payload_bytes, "allowed_encodings": list(lim.allowed_encodings),
            "max_custom_entries": lim.max_custom_entries, "max_custom_key_bytes": lim.max_custom_key_bytes,
            "max_custom_bytes": lim.max_custom_bytes}


def test_server_info_reports_exactly_the_configured_limits(custom_limits: Stubs) -> None:
    """GetServerInfo: version, features, persist/strict mode, the server-wide limits, the
    queue defaults and each declared queue's limits as configured; no max_message_bytes."""
    info = custom_limits.info()
    assert info.version == __version__
    assert {"enqueue_atomic", "idempotency", "scheduling"} <= set(info.features)
    assert info.persist_mode == pb.SYNC and info.strict is False
    lim = info.limits
    got = {name: getattr(lim, name) for name in LIMITS if name != "max_schedule_horizon"}
    got["max_schedule_horizon"] = duration_to_seconds(lim.max_schedule_horizon)
    assert got == LIMITS
    assert "max_message_bytes" not in {f.name for f in pb.ServerLimits.DESCRIPTOR.fields}
    assert _qlimits(info.queue_defaults.limits) == DEFAULT_QLIMITS
    [tight] = info.queues
    assert (tight.name, tight.declared, tight.settings.default_priority) == ("tight", True, 1)
    assert _qlimits(tight.settings.limits) == TIGHT_QLIMITS


def test_enforcement_follows_the_advertised_limits(custom_limits: Stubs) -> None:
    """Every advertised number is the boundary the server enforces: at the limit accepted,
    one past it refused with that limit in the details."""
    s = custom_limits
    info = s.info()
    lim, qd = info.limits, info.queue_defaults.limits
    tight = info.queues[0].settings.limits
    horizon = duration_to_seconds(lim.max_schedule_horizon)

    def at_and_past(make: Callable[[int], pb.EnqueueRequest], n: int, reason: str, field: str) -> None:
        assert s.enqueue(make(n)).job_id
        meta = {"field": field, "limit": str(n), "actual": str(n + 1)}
        assert_rejected(fails(s.enqueue, make(n + 1)), reason, meta)

    # server-wide limits, on "tight" (no encoding restriction)
    at_and_past(lambda n: job("tight", max_attempts=n), lim.max_attempts_ceiling, "INVALID_ARGUMENT",
                "max_attempts")
    at_and_past(lambda n: job("q" * n, encoding="a/b"), lim.max_queue_name_bytes, "QUEUE_NAME_INVALID", "queue")
    at_and_past(lambda n: job("tight", "t" * n), lim.max_job_type_bytes, "JOB_TYPE_INVALID", "job_type")
    at_and_past(lambda n: job("tight", key="k" * n), lim.max_idempotency_key_bytes, "IDEMPOTENCY_KEY_TOO_LONG",
                "idempotency_key")
    at_and_past(lambda n: job("tight", encoding="e" * n), lim.max_encoding_bytes, "INVALID_ARGUMENT",
                "payload.encoding")
    at_and_past(lambda n: job("tight", trace={"tracestate": "v" * n}), lim.max_trace_value_bytes,
                "TRACE_CONTEXT_INVALID", "trace_context[tracestate]")
    at_and_past(lambda n: job("tight", trace={f"k{i}": "v" for i in range(n)}), lim.max_trace_entries,
                "TRACE_CONTEXT_INVALID", "trace_context")
    # queue defaults (on-demand queue "q") and the declared queue "tight"
    for queue, ql in (("q", qd), ("tight", tight)):
        enc = ql.allowed_encodings[0] if ql.allowed_encodings else ""

        def payload_of(n: int, q: str = queue, e: str = enc) -> pb.EnqueueRequest:
            return job(q, data=b"x" * n, encoding=e)

        def entries_of(n: int, q: str = queue, e: str = enc) -> pb.EnqueueRequest:
            return job(q, encoding=e, custom={f"{i}": True for i in range(n)})

        at_and_past(payload_of, ql.max_payload_bytes, "PAYLOAD_TOO_LARGE", "payload.data")
        at_and_past(entries_of, ql.max_custom_entries, "CUSTOM_ENTRIES_TOO_MANY", "custom")
        klen = ql.max_custom_key_bytes
        assert s.enqueue(job(queue, encoding=enc, custom={"k" * klen: True})).job_id
        assert_rejected(fails(s.enqueue, job(queue, encoding=enc, custom={"k" * (klen + 1): True})),
                        "CUSTOM_KEY_TOO_LONG", {"field": f"custom[{'k' * (klen + 1)}]", "limit": str(klen),
                                                "actual": str(klen + 1)})
        size = ql.max_custom_bytes  # one 1-byte key + a string value
        assert s.enqueue(job(queue, encoding=enc, custom={"k": "v" * (size - 1)})).job_id
        assert_rejected(fails(s.enqueue, job(queue, encoding=enc, custom={"k": "v" * size})),
                        "CUSTOM_MAP_TOO_LARGE", {"field": "custom", "limit": str(size), "actual": str(size + 1)})
    assert_rejected(fails(s.enqueue, job("q", encoding="x/y")), "ENCODING_NOT_ALLOWED",
                    {"field": "payload.encoding"})
    assert_rejected(fails(s.enqueue, job("q")), "ENCODING_NOT_ALLOWED", {"field": "payload.encoding"})
    assert s.enqueue(job("tight", scheduled_at=time.time() + horizon - 5)).job_id
    assert_rejected(fails(s.enqueue, job("tight", scheduled_at=time.time() + horizon + 5)), "SCHEDULED_TOO_FAR",
                    {"field": "scheduled_at", "limit": str(int(horizon)), "actual": str(int(horizon) + 5)})
    cap = lim.max_enqueue_batch
    for call in (s.batch, s.atomic):
        assert len(call([job("tight")] * cap)) == cap
        failure = fails(call, [job("tight")] * (cap + 1))
        assert failure.error_info is not None
        assert dict(failure.error_info.metadata) == {"field": "jobs", "limit": str(cap), "actual": str(cap + 1)}


# ---------------------------------------------------------------- max_message_bytes


def test_a_request_over_max_message_bytes_is_resource_exhausted_without_details(
        server_factory: ServerFactory) -> None:
    """Default max_message_bytes (16 MiB) with the payload cap raised to it: a 15 MiB batch is
    stored; ~17 MiB (a batch of 1 MiB payloads, or one payload) is RESOURCE_EXHAUSTED with no
    ErrorInfo/OVERLOADED and no RetryInfo, and nothing of it is stored."""
    proc = server_factory(queue_defaults={"limits": {"max_payload_bytes": 16 * MiB}})
    with connect(proc.grpc_target) as s:
        chunk = b"\xab" * MiB
        assert len(s.batch([job("big", f"ok{i}", data=chunk) for i in range(15)])) == 15
        for reqs in ([job("big", f"over{i}", data=chunk) for i in range(17)],
                     [job("big", "one-payload", data=b"\xcd" * (17 * MiB))]):
            failure = fails(s.batch, reqs)
            assert failure.code == grpc.StatusCode.RESOURCE_EXHAUSTED, failure.message
            assert failure.error_info is None and failure.retry_info is None, failure.details
        failure = fails(s.enqueue, job("big", "single", data=b"\xcd" * (17 * MiB)))
        assert failure.code == grpc.StatusCode.RESOURCE_EXHAUSTED and not failure.details
        jobs = s.reserve_all(["big"])
        assert sorted(j.job_type for j in jobs) == sorted(f"ok{i}" for i in range(15))
        assert s.info().version, "the server still answers"

