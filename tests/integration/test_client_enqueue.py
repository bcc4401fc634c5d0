"""The blocking Client against a real ``sepp serve``: the seed page's producer surface end to end."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from support.servers import unreached_port

import sepp
from sepp import (
    AtomicEnqueueError,
    Client,
    ClientOptions,
    DeadlineExceeded,
    EnqueueAck,
    EnqueueRequest,
    MessageTooLarge,
    Payload,
    RejectedError,
    Rejection,
    RejectionCode,
    RetryPolicy,
    Unavailable,
)
from sepp.client.admin import AdminClient
from sepp.errors import SeppError
from sepp.testing import ServerProcess, free_port

MiB = 1024 * 1024
SERVER_ONLY = ClientOptions(validate_locally=False)


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[Client]:
    with Client(shared_server.grpc_target) as c:
        yield c


@pytest.fixture
def remote(shared_server: ServerProcess) -> Iterator[Client]:
    """A client that skips local validation: every verdict is the server's."""
    with Client(shared_server.grpc_target, options=SERVER_ONLY) as c:
        yield c


def _key() -> str:
    return uuid.uuid4().hex


def test_enqueue_returns_a_uuid_ack(client: Client) -> None:
    ack = client.enqueue(EnqueueRequest("emails", "welcome").with_json_payload({"user_id": 42}))
    assert uuid.UUID(ack.job_id).version == 7
    assert ack.deduplicated is False


def test_an_idempotency_key_deduplicates_to_the_original_job(client: Client) -> None:
    request = EnqueueRequest("emails", "welcome").with_idempotency_key(_key())
    first = client.enqueue(request)
    again = client.enqueue(request.with_payload(b"different body"))
    assert again == EnqueueAck(first.job_id, deduplicated=True)


def test_every_optional_field_is_accepted(client: Client) -> None:
    request = (EnqueueRequest("emails", "welcome")
               .with_payload(Payload(b'{"user_id": 42}', "application/json"))
               .with_priority(7)
               .with_max_attempts(5)
               .with_custom_entry("user_id", 42)
               .with_custom_entry("locale", "en-US")
               .with_custom_entry("vip", True)
               .with_custom_entry("score", 0.5)
               .with_delay(3600)
               .with_idempotency_key(_key())
               .with_trace_context({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}))
    assert client.enqueue(request).deduplicated is False


def test_get_server_info_advertises_version_modes_and_limits(client: Client) -> None:
    info = client.get_server_info()
    assert info.version == sepp.__version__
    assert info.persist_mode == "group" and info.strict is False
    assert info.limits.max_enqueue_batch == 256
    assert info.queue_defaults.limits.max_payload_bytes == 1 * MiB
    assert client.get_server_info(cached=True) == info


@pytest.mark.parametrize("options", [ClientOptions(), SERVER_ONLY], ids=["local", "server"])
def test_a_rejection_is_the_same_whether_found_locally_or_by_the_server(shared_server: ServerProcess,
                                                                        options: ClientOptions) -> None:
    with Client(shared_server.grpc_target, options=options) as c:
        with pytest.raises(RejectedError) as info:
            c.enqueue(EnqueueRequest("emails", "welcome", payload=Payload(b"x" * (MiB + 1))))
    assert info.value.rejection == Rejection(RejectionCode.PAYLOAD_TOO_LARGE,
                                             "payload is larger than the queue's max_payload_bytes; to raise it: "
                                             "sepp queues declare emails --max-payload-bytes N",
                                             "payload.data", MiB, MiB + 1)


def test_a_payload_of_exactly_max_payload_bytes_is_accepted(client: Client) -> None:
    assert client.enqueue(EnqueueRequest("emails", "big", payload=Payload(b"x" * MiB))).job_id


def test_a_local_rejection_needs_no_round_trip(server: ServerProcess) -> None:
    with Client(server.grpc_target, options=ClientOptions(timeout=0.3)) as c:
        c.get_server_info(cached=True)
        server.terminate()
        with pytest.raises(RejectedError) as info:
            c.enqueue(EnqueueRequest("emails", "welcome", priority=10))
        assert info.value.code is RejectionCode.INVALID_ARGUMENT and info.value.rejection.field == "priority"
        with pytest.raises(Unavailable):
            c.enqueue(EnqueueRequest("emails", "welcome"))  # waits for a connection up to its timeout


# ----------------------------------------------------------------- batches


def _mixed() -> list[EnqueueRequest]:
    return [
        EnqueueRequest("emails", "welcome"),
        EnqueueRequest("emails", "welcome", priority=12),
        EnqueueRequest("", "nameless"),
        EnqueueRequest("emails", "receipt", custom={"n": float("nan")}),
        EnqueueRequest("billing", "charge"),
    ]


def _shape(results: list[EnqueueAck | Rejection]) -> list[tuple[str, str]]:
    return [("ack", "") if isinstance(r, EnqueueAck) else (r.code.value, r.field) for r in results]


