"""``sepp worker module:attr``: run a :class:`~sepp.worker.Worker` defined in an importable module.

``attr`` names a ``Worker`` (or a function of no arguments returning one). Flags
override the worker's own settings. One line per job outcome goes to stdout (JSON
with ``--json``); lifecycle messages and warnings go to stderr. SIGTERM or Ctrl-C
drains gracefully (a second one skips the grace period). Exit codes: 0 after a
clean stop, 2 for a bad target or flag.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import logging
import os
import sys
from typing import Annotated, Any

import typer

from sepp.cli.main import app

EXIT_USAGE = 2


def load_worker(spec: str) -> Any:
    """Import ``module:attr`` (the current directory is importable) and return the ``Worker``.

    Raises ``ValueError`` with a readable message when the spec is malformed, the module
    or attribute is missing, or the attribute is not (and does not build) a ``Worker``.
    """
    from sepp.worker import Worker

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected MODULE:ATTRIBUTE (e.g. myapp.jobs:worker), got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ValueError(f"cannot import module {module_name!r}: {exc}") from exc
        raise
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, Worker) and callable(obj):
        obj = obj()
    if not isinstance(obj, Worker):
        raise ValueError(f"{spec} is a {type(obj).__name__}, not a sepp.worker.Worker")
    return obj


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


@app.command("worker")
def worker(
    target: Annotated[str, typer.Argument(help="MODULE:ATTRIBUTE naming a sepp.worker.Worker.")],
    server: Annotated[str | None, typer.Option("--server", "-s", help="gRPC HOST:PORT of the server.")] = None,
    queues: Annotated[str | None, typer.Option("--queues", "-q", help="Queues to reserve from, in order: a,b.")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c", min=1,
                                                    help="Handlers running at once.")] = None,
    prefetch: Annotated[int | None, typer.Option(min=0, help="Jobs reserved ahead of free slots.")] = None,
    shutdown_grace: Annotated[float | None, typer.Option(min=0, help="Seconds running jobs get on SIGTERM.")] = None,
    lease: Annotated[float | None, typer.Option(min=0.001, help="Lease seconds (default: the queue's).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per job outcome.")] = False,
    log_level: Annotated[str, typer.Option(help="debug | info | warning | error (stderr).")] = "info",
) -> None:
    """Run handlers from an importable module until SIGTERM/SIGINT, then drain gracefully."""
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        w = load_worker(target)
        changes: dict[str, Any] = {"target": server, "queues": queues, "concurrency": concurrency,
                                   "prefetch": prefetch, "shutdown_grace": shutdown_grace, "lease_duration": lease}
        w.configure(**{k: v for k, v in changes.items() if v is not None})
        if not w.config.queues:
            raise ValueError("the worker has no queues: pass --queues a,b or set them in the Worker")
    except (ValueError, TypeError) as exc:
        typer.echo(f"sepp worker: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None

    out = sys.stdout

    def emit(report: Any) -> None:
        out.write(format_report(report, as_json) + "\n")
        out.flush()

    w.on_outcome(emit)
    w.run_sync()
