"""``sepp worker module:attr``: run a :class:`~sepp.worker.Worker` defined in an importable module.

``attr`` names a ``Worker`` (or a function of no arguments returning one), or a ``sepp.App``
(``sepp.tasks``: a Worker running every task of the app, on the tasks' queues). Flags
override the worker's own settings. Job outcomes go to stdout (JSON with ``--json``);
lifecycle messages and warnings go to stderr (``--log-level``). SIGTERM or Ctrl-C
drains gracefully (a second one skips the grace period). Exit codes: 0 after a
clean stop, 2 for a bad target or flag. ``--server`` falls back to ``SEPP_SERVER`` like
every other command, then to the Worker's own ``target``.

Outcome lines: a failure (retry), a dead-letter and a refused or failed
settle always get their own line. A success (completed, released) gets one while there
are at most ``LINE_RATE`` of them in the current second; past that they are counted, and
a summary line ("completed 12,345 jobs in the last 10.0 s") follows every
``SUMMARY_EVERY`` seconds and at exit. ``--json`` (for programs, which want every record)
and ``--log-level debug`` print every outcome; ``--quiet`` prints failures and
dead-letters only.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib
import json
import math
import os
import sys
import time
from typing import IO, Annotated, Any

import typer

from sepp.cli.flags import FlagValueError, check_bounds
from sepp.cli.main import app
from sepp.cli.shell import EXIT_USAGE, ClientTokenOpt, fail_auth
from sepp.cli.tls import client_tls
from sepp.errors import PermissionDenied, Unauthenticated
from sepp.hard_limits import MAX_LEASE, MIN_LEASE, fmt_number
from sepp.logs import LOG_FORMATS
from sepp.logs import configure as configure_logging
from sepp.worker.config import default_worker_id

#: Success lines per second before they are summarised instead.
LINE_RATE = 50
#: Seconds between summary lines while successes are being counted, not printed.
SUMMARY_EVERY = 10.0


def load_worker(spec: str) -> Any:
    """Import ``module:attr`` (the current directory is importable) and return the ``Worker``
    (for a ``sepp.App``: ``app.worker()``, every task registered).

    Raises ``ValueError`` with a readable message when the spec is malformed (a file name
    ``myapp.py:app`` says to drop the ``.py``: ``sepp worker myapp:app``), the module
    or attribute is missing (the message then lists the ``App`` and ``Worker`` objects the
    module holds: ``module 'myapp' has no attribute 'ap'; App or Worker objects there: app``),
    or the attribute is not (and does not build) a ``Worker``.
    """
    from sepp.worker import Worker

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected MODULE:ATTRIBUTE (e.g. myapp.jobs:worker), got {spec!r}")
    if module_name.endswith(".py"):  # a file name: importing it would run myapp, then fail on "myapp.py"
        folder, _, stem = module_name[:-3].replace("\\", "/").rpartition("/")
        where = f"run from {folder} and " if folder else ""
        raise ValueError(f"{spec!r} names a file, sepp worker takes a module: {where}drop the .py: "
                         f"sepp worker {stem}:{attr}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ValueError(f"cannot import module {module_name!r}: {exc} (looked in {os.getcwd()} and on "
                             "sys.path: run from the folder that holds it, or add that folder to PYTHONPATH)") from exc
        raise
    # A sepp.App exists only once sepp.tasks was loaded (by the module that made it): looked up,
    # not imported, so a plain Worker's process still imports no pydantic.
    tasks_app = sys.modules.get("sepp.tasks.app")
    app_class: Any = tasks_app._AppBase if tasks_app is not None else ()
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            found = runnable_names(obj, (Worker, app_class))
            there = (f"; App or Worker objects there: {', '.join(found)}" if found
                     else "; it holds no App or Worker object")
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}{there}") from None
    if not isinstance(obj, Worker) and not isinstance(obj, app_class) and callable(obj):
        obj = obj()
        tasks_app = sys.modules.get("sepp.tasks.app")
        app_class = tasks_app._AppBase if tasks_app is not None else ()
    if isinstance(obj, app_class):  # a sepp.App: a Worker running every task of it
        if not obj.tasks:
            raise ValueError(f"{spec} is a sepp.App without tasks (import the modules that define them in the "
                             "app's module)")
        return obj.worker()
    if not isinstance(obj, Worker):
        raise ValueError(f"{spec} is a {type(obj).__name__}, not a sepp.worker.Worker or a sepp.App")
    return obj


def runnable_names(holder: Any, kinds: tuple[type, ...]) -> list[str]:
    """The names of ``holder``'s attributes (a module's globals, say) that are instances of
    ``kinds`` (``Worker`` and ``sepp.App``), sorted, those starting with ``_`` left out: what
    ``sepp worker MODULE:NAME`` could run, for the message of a name that is not there."""
    try:
        items = list(vars(holder).items())
    except TypeError:  # no __dict__
        return []
    return sorted(name for name, value in items if not name.startswith("_") and isinstance(value, kinds))


def _label(report: Any) -> str:
    if report.refused:
        return f"{report.outcome} refused ({report.refused})"
    if report.outcome == "completed":
        return "completed"
    if report.outcome in ("retry", "retry_after"):
        if report.state == "dead_lettered":
            return "dead_lettered (attempts exhausted)"
        if report.run_at is not None:
            wait = (report.run_at - dt.datetime.now(dt.UTC)).total_seconds()
            return f"retry in {max(0.0, wait):.2f}s"
        return "retry now"
    if report.outcome == "dead_letter":
        return "dead_lettered"
    return report.outcome  # type: ignore[no-any-return]


def format_report(report: Any, as_json: bool = False) -> str:
    """One line for a ``JobReport``: time (UTC), job id, type, attempt, outcome, duration ms, error."""
    job = report.job
    now = dt.datetime.now(dt.UTC)
    if as_json:
        return json.dumps({
            "time": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "job_id": job.id, "queue": job.queue, "job_type": job.job_type, "attempt": job.attempt,
            "max_attempts": job.max_attempts, "outcome": report.outcome, "state": report.state,
            "duration_ms": round(report.duration * 1000, 3), "error": report.error or None,
            "run_at": report.run_at.isoformat() if report.run_at else None, "refused": report.refused or None,
        }, ensure_ascii=False)
    line = (f"{now:%H:%M:%S}.{now.microsecond // 1000:03d} {job.id} {job.job_type} "
            f"attempt={job.attempt}/{job.max_attempts} {_label(report)} {report.duration * 1000:.1f}ms")
    if report.error and report.outcome != "completed":
        line += f" error={json.dumps(report.error, ensure_ascii=False)}"
    return line


def _always_shown(report: Any) -> bool:
    """Failures, dead-letters and refused/failed settles: never summarised away."""
    return bool(report.refused) or report.outcome not in ("completed", "released") or report.state == "dead_lettered"


class OutcomeLines:
    """Writes a worker's outcome lines to ``out`` (see the module docstring for the rules).

    ``rate``: success lines per second before they are counted instead (``None``: no
    limit); ``quiet``: no success lines or summaries at all; ``every``: seconds from the
    first counted success to its summary line. Runs on the worker's event loop (an
    ``on_outcome`` hook); the summary is timed with ``loop.call_later``.
    """

    def __init__(self, out: IO[str], *, as_json: bool = False, quiet: bool = False, rate: int | None = LINE_RATE,
                 every: float = SUMMARY_EVERY) -> None:
        self._out = out
        self._json = as_json
        self._quiet = quiet
        self._rate = rate
        self._every = every
        self._second = -1
        self._in_second = 0
        #: Successes counted, not printed, since ``_since`` (monotonic seconds).
        self._counted: dict[str, int] = {}
        self._since = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def __call__(self, report: Any) -> None:
        """The ``on_outcome`` hook."""
        if _always_shown(report):
            self._write(format_report(report, self._json))
            return
        if self._quiet:
            return
        now = time.monotonic()
        second = int(now)
        if second != self._second:
            self._second, self._in_second = second, 0
        if self._rate is None or (self._in_second < self._rate and not self._counted):
            self._in_second += 1
            self._write(format_report(report, self._json))
            return
        if not self._counted:  # counting starts: its summary is due in ``every`` seconds
            self._since = now
            with contextlib.suppress(RuntimeError):
                self._timer = asyncio.get_running_loop().call_later(self._every, self.summary)
        self._counted[report.outcome] = self._counted.get(report.outcome, 0) + 1

    def summary(self) -> None:
        """Print the summary of the successes counted so far, if any (also called at exit)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._counted:
            self._write(format_summary(self._counted, time.monotonic() - self._since))
            self._counted = {}

    def _write(self, line: str) -> None:
        self._out.write(line + "\n")
        self._out.flush()


