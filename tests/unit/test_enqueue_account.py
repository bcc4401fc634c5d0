"""The words of an ``enqueue_many`` that stopped early (``sepp.errors.many_account``), the
transport error it completes (``_many.ManyRun.account``), and the ``sepp enqueue --batch-file``
SIGINT handler that holds a Ctrl-C while a batch's lines are printed (``HeldInterrupt``), and
the callbacks' bookkeeping (``ManyRun.report``).
The behaviour against real servers: tests/integration/test_enqueue_interrupted.py and
tests/acceptance/test_cli_interrupt.py."""

from __future__ import annotations

import signal
from concurrent.futures import Future

import grpc
import pytest

from sepp.cli.batch_file import HeldInterrupt
from sepp.client import ClientOptions, _core, _many
from sepp.errors import DeadlineExceeded, Unavailable, many_account
from sepp.request import BatchResult, EnqueueAck


@pytest.mark.parametrize(("args", "kwargs", "text"), [
    ((0, 0), {}, "no request answered; requests from 0 on were never sent (safe to send)"),
    ((1, 1), {}, "request 0 answered (see .answered); requests from 1 on were never sent (safe to send)"),
    ((3, 4), {}, "requests 0–2 answered (see .answered); request 3 may or may not be stored (sent, no verdict); "
                 "requests from 4 on were never sent (safe to send)"),
    # Read to its end: nothing past the last request sent; one or more unsent at the end.
    ((5, 5, 5), {"rest": False}, "requests 0–4 answered (see .answered)"),
    ((5, 6, 7), {"rest": False}, "requests 0–4 answered (see .answered); request 5 may or may not be stored "
                                 "(sent, no verdict); request 6 was never sent (safe to send)"),
    ((0, 2, 9), {"rest": False, "where": "x"}, "no request answered; requests 0–1 may or may not be stored "
                                               "(sent, no verdict); requests 2–8 were never sent (safe to send)"),
])
def test_the_account_names_each_part_at_its_limits(args: tuple[int, ...], kwargs: dict[str, object],
                                                   text: str) -> None:
    assert many_account(*args, **kwargs) == text  # type: ignore[arg-type]


def _done(results: list[object] | None = None, error: BaseException | None = None) -> Future[object]:
    fut: Future[object] = Future()
    fut.set_running_or_notify_cancel()
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(results)
    return fut


def _unsent(fut: Future[object]) -> bool:
    return fut.cancelled() or (fut.done() and _many.provably_unsent(fut.exception()))


@pytest.mark.parametrize("maybe_sent", [False, True])
def test_a_transport_error_loses_its_lone_call_verdict_and_gains_the_account(maybe_sent: bool) -> None:
    # The last batch found no connection: that call was "never sent: safe to send again",
    # but the batch before it was sent and got no verdict.
    error = _core.no_connection(ClientOptions(timeout=1.0), "127.0.0.1:1", maybe_sent)
    run = _many.ManyRun()
    run.out.extend(EnqueueAck(f"id{i}") for i in range(4))
    first, second = _done(error=DeadlineExceeded()), _done(error=error)
    run.batches.extend([_many.Sent(4, 8, first), _many.Sent(8, 12, second)])
    run.account(error, _unsent)
    assert error.answered == run.out and error.maybe_stored == range(4, 12 if maybe_sent else 8)
    assert error.call_message == "server unavailable (127.0.0.1:1): no connection within the 1 s deadline"
    end = 12 if maybe_sent else 8
    assert str(error) == (f"{error.call_message}; enqueue_many: requests 0–3 answered (see .answered); "
                          f"requests 4–{end - 1} may or may not be stored (sent, no verdict); "
                          f"requests from {end} on were never sent (safe to send)")


def test_a_cancelled_batch_was_never_sent_and_a_too_large_one_neither() -> None:
    run = _many.ManyRun()
    cancelled: Future[object] = Future()
    assert cancelled.cancel()
    too_large = _done(error=_many.UnsentTooLarge("x", code=grpc.StatusCode.RESOURCE_EXHAUSTED))
    lost = _done(error=Unavailable("gone", not_sent=False))
    run.batches.extend([_many.Sent(0, 4, too_large), _many.Sent(4, 8, cancelled)])
    assert run.maybe_end(0, _unsent) == 0 and run.handed == 8
    run.batches.append(_many.Sent(8, 12, lost))
    assert run.maybe_end(0, _unsent) == 12


