"""``enqueue_many`` stopped part-way says exactly what became of the requests: Ctrl-C (SIGINT)
raises ``EnqueueInterrupted`` (a ``KeyboardInterrupt``) after waiting for the batches in
flight (``ClientOptions.interrupt_grace``; a second Ctrl-C ends the wait), a transport error
carries the same account, and a cancelled ``AsyncClient.enqueue_many`` stays a plain
``CancelledError`` with the account as a note.

Every check compares the account with the jobs the server really stored: each job carries its
request index in its custom map (``i``), and the queue is listed through the admin API. The
Ctrl-C tests run the producer as a child process and signal it once it printed enough
progress lines; a batch that must stay unanswered is sent through ``OneWayCut``, which drops
the calls the client sends from some point on (the test waits until it dropped a batch's worth).
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any

import pytest
from support.interrupting import with_default_sigint
from support.proxy import OneWayCut
from support.servers import ServerFactory, module_server
from support.stored import stored_by
from support.waiting import wait_for

from sepp import AsyncClient, Client, EnqueueAck, EnqueueInterrupted, EnqueueRequest, Payload
from sepp.client.options import ClientOptions, RetryPolicy
from sepp.errors import SeppError, TransportError
from sepp.testing import ServerProcess

pytestmark = pytest.mark.timeout(180)

#: The server's batch cap: small, so a run has many batches and the signal lands mid-way.
CAP = 32
#: Batches ``enqueue_many`` keeps in flight in these tests.
IN_FLIGHT = 4
#: Bytes a client must have sent after the cut before a batch counts as sent into it: more than
#: HTTP/2's control frames (pings, window updates, a new stream's headers), less than a batch
#: of ``CAP`` jobs (each ~40 bytes).
BATCH_BYTES = 1000
#: The longest a child may take to end once told to (it waits ``interrupt_grace`` at most;
#: the rest is a loaded machine's start-up and teardown).
ENDS_WITHIN = 60.0


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """A server whose batches hold at most ``CAP`` jobs; every test uses queues of its own."""
    yield from module_server(tmp_path_factory, backend, limits={"max_enqueue_batch": CAP})


def _job(queue: str, i: int) -> EnqueueRequest:
    return EnqueueRequest(queue, "t", payload=Payload.json({"i": i}), custom={"i": i})


def _jobs(queue: str, counter: list[int] | None = None) -> Iterator[EnqueueRequest]:
    """Endless jobs of ``queue``, job i carrying ``i``; ``counter[0]`` = how many were yielded."""
    i = 0
    while True:
        if counter is not None:
            counter[0] = i + 1
        yield _job(queue, i)
        i += 1


def stored(target: str, queue: str) -> dict[int, str]:
    """Request index (custom ``i``) → id of every job stored in ``queue``; an index stored
    twice fails the test."""
    return stored_by(target, queue, "i")


def check_account(store: dict[int, str], answered: Sequence[str | None], maybe: range) -> None:
    """The account of an interrupted run against the store: every answered ack is the stored
    job of its request, every stored job was answered or lies in ``maybe`` (which follows the
    answered prefix), and nothing past ``maybe`` was stored."""
    assert maybe.start == len(answered)
    acked = {i: job_id for i, job_id in enumerate(answered) if job_id is not None}
    assert {i: store.get(i) for i in acked} == acked
    unexplained = sorted(set(store) - set(acked) - set(maybe))
    assert not unexplained, f"stored but neither answered nor in {maybe}: {unexplained[:10]}"


def check_seen(seen: list[list[Any]], answered: Sequence[str | None], *, whole: bool = True) -> None:
    """The batches ``on_batch`` was passed (``[start, ids]`` each) against the ids answered:
    each batch is the answered ids at its place, in order, none twice; together they cover the
    answered ids (``whole``; else a prefix of them) but for at most one batch — the one whose
    callback the Ctrl-C interrupted, which is not called again for the same results."""
    gaps, end = [], 0
    for start, ids in seen:
        assert start >= end, (start, end)
        if start > end:
            gaps.append((end, start))
        assert ids == list(answered[start:start + len(ids)])
        end = start + len(ids)
    if whole and end < len(answered):
        gaps.append((end, len(answered)))
    assert len(gaps) <= 1 and all(b - a <= CAP for a, b in gaps), gaps


# ----------------------------------------------------------------- Ctrl-C, in a child process

#: The producer of the Ctrl-C tests: ``enqueue_many`` of endless jobs with ``progress N`` on
#: stdout per batch; on ``EnqueueInterrupted`` one JSON line (the ids answered, the
#: ``[start, ids]`` of each batch passed to ``on_batch``, the range that may be stored, the message, whether it is a
#: KeyboardInterrupt) and exit 130. With
#: ``report-wait`` a thread prints ``waiting`` once the main thread waits for the batches in
#: flight after the interruption.
CHILD = r"""
import json, signal, sys, threading, time
from sepp import Client, ClientOptions, EnqueueAck, EnqueueInterrupted, EnqueueRequest, Payload

