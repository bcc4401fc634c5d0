"""``sepp enqueue --batch-file``: send a file of JSON lines with ``enqueue_many`` (or in one
``enqueue_atomic`` call) and print one result line per job; a Ctrl-C at any point ends the
run with its account — lines answered, maybe stored, not sent (exit 130; ``HeldInterrupt``
keeps a result line from being printed twice)."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import typer
from rich.markup import escape

from sepp.cli.enqueue_report import (
    ack_json,
    fail_input,
    fail_rejected,
    fail_transport,
    open_client,
    print_rejection,
    rejection_json,
)
from sepp.cli.job_input import JobDefaults, read_batch_lines
from sepp.cli.progress import progress_bar
from sepp.cli.shell import EXIT_REJECTED, err_console, out_console, print_json
from sepp.request import EnqueueAck, EnqueueRequest


def _job_lines(text: str) -> list[int]:
    """The numbers of the lines of a batch file that hold a job: those that are not blank
    (as ``read_batch_lines`` reads them, without parsing them)."""
    return [number for number, line in enumerate(text.splitlines(), start=1) if line.strip()]


#: The account of a ``--batch-file`` run interrupted before its file was read.
_NOT_READ = "no line was sent (the batch file was not read yet)"


def enqueue_file(path: Path, defaults: JobDefaults, atomic: bool, server: str, timeout: float,
                  validate_locally: bool, as_json: bool, token: str | None = None, *, progress: bool = False) -> None:
    """Send the batch file ``path`` (``-`` = stdin) — with ``enqueue_many``, or in one
    ``enqueue_atomic`` call with ``atomic`` — and print one line per job. A Ctrl-C at any
    point ends it with the account of ``_report_account`` (exit ``EXIT_INTERRUPTED``): the
    precise one of ``enqueue_many`` (``_enqueue_lines``), or, outside it, the lines printed
    as answered and every other line as not sent (before the call) or maybe stored (once it
    was made). Raises ``typer.Exit``."""
    from sepp.errors import RejectedError, TransportError

    guard = HeldInterrupt()
    printed = _Printed()
    text: str | None = None
    lines: list[int] | None = None
    with guard.installed():
        try:
            try:
                text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                fail_input(f"cannot read batch file: {exc}", as_json)
            try:
                jobs = read_batch_lines(text, defaults)
            except ValueError as exc:  # the whole file is read before any line is sent
                fail_input(f"{exc}; nothing was sent (every line is checked before the first is sent)", as_json)
            if not jobs:
                fail_input("the batch file holds no jobs", as_json)
            lines = [number for number, _ in jobs]
            requests = [req for _, req in jobs]
            with open_client(server, timeout, validate_locally, token) as client:
                try:
                    if atomic:
                        _enqueue_atomic(client, requests, lines, as_json, guard, printed)
                    else:
                        _enqueue_lines(client, requests, lines, server, as_json, progress, path.name, guard, printed)
                except RejectedError as exc:
                    fail_rejected(exc.rejection, as_json)
                except TransportError as exc:
                    fail_transport(exc, server, as_json)
        except KeyboardInterrupt:  # a Ctrl-C outside enqueue_many's own account
            guard.settled = True  # first: a further Ctrl-C is ignored from here on
            if lines is None and text is not None:
                lines = _job_lines(text)
            if lines:
                _report_account(lines, printed.count, max(printed.count, printed.sent), as_json,
                                {"error": "interrupted"}, "interrupted")
            elif as_json:
                print_json({"error": "interrupted", "message": _NOT_READ}, stderr=True)
            else:
                err_console().print(f"[bold]interrupted:[/] {_NOT_READ}", markup=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
    if printed.rejected:
        if not as_json:
            err_console().print(f"{printed.rejected} of {len(lines)} jobs rejected; the others were enqueued")
        raise typer.Exit(EXIT_REJECTED)


#: The exit status of a ``sepp enqueue --batch-file`` stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130


class HeldInterrupt:
    """The SIGINT handling of a ``--batch-file`` run: however many Ctrl-Cs come, whenever they
    come, no result line is printed twice and the run ends with its account (exit 130).

    * By default a Ctrl-C raises ``KeyboardInterrupt`` at once: the first one stops
      ``enqueue_many`` (which then waits for the batches in flight), a further one ends that
      wait.
    * Inside ``hold()`` (the lines of an answered batch are being printed) Ctrl-Cs are held,
      however many, and one ``KeyboardInterrupt`` is raised when the block ends: a batch's
      lines are printed whole and counted once.
    * Once ``settled`` (set by the command as it starts printing its account) they are ignored.

    ``installed()`` puts it in place for a block, in the main thread only and only over
    Python's own handler (a handler the embedding program set is left alone)."""

    def __init__(self) -> None:
        self.holding = False
        self.held = False
        #: Set by the command when it starts its account: Ctrl-Cs are ignored from then on.
        self.settled = False
        #: Whether a SIGINT came while it was installed.
        self.signalled = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler: ignore once settled, hold inside ``hold()``, raise otherwise."""
        self.signalled = True
        if self.settled:
            return
        if self.holding:
            self.held = True
            return
        raise KeyboardInterrupt

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Handle SIGINT with this object for the block (see the class). When a SIGINT came
        meanwhile, the block ends with SIGINT ignored (``SIG_IGN``) rather than Python's
        handler back: the command is on its way out with its account printed, and while the
        interpreter finalizes, a handler other than ``SIG_IGN`` is replaced by the default
        action — a further Ctrl-C would kill the process (exit -2 instead of 130)."""
        ours = (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        if ours:
            signal.signal(signal.SIGINT, self)
        try:
            yield
        finally:
            if ours:
                signal.signal(signal.SIGINT, signal.SIG_IGN if self.signalled else signal.default_int_handler)

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold Ctrl-Cs during the block; when one came and the block ends normally, raise
        ``KeyboardInterrupt`` (unless ``settled``)."""
        self.held = False
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.held and not self.settled:
            self.held = False
            raise KeyboardInterrupt


@dataclass(slots=True)
class _Printed:
    """What a ``--batch-file`` run printed: the results of the first ``count`` requests,
    ``rejected`` of them rejections; ``sent``: how many requests may have been sent (0
    before the enqueue call, all of them once it was made)."""

    count: int = 0
    rejected: int = 0
    sent: int = 0


def _result_text(line: int, result: Any, as_json: bool) -> str:
    """The output line (with its newline) of the job of file line ``line``: ``line 7:
    enqueued ID`` / ``deduplicated ID`` / ``rejected CODE: …``, or its JSON document."""
    if isinstance(result, EnqueueAck):
        status = "deduplicated" if result.deduplicated else "enqueued"
        if as_json:
            return json.dumps({"line": line, "status": status, **ack_json(result)}, ensure_ascii=False) + "\n"
        return f"line {line}: {status} {result.job_id}\n"
    if as_json:
        return json.dumps({"line": line, "status": "rejected", **rejection_json(result)}, ensure_ascii=False) + "\n"
    return f"line {line}: rejected {result}\n"


def _write_results(lines: list[int], start: int, results: Sequence[Any], as_json: bool, printed: _Printed) -> None:
    """Print the lines of ``results`` (those of the requests from ``start`` on, file lines
    ``lines``) on stdout with plain buffered writes, flushed once at the end (a reader of a
    pipe gets each batch as it is answered); count them in ``printed``. On a terminal a
    rejection goes through rich (in red)."""
    out = sys.stdout
    colour = not as_json and out.isatty()
    parts: list[str] = []
    for offset, result in enumerate(results):
        line = lines[start + offset]
        if not isinstance(result, EnqueueAck):
            printed.rejected += 1
            if colour:
                out.write("".join(parts))
                parts.clear()
                out_console().print(f"line {line}: [red]rejected[/] {escape(str(result))}", markup=True)
                continue
        parts.append(_result_text(line, result, as_json))
    out.write("".join(parts))
    out.flush()
    printed.count = start + len(results)


def _enqueue_atomic(client: Any, requests: list[EnqueueRequest], lines: list[int], as_json: bool,
                    guard: HeldInterrupt, printed: _Printed) -> None:
    """Send ``requests`` (file lines ``lines``) in one ``enqueue_atomic`` call and print one
    line per ack; every refusal on stderr and exit 2 when any line was refused (nothing was
    enqueued). Raises ``typer.Exit``, and ``KeyboardInterrupt`` (``printed`` says how far
    it got)."""
    from sepp.errors import AtomicEnqueueError

    printed.sent = len(requests)
    try:
        acks = client.enqueue_atomic(requests)
    except AtomicEnqueueError as exc:
        for failure in exc.errors:
            line = lines[failure.index]
            if as_json:
                print_json({"line": line, "status": "rejected", **rejection_json(failure.rejection)}, stderr=True)
            else:
                print_rejection(failure.rejection, f"line {line} rejected")
        if not as_json:
            err_console().print(f"atomic batch refused: {len(exc.errors)} of {len(requests)} lines "
                                "rejected, nothing enqueued")
        raise typer.Exit(EXIT_REJECTED) from None
    with guard.hold():
        _write_results(lines, 0, acks, as_json, printed)


def _enqueue_lines(client: Any, requests: list[EnqueueRequest], lines: list[int], server: str, as_json: bool,
                   progress: bool, name: str, guard: HeldInterrupt, printed: _Printed) -> None:
    """Send ``requests`` (file lines ``lines``) with ``enqueue_many`` and print one line per
    result as each batch is answered (``printed`` counts them and the rejections).

    On Ctrl-C: the results answered before the interruption or while the batches in flight
    were waited for are printed, then (stderr) which lines were answered, which may or may not
    be stored and which were not sent; exit ``EXIT_INTERRUPTED``. On a transport error the
    same, then the error (exit 3). Raises ``typer.Exit``, and ``KeyboardInterrupt`` for a
    Ctrl-C outside ``enqueue_many``'s account (``printed`` says how far it got)."""
    from sepp.errors import EnqueueInterrupted, TransportError

    stopped: EnqueueInterrupted | TransportError | None = None
    with progress_bar(len(requests), f"enqueue {name}", show=progress) as advance:
        def on_batch(start: int, results: list[Any]) -> None:
            with guard.hold():  # a batch's lines are printed whole, then counted
                # A batch missed (a Ctrl-C landed before the hold) leaves a gap: the account prints it.
                if start == printed.count:
                    _write_results(lines, start, results, as_json, printed)
                    advance(len(results))

        printed.sent = len(requests)
        try:
            client.enqueue_many(requests, on_batch=on_batch)
        except (EnqueueInterrupted, TransportError) as exc:
            guard.settled = True  # first: a further Ctrl-C is ignored from here on
            stopped = exc
            rest = (exc.answered or [])[printed.count:]  # answered but not printed yet
            _write_results(lines, printed.count, rest, as_json, printed)
            advance(len(rest))
    if stopped is None:
        return
    answered = len(stopped.answered or ())
    end = stopped.maybe_stored.stop if stopped.maybe_stored is not None else answered
    if isinstance(stopped, EnqueueInterrupted):
        _report_account(lines, answered, end, as_json, {"error": "interrupted"}, "interrupted")
        raise typer.Exit(EXIT_INTERRUPTED)
    if not as_json:  # with --json the account goes into the error document
        _report_account(lines, answered, end, as_json, {}, "stopped")
    fail_transport(stopped, server, as_json, _account_json(lines, answered, end))


def _line_span(lines: list[int], start: int, stop: int) -> str:
    """``line 7`` or ``lines 7–12``: the file lines of the requests ``start`` ≤ i < ``stop``."""
    return f"line {lines[start]}" if stop == start + 1 else f"lines {lines[start]}–{lines[stop - 1]}"


def _account_json(lines: list[int], answered: int, end: int) -> dict[str, Any]:
    """The file lines answered, maybe stored and not sent, as ``[first, last]`` or ``null``
    each: the keys an interrupted or failed ``--batch-file`` run adds to its ``--json`` error."""
    def span(start: int, stop: int) -> list[int] | None:
        return [lines[start], lines[stop - 1]] if stop > start else None

    return {"answered_lines": span(0, answered), "maybe_stored_lines": span(answered, end),
            "unsent_lines": span(end, len(lines))}


def _report_account(lines: list[int], answered: int, end: int, as_json: bool, doc: dict[str, Any],
                    what: str) -> None:
    """Say on stderr which lines of the file were answered (their results printed above),
    which may or may not be stored (sent, no verdict) and which were never sent, and how to
    resume without duplicates; as JSON with ``--json`` (``doc`` plus ``_account_json``)."""
    if as_json:
        print_json({**doc, **_account_json(lines, answered, end)}, stderr=True)
        return
    parts = [f"{_line_span(lines, 0, answered)} answered (printed above)" if answered else "no line was answered"]
    if end > answered:
        parts.append(f"{_line_span(lines, answered, end)} may or may not be stored (sent, no verdict)")
    if end < len(lines):
        parts.append(f"{_line_span(lines, end, len(lines))} {'were' if len(lines) > end + 1 else 'was'} not sent")
    err = err_console()
    err.print(f"[bold]{what}:[/] {'; '.join(parts)}", markup=True)
    if end < len(lines) or end > answered:
        maybe = (f"; {_line_span(lines, answered, end)} may be stored already: send them again only with "
                 "idempotency keys, or after checking for them (sepp jobs list)") if end > answered else ""
        rest = f"resume from line {lines[end]}" if end < len(lines) else "every line was sent"
        err.print(f"{rest}{maybe}", markup=False)