def test_report_passes_each_result_to_the_callbacks_once_in_order() -> None:
    run = _many.ManyRun()
    calls: list[tuple[str, int, int]] = []

    def on_batch(start: int, results: list[BatchResult]) -> None:
        calls.append(("batch", start, len(results)))

    def progress(done: int, total: int | None) -> None:
        calls.append(("progress", done, total or 0))

    run.out.extend(EnqueueAck(f"id{i}") for i in range(4))
    run.report(on_batch, progress, 10)
    run.report(on_batch, progress, 10)  # nothing new: no call
    run.out.extend(EnqueueAck(f"id{i}") for i in range(4, 7))
    run.report(on_batch, progress, 10)
    assert calls == [("batch", 0, 4), ("progress", 4, 10), ("batch", 4, 3), ("progress", 7, 10)]
    assert (run.seen, run.counted) == (7, 7)


def test_a_callback_interrupted_part_way_is_not_called_again_for_the_same_results() -> None:
    # A KeyboardInterrupt that lands in on_batch: that batch counts as passed to it; the
    # catch-up after the interruption calls progress only, then the next batch goes on.
    run = _many.ManyRun()
    batches: list[int] = []
    counts: list[int] = []

    def on_batch(start: int, results: list[BatchResult]) -> None:
        batches.append(start)
        if len(batches) == 1:
            raise KeyboardInterrupt

    run.out.extend(EnqueueAck(f"id{i}") for i in range(3))
    with pytest.raises(KeyboardInterrupt):
        run.report(on_batch, lambda done, _total: counts.append(done), None)
    assert (batches, counts) == ([0], [])
    run.report(on_batch, lambda done, _total: counts.append(done), None)
    assert (batches, counts) == ([0], [3])
    run.out.append(EnqueueAck("id3"))
    run.report(on_batch, lambda done, _total: counts.append(done), None)
    assert (batches, counts) == ([0, 3], [3, 4])


def test_the_note_of_a_callback_that_failed_is_on_the_interruption() -> None:
    run = _many.ManyRun()
    run.note = "a callback raised ValueError: x"
    exc = run.interrupted(_unsent)
    assert exc.__notes__ == ["a callback raised ValueError: x"]
    assert str(exc) == ("enqueue_many interrupted: no request answered; requests from 0 on were never sent "
                        "(safe to send)")


def test_a_ctrl_c_while_a_batch_is_printed_is_held_until_it_is() -> None:
    held = HeldInterrupt()
    with pytest.raises(KeyboardInterrupt):
        held(signal.SIGINT, None)  # outside a hold: at once
    printed: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        with held.hold():
            held(signal.SIGINT, None)  # held: the batch goes on
            printed.append(1)
    assert printed == [1]
    with held.hold():  # a new hold starts clean
        pass
    with pytest.raises(KeyboardInterrupt), held.hold():
        held(signal.SIGINT, None)
        held(signal.SIGINT, None)  # however many: held, and one KeyboardInterrupt at the end
        printed.append(2)
    assert printed == [1, 2]
    held.settled = True  # the account: a Ctrl-C does not cut it short, in a hold or not
    held(signal.SIGINT, None)
    with held.hold():
        held(signal.SIGINT, None)
        printed.append(3)
    assert printed == [1, 2, 3]


def test_the_handler_is_installed_only_over_pythons_own() -> None:
    held = HeldInterrupt()
    before = signal.getsignal(signal.SIGINT)
    with held.installed():
        assert signal.getsignal(signal.SIGINT) is (held if before is signal.default_int_handler else before)
    assert signal.getsignal(signal.SIGINT) is before


def test_after_a_ctrl_c_sigint_stays_ignored_to_the_exit() -> None:
    # The command exits with its account printed; while Python finalizes, a handler would be
    # replaced by the default action (death by SIGINT): ignored instead.
    # Python's own handler, as in a command started from a terminal, whatever the test runner
    # inherited (SIGINT is ignored in a background job of a non-interactive shell).
    held = HeldInterrupt()
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with held.installed():
            held.settled = True
            held(signal.SIGINT, None)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
