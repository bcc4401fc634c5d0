"""``Client.enqueue_many`` / ``AsyncClient.enqueue_many``: any iterable is
cut into ``max_enqueue_batch``-sized batches (at the limit: one batch; one past: two), several
are kept in flight, every result comes back in request order (rejections in the middle
included) and ``progress(done, total)`` is called after each batch, in order.
A real server with ``max_enqueue_batch = 4``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from support.servers import module_server

from sepp import AsyncClient, Client, EnqueueAck, EnqueueRequest, Payload, Rejection, RejectionCode
from sepp.client.admin import AdminClient
from sepp.client.options import ClientOptions
from sepp.errors import MessageTooLarge
from sepp.testing import ServerProcess

CAP = 4


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """A server whose batches hold at most ``CAP`` jobs; one for the module (every test
    uses queues of its own)."""
    yield from module_server(tmp_path_factory, backend, limits={"max_enqueue_batch": CAP})


def _requests(queue: str, n: int, bad: frozenset[int] | set[int] = frozenset()) -> Iterator[EnqueueRequest]:
    """A generator (no len): job i carries ``{"i": i}``; the ones in ``bad`` have priority 10."""
    for i in range(n):
        yield EnqueueRequest(queue, "t", payload=Payload.json({"i": i}), priority=10 if i in bad else None)


def _stored(target: str, out: list[Any]) -> list[int]:
    """The ``i`` each acked slot's stored job carries, in slot order."""
    with AdminClient(target) as admin:
        return [Payload(admin.get_job(r.job_id).payload.data).decode_json()["i"]
                for r in out if isinstance(r, EnqueueAck)]


@pytest.mark.parametrize("n", [CAP, CAP + 1, 3 * CAP + 2])
def test_results_keep_request_order_and_batches_follow_the_cap(capped: ServerProcess, n: int) -> None:
    calls: list[tuple[int, Any]] = []
    with Client(capped.grpc_target) as client:
        out = client.enqueue_many(_requests(f"m{n}", n), in_flight=3,
                                  progress=lambda done, total: calls.append((done, total)))
    assert len(out) == n and all(isinstance(r, EnqueueAck) for r in out)
    # One progress call per batch of CAP (the last one shorter), in order; a generator has no len.
    expected = [min(k, n) for k in range(CAP, n + CAP, CAP)]
    assert calls == [(d, None) for d in expected]
    assert _stored(capped.grpc_target, out) == list(range(n))


def test_rejections_in_the_middle_stay_in_their_slots(capped: ServerProcess) -> None:
    bad = {1, 5, 6, 9}
    reqs = list(_requests("mid", 10, bad))
    calls: list[tuple[int, Any]] = []
    with Client(capped.grpc_target) as client:
        out = client.enqueue_many(reqs, progress=lambda done, total: calls.append((done, total)))
    assert [isinstance(r, Rejection) for r in out] == [i in bad for i in range(10)]
    assert all(r.code is RejectionCode.INVALID_ARGUMENT for r in out if isinstance(r, Rejection))
    assert calls == [(4, 10), (8, 10), (10, 10)]  # a list has a len: total is known
    assert _stored(capped.grpc_target, out) == [i for i in range(10) if i not in bad]


def test_an_empty_iterable_sends_nothing_and_in_flight_must_be_positive(capped: ServerProcess) -> None:
    with Client(capped.grpc_target) as client:
        assert client.enqueue_many([]) == []
        with pytest.raises(ValueError, match="in_flight"):
            client.enqueue_many(_requests("x", 1), in_flight=0)


async def test_async_enqueue_many_matches_the_sync_one(capped: ServerProcess) -> None:
    bad = {4}
    calls: list[tuple[int, Any]] = []
    async with AsyncClient(capped.grpc_target) as client:
        out = await client.enqueue_many(list(_requests("amany", CAP + 1, bad)), in_flight=2,
                                        progress=lambda done, total: calls.append((done, total)))
        with pytest.raises(ValueError):
            await client.enqueue_many([], in_flight=0)
        assert await client.enqueue_many(iter(())) == []
    assert [isinstance(r, Rejection) for r in out] == [i in bad for i in range(CAP + 1)]
    assert calls == [(CAP, CAP + 1), (CAP + 1, CAP + 1)]
    assert _stored(capped.grpc_target, out) == list(range(CAP))


#: The message cap of ``narrow``'s server and of the clients that talk to it, bytes.
NARROW = 64 * 1024


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """A server whose messages hold at most ``NARROW`` bytes (payloads up to 16 KiB)."""
    yield from module_server(tmp_path_factory, backend, limits={"max_message_bytes": NARROW},
                             queue_defaults={"limits": {"max_payload_bytes": 16 * 1024}})


def _sized(queue: str, n: int) -> list[EnqueueRequest]:
    """``n`` jobs of 10 KiB each (every 7th with a key and a priority: not a plain request)."""
    return [EnqueueRequest(queue, "t", payload=Payload(b"%06d" % i + b"." * (10 * 1024 - 6)),
                           idempotency_key=f"k{i}" if i % 7 == 0 else None, priority=3 if i % 7 == 0 else None)
            for i in range(n)]