def format_summary(counts: dict[str, int], seconds: float) -> str:
    """The summary line: time (UTC), ``completed 12,345[, released 3] jobs in the last 10.0 s``."""
    now = dt.datetime.now(dt.UTC)
    what = ", ".join(f"{kind} {n:,}" for kind, n in sorted(counts.items()))
    return f"{now:%H:%M:%S}.{now.microsecond // 1000:03d} {what} jobs in the last {seconds:.1f} s"


def _check_seconds(flag: str, value: float, lo: float, hi: float | None) -> None:
    """Refuse a seconds flag outside ``lo..hi`` (or not finite) with a one-line
    ``FlagValueError`` naming the flag, the limit and the value."""
    if not math.isfinite(value):
        raise FlagValueError(flag, fmt_number(value), "must be a finite number of seconds")
    check_bounds(flag, fmt_number(value), value, lo, hi, duration=True)


@app.command("worker")
def worker(
    target: Annotated[str, typer.Argument(help="MODULE:ATTRIBUTE naming a sepp.worker.Worker (or a function of no "
                                                  "arguments returning one) or a sepp.App (every task); "
                                                  "MODULE is imported from the current directory, then sys.path "
                                                  "(PYTHONPATH).")],
    server: Annotated[str | None, typer.Option(
        "--server", "-s", envvar="SEPP_SERVER", show_default=False,
        help="gRPC target of the server: HOST:PORT, or for several nodes ipv4:HOST:PORT,HOST:PORT,… "
             "or dns:///NAME:PORT (docs/deploying.md; default: the Worker's own target).")] = None,
    queues: Annotated[str | None, typer.Option("--queues", "-q", help="Queues to reserve from, in order: a,b.")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c", min=1,
                                                    help="Handlers running at once.")] = None,
    prefetch: Annotated[int | None, typer.Option(
        min=0, help="Jobs reserved ahead of free slots (default: the Worker's; adaptive unless set).")] = None,
    shutdown_grace: Annotated[float | None, typer.Option(help="Seconds running jobs get on SIGTERM.")] = None,
    lease: Annotated[float | None, typer.Option(
        help=f"Lease seconds, {fmt_number(MIN_LEASE)} to {fmt_number(MAX_LEASE)} (default: the queue's).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per job outcome (every job).")] = False,
    log_level: Annotated[str, typer.Option(
        help="debug | info | warning | error (stderr); debug also prints a line for every job.")] = "info",
    quiet: Annotated[bool, typer.Option("--quiet", help="Outcome lines for failures and dead-letters only.")] = False,
    token: ClientTokenOpt = None,
    log_format: Annotated[str, typer.Option(
        envvar="SEPP_LOG_FORMAT", help="text | json: the stderr log lines, JSON = one object per line.")] = "text",
) -> None:
    """Run handlers from an importable module until SIGTERM/SIGINT, then drain gracefully."""
    level = log_level.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        typer.echo(f"sepp worker: --log-level must be debug, info, warning or error, not {log_level!r}", err=True)
        raise typer.Exit(EXIT_USAGE)
    if log_format not in LOG_FORMATS:
        typer.echo(f"sepp worker: --log-format must be text or json, not {log_format!r}", err=True)
        raise typer.Exit(EXIT_USAGE)
    # Lines name the worker (host:pid, the default worker id) as the server's name the node.
    configure_logging(level, log_format, default_worker_id())
    try:
        if lease is not None:
            _check_seconds("--lease", lease, MIN_LEASE, MAX_LEASE)
        if shutdown_grace is not None:
            _check_seconds("--shutdown-grace", shutdown_grace, 0.0, None)
    except FlagValueError as exc:
        typer.echo(f"sepp worker: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    try:
        w = load_worker(target)
        changes: dict[str, Any] = {"target": server, "queues": queues, "concurrency": concurrency,
                                   "prefetch": prefetch, "shutdown_grace": shutdown_grace, "lease_duration": lease,
                                   **client_tls()}
        w.configure(**{k: v for k, v in changes.items() if v is not None})
        if token:
            w.use_token(token)
        if not w.config.queues:
            raise ValueError("the worker has no queues: pass --queues a,b or set them in the Worker")
    except (ValueError, TypeError) as exc:
        typer.echo(f"sepp worker: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None

    every_job = as_json or level == "DEBUG"
    lines = OutcomeLines(sys.stdout, as_json=as_json, quiet=quiet, rate=None if every_job else LINE_RATE)
    w.on_outcome(lines)
    try:
        w.run_sync()
    except (Unauthenticated, PermissionDenied) as exc:  # the server refused the token
        fail_auth(exc, False)
    finally:
        if not quiet:
            lines.summary()
