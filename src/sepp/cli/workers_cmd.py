"""``sepp workers list``: every worker that called within the last hour, on any node, with
what it said (host, queues, concurrency, client version) and what the servers counted (jobs
in flight, last reserve, jobs done in the last minute), its state — live, quiet (no call within
two lease periods) or stopped (it stopped cleanly: ``Worker.stop`` / SIGTERM, and has not
reserved since) — and how many are in each (the same view as the UI's Workers
page)."""

from __future__ import annotations

import time
from typing import Any

import typer
from rich import box
from rich.table import Table

from sepp.api.v1 import admin_pb2 as apb
from sepp.cli.admin_calls import admin_client, admin_out, print_admin_json
from sepp.cli.admin_views import human_duration, iso_time
from sepp.cli.main import app
from sepp.cli.shell import DEFAULT_SERVER, JsonOpt, ServerOpt, TokenOpt, escape
from sepp.cli.shell import WaitTimeoutOpt as TimeoutOpt

workers_app = typer.Typer(name="workers", help="The workers that called recently (the UI's Workers page).",
                          no_args_is_help=True)
app.add_typer(workers_app)


def worker_state(w: apb.WorkerInfo) -> str:
    """``live``, ``quiet`` or ``stopped`` (``stopped_at`` set)."""
    return "stopped" if w.HasField("stopped_at") else "quiet" if w.quiet else "live"


def worker_json(w: apb.WorkerInfo) -> dict[str, Any]:
    """One worker as plain JSON (times RFC 3339 UTC; ``stopped_at`` null unless stopped)."""
    return {"worker_id": w.worker_id, "host": w.host, "queues": list(w.queues), "concurrency": w.concurrency,
            "client_version": w.client_version, "nodes": list(w.nodes), "in_flight": w.in_flight,
            "first_seen": iso_time(w.first_seen), "last_reserve": iso_time(w.last_reserve),
            "last_seen": iso_time(w.last_seen), "completed_last_minute": w.completed_last_minute,
            "failed_last_minute": w.failed_last_minute, "quiet": w.quiet, "state": worker_state(w),
            "stopped_at": iso_time(w.stopped_at, w.HasField("stopped_at"))}


def _ago(t: Any, now: float) -> str:
    if t.seconds == 0 and t.nanos == 0:
        return "–"
    return human_duration(max(0.0, now - (t.seconds + t.nanos / 1e9))) + " ago"


@workers_app.command("list")
def workers_list(server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
                 timeout: TimeoutOpt = 30.0) -> None:
    """Workers that called within the last hour: live ones first, then those gone quiet (no call
    within two lease periods), then those that stopped cleanly (SIGTERM / Worker.stop; until
    their next Reserve)."""
    with admin_client(server, token, timeout, as_json) as client:
        resp = client.list_workers()
    if as_json:
        print_admin_json({"workers": [worker_json(w) for w in resp.workers], "quiet": resp.quiet,
                     "stopped": resp.stopped, "total": resp.total})
        return
    if not resp.workers:
        admin_out().print("No worker called within the last hour.")
        return
    now = time.time()
    table = Table(box=box.SIMPLE_HEAD)
    for col, justify in (("worker", "left"), ("host", "left"), ("queues", "left"), ("concurrency", "right"),
                         ("in flight", "right"), ("last reserve", "right"), ("done/min", "right"),
                         ("failed/min", "right"), ("nodes", "left"), ("state", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for w in resp.workers:
        table.add_row(escape(w.worker_id), escape(w.host) or "–", escape(", ".join(w.queues)),
                      str(w.concurrency) if w.concurrency else "–", f"{w.in_flight:,}", _ago(w.last_reserve, now),
                      f"{w.completed_last_minute:,}", f"{w.failed_last_minute:,}", escape(", ".join(w.nodes)),
                      _state_cell(w, now))
    admin_out().print(table)
    total = max(resp.total, len(resp.workers))
    shown = "" if total == len(resp.workers) else f" ({len(resp.workers)} shown)"
    admin_out().print(f"{total} worker(s){shown}: {total - resp.quiet - resp.stopped} live, {resp.quiet} gone quiet "
                 f"(no call within two lease periods), {resp.stopped} stopped")


def _state_cell(w: apb.WorkerInfo, now: float) -> str:
    if w.HasField("stopped_at"):
        return f"[dim]stopped {_ago(w.stopped_at, now)}[/]"
    return "[yellow]quiet[/]" if w.quiet else "live"