def test_enqueue_batch_returns_one_result_per_job_in_order(client: Client, remote: Client) -> None:
    expected = [("ack", ""), ("InvalidArgument", "priority"), ("QueueNameInvalid", "queue"),
                ("InvalidArgument", "custom[n]"), ("ack", "")]
    assert _shape(client.enqueue_batch(_mixed())) == expected
    assert _shape(remote.enqueue_batch(_mixed())) == expected


def test_enqueue_batch_of_only_bad_jobs_sends_nothing_and_still_answers(client: Client) -> None:
    results = client.enqueue_batch([EnqueueRequest("", "t"), EnqueueRequest("q", "")])
    assert _shape(results) == [("QueueNameInvalid", "queue"), ("JobTypeInvalid", "job_type")]


def test_a_key_repeated_inside_one_batch_is_created_once(client: Client) -> None:
    key = _key()
    first, second = client.enqueue_batch([EnqueueRequest("q", "t", idempotency_key=key)] * 2)
    assert isinstance(first, EnqueueAck) and isinstance(second, EnqueueAck)
    assert (second.job_id, first.deduplicated, second.deduplicated) == (first.job_id, False, True)


@pytest.mark.parametrize("count", [0, 257])
@pytest.mark.parametrize("options", [ClientOptions(), SERVER_ONLY], ids=["local", "server"])
def test_an_empty_or_over_cap_batch_is_refused_whole(shared_server: ServerProcess, options: ClientOptions,
                                                     count: int) -> None:
    jobs = [EnqueueRequest("q", "t")] * count
    with Client(shared_server.grpc_target, options=options) as c:
        for call in (c.enqueue_batch, c.enqueue_atomic):
            with pytest.raises(RejectedError) as info:
                call(jobs)
            rejection = info.value.rejection
            assert not isinstance(info.value, AtomicEnqueueError)
            assert (rejection.code, rejection.field, rejection.limit, rejection.actual) == (
                RejectionCode.INVALID_ARGUMENT, "jobs", 256, count)


def test_enqueue_atomic_returns_every_ack_in_order(client: Client) -> None:
    keys = [_key() for _ in range(3)]
    acks = client.enqueue_atomic([EnqueueRequest("checkout", step, idempotency_key=k)
                                  for step, k in zip(["reserve_seat", "charge_card", "email"], keys, strict=True)])
    assert len(acks) == 3 and len({a.job_id for a in acks}) == 3
    assert not any(a.deduplicated for a in acks)
    # A deduplicated job counts as a success in an atomic batch.
    again = client.enqueue_atomic([EnqueueRequest("checkout", "reserve_seat", idempotency_key=keys[0]),
                                   EnqueueRequest("checkout", "new_step")])
    assert again[0] == EnqueueAck(acks[0].job_id, True) and not again[1].deduplicated


@pytest.mark.parametrize("options", [ClientOptions(), SERVER_ONLY], ids=["local", "server"])
def test_a_failed_atomic_batch_stores_nothing_and_lists_every_failure(shared_server: ServerProcess,
                                                                      options: ClientOptions) -> None:
    keys = [_key(), _key()]
    good = [EnqueueRequest("checkout", "reserve_seat", idempotency_key=keys[0]),
            EnqueueRequest("checkout", "charge_card", idempotency_key=keys[1])]
    with Client(shared_server.grpc_target, options=options) as c:
        with pytest.raises(AtomicEnqueueError) as info:
            c.enqueue_atomic([good[0], EnqueueRequest("checkout", "x", priority=-1), good[1],
                              EnqueueRequest("bad queue", "x")])
        assert [(e.index, e.rejection.code, e.rejection.field) for e in info.value.errors] == [
            (1, RejectionCode.INVALID_ARGUMENT, "priority"), (3, RejectionCode.QUEUE_NAME_INVALID, "queue")]
        # Nothing was stored and no key was claimed: the good jobs are new now.
        assert not any(a.deduplicated for a in c.enqueue_atomic(good))


# ----------------------------------------------------------------- strict mode and queue limits


def test_strict_mode_rejects_undeclared_queues_locally_and_on_the_server(server: ServerProcess) -> None:
    server.restart(strict=True, queues={"emails": {"limits": {"max_payload_bytes": 16,
                                                              "allowed_encodings": ["application/json"]}}})
    with Client(server.grpc_target) as local, Client(server.grpc_target, options=SERVER_ONLY) as remote:
        assert local.get_server_info().strict
        for c in (local, remote):
            with pytest.raises(RejectedError) as info:
                c.enqueue(EnqueueRequest("other", "t"))
            assert (info.value.code, info.value.rejection.field) == (RejectionCode.UNKNOWN_QUEUE, "queue")
            with pytest.raises(RejectedError) as info:
                c.enqueue(EnqueueRequest("emails", "t", payload=Payload(b"{}", "text/plain")))
            assert info.value.code is RejectionCode.ENCODING_NOT_ALLOWED
            assert c.enqueue(EnqueueRequest("emails", "t", payload=Payload.json({}))).job_id


