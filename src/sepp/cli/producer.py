"""``sepp enqueue`` and ``sepp info``: the producer side of the CLI, over the sync Client.

Exit codes: 0 success; 2 a rejection or bad input (nothing, or only the accepted
jobs of a best-effort batch, was enqueued); 3 a transport error (no verdict); 130 a
``--batch-file`` run stopped by Ctrl-C (what was stored is listed first).
Human output goes through rich; ``--json`` prints machine-readable JSON instead.
Results go to stdout, errors to stderr (as JSON with ``--json``).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, NoReturn

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from sepp.cli.main import app
from sepp.cli.progress import progress_bar, wanted
from sepp.cli.shell import (
    DEFAULT_SERVER,
    EXIT_REJECTED,
    EXIT_TRANSPORT,
    ClientTokenOpt,
    JsonOpt,
    ServerOpt,
    err_console,
    fail,
    fail_auth,
    out_console,
    print_json,
)
from sepp.cli.shell import AttemptTimeoutOpt as TimeoutOpt
from sepp.cli.shell import parse_duration as parse_duration
from sepp.cli.shell import parse_when as parse_when
from sepp.cli.tls import client_tls
from sepp.request import (
    INT64_MAX,
    INT64_MIN,
    JSON_ENCODING,
    CustomPrimitive,
    EnqueueAck,
    EnqueueRequest,
    Payload,
    Rejection,
)

_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_TYPES = ("int", "float", "bool", "str")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_LINE_KEYS = {"queue", "job_type", "payload", "custom", "priority", "max_attempts", "scheduled_at",
              "idempotency_key", "trace_context"}

CUSTOM_HELP = (
    "Custom entry KEY=VALUE, repeatable. Type it with KEY:int=42, KEY:float=1.5, KEY:bool=true "
    "(true/false/yes/no/on/off/1/0) or KEY:str=007. Untyped values are inferred like JSON literals: "
    "true/false is a bool, a JSON number is an int (no fraction or exponent) or a float, anything else "
    "(including 007, +1, nan) is a string."
)


# ----------------------------------------------------------------- pure parsing helpers


def parse_custom(spec: str) -> tuple[str, CustomPrimitive]:
    """Parse one ``--custom`` argument into ``(key, typed value)``.

    ``KEY:TYPE=VALUE`` with TYPE in int/float/bool/str is explicit; ``KEY=VALUE`` is
    inferred (see ``CUSTOM_HELP``). The key is split at the first ``=``, so a key may
    contain ``:`` as long as it does not end in ``:int`` etc.

    Raises:
        ValueError: no ``=``, a value that does not parse as its type, or an int
            outside int64.
    """
    left, sep, raw = spec.partition("=")
    if not sep:
        raise ValueError(f"custom entry {spec!r} must look like KEY=VALUE or KEY:TYPE=VALUE")
    key, colon, type_name = left.rpartition(":")
    if not colon or type_name not in _TYPES:
        key, type_name = left, ""
    value: CustomPrimitive
    if type_name == "str":
        value = raw
    elif type_name == "bool":
        low = raw.strip().lower()
        if low not in _TRUE | _FALSE:
            raise ValueError(f"custom[{key}]: {raw!r} is not a bool (true/false/yes/no/on/off/1/0)")
        value = low in _TRUE
    elif type_name == "int":
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"custom[{key}]: {raw!r} is not an int") from None
    elif type_name == "float":
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"custom[{key}]: {raw!r} is not a float") from None
    elif raw in ("true", "false"):
        value = raw == "true"
    elif (number := _JSON_NUMBER.fullmatch(raw)) is not None:
        value = float(raw) if number.group(1) or number.group(2) else int(raw)
    else:
        value = raw
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"custom[{key}]: {raw} does not fit in int64 (use {key}:str=... or {key}:float=...)")
    return key, value


def payload_from_json_value(value: Any) -> Payload | None:
    """A batch line's ``payload``: ``null`` = none; ``{"data_b64": …, "encoding": …}`` = raw
    bytes (base64); any other JSON value is sent as JSON (``application/json``).

    Raises ``ValueError`` for bad base64 or a non-string encoding.
    """
    if value is None:
        return None
    if isinstance(value, dict) and "data_b64" in value and set(value) <= {"data_b64", "encoding"}:
        encoding = value.get("encoding", "")
        if not isinstance(value["data_b64"], str) or not isinstance(encoding, str):
            raise ValueError("payload data_b64 and encoding must be strings")
        try:
            data = base64.b64decode(value["data_b64"], validate=True)
        except binascii.Error as exc:
            raise ValueError(f"payload data_b64 is not valid base64: {exc}") from None
        return Payload(data, encoding)
    return Payload.json(value)


@dataclass(frozen=True, slots=True)
class JobDefaults:
    """Values from the command line that a batch line inherits when it does not set them."""

    queue: str | None = None
    job_type: str | None = None
    custom: Mapping[str, CustomPrimitive] | None = None
    priority: int | None = None
    max_attempts: int | None = None
    scheduled_at: dt.datetime | None = None


def request_from_line(obj: Any, defaults: JobDefaults) -> EnqueueRequest:
    """Build one ``EnqueueRequest`` from a parsed batch-file line (a JSON object).

    Keys: queue, job_type, payload, custom, priority, max_attempts, scheduled_at
    (ISO 8601 with zone), idempotency_key, trace_context. Unknown keys are errors.

    Raises:
        ValueError: missing queue/job_type, unknown keys, values of the wrong shape.
        TypeError/OverflowError: from ``EnqueueRequest`` (e.g. an int outside int64).
    """
    if not isinstance(obj, dict):
        raise ValueError("each line must be a JSON object")
    unknown = set(obj) - _LINE_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; allowed: {sorted(_LINE_KEYS)}")
    queue = obj.get("queue", defaults.queue)
    job_type = obj.get("job_type", defaults.job_type)
    if queue is None or job_type is None:
        raise ValueError("queue and job_type are required (in the line or as arguments)")
    custom = dict(defaults.custom or {})
    line_custom = obj.get("custom") or {}
    if not isinstance(line_custom, dict):
        raise ValueError("custom must be a JSON object")
    custom.update(line_custom)
    when = defaults.scheduled_at
    if obj.get("scheduled_at") is not None:
        if not isinstance(obj["scheduled_at"], str):
            raise ValueError("scheduled_at must be an ISO 8601 string")
        when = parse_when(obj["scheduled_at"])
    return EnqueueRequest(
        queue,
        job_type,
        payload=payload_from_json_value(obj.get("payload")),
        custom=custom,
        priority=obj.get("priority", defaults.priority),
        max_attempts=obj.get("max_attempts", defaults.max_attempts),
        scheduled_at=when,
        idempotency_key=obj.get("idempotency_key"),
        trace_context=obj.get("trace_context") or {},
    )


def read_batch_lines(text: str, defaults: JobDefaults) -> list[tuple[int, EnqueueRequest]]:
    """Parse a JSON-lines batch file into ``(line number, request)``; blank lines are skipped.

    Raises ``ValueError`` naming the first bad line.
    """
    out: list[tuple[int, EnqueueRequest]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((number, request_from_line(json.loads(line), defaults)))
        except (ValueError, TypeError, OverflowError) as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return out


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def rejection_json(rejection: Rejection) -> dict[str, Any]:
    """A rejection as a JSON object (code, message, field, limit, actual)."""
    return {"code": rejection.code.value, "message": rejection.message, "field": rejection.field,
            "limit": rejection.limit, "actual": rejection.actual}


def ack_json(ack: EnqueueAck) -> dict[str, Any]:
    """An ack as a JSON object."""
    return {"job_id": ack.job_id, "deduplicated": ack.deduplicated}


# ----------------------------------------------------------------- output


def _fail_input(message: str, as_json: bool) -> NoReturn:
    fail(message, as_json, EXIT_REJECTED, {"error": "invalid_input", "message": message}, clean=escape)


def _fail_rejected(rejection: Rejection, as_json: bool, what: str = "rejected") -> NoReturn:
    if as_json:
        print_json({"error": "rejected", **rejection_json(rejection)}, stderr=True)
    else:
        _print_rejection(rejection, what)
    raise typer.Exit(EXIT_REJECTED)


def _print_rejection(rejection: Rejection, what: str) -> None:
    err = err_console()
    err.print(f"[bold red]{escape(what)}:[/] [bold]{rejection.code.value}[/] — {escape(rejection.message)}",
              markup=True)
    for name in ("field", "limit", "actual"):
        value = getattr(rejection, name)
        if value not in (None, ""):
            err.print(f"  {name}: {value}", markup=False)


def _fail_transport(exc: Exception, server: str, as_json: bool, extra: dict[str, Any] | None = None) -> NoReturn:
    """End the command on a transport error: exit 3 (2 for a refused token), the error on
    stderr — an ``enqueue_many`` error by its failed call's own message (``call_message``: the
    caller reports the lines) — as JSON with ``--json``, ``extra`` keys added."""
    from sepp.errors import Overloaded, PermissionDenied, TransportError, Unauthenticated

    if isinstance(exc, Unauthenticated | PermissionDenied):  # exit 2, fix the token
        fail_auth(exc, as_json)

    kind = type(exc).__name__
    message = (exc.call_message if isinstance(exc, TransportError) else None) or str(exc)
    if as_json:
        more = {"retry_after": exc.retry_after} if isinstance(exc, Overloaded) else {}
        print_json({"error": "transport", "kind": kind, "server": server, "message": message, **more,
                    **(extra or {})}, stderr=True)
    else:
        err_console().print(f"[bold red]transport error ({kind}) talking to {escape(server)}:[/] {escape(message)}",
                     markup=True)
    raise typer.Exit(EXIT_TRANSPORT)


# ----------------------------------------------------------------- commands

def _client(server: str, timeout: float, validate_locally: bool = True, token: str | None = None) -> Any:
    from sepp.client import Client, ClientOptions

    return Client(server, options=ClientOptions(timeout=timeout, validate_locally=validate_locally),
                  token=token or "", **client_tls())


def _read_payload(payload: str | None, payload_file: Path | None, as_json: bool) -> bytes | None:
    if payload is not None and payload_file is not None:
        _fail_input("give the payload as an argument or with --payload-file, not both", as_json)
    if payload_file is not None:
        if str(payload_file) == "-":
            return sys.stdin.buffer.read()
        try:
            return payload_file.read_bytes()
        except OSError as exc:
            _fail_input(f"cannot read payload file: {exc}", as_json)
    if payload == "-":
        return sys.stdin.buffer.read()
    return None if payload is None else payload.encode("utf-8")


@app.command("enqueue")
def enqueue_cmd(
    queue: Annotated[str | None, typer.Argument(
        help="Target queue. With --batch-file, the default for lines without one.")] = None,
    job_type: Annotated[str | None, typer.Argument(
        help="Job type tag. With --batch-file, the default for lines without one.")] = None,
    payload: Annotated[str | None, typer.Argument(
        help="Payload text (sent as UTF-8), or - to read raw bytes from stdin.")] = None,
    payload_file: Annotated[Path | None, typer.Option(
        "--payload-file", "-f", help="Read the payload bytes from FILE (- = stdin).")] = None,
    encoding: Annotated[str | None, typer.Option(
        "--encoding", "-e", help="Payload encoding label, e.g. application/json. Default: none (\"\"), "
        "or application/json with --json-payload.")] = None,
    json_payload: Annotated[bool, typer.Option(
        "--json-payload", help="Check that the payload is valid JSON and label it application/json "
        "(unless --encoding says otherwise).")] = False,
    custom: Annotated[list[str] | None, typer.Option("--custom", "-c", help=CUSTOM_HELP)] = None,
    priority: Annotated[int | None, typer.Option(
        "--priority", "-p", help="0 (lowest) … 9 (highest).")] = None,
    max_attempts: Annotated[int | None, typer.Option("--max-attempts", help="Deliveries before dead-letter.")
                            ] = None,
    at: Annotated[str | None, typer.Option(
        "--at", help="Run at this ISO 8601 time with a zone, e.g. 2030-01-01T09:00:00Z.")] = None,
    in_: Annotated[str | None, typer.Option(
        "--in", help="Run after this delay: 30s, 10m, 2h, 1d, 1h30m.")] = None,
    idempotency_key: Annotated[str | None, typer.Option(
        "--idempotency-key", "-k", help="Dedup key: a retry within the queue's window is not enqueued twice.")
                               ] = None,
    batch_file: Annotated[Path | None, typer.Option(
        "--batch-file", "-b", help="JSON lines, one job per line (- = stdin); sent with enqueue_many in "
        "batches of the server's max_enqueue_batch, 4 in flight (Ctrl-C: the lines answered, maybe stored and "
        "not sent are listed on stderr, exit 130). Keys: queue, job_type, payload (a JSON value, or "
        "{\"data_b64\": …, \"encoding\": …} for raw bytes), custom, priority, max_attempts, scheduled_at, "
        "idempotency_key, trace_context. Command-line values are defaults for every line.")] = None,
    atomic: Annotated[bool, typer.Option(
        "--atomic", help="With --batch-file: all lines in one all-or-nothing call.")] = False,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", show_default=False,
        help="With --batch-file: a progress bar on stderr (counts, rate, time left). "
        "Default: when stderr is a terminal.")] = None,
    no_local_validation: Annotated[bool, typer.Option(
        "--no-local-validation", help="Send without checking the advertised limits first.")] = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: ClientTokenOpt = None,
    timeout: TimeoutOpt = 10.0,
    as_json: JsonOpt = False,
) -> None:
    """Enqueue a job (or a file of jobs) and print its id.

    Exit status: 0 enqueued, 2 rejected, bad input or token refused, 3 transport error,
    130 a --batch-file run stopped by Ctrl-C.
    """
    from sepp.errors import RejectedError, TransportError

    # -- common per-job values
    custom_map: dict[str, CustomPrimitive] = {}
    for spec in custom or ():
        try:
            key, value = parse_custom(spec)
        except ValueError as exc:
            _fail_input(str(exc), as_json)
        custom_map[key] = value
    if at is not None and in_ is not None:
        _fail_input("give --at or --in, not both", as_json)
    when: dt.datetime | None = None
    try:
        if at is not None:
            when = parse_when(at)
        elif in_ is not None:
            when = dt.datetime.now(dt.UTC) + parse_duration(in_)
    except ValueError as exc:
        _fail_input(str(exc), as_json)

    if batch_file is not None:
        if payload is not None or payload_file is not None or json_payload or encoding is not None:
            _fail_input("a payload cannot be combined with --batch-file (put it in each line)", as_json)
        if idempotency_key is not None:
            _fail_input("--idempotency-key cannot apply to a whole batch (put one in each line)", as_json)
        defaults = JobDefaults(queue, job_type, custom_map, priority, max_attempts, when)
        _enqueue_file(batch_file, defaults, atomic, server, timeout, not no_local_validation, as_json, token,
                      progress=wanted(progress, as_json))
        return
    if atomic:
        _fail_input("--atomic needs --batch-file", as_json)
    if queue is None or job_type is None:
        _fail_input("QUEUE and JOB_TYPE are required (or use --batch-file)", as_json)

    data = _read_payload(payload, payload_file, as_json)
    if json_payload:
        if data is None:
            _fail_input("--json-payload needs a payload", as_json)
        try:
            json.loads(data)
        except ValueError as exc:
            _fail_input(f"the payload is not valid JSON: {exc}", as_json)
    label = encoding if encoding is not None else (JSON_ENCODING if json_payload else "")
    try:
        request = EnqueueRequest(
            queue, job_type,
            payload=Payload(data or b"", label) if data is not None or encoding is not None else None,
            custom=custom_map, priority=priority, max_attempts=max_attempts, scheduled_at=when,
            idempotency_key=idempotency_key)
    except (TypeError, ValueError, OverflowError) as exc:
        _fail_input(str(exc), as_json)

    with _client(server, timeout, not no_local_validation, token) as client:
        try:
            ack = client.enqueue(request)
        except RejectedError as exc:
            _fail_rejected(exc.rejection, as_json)
        except TransportError as exc:
            _fail_transport(exc, server, as_json)
    if as_json:
        print_json(ack_json(ack))
    elif ack.deduplicated:
        out_console().print(f"deduplicated: job {ack.job_id} was already enqueued on {queue}")
    else:
        out_console().print(f"enqueued job {ack.job_id} on {queue}")


def _enqueue_file(path: Path, defaults: JobDefaults, atomic: bool, server: str, timeout: float,
                  validate_locally: bool, as_json: bool, token: str | None = None, *, progress: bool = False) -> None:
    from sepp.errors import AtomicEnqueueError, RejectedError, TransportError

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail_input(f"cannot read batch file: {exc}", as_json)
    try:
        jobs = read_batch_lines(text, defaults)
    except ValueError as exc:
        _fail_input(str(exc), as_json)
    if not jobs:
        _fail_input("the batch file holds no jobs", as_json)
    lines = [number for number, _ in jobs]
    requests = [req for _, req in jobs]
    rejected = 0
    with _client(server, timeout, validate_locally, token) as client:
        try:
            if atomic:
                try:
                    acks = client.enqueue_atomic(requests)
                except AtomicEnqueueError as exc:
                    for failure in exc.errors:
                        line = lines[failure.index]
                        if as_json:
                            print_json({"line": line, "status": "rejected",
                                         **rejection_json(failure.rejection)}, stderr=True)
                        else:
                            _print_rejection(failure.rejection, f"line {line} rejected")
                    if not as_json:
                        err_console().print(f"atomic batch refused: {len(exc.errors)} of {len(requests)} lines "
                                     "rejected, nothing enqueued")
                    raise typer.Exit(EXIT_REJECTED) from None
                for line, ack in zip(lines, acks, strict=True):
                    _report_ack(line, ack, as_json)
            else:
                rejected = _enqueue_lines(client, requests, lines, server, as_json, progress, path.name)
        except RejectedError as exc:
            _fail_rejected(exc.rejection, as_json)
        except TransportError as exc:
            _fail_transport(exc, server, as_json)
    if rejected:
        if not as_json:
            err_console().print(f"{rejected} of {len(requests)} jobs rejected; the others were enqueued")
        raise typer.Exit(EXIT_REJECTED)


#: The exit status of a ``sepp enqueue --batch-file`` stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130


class HeldInterrupt:
    """The SIGINT handler of a ``--batch-file`` run: a Ctrl-C that comes while the lines of an
    answered batch are printed (``hold()``) takes effect once they all are — so every line
    printed is counted and none is printed twice — and any other one at once
    (``KeyboardInterrupt``), as does a second one while the first is held.

    ``installed()`` puts it in place for a block, in the main thread only and only over
    Python's own handler (a handler the embedding program set is left alone)."""

    def __init__(self) -> None:
        self.holding = False
        self.held = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler: hold the first Ctrl-C inside ``hold()``, raise otherwise."""
        if self.holding and not self.held:
            self.held = True
            return
        raise KeyboardInterrupt

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Handle SIGINT with this object for the block (see the class)."""
        ours = (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        if ours:
            signal.signal(signal.SIGINT, self)
        try:
            yield
        finally:
            if ours:
                signal.signal(signal.SIGINT, signal.default_int_handler)

    @contextmanager
    def hold(self, *, release: bool = True) -> Iterator[None]:
        """Hold a Ctrl-C during the block; with ``release``, raise it (``KeyboardInterrupt``)
        when the block ends normally."""
        self.held = False
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if release and self.held:
            self.held = False
            raise KeyboardInterrupt


@dataclass(slots=True)
class _Printed:
    """What a ``--batch-file`` run printed: results up to index ``count``, ``rejected`` of them rejections."""

    count: int = 0
    rejected: int = 0


def _enqueue_lines(client: Any, requests: list[EnqueueRequest], lines: list[int], server: str, as_json: bool,
                   progress: bool, name: str) -> int:
    """Send ``requests`` (file lines ``lines``) with ``enqueue_many`` and print one line per
    result as each batch is answered; return how many were rejected.

    On Ctrl-C: the results answered before the interruption or while the batches in flight
    were waited for are printed, then (stderr) which lines were answered, which may or may not
    be stored and which were not sent; exit ``EXIT_INTERRUPTED``. On a transport error the
    same, then the error (exit 3). Raises ``typer.Exit``."""
    from sepp.errors import EnqueueInterrupted, TransportError

    printed = _Printed()
    guard = HeldInterrupt()

    def show(results: list[Any], start: int) -> None:
        for offset, result in enumerate(results):
            line = lines[start + offset]
            if isinstance(result, EnqueueAck):
                _report_ack(line, result, as_json)
            else:
                printed.rejected += 1
                if as_json:
                    print_json({"line": line, "status": "rejected", **rejection_json(result)})
                else:
                    out_console().print(f"line {line}: [red]rejected[/] {escape(str(result))}", markup=True)
        printed.count = start + len(results)

    stopped: EnqueueInterrupted | TransportError | None = None
    with guard.installed():
        with progress_bar(len(requests), f"enqueue {name}", show=progress) as advance:
            def on_batch(start: int, results: list[Any]) -> None:
                with guard.hold():  # a batch's lines are printed whole, then counted
                    show(results, start)
                    advance(len(results))

            try:
                client.enqueue_many(requests, on_batch=on_batch)
            except (EnqueueInterrupted, TransportError) as exc:
                stopped = exc
                rest = (exc.answered or [])[printed.count:]
                with guard.hold(release=False):  # what was answered while it stopped
                    show(rest, printed.count)
                    advance(len(rest))
        if stopped is None:
            return printed.rejected
        answered = len(stopped.answered or ())
        end = stopped.maybe_stored.stop if stopped.maybe_stored is not None else answered
        with guard.hold(release=False):
            if isinstance(stopped, EnqueueInterrupted):
                _report_account(lines, answered, end, as_json, {"error": "interrupted"}, "interrupted")
                raise typer.Exit(EXIT_INTERRUPTED)
            if not as_json:  # with --json the account goes into the error document
                _report_account(lines, answered, end, as_json, {}, "stopped")
        _fail_transport(stopped, server, as_json, _account_json(lines, answered, end))


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
    parts = [f"{_line_span(lines, 0, answered)} answered (printed above)" if answered else "no line answered"]
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


def _report_ack(line: int, ack: EnqueueAck, as_json: bool) -> None:
    if as_json:
        print_json({"line": line, "status": "deduplicated" if ack.deduplicated else "enqueued",
                     **ack_json(ack)})
    else:
        verb = "deduplicated" if ack.deduplicated else "enqueued"
        out_console().print(f"line {line}: {verb} {ack.job_id}")


def _bytes(value: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return f"{value} B"


def _seconds(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return str(value)
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if value >= size and value % size == 0:
            return f"{int(value // size)}{unit}"
    return f"{value:g}s"


@app.command("info")
def info_cmd(server: ServerOpt = DEFAULT_SERVER, token: ClientTokenOpt = None, timeout: TimeoutOpt = 10.0,
             as_json: JsonOpt = False) -> None:
    """Show the server's version, modes, limits and queues (GetServerInfo).

    Exit status: 0 success, 2 token refused, 3 transport error.
    """
    from sepp.errors import TransportError

    with _client(server, timeout, token=token) as client:
        try:
            info = client.get_server_info()
        except TransportError as exc:
            _fail_transport(exc, server, as_json)
    advertised = ("max_enqueue_batch", "max_attempts_ceiling", "max_queue_name_bytes", "max_job_type_bytes",
                  "max_schedule_horizon", "max_idempotency_key_bytes", "max_encoding_bytes",
                  "max_trace_entries", "max_trace_value_bytes")
    limits = {name: getattr(info.limits, name) for name in advertised}
    if as_json:
        print_json({
            "server": server, "version": info.version, "node": info.node, "uptime": info.uptime,
            "storage": info.storage,
            "nodes": [{"name": n.name, "address": n.address, "version": n.version, "started_at": n.started_at,
                       "last_seen": n.last_seen} for n in info.nodes],
            "persist_mode": info.persist_mode, "strict": info.strict, "features": sorted(info.features),
            "limits": limits, "queue_defaults": info.queue_defaults.model_dump(mode="json"),
            "queues": [{"name": q.name, "declared": q.declared, "paused": q.paused,
                        "settings": q.settings.model_dump(mode="json")} for q in info.queues.values()],
        })
        return
    out = out_console()
    out.print(f"[bold]sepp {escape(info.version)}[/] at {escape(server)}"
              + (f" (node {escape(info.node)})" if info.node else ""), markup=True)
    out.print(f"persist mode: {info.persist_mode}   strict: {'yes' if info.strict else 'no'}   "
              f"uptime: {_seconds(round(info.uptime))}")
    out.print(f"features: {', '.join(sorted(info.features)) or '-'}")
    if info.storage:
        out.print(f"storage: {info.storage}")
    if info.nodes:
        nodes = Table(title="Nodes", title_justify="left", box=box.SIMPLE_HEAD)
        for column in ("node", "address", "version", "started", "last seen"):
            nodes.add_column(column)
        now = time.time()
        for n in info.nodes:
            nodes.add_row(escape(n.name), escape(n.address), escape(n.version),
                          f"{max(0, round(now - n.started_at))} s ago", f"{max(0, round(now - n.last_seen))} s ago")
        out.print(nodes)
    table = Table(title="Server limits", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("limit")
    table.add_column("value", justify="right")
    for name, value in limits.items():
        table.add_row(name, _seconds(value) if name == "max_schedule_horizon" else str(value))
    out.print(table)
    queues = Table(title="Queues", title_justify="left", box=box.SIMPLE_HEAD,
                   caption="prio/tries = default priority/max attempts; payload = max payload; "
                           "custom = max entries/key bytes/map bytes", caption_justify="left")
    for column in ("queue", "decl", "paused", "prio", "tries", "payload", "encodings", "custom"):
        if column in ("queue", "encodings"):
            queues.add_column(column, overflow="fold")
        else:
            queues.add_column(column, justify="right", no_wrap=True)

    def add(name: str, declared: str, paused: str, settings: Any) -> None:
        lim = settings.limits
        queues.add_row(escape(name), declared, paused, str(settings.default_priority),
                       str(settings.default_max_attempts), _bytes(lim.max_payload_bytes),
                       escape(", ".join(lim.allowed_encodings)) or "any",
                       f"{lim.max_custom_entries}/{lim.max_custom_key_bytes}/{lim.max_custom_bytes}")

    add("(defaults, unused: strict)" if info.strict else "(defaults)", "", "", info.queue_defaults)
    for q in info.queues.values():
        add(q.name, "yes" if q.declared else "no", "yes" if q.paused else "no", q.settings)
    out.print(queues)
