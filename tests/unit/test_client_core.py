"""The clients' transport-free core: retry decisions, backoff, batch merging, local validation."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

import grpc
import pytest

import sepp
from sepp import errors
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import ClientOptions, RetryPolicy, _core
from sepp.rejections import RejectionCode
from sepp.request import EnqueueAck, EnqueueRequest, Rejection

OPTIONS = ClientOptions(retry=RetryPolicy(max_attempts=3, initial_backoff=0.1, max_backoff=1.0, jitter=0.0))


# ----------------------------------------------------------------- retry decisions


def test_overloaded_is_retried_even_without_idempotency_keys_honoring_retry_after() -> None:
    error = errors.Overloaded(retry_after=0.3)
    assert _core.retry_delay(error, 1, OPTIONS, idempotent=False) == pytest.approx(0.3)
    # Under sustained overload the exponential backoff takes over once it is longer.
    longer = dataclasses.replace(OPTIONS, retry=dataclasses.replace(OPTIONS.retry, max_attempts=10))
    assert _core.retry_delay(error, 3, longer, idempotent=False) == pytest.approx(0.4)


@pytest.mark.parametrize("error", [errors.Unavailable(), errors.DeadlineExceeded()])
def test_unavailable_and_deadline_are_retried_only_when_every_job_has_a_key(error: errors.SeppError) -> None:
    assert _core.retry_delay(error, 1, OPTIONS, idempotent=False) is None
    assert _core.retry_delay(error, 1, OPTIONS, idempotent=True) == pytest.approx(0.1)
    assert _core.retry_delay(error, 2, OPTIONS, idempotent=True) == pytest.approx(0.2)


@pytest.mark.parametrize("error", [
    errors.RejectedError(Rejection(RejectionCode.PAYLOAD_TOO_LARGE)),
    errors.MessageTooLarge(),
    errors.ServerError(code=grpc.StatusCode.INTERNAL),
])
def test_deterministic_and_unknown_failures_are_never_retried(error: errors.SeppError) -> None:
    assert _core.retry_delay(error, 1, OPTIONS, idempotent=True) is None


def test_only_a_call_that_provably_reached_no_server_waits_for_the_connection() -> None:
    """A refused connect and a call a stopping server cancelled before any
    handler took it wait (key or not); a connection lost under a call does not."""
    refused = _core.error_from_status(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; last error: "
                                      "UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused",
                                      None)
    cancelled = _core.error_from_status(grpc.StatusCode.CANCELLED, "CANCELLED", None)
    broken = _core.error_from_status(grpc.StatusCode.UNAVAILABLE, "Socket closed", None)
    assert _core.waits_for_connection(refused, OPTIONS) and _core.waits_for_connection(cancelled, OPTIONS)
    assert not _core.waits_for_connection(broken, OPTIONS)
    assert not _core.waits_for_connection(errors.DeadlineExceeded(), OPTIONS)
    off = dataclasses.replace(OPTIONS, wait_for_ready=False)
    assert not _core.waits_for_connection(refused, off)
    # ... and then it is retried per the policy, key or not.
    assert _core.retry_delay(refused, 1, off, idempotent=False) == pytest.approx(0.1)
    assert _core.retry_delay(broken, 1, off, idempotent=False) is None


def test_the_wait_for_a_connection_ends_with_the_deadline() -> None:
    assert _core.connect_pause(None, 0.05) == 0.05
    assert _core.connect_pause(time.monotonic() + 10, 0.05) == 0.05
    before = time.monotonic()
    nearer = _core.connect_pause(before + 3.0, 5.0)  # the deadline is nearer than the longest pause
    assert nearer is not None and before + 3.0 - time.monotonic() <= nearer <= 3.0
    assert _core.connect_pause(time.monotonic() + _core.MIN_ATTEMPT_TIME / 2, 0.05) is None
    assert _core.connect_pause(time.monotonic() - 1, 0.05) is None
    error = _core.no_connection(OPTIONS, "127.0.0.1:1", maybe_sent=False)
    assert error.not_sent and "no connection within the 10 s deadline" in str(error)
    assert "never sent: safe to send again" in str(error)  # what to do, in the text (new-user trial)
    maybe = _core.no_connection(OPTIONS, "127.0.0.1:1", maybe_sent=True)
    assert not maybe.not_sent and "may have reached the server" in str(maybe)


def test_retrying_stops_after_max_attempts() -> None:
    assert _core.retry_delay(errors.Overloaded(retry_after=0.0), 2, OPTIONS, idempotent=True) is not None
    assert _core.retry_delay(errors.Overloaded(retry_after=0.0), 3, OPTIONS, idempotent=True) is None
    never = dataclasses.replace(OPTIONS, retry=RetryPolicy.disabled())
    assert _core.retry_delay(errors.Overloaded(), 1, never, idempotent=True) is None


def test_backoff_grows_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=0.5, multiplier=2.0, jitter=0.0)
    assert [policy.delay(n) for n in range(1, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])


def test_jitter_spreads_the_backoff_but_never_shortens_retry_after() -> None:
    policy = RetryPolicy(initial_backoff=1.0, max_backoff=10.0, jitter=0.2)
    assert policy.delay(1, rand=lambda: 0.0) == pytest.approx(0.8)
    assert policy.delay(1, rand=lambda: 0.999999) == pytest.approx(1.2, abs=1e-5)
    assert policy.delay(1, retry_after=2.0, rand=lambda: 0.0) == pytest.approx(2.0)
    assert policy.delay(1, retry_after=2.0, rand=lambda: 0.5) == pytest.approx(2.2)
    assert policy.delay(1, retry_after=0.1, rand=lambda: 0.0) == pytest.approx(0.8)


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"initial_backoff": -1}, {"jitter": 1.5},
                                    {"initial_backoff": 2.0, "max_backoff": 1.0}, {"multiplier": 0.5}])
def test_retry_policy_refuses_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_client_options_refuse_nonsense() -> None:
    with pytest.raises(ValueError):
        ClientOptions(timeout=0)
    with pytest.raises(ValueError):
        ClientOptions(max_message_bytes=10)


def test_all_keyed_requires_a_key_on_every_job() -> None:
    keyed = EnqueueRequest("q", "t", idempotency_key="k").to_proto()
    bare = EnqueueRequest("q", "t").to_proto()
    assert _core.all_keyed([keyed, keyed]) and not _core.all_keyed([keyed, bare])


# ----------------------------------------------------------------- channel


def test_channel_sends_the_user_agent_and_message_caps() -> None:
    opts = dict(_core.channel_options(ClientOptions(max_message_bytes=2048)))
    assert opts["grpc.primary_user_agent"] == f"sepp-python/{sepp.__version__}"
    assert opts["grpc.max_send_message_length"] == opts["grpc.max_receive_message_length"] == 2048


# ----------------------------------------------------------------- batches


def test_batch_size_rejection_refuses_empty_and_over_cap_batches() -> None:
    assert _core.batch_size_rejection(1, 3) is None and _core.batch_size_rejection(3, 3) is None
    for count in (0, 4):
        rejection = _core.batch_size_rejection(count, 3)
        assert rejection is not None
        assert (rejection.code, rejection.field, rejection.limit, rejection.actual) == (
            RejectionCode.INVALID_ARGUMENT, "jobs", 3, count)


def test_merge_batch_keeps_request_order_around_local_rejections() -> None:
    local = Rejection(RejectionCode.QUEUE_NAME_INVALID, "queue name is empty", "queue")
    server_rejection = Rejection(RejectionCode.PAYLOAD_TOO_LARGE, "too big", "payload.data", 1, 2)
    response = ppb.EnqueueBatchResponse(results=[
        ppb.EnqueueResult(ack=pb.EnqueueAck(job_id="a")),
        ppb.EnqueueResult(rejection=server_rejection.to_proto()),
        ppb.EnqueueResult(ack=pb.EnqueueAck(job_id="c", deduplicated=True)),
    ])
    merged = _core.merge_batch([local, None, None, local, None], response)
    assert merged == [local, EnqueueAck("a"), server_rejection, local, EnqueueAck("c", True)]


def test_merge_batch_with_nothing_sent() -> None:
    local = Rejection(RejectionCode.QUEUE_NAME_INVALID)
    assert _core.merge_batch([local, local], None) == [local, local]


def test_merge_batch_refuses_a_result_count_that_does_not_match() -> None:
    with pytest.raises(errors.ServerError):
        _core.merge_batch([None, None], ppb.EnqueueBatchResponse(results=[ppb.EnqueueResult()]))
    with pytest.raises(errors.ServerError):
        _core.merge_batch([None], ppb.EnqueueBatchResponse(results=[ppb.EnqueueResult()]))
    with pytest.raises(errors.ServerError):
        _core.atomic_acks(ppb.EnqueueAtomicResponse(acks=[pb.EnqueueAck(job_id="a")]), 2)


def test_atomic_local_error_lists_every_local_failure() -> None:
    bad = Rejection(RejectionCode.JOB_TYPE_INVALID)
    assert _core.atomic_local_error([None, None]) is None
    error = _core.atomic_local_error([None, bad, None, bad])
    assert error is not None and [e.index for e in error.errors] == [1, 3]


# ----------------------------------------------------------------- local validation


def _cached(strict: bool) -> _core.CachedInfo:
    msg = ppb.ServerInfo(version="0.1.0", strict=strict)
    msg.limits.CopyFrom(pb.ServerLimits(
        max_enqueue_batch=256, max_attempts_ceiling=1000, max_queue_name_bytes=128, max_job_type_bytes=256,
        max_idempotency_key_bytes=256, max_encoding_bytes=128, max_trace_entries=8,
        max_trace_value_bytes=512))
    msg.limits.max_schedule_horizon.seconds = 365 * 86400
    msg.queue_defaults.default_priority = 5
    msg.queue_defaults.default_max_attempts = 10
    msg.queue_defaults.lease_duration.seconds = 30
    msg.queue_defaults.limits.CopyFrom(pb.QueueLimits(max_payload_bytes=16, max_custom_entries=32,
                                                      max_custom_key_bytes=64, max_custom_bytes=8192))
    queue = msg.queues.add(name="declared", declared=True)
    queue.settings.CopyFrom(msg.queue_defaults)
    queue.settings.limits.max_payload_bytes = 4
    return _core.CachedInfo.build(msg)


def test_local_validation_uses_the_queue_limits_and_the_defaults_for_unknown_queues() -> None:
    cached = _cached(strict=False)
    five = EnqueueRequest("declared", "t", payload=_payload(5)).to_proto()
    rejection = _core.validate(cached, five)
    assert rejection is not None and (rejection.code, rejection.limit) == (RejectionCode.PAYLOAD_TOO_LARGE, 4)
    assert _core.validate(cached, EnqueueRequest("other", "t", payload=_payload(5)).to_proto()) is None
    assert _core.validate(cached, EnqueueRequest("other", "t", payload=_payload(17)).to_proto()) is not None


def test_local_validation_in_strict_mode_rejects_undeclared_queues() -> None:
    cached = _cached(strict=True)
    verdicts = _core.validate_all(cached, [EnqueueRequest("declared", "t").to_proto(),
                                           EnqueueRequest("other", "t").to_proto()])
    assert verdicts[0] is None
    assert verdicts[1] is not None and verdicts[1].code is RejectionCode.UNKNOWN_QUEUE


def test_a_local_unknown_queue_refreshes_the_cache_at_most_once_a_second() -> None:
    cached = _cached(strict=True)
    unknown = [Rejection(RejectionCode.UNKNOWN_QUEUE)]
    assert not _core.needs_refresh(unknown, cached)  # just fetched
    old = dataclasses.replace(cached, fetched_at=time.monotonic() - 5)
    assert _core.needs_refresh(unknown, old)
    assert not _core.needs_refresh([None, Rejection(RejectionCode.PAYLOAD_TOO_LARGE)], old)


def test_cache_freshness_follows_the_ttl() -> None:
    cached = dataclasses.replace(_cached(strict=False), fetched_at=time.monotonic() - 10)
    assert cached.fresh(None) and cached.fresh(60) and not cached.fresh(5)


def test_invalid_advertised_limits_are_a_server_error() -> None:
    with pytest.raises(errors.ServerError, match="invalid limits"):
        _core.CachedInfo.build(ppb.ServerInfo(limits=pb.ServerLimits(max_enqueue_batch=0)))


def test_to_protos_refuses_things_that_are_not_requests() -> None:
    with pytest.raises(TypeError, match="EnqueueRequest"):
        _core.to_protos([EnqueueRequest("q", "t"), {"queue": "q"}])  # type: ignore[list-item]


def _payload(size: int) -> sepp.Payload:
    return sepp.Payload(b"x" * size)


# ----------------------------------------------------------------- public API


def test_every_public_name_resolves() -> None:
    for name in sepp.__all__:
        assert getattr(sepp, name) is not None
    with pytest.raises(AttributeError):
        sepp.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def test_importing_sepp_is_cheap() -> None:
    code = "import sys, sepp; print(any(m == 'grpc' or m.startswith('sepp.client') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