def _stored_order(target: str, out: list[Any]) -> list[int]:
    with AdminClient(target) as admin:
        return [int(admin.get_job(r.job_id).payload.data[:6]) for r in out]


def test_batches_stay_within_the_message_cap(narrow: ServerProcess) -> None:
    # 40 jobs of 10 KiB: the count cap (256) makes one 400 KiB batch, which enqueue_batch
    # refuses before sending (the client's cap is the server's). enqueue_many sends it in parts.
    calls: list[tuple[int, Any]] = []
    with Client(narrow.grpc_target, options=ClientOptions(max_message_bytes=NARROW)) as client:
        with pytest.raises(MessageTooLarge, match="nothing was sent"):
            client.enqueue_batch(_sized("narrow-batch", 40))
        out = client.enqueue_many(_sized("narrow", 40), in_flight=3,
                                  progress=lambda done, total: calls.append((done, total)))
    assert len(out) == 40 and all(isinstance(r, EnqueueAck) for r in out)
    assert calls == [(40, 40)]  # one batch of the count cap, answered once all its parts were
    assert _stored_order(narrow.grpc_target, out) == list(range(40))
    with AdminClient(narrow.grpc_target) as admin:  # the refused batch made no queue, stored no job
        assert "narrow-batch" not in {s.queue for s in admin.queue_stats()}


async def test_async_batches_stay_within_the_message_cap(narrow: ServerProcess) -> None:
    async with AsyncClient(narrow.grpc_target, options=ClientOptions(max_message_bytes=NARROW)) as client:
        out = await client.enqueue_many(iter(_sized("anarrow", 25)))
    assert len(out) == 25 and all(isinstance(r, EnqueueAck) for r in out)
    assert _stored_order(narrow.grpc_target, out) == list(range(25))


def test_closing_the_client_mid_way_raises_runtime_error_not_a_retry(capped: ServerProcess) -> None:
    # close() cancels the calls in flight (CANCELLED: not a server's shutdown, so not "never
    # sent": those batches may be stored). They used to be retried on the closed channel,
    # which raised grpc's ValueError "Cannot invoke RPC on closed channel!".
    client = Client(capped.grpc_target)
    done = threading.Event()

    def progress(count: int, _total: Any) -> None:
        if count >= 40:
            done.set()

    errors: list[BaseException] = []

    def run() -> None:
        try:
            client.enqueue_many((EnqueueRequest("closing", "t") for _ in range(1_000_000)), progress=progress)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert done.wait(10)
    client.close()
    thread.join(10)
    assert not thread.is_alive() and len(errors) == 1
    assert isinstance(errors[0], RuntimeError) and "closed" in str(errors[0]), repr(errors[0])


def _with_one_too_large(queue: str) -> list[EnqueueRequest]:
    """16 jobs of ~100 bytes, job 9's payload 10 KiB (over ``TIGHT``: it cannot be sent)."""
    return [EnqueueRequest(queue, "t", payload=Payload(b"%06d" % i + (b"." * (10 * 1024) if i == 9 else b"")))
            for i in range(16)]


#: A client message cap below one job of ``_with_one_too_large`` (the server's stays 16 MiB).
TIGHT = 8 * 1024


def test_a_failed_batch_keeps_what_was_answered_before_it(capped: ServerProcess) -> None:
    # Batches of 4: [0-3] [4-7] [8, 9, 10, 11] [12-15]. The third is too large for the client's
    # cap and goes in parts: [8] is stored, [9] alone cannot be sent. The exception carries the
    # results of jobs 0..8, in order: exactly the ones the caller can count on.
    with Client(capped.grpc_target, options=ClientOptions(max_message_bytes=TIGHT)) as client:
        with pytest.raises(MessageTooLarge) as caught:
            client.enqueue_many(_with_one_too_large("answered"), in_flight=2)
    answered = caught.value.answered
    assert answered is not None and len(answered) == 9
    assert all(isinstance(r, EnqueueAck) for r in answered)
    assert _stored_order(capped.grpc_target, answered) == list(range(9))


async def test_async_a_failed_batch_keeps_what_was_answered_before_it(capped: ServerProcess) -> None:
    async with AsyncClient(capped.grpc_target, options=ClientOptions(max_message_bytes=TIGHT)) as client:
        with pytest.raises(MessageTooLarge) as caught:
            await client.enqueue_many(_with_one_too_large("aanswered"), in_flight=3)
    answered = caught.value.answered
    assert answered is not None and len(answered) == 9
    assert _stored_order(capped.grpc_target, answered) == list(range(9))


def test_other_calls_leave_answered_unset(capped: ServerProcess) -> None:
    with Client(capped.grpc_target, options=ClientOptions(max_message_bytes=TIGHT)) as client:
        with pytest.raises(MessageTooLarge) as caught:
            client.enqueue_batch(_with_one_too_large("unset")[8:12])
    assert caught.value.answered is None
