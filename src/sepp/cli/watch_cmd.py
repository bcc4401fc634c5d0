"""``sepp jobs watch`` (registered by ``jobs_cmd``): live job events (``WatchJobs``), one line per event, until Ctrl-C.

Exit codes as the other producer commands: 0 stopped by Ctrl-C; 2 refused (a token without
the role, bad filters); 3 the watch ended (the server stopped, or the watcher fell behind:
events are at-most-once and not replayed, docs/decisions.md "Live job events").
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from sepp.cli.enqueue_report import fail_transport, open_client
from sepp.cli.shell import DEFAULT_SERVER, ClientTokenOpt, JsonOpt, ServerOpt, escape, fail, out_console

#: What the line of each kind shows after the job, from its fields.
_DETAIL = {"reserved": ("worker_id",), "retry_scheduled": ("run_at", "error"), "dead_lettered": ("reason", "error"),
           "cancelled": ("reason",), "requeued": ("reason",), "progress": ("progress",),
           "completed": ("result_bytes",), "promoted": (), "enqueued": ("run_at",)}


def event_line(doc: dict[str, Any]) -> str:
    """One event for people: ``time kind job_id queue/type state attempt details``."""
    parts = [doc["at"], f"{doc['kind']:<15}", doc["job_id"], f"{doc['queue']}/{doc['job_type']}", doc["state"],
             f"attempt {doc['attempt']}"]
    for name in _DETAIL.get(doc["kind"], ()):
        if name in doc and doc[name] not in ("", None):
            value = doc[name]
            parts.append(f"{name}={json.dumps(value, ensure_ascii=False) if name == 'progress' else value}")
    if doc.get("node"):
        parts.append(f"node={doc['node']}")
    return "  ".join(str(p) for p in parts)


def jobs_watch(
    queue: Annotated[list[str] | None, typer.Option("--queue", "-q", help="Only this queue (repeat for more).")] = None,
    job_type: Annotated[list[str] | None, typer.Option("--type", help="Only this job type (repeat for more).")] = None,
    job: Annotated[list[str] | None, typer.Option("--job", help="Only this job id (repeat for more).")] = None,
    server: ServerOpt = DEFAULT_SERVER, token: ClientTokenOpt = None, as_json: JsonOpt = False,
) -> None:
    """Print one line per job state change as it happens (enqueued, promoted, reserved, progress,
    completed, retry_scheduled, dead_lettered, cancelled, requeued), on every node, until Ctrl-C.

    Live and at-most-once: events before the watch began, or while it was cut off, are not
    shown (read the jobs' state with `sepp jobs show`). --json prints one JSON object per line.
    Needs a token with role produce or admin when the server has tokens.
    """
    from sepp.errors import RejectedError, TransportError

    with open_client(server, 10.0, token=token) as client:
        events = client.watch(queues=queue or [], job_types=job_type or [], job_ids=job or [])
        out = out_console()
        try:
            for event in events:
                doc = event.to_json()
                if as_json:
                    sys.stdout.write(json.dumps(doc, ensure_ascii=False) + "\n")
                    sys.stdout.flush()
                else:
                    out.print(escape(event_line(doc)))
        except KeyboardInterrupt:
            events.close()
            return
        except RejectedError as exc:
            fail(str(exc), as_json, 2, {"error": "rejected", "message": str(exc)})
        except TransportError as exc:
            fail_transport(exc, server, as_json)