def test_a_queue_declared_after_the_client_started_is_found(server: ServerProcess) -> None:
    server.restart(strict=True, queues={"a": {}}, grpc_listen=f"127.0.0.1:{free_port()}")  # same port after
    with Client(server.grpc_target) as c:
        c.get_server_info(cached=True)
        server.restart(queues={"a": {}, "b": {}})
        time.sleep(1.1)  # a local UnknownQueue re-fetches ServerInfo at most once a second
        assert c.enqueue(EnqueueRequest("b", "t")).job_id


# ----------------------------------------------------------------- transport errors


def test_a_message_over_the_servers_cap_is_message_too_large(shared_server: ServerProcess) -> None:
    big = EnqueueRequest("q", "t", payload=Payload(b"x" * (17 * MiB)))
    with Client(shared_server.grpc_target, options=ClientOptions(validate_locally=False,
                                                          max_message_bytes=64 * MiB)) as c:
        with pytest.raises(MessageTooLarge) as info:
            c.enqueue(big)
    assert not info.value.transient
    with Client(shared_server.grpc_target, options=SERVER_ONLY) as c, pytest.raises(MessageTooLarge):
        c.enqueue(big)  # refused by the client's own cap, never sent


def test_an_unreachable_server_is_unavailable_and_nothing_was_sent() -> None:
    """A call waits for a connection within its deadline — on a first contact
    only with ``wait_for_server_start`` (else it fails at once: test_first_contact.py); when
    none comes it is ``Unavailable`` with ``not_sent`` — never an ambiguous ``DeadlineExceeded``
    — and says what the last try ran into."""
    options = ClientOptions(timeout=0.5, wait_for_server_start=True,
                            retry=RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.01))
    target = f"127.0.0.1:{unreached_port()}"
    started = time.monotonic()
    with Client(target, options=options) as c:
        with pytest.raises(Unavailable) as info:
            c.enqueue(EnqueueRequest("q", "t"))
    assert 0.45 <= time.monotonic() - started < 5
    assert info.value.transient and info.value.not_sent
    assert "no connection within the 0.5 s deadline" in str(info.value)
    assert f"last try: connection refused: is sepp running on {target}?" in str(info.value)


def test_without_wait_for_ready_an_unreachable_server_fails_at_once_and_unsent() -> None:
    options = ClientOptions(wait_for_ready=False, retry=RetryPolicy(max_attempts=2, initial_backoff=0.01,
                                                                    max_backoff=0.01))
    started = time.monotonic()
    with Client(f"127.0.0.1:{unreached_port()}", options=options) as c:
        with pytest.raises(Unavailable) as info:
            c.enqueue(EnqueueRequest("q", "t"))
    assert time.monotonic() - started < 5
    assert info.value.not_sent and "connection refused: is sepp running on" in str(info.value)


#: The commit delay of the timed-out-enqueue test, seconds: twice its client's 0.3 s deadline
#: (was 1 s: every commit of the restart, the retry and the stop waited it).
COMMIT_DELAY = 0.6


def test_a_timed_out_enqueue_may_still_be_stored_so_a_key_makes_the_retry_safe(server: ServerProcess) -> None:
    # Every commit waits COMMIT_DELAY: the enqueue cannot be answered before it, so a deadline
    # shorter than it always expires first, however loaded the machine.
    server.restart(debug_commit_delay=COMMIT_DELAY)
    key = _key()
    request = EnqueueRequest("q", "slow", idempotency_key=key)
    impatient = ClientOptions(timeout=0.3, retry=RetryPolicy.disabled())
    with Client(server.grpc_target, options=impatient) as c:
        # Connect and fetch the server info (local validation) before the timed call, so that
        # only the enqueue meets the 0.3 s deadline. Right after a restart on a loaded machine
        # the connection alone can take longer: these tries may time out, the enqueue cannot
        # get past the commit delay.
        warm_until = time.monotonic() + 30
        while True:
            try:
                c.get_server_info(cached=True)
                break
            except DeadlineExceeded:
                assert time.monotonic() < warm_until, "the restarted server never answered GetServerInfo"
        with pytest.raises(DeadlineExceeded):
            c.enqueue(request)
    # The server goes on and stores it after the client gave up (no sleep: wait until it is there).
    with AdminClient(server.grpc_target) as admin:
        deadline = time.monotonic() + 15
        while True:
            try:
                admin.find_job_by_key("q", key)
                break
            except SeppError:
                assert time.monotonic() < deadline, "the timed-out enqueue was never stored"
                time.sleep(0.05)
    with Client(server.grpc_target) as c:
        assert c.enqueue(request).deduplicated is True


def test_closing_twice_is_fine_and_a_closed_client_refuses_calls(shared_server: ServerProcess) -> None:
    c = Client(shared_server.grpc_target)
    c.close()
    c.close()
    with pytest.raises(RuntimeError, match="closed"):
        c.get_server_info()