target, queue, grace, mode = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]

def jobs():
    i = 0
    while True:
        yield EnqueueRequest(queue, "t", payload=Payload.json({"i": i}), custom={"i": i})
        i += 1

def report_wait():
    main = threading.main_thread().ident
    while True:
        frame = sys._current_frames().get(main)
        while frame is not None and frame.f_code.co_name != "await_verdicts":
            frame = frame.f_back
        if frame is not None:
            print("waiting", flush=True)
            return
        time.sleep(0.01)

def interrupt_from_a_thread():
    # Ctrl-C as the OS may deliver it: to some thread other than the main one, while the main
    # thread waits for the oldest batch in flight (found in its stack twice, 0.1 s apart).
    sys.stdin.readline()
    main = threading.main_thread().ident
    def collecting():
        frame = sys._current_frames().get(main)
        while frame is not None and frame.f_code.co_name != "collect":
            frame = frame.f_back
        return frame is not None
    while not (collecting() and time.sleep(0.1) is None and collecting()):
        time.sleep(0.01)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)

if mode == "report-wait":
    threading.Thread(target=report_wait, daemon=True).start()
if mode == "thread-signal":
    threading.Thread(target=interrupt_from_a_thread, daemon=True).start()
seen = []

def on_batch(start, results):
    # One step records the batch (a Ctrl-C landing in this callback loses the batch whole).
    seen.append([start, [r.job_id if isinstance(r, EnqueueAck) else None for r in results]])

with Client(target, options=ClientOptions(timeout=120, interrupt_grace=grace)) as client:
    try:
        client.enqueue_many(jobs(), in_flight=4, on_batch=on_batch,
                            progress=lambda done, total: print("progress", done, flush=True))
    except EnqueueInterrupted as exc:
        print(json.dumps({"answered": [r.job_id if isinstance(r, EnqueueAck) else None for r in exc.answered],
                          "seen": seen,
                          "maybe": [exc.maybe_stored.start, exc.maybe_stored.stop], "message": str(exc),
                          "keyboard_interrupt": isinstance(exc, KeyboardInterrupt)}), flush=True)
        sys.exit(130)
