"""``sepp jobs result ID [--wait 30s] [--json]``: a job's outcome and result, waited for with
the producer client's ``wait`` (role ``produce`` or ``admin``). ``sepp jobs`` registers it.

Exit codes: 0 the job completed (its result printed); 1 it was dead-lettered or cancelled
(its last error, attempts and reason printed); 2 bad input, no such job, or a refused token;
3 a transport error; 4 not finished within ``--wait`` (default 0: look once).
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from sepp.cli.enqueue_report import fail_transport, open_client
from sepp.cli.flags import FlagValueError
from sepp.cli.shell import (
    DEFAULT_SERVER,
    EXIT_REFUSED,
    JsonOpt,
    ServerOpt,
    TokenOpt,
    escape,
    fail,
    out_console,
    parse_duration,
    print_json,
)
from sepp.cli.shell import AttemptTimeoutOpt as TimeoutOpt
from sepp.hard_limits import DAY

#: Exit codes of ``sepp jobs result`` besides the shell's (0, 2, 3).
EXIT_JOB_FAILED, EXIT_NOT_FINISHED = 1, 4
#: Longest ``--wait``, seconds (a day: the wait is many long-polls).
MAX_WAIT_FLAG = DAY


def result_json(outcome: Any) -> dict[str, Any]:
    """A ``JobOutcome`` as plain JSON: the result as ``value`` (the decoded JSON) when it is
    JSON, else ``text`` when it is UTF-8, else ``base64``, with ``encoding`` and ``bytes``."""
    result: dict[str, Any] | None = None
    if outcome.result is not None:
        data, encoding = outcome.result.data, outcome.result.encoding
        result = {"encoding": encoding, "bytes": len(data)}
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            result["base64"] = base64.b64encode(data).decode()
        else:
            try:
                result["value"] = json.loads(text) if encoding == "application/json" else None
            except ValueError:
                result["value"] = None
            if result["value"] is None:
                del result["value"]
                result["text"] = text

    def iso(t: Any) -> str | None:
        return None if t is None else t.isoformat().replace("+00:00", "Z")

    return {"job_id": outcome.job_id, "state": outcome.state, "queue": outcome.queue, "job_type": outcome.job_type,
            "attempt": outcome.attempt, "finished_at": iso(outcome.finished_at), "reason": outcome.reason or None,
            "last_error": outcome.last_error or None, "result": result,
            "attempts": [{"attempt": a.attempt, "worker_id": a.worker_id, "node": a.node,
                          "started_at": iso(a.started_at), "ended_at": iso(a.ended_at), "outcome": a.outcome,
                          "error_message": a.error_message, "error_detail": a.error_detail} for a in outcome.attempts]}


def print_outcome(data: dict[str, Any]) -> None:
    """``sepp jobs result`` for people: the state line, the result (JSON re-indented, text, or
    base64; the first 4000 characters) or the last error and the attempts."""
    out = out_console(tables=True)
    out.print(f"[bold]job {data['job_id']}[/]  {data['state']}  (attempt {data['attempt']}, "
              f"finished {data['finished_at'] or '?'})")
    if data["reason"]:
        out.print(f"reason: {escape(data['reason'])}")
    result = data["result"]
    if data["state"] == "COMPLETED":
        if result is None:
            out.print("result: (none)")
        else:
            out.print(f"[bold]result[/] ({result['bytes']:,} bytes, encoding {escape(result['encoding'] or '(none)')})")
            if "value" in result:
                out.print(escape(json.dumps(result["value"], indent=2, ensure_ascii=False)[:4000]))
            elif "text" in result:
                out.print(escape(result["text"][:4000]) or "(empty)")
            else:
                out.print(f"(binary, base64) {result['base64'][:4000]}")
        return
    if data["last_error"]:
        out.print(f"last error: {escape(data['last_error'][:2000])}")
    if data["attempts"]:
        table = Table(box=box.SIMPLE_HEAD, title="attempts", title_justify="left")
        for col in ("#", "worker", "started", "ended", "outcome", "error"):
            table.add_column(col)
        for a in data["attempts"]:
            table.add_row(str(a["attempt"]), escape(a["worker_id"]), a["started_at"] or "", a["ended_at"] or "",
                          a["outcome"], escape(a["error_message"][:200]))
        out.print(table)


def where_it_waits(server: str, token: str | None, timeout: float, job_id: str) -> dict[str, Any] | None:
    """What a job not finished is doing, for ``sepp jobs result``'s message: ``{"state": "READY",
    "queue": …, "no_consumer": bool}`` — ``no_consumer`` true for a READY or SCHEDULED job on a
    queue no worker polls (no Reserve of it on record) or that the queue stats flag "no
    consumer" (READY jobs waiting longer than its ``consumer_timeout`` with no Reserve), as
    ``sepp queues list`` does. ``None`` when the admin API cannot say (a token without that
    role, the job gone, the server unreachable): the message then names the job only."""
    from sepp.cli.tls import client_tls
    from sepp.client.admin import AdminClient
    from sepp.domain.states import STATE_NAMES, State
    from sepp.errors import SeppError

    try:
        with AdminClient(server, token=token, timeout=min(timeout, 5.0), **client_tls()) as admin:
            job = admin.get_job(job_id)
            state = int(job.state)
            waiting = state in (State.READY, State.SCHEDULED)
            stats = admin.queue_stats([job.queue])[0] if waiting else None
    except (SeppError, ValueError, IndexError):
        return None
    no_consumer = stats is not None and (stats.no_consumer or not stats.HasField("last_reserve_at"))
    return {"state": STATE_NAMES.get(state, str(state)).upper(), "queue": job.queue, "no_consumer": no_consumer}


def jobs_result(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    wait: Annotated[str, typer.Option(
        "--wait", help="Wait this long for the job to finish: 30s, 10m, 2h (default: look once).")] = "0s",
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """A job's outcome: its result when it completed, its last error and attempts when it was
    dead-lettered or cancelled. Needs a token with role produce or admin when the server has tokens."""
    from sepp.errors import JobNotFound, RefusedError, TransportError, WaitTimeout

    try:
        seconds = parse_duration(wait, "--wait", MAX_WAIT_FLAG).total_seconds()
    except FlagValueError as exc:
        fail(str(exc), as_json, EXIT_REFUSED, {"error": "invalid_input", "message": str(exc)})
    try:
        with open_client(server, timeout, token=token) as client:
            (outcome,) = client.wait([job_id], timeout=seconds).values()
    except ValueError as exc:  # not a UUID
        fail(str(exc), as_json, EXIT_REFUSED, {"error": "invalid_input", "message": str(exc)})
    except JobNotFound as exc:
        fail(str(exc), as_json, EXIT_REFUSED, {"error": "not_found", "job_id": exc.job_id, "message": str(exc)})
    except WaitTimeout:
        where = where_it_waits(server, token, timeout, job_id)
        message = f"job {job_id} is not finished" + (f" after {seconds:g} s" if seconds else "")
        if where is not None:
            message += f" (state {where['state']}, queue {where['queue']!r})"
            if where["no_consumer"]:
                message += (f": no worker has reserved from queue {where['queue']!r} recently "
                            "(sepp queues list flags it 'no consumer'); is a worker running for it?")
        fail(message, as_json, EXIT_NOT_FINISHED,
             {"error": "not_finished", "job_id": job_id, "message": message, **(where or {})})
    except RefusedError as exc:
        fail(str(exc), as_json, EXIT_REFUSED, {"error": "refused", "message": str(exc)})
    except TransportError as exc:
        fail_transport(exc, server, as_json)
    data = result_json(outcome)
    if as_json:
        print_json(data)
    else:
        print_outcome(data)
    if not outcome.completed:
        raise typer.Exit(EXIT_JOB_FAILED)