"""


def start_child(target: str, queue: str, grace: float, mode: str = "") -> subprocess.Popen[str]:
    return subprocess.Popen(with_default_sigint([sys.executable, "-c", CHILD, target, queue, str(grace), mode or "-"]),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})


def read_until(stream: IO[str], want: str, count: int = 1, child: subprocess.Popen[str] | None = None) -> None:
    """Read lines from ``stream`` until ``count`` of them started with ``want``. When the
    stream ends first, the ``AssertionError`` quotes the last lines read and, given the
    ``child``, its exit code and the end of its stderr (what it did instead)."""
    seen = 0
    last: list[str] = []
    for line in stream:
        last = [*last[-9:], line.rstrip("\n")]
        if line.startswith(want):
            seen += 1
            if seen >= count:
                return
    told = f"the child ended before printing {count} lines starting {want!r}; its last lines: {last}"
    if child is not None and child.stderr is not None:
        told += f"; exit code {child.wait(10)}; stderr ends: {child.stderr.read()[-3000:]!r}"
    raise AssertionError(told)


def finish(child: subprocess.Popen[str]) -> dict[str, Any]:
    """The child's JSON report, once it ended with 130 (the rest of stdout is read from the
    same object as ``read_until``, which read ahead)."""
    assert child.stdout is not None and child.stderr is not None
    out, err = child.stdout.read(), child.stderr.read()
    child.wait(ENDS_WITHIN)
    assert child.returncode == 130, err
    report: dict[str, Any] = json.loads(out.splitlines()[-1])
    assert report["keyboard_interrupt"] is True
    return report


def test_ctrl_c_waits_for_the_batches_in_flight_and_accounts_for_every_stored_job(
        capped: ServerProcess) -> None:
    child = start_child(capped.grpc_target, "int-healthy", grace=60.0)
    try:
        assert child.stdout is not None
        read_until(child.stdout, "progress", 30)
        child.send_signal(signal.SIGINT)
        report = finish(child)
    finally:
        child.kill()
    answered, maybe = report["answered"], range(*report["maybe"])
    store = stored(capped.grpc_target, "int-healthy")
    assert len(answered) >= 30 * CAP
    # The server answers every batch in flight within the grace: nothing is left unknown, and
    # what was stored is exactly what was answered, id for id.
    assert maybe == range(len(answered), len(answered))
    check_account(store, answered, maybe)
    assert store == dict(enumerate(answered))
    # The batches answered while it waited were passed to on_batch too: someone saving the
    # ids from on_batch has every id answered.
    check_seen(report["seen"], answered)
    assert f"requests 0–{len(answered) - 1} answered (see .answered)" in report["message"]
    assert f"requests from {len(answered)} on were never sent" in report["message"]


@pytest.fixture
def cut(capped: ServerProcess) -> Iterator[OneWayCut]:
    proxy = OneWayCut(capped.grpc_target)
    yield proxy
    proxy.close()


def test_batches_sent_into_a_cut_are_reported_as_maybe_stored(capped: ServerProcess, cut: OneWayCut) -> None:
    child = start_child(cut.target, "int-cut", grace=0.5)
    try:
        assert child.stdout is not None
        read_until(child.stdout, "progress", 20)
        cut.cut()
        wait_for(lambda: cut.dropped >= BATCH_BYTES, 30, what="a batch sent after the cut")
        child.send_signal(signal.SIGINT)
        report = finish(child)
    finally:
        child.kill()
    answered, maybe = report["answered"], range(*report["maybe"])
    store = stored(capped.grpc_target, "int-cut")
    check_account(store, answered, maybe)
    # At least the batch sent after the cut had no verdict, and the server never got it whole.
    # A batch handed over after it may be stored all the same (the client's writes of the
    # calls in flight interleave, so its frames can have gone out before the cut): it is
    # among those that may be stored (check_account).
    assert CAP <= len(maybe) <= IN_FLIGHT * CAP
    assert len(set(maybe) - set(store)) >= CAP
    check_seen(report["seen"], answered)
    assert f"requests {maybe.start}–{maybe.stop - 1} may or may not be stored (sent, no verdict)" in report["message"]
    assert f"requests from {maybe.stop} on were never sent" in report["message"]


def test_a_second_ctrl_c_ends_the_wait_for_the_batches_in_flight(capped: ServerProcess, cut: OneWayCut) -> None:
    # A grace far longer than the test's patience: only the second Ctrl-C can end the wait.
    child = start_child(cut.target, "int-twice", grace=600.0, mode="report-wait")
    try:
        assert child.stdout is not None
        read_until(child.stdout, "progress", 10)
        cut.cut()
        wait_for(lambda: cut.dropped >= BATCH_BYTES, 30, what="a batch sent after the cut")
        child.send_signal(signal.SIGINT)
        read_until(child.stdout, "waiting", child=child)
        child.send_signal(signal.SIGINT)
        report = finish(child)
    finally:
        child.kill()
    answered, maybe = report["answered"], range(*report["maybe"])
    check_account(stored(capped.grpc_target, "int-twice"), answered, maybe)
    assert len(maybe) >= CAP
    check_seen(report["seen"], answered, whole=False)


def test_a_ctrl_c_the_os_hands_to_another_thread_ends_the_run_at_once(capped: ServerProcess, cut: OneWayCut) -> None:
    # The batch sent after the cut is never answered (the child's calls time out after 120 s):
    # a main thread that slept in its wait until then would see the Ctrl-C only 120 s later.
    child = start_child(cut.target, "int-thread", grace=0.0, mode="thread-signal")
    try:
        assert child.stdout is not None and child.stdin is not None
        read_until(child.stdout, "progress", 10)
        cut.cut()
        wait_for(lambda: cut.dropped >= BATCH_BYTES, 30, what="a batch sent after the cut")
        child.stdin.write("go\n")
        child.stdin.flush()
        told = time.monotonic()
        report = finish(child)
        assert time.monotonic() - told < ENDS_WITHIN  # the calls in flight would end after 120 s
    finally:
        child.kill()
    answered, maybe = report["answered"], range(*report["maybe"])
    check_account(stored(capped.grpc_target, "int-thread"), answered, maybe)
    assert len(maybe) >= CAP


# ----------------------------------------------------------------- in process


def test_an_interruption_in_a_callback_is_enqueue_interrupted_after_the_batches_in_flight(
        capped: ServerProcess) -> None:
    # A KeyboardInterrupt can land anywhere in the calling thread, a callback included: the
    # batch the callback was called for is answered; the three in flight are waited for.
    seen: list[int] = []

    def progress(done: int, _total: int | None) -> None:
        seen.append(done)
        if len(seen) == 3:
            raise KeyboardInterrupt

    requests = [_job("int-callback", i) for i in range(6 * CAP)]
    with Client(capped.grpc_target) as client, pytest.raises(EnqueueInterrupted) as caught:
        client.enqueue_many(requests, in_flight=IN_FLIGHT, progress=progress)
    exc = caught.value
    assert isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Exception | SeppError)
    # The batches a sending thread had taken are answered within the grace; one not taken yet
    # is cancelled: never sent. Every batch was handed over (a list: read to its end).
    assert len(exc.answered) in (3 * CAP, 4 * CAP, 5 * CAP, 6 * CAP)
    # Each batch answered while it waited was counted too, in order.
    assert seen == list(range(CAP, len(exc.answered) + 1, CAP))
    ids = [r.job_id for r in exc.answered if isinstance(r, EnqueueAck)]
    check_account(stored(capped.grpc_target, "int-callback"), ids, exc.maybe_stored)
    if exc.maybe_stored.stop == 6 * CAP:
        assert str(exc).endswith(" (sent, no verdict)") or str(exc).endswith("(see .answered)")
    else:
        assert str(exc).endswith(f"requests {exc.maybe_stored.stop}–{6 * CAP - 1} were never sent (safe to send)")
    assert str(exc).startswith(f"enqueue_many interrupted: requests 0–{len(ids) - 1} answered (see .answered)")


def test_no_grace_reports_the_batches_in_flight_as_maybe_stored(capped: ServerProcess) -> None:
    # interrupt_grace=0: the batches in flight are not waited for; those not answered yet at
    # that instant are in maybe_stored (the server may well store them a moment later).
    batches: list[int] = []

    def on_batch(start: int, results: list[Any]) -> None:
        batches.append(start)
        if len(batches) == 2:
            raise KeyboardInterrupt

    with Client(capped.grpc_target, options=ClientOptions(interrupt_grace=0)) as client:
        with pytest.raises(EnqueueInterrupted) as caught:
            client.enqueue_many(_jobs("int-nograce"), in_flight=IN_FLIGHT, on_batch=on_batch)
        client.enqueue(_job("int-nograce-after", 0))  # the client goes on working
    exc = caught.value
    assert 2 * CAP <= len(exc.answered) <= (IN_FLIGHT + 1) * CAP and len(exc.answered) % CAP == 0
    assert batches == list(range(0, len(exc.answered), CAP))  # those answered at that instant too
    assert exc.maybe_stored.start == len(exc.answered) and exc.maybe_stored.stop <= (IN_FLIGHT + 1) * CAP
    ids = [r.job_id for r in exc.answered]
    check_account(stored(capped.grpc_target, "int-nograce"), ids, exc.maybe_stored)


def test_on_batch_gets_exactly_the_answered_results_after_an_interruption(capped: ServerProcess) -> None:
    # The user's check: the ids saved from on_batch are exactly exc.answered, the batches
    # answered while it waited for those in flight included.
    saved: list[Any] = []

    def on_batch(start: int, results: list[Any]) -> None:
        assert start == len(saved)
        saved.extend(results)
        if len(saved) == 5 * CAP:
            # Once the server stored the next batch, it is answered while enqueue_many waits.
            wait_for(lambda: len(stored(capped.grpc_target, "int-saved")) >= 6 * CAP, 30, what="the next batch")
            raise KeyboardInterrupt

    with Client(capped.grpc_target) as client, pytest.raises(EnqueueInterrupted) as caught:
        client.enqueue_many(_jobs("int-saved"), in_flight=IN_FLIGHT, on_batch=on_batch)
    exc = caught.value
    assert len(exc.answered) >= 6 * CAP  # the batches in flight were answered within the grace
    assert saved == exc.answered
    ids = [r.job_id for r in saved]
    check_account(stored(capped.grpc_target, "int-saved"), ids, exc.maybe_stored)


def test_a_callback_that_fails_while_it_waits_is_not_called_again_and_the_account_is_whole(
        capped: ServerProcess) -> None:
    # The interruption lands in on_batch; on_batch then fails on the next batch, answered
    # while it waited: no further callback, and still EnqueueInterrupted with every answer.
    batches: list[int] = []
    counts: list[int] = []

    def on_batch(start: int, results: list[Any]) -> None:
        batches.append(start)
        if len(batches) == 2:
            wait_for(lambda: len(stored(capped.grpc_target, "int-failing")) >= 3 * CAP, 30, what="the next batch")
            raise KeyboardInterrupt
        if len(batches) == 3:
            raise ValueError("disk full")

    with Client(capped.grpc_target) as client, pytest.raises(EnqueueInterrupted) as caught:
        client.enqueue_many([_job("int-failing", i) for i in range(8 * CAP)], in_flight=IN_FLIGHT,
                            on_batch=on_batch, progress=lambda done, _total: counts.append(done))
    exc = caught.value
    assert len(exc.answered) >= 3 * CAP  # the batch it failed on is answered
    assert batches == [0, CAP, 2 * CAP]
    assert counts == [CAP, 2 * CAP]  # progress: the batch on_batch failed on and after, not counted
    assert exc.__notes__ == ["a callback raised ValueError: disk full; on_batch and progress were not called "
                             f"for the requests from {3 * CAP} on"]
    ids = [r.job_id for r in exc.answered]
    check_account(stored(capped.grpc_target, "int-failing"), ids, exc.maybe_stored)


def test_a_transport_error_says_which_requests_may_be_stored(server_factory: ServerFactory) -> None:
    # The server stops under a long enqueue_many: the calls after it find no connection
    # ("never sent" for each of them), but batches before them were sent and some were not
    # answered. The error accounts for every request, without the lone call's "safe to send
    # again" — and the store agrees.
    server = server_factory()
    stopped: list[int] = []

    def progress(done: int, _total: int | None) -> None:
        if done >= 20 * 256 and not stopped:
            stopped.append(done)
            server.terminate()

    # A deadline a loaded machine does not run out before the stop (a batch answered late
    # must not be the first error: 1 s was, at load 24); after the stop a call waits for a
    # connection up to it (twice: about 20 s).
    options = ClientOptions(timeout=10.0, retry=RetryPolicy.disabled())
    with Client(server.grpc_target, options=options) as client, pytest.raises(TransportError) as caught:
        client.enqueue_many(_jobs("int-transport"), in_flight=IN_FLIGHT, progress=progress)
    exc = caught.value
    assert exc.answered is not None and exc.maybe_stored is not None and exc.call_message is not None
    first, end = len(exc.answered), exc.maybe_stored.stop
    assert exc.maybe_stored.start == first >= stopped[0]
    message = str(exc)
    assert "the call was never sent" not in message and "earlier try" not in message
    assert message.startswith(exc.call_message + "; enqueue_many: ")
    assert f"requests 0–{first - 1} answered (see .answered)" in message
    assert f"requests from {end} on were never sent (safe to send)" in message
    if end > first:
        assert f"requests {first}–{end - 1} may or may not be stored (sent, no verdict)" in message
    server.restart()
    ids = [r.job_id for r in exc.answered]
    check_account(stored(server.grpc_target, "int-transport"), ids, exc.maybe_stored)


# ----------------------------------------------------------------- AsyncClient: cancellation


def notes_of(exc: BaseException | None) -> list[str]:
    """The notes (``add_note``) of ``exc`` and of the exceptions it was raised from or during."""
    notes: list[str] = []
    while exc is not None:
        notes += getattr(exc, "__notes__", [])
        exc = exc.__cause__ or exc.__context__
    return notes


async def test_a_cancelled_async_enqueue_many_stays_a_cancelled_error_with_the_account_as_a_note(
        capped: ServerProcess) -> None:
    reported: list[Any] = []
    yielded = [0]
    task: asyncio.Task[Any] | None = None

    def on_batch(start: int, results: list[Any]) -> None:
        assert start == len(reported)
        reported.extend(results)
        if len(reported) == 3 * CAP:
            assert task is not None
            task.cancel()

    async with AsyncClient(capped.grpc_target) as client:
        task = asyncio.ensure_future(client.enqueue_many(_jobs("int-async", yielded), in_flight=IN_FLIGHT,
                                                         on_batch=on_batch))
        with pytest.raises(asyncio.CancelledError) as caught:
            await task
        assert task.cancelled()
        await client.enqueue(_job("int-async-after", 0))  # the client goes on working
    # The cancellation lands at the next await that suspends: batches answered meanwhile are
    # still passed to on_batch, and the note counts exactly those.
    assert len(reported) >= 3 * CAP
    assert any(f"enqueue_many cancelled: requests 0–{len(reported) - 1} answered (each passed to on_batch and "
               "progress)" in note for note in notes_of(caught.value)), notes_of(caught.value)
    ids = [r.job_id for r in reported]
    # Answered: exactly what on_batch saw; the batches cancelled in flight may be stored;
    # nothing the iterable did not yield.
    check_account(stored(capped.grpc_target, "int-async"), ids, range(len(ids), yielded[0]))


async def test_asyncio_timeout_still_turns_the_cancellation_into_timeout_error(capped: ServerProcess) -> None:
    async with AsyncClient(capped.grpc_target) as client:
        with pytest.raises(TimeoutError) as caught:
            async with asyncio.timeout(None) as deadline:
                def progress(done: int, _total: int | None) -> None:
                    if done >= 2 * CAP:
                        deadline.reschedule(asyncio.get_running_loop().time())

                await client.enqueue_many(_jobs("int-timeout"), progress=progress)
    assert isinstance(caught.value.__cause__, asyncio.CancelledError)
    assert any("enqueue_many cancelled:" in note for note in notes_of(caught.value))


def test_interrupt_grace_must_not_be_negative() -> None:
    assert ClientOptions(interrupt_grace=0).interrupt_grace == 0
    for bad in (-0.001, float("nan")):
        with pytest.raises(ValueError, match="interrupt_grace"):
            ClientOptions(interrupt_grace=bad)


def test_enqueue_interrupted_pickles_with_its_account() -> None:
    import pickle

    exc = EnqueueInterrupted([], range(0, 5), "enqueue_many interrupted: x")
    back = pickle.loads(pickle.dumps(exc))
    assert (back.answered, back.maybe_stored, str(back)) == ([], range(0, 5), "enqueue_many interrupted: x")
    default = EnqueueInterrupted([], range(0, 5))
    assert str(default) == ("enqueue_many interrupted: no request answered; requests 0–4 may or may not be "
                            "stored (sent, no verdict); requests from 5 on were never sent (safe to send)")


# ----------------------------------------------------------------- any other exception


def _failing_source(queue: str, count: int, yielded: list[int]) -> Iterator[EnqueueRequest]:
    """``count`` jobs of ``queue`` (job i carrying ``i``), then ``ValueError``: a source that breaks
    part-way (a bad row of the file it reads); ``yielded[0]`` = how many it yielded."""
    for i in range(count):
        yielded[0] = i + 1
        yield _job(queue, i)
    raise ValueError("bad row in the source")


def noted_account(exc: BaseException) -> tuple[int, range]:
    """(requests answered, the range that may be stored) of the ``enqueue_many stopped:`` note
    on ``exc``; fails the test when there is none."""
    notes = [n for n in notes_of(exc) if n.startswith("enqueue_many stopped: ")]
    assert notes, f"no account on {exc!r}: {notes_of(exc)}"
    answered = re.search(r"requests 0–(\d+) answered", notes[0])
    first = int(answered[1]) + 1 if answered else 0
    maybe = re.search(r"requests (\d+)(?:–(\d+))? may or may not be stored", notes[0])
    end = (int(maybe[2] or maybe[1]) + 1) if maybe else first
    assert maybe is None or int(maybe[1]) == first
    return first, range(first, end)


def test_an_exception_from_a_callback_carries_the_account_as_a_note(capped: ServerProcess) -> None:
    # A callback that raises stops the run: the batches in flight are waited for and the
    # exception is raised as it is — with a note saying which requests may be stored beyond
    # those passed to on_batch (jobs of the batches in flight were stored, their ids never
    # shown to the caller).
    reported: list[Any] = []

    def on_batch(start: int, results: list[Any]) -> None:
        reported.extend(results)
        if len(reported) == 3 * CAP:
            raise RuntimeError("the callback broke")

    with Client(capped.grpc_target) as client, pytest.raises(RuntimeError, match="the callback broke") as caught:
        client.enqueue_many([_job("int-cb-raise", i) for i in range(20 * CAP)], in_flight=IN_FLIGHT,
                            on_batch=on_batch)
    answered, maybe = noted_account(caught.value)
    assert answered == len(reported) == 3 * CAP
    check_account(stored(capped.grpc_target, "int-cb-raise"), [r.job_id for r in reported], maybe)


async def test_an_iterable_that_raises_gives_its_exception_with_the_account_as_a_note(
        capped: ServerProcess) -> None:
    # The async client cancels the batches in flight at once: they may be stored.
    reported: list[Any] = []
    yielded = [0]
    async with AsyncClient(capped.grpc_target) as client:
        with pytest.raises(ValueError, match="bad row") as caught:
            await client.enqueue_many(_failing_source("int-src-raise", 10 * CAP + 5, yielded), in_flight=IN_FLIGHT,
                                      on_batch=lambda start, results: reported.extend(results))
    answered, maybe = noted_account(caught.value)
    assert answered == len(reported)
    assert maybe.stop <= yielded[0]
    check_account(stored(capped.grpc_target, "int-src-raise"), [r.job_id for r in reported], maybe)
