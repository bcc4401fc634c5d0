"""``sepp periodic list|show|pause|resume|trigger|delete|declare``:
the schedules every node runs, with their next three run times, last run and the job it
produced — the same view as the UI's Periodic page. docs/periodic.md has examples."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from sepp.api.v1 import periodic_pb2 as ppb
from sepp.cli.admin_calls import admin_client, admin_fail, admin_out, print_admin_json
from sepp.cli.admin_views import custom_json, custom_table, human_duration, iso_time, payload_json, print_payload
from sepp.cli.job_input import parse_custom
from sepp.cli.main import app
from sepp.cli.shell import DEFAULT_SERVER, EXIT_USAGE, JsonOpt, ServerOpt, TokenOpt, YesOpt, confirm, escape
from sepp.cli.shell import WaitTimeoutOpt as TimeoutOpt
from sepp.wire import custom_from_proto, custom_to_proto

periodic_app = typer.Typer(name="periodic", help="Periodic schedules: cron or every-N jobs (docs/periodic.md).",
                           no_args_is_help=True)
app.add_typer(periodic_app)

NameArg = Annotated[str, typer.Argument(help="Schedule name.")]


def periodic_json(p: ppb.PeriodicInfo) -> dict[str, Any]:
    """One schedule as plain JSON (times RFC 3339 UTC; ``null`` when none)."""
    s = p.schedule
    return {"name": s.name, "cron": s.cron, "every": s.every, "timezone": s.timezone, "queue": s.queue,
            "job_type": s.job_type, "payload": s.payload.decode(errors="replace"), "encoding": s.encoding,
            "custom": {k: custom_from_proto(v) for k, v in s.custom.items()},
            "priority": s.priority if s.HasField("priority") else None,
            "max_attempts": s.max_attempts if s.HasField("max_attempts") else None, "catch_up": s.catch_up,
            "source": p.source, "paused": p.paused, "next_runs": [iso_time(t) for t in p.next_runs],
            "last_tick": iso_time(p.last_tick, p.HasField("last_tick")),
            "last_run_at": iso_time(p.last_run_at, p.HasField("last_run_at")),
            "last_job_id": p.last_job_id or None, "last_error": p.last_error or None, "invalid": p.invalid or None}


def timing(s: ppb.PeriodicSchedule) -> str:
    """``cron 0 3 * * * (Europe/Berlin)`` or ``every 15m``."""
    return f"cron {s.cron} ({s.timezone})" if s.cron else f"every {s.every}" if s.every else "–"


def _last(p: ppb.PeriodicInfo, now: float) -> str:
    if not p.HasField("last_run_at"):
        return "never"
    t = p.last_run_at
    return human_duration(max(0.0, now - (t.seconds + t.nanos / 1e9))) + " ago"


@periodic_app.command("list")
def periodic_list(server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
                  timeout: TimeoutOpt = 30.0) -> None:
    """Every schedule with its timing, next three run times (UTC), last run and the job it
    produced."""
    with admin_client(server, token, timeout, as_json) as client:
        schedules = client.list_periodic()
    if as_json:
        print_admin_json([periodic_json(p) for p in schedules])
        return
    if not schedules:
        admin_out().print("No periodic schedules.")
        return
    now = time.time()
    table = Table(box=box.SIMPLE_HEAD)
    for col in ("name", "timing", "queue / job type", "next runs (UTC)", "last run"):
        table.add_column(col)
    # A job id is 36 characters and is copied into `sepp jobs show`: never cut, the other columns wrap.
    table.add_column("last job", min_width=36, no_wrap=True)
    table.add_column("state")
    for p in schedules:
        s = p.schedule
        state = "[red]invalid[/]" if p.invalid else "[yellow]paused[/]" if p.paused else "active"
        nxt = "\n".join((iso_time(t) or "") for t in p.next_runs) or "–"
        job = escape(p.last_job_id) if p.last_job_id else (f"[red]{escape(p.last_error[:60])}[/]"
                                                             if p.last_error else "–")
        table.add_row(escape(s.name), escape(timing(s)), escape(f"{s.queue} / {s.job_type}"), nxt, _last(p, now),
                      job, state)
    admin_out().print(table)
    admin_out().print(f"{len(schedules)} schedule(s)")


@periodic_app.command("show")
def periodic_show(name: NameArg, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None,
                  as_json: JsonOpt = False, timeout: TimeoutOpt = 30.0) -> None:
    """One schedule: its whole definition and state."""
    with admin_client(server, token, timeout, as_json) as client:
        p = client.get_periodic(name)
    if as_json:
        print_admin_json(periodic_json(p))
        return
    print_periodic(p, time.time())


def print_periodic(p: ppb.PeriodicInfo, now: float) -> None:
    """``sepp periodic show`` for people, in the style of ``sepp jobs show``: a heading with
    the state, a field / value table (times RFC 3339 UTC, the last run also as an age from
    ``now``, seconds since the epoch), the payload (JSON re-indented) and the custom map."""
    s = p.schedule
    out = admin_out()
    state = "[red]invalid[/]" if p.invalid else "[yellow]paused[/]" if p.paused else "active"
    source = "a [[periodic]] table of a config file" if p.source == "config" else "the admin API"
    out.print(f"[bold]schedule {escape(s.name)}[/]  {state}  (declared by {escape(source)})")
    table = Table(box=box.SIMPLE, show_header=False)
    table.add_column("field", style="dim")
    table.add_column("value")
    rows: list[tuple[str, str]] = []
    if p.invalid:
        rows.append(("invalid", p.invalid))
    rows += [("cron", s.cron), ("timezone", s.timezone)] if s.cron else [("every", s.every or "–")]
    rows += [("queue", s.queue), ("job_type", s.job_type),
             ("priority", str(s.priority) if s.HasField("priority") else "the queue's default"),
             ("max_attempts", str(s.max_attempts) if s.HasField("max_attempts") else "the queue's default"),
             ("catch_up", s.catch_up)]
    for key, value in rows:
        table.add_row(key, escape(value))
    nxt = "\n".join(iso_time(t) or "" for t in p.next_runs) or ("– (paused)" if p.paused else "–")
    table.add_row("next_runs", nxt)
    table.add_row("last_tick", iso_time(p.last_tick, p.HasField("last_tick")) or "none yet")
    last = iso_time(p.last_run_at, p.HasField("last_run_at"))
    table.add_row("last_run_at", f"{last} ({_last(p, now)})" if last else "never")
    table.add_row("last_job_id", p.last_job_id or "–")
    if p.last_error:
        table.add_row("last_error", f"[red]{escape(p.last_error)}[/]")
    out.print(table)
    print_payload(out, payload_json(s.payload, s.encoding))
    if s.custom:
        out.print(custom_table(custom_json(s.custom)))


def _set_paused(name: str, paused: bool, server: str, token: str | None, as_json: bool, timeout: float) -> None:
    with admin_client(server, token, timeout, as_json) as client:
        p = client.pause_periodic(name) if paused else client.resume_periodic(name)
    if as_json:
        print_admin_json(periodic_json(p))
        return
    if paused:
        admin_out().print(f"Paused schedule {escape(name)}: it enqueues nothing until resumed.")
    else:
        nxt = iso_time(p.next_runs[0]) if p.next_runs else "–"
        admin_out().print(f"Resumed schedule {escape(name)}; next run {nxt} "
                          "(the ticks of the pause are not caught up).")


@periodic_app.command("pause")
def periodic_pause(name: NameArg, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None,
                   as_json: JsonOpt = False, timeout: TimeoutOpt = 30.0) -> None:
    """Stop enqueueing the schedule's jobs (on every node)."""
    _set_paused(name, True, server, token, as_json, timeout)


@periodic_app.command("resume")
def periodic_resume(name: NameArg, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None,
                    as_json: JsonOpt = False, timeout: TimeoutOpt = 30.0) -> None:
    """Enqueue the schedule's jobs again from its next tick."""
    _set_paused(name, False, server, token, as_json, timeout)


@periodic_app.command("trigger")
def periodic_trigger(name: NameArg, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None,
                     as_json: JsonOpt = False, timeout: TimeoutOpt = 30.0) -> None:
    """Enqueue the schedule's job now, out of its timetable (its ticks are unchanged)."""
    with admin_client(server, token, timeout, as_json) as client:
        resp = client.trigger_periodic(name)
    if as_json:
        print_admin_json({"name": name, "job_id": resp.job_id, "deduplicated": resp.deduplicated})
        return
    admin_out().print(f"Triggered {escape(name)}: job {resp.job_id}{' (deduplicated)' if resp.deduplicated else ''}")


@periodic_app.command("delete")
def periodic_delete(name: NameArg, yes: YesOpt = False, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None,
                    as_json: JsonOpt = False, timeout: TimeoutOpt = 30.0) -> None:
    """Forget a schedule (the jobs it made stay). One declared in a config file comes back
    when a node with that file starts: remove it there too."""
    with admin_client(server, token, timeout, as_json) as client:
        p = client.get_periodic(name)
        also = " It is declared in a config file: remove it there too, or a restart brings it back." \
            if p.source == "config" else ""
        confirm(f"Delete schedule {name}?{also}", yes, as_json)
        client.delete_periodic(name)
    if as_json:
        print_admin_json({"name": name, "deleted": True})
        return
    admin_out().print(f"Deleted schedule {escape(name)}.")


@periodic_app.command("declare")
def periodic_declare(
    name: NameArg,
    queue: Annotated[str, typer.Option("--queue", "-q", help="Queue the jobs go to.")],
    job_type: Annotated[str, typer.Option("--job-type", "-t", help="The jobs' job type.")],
    cron: Annotated[str, typer.Option("--cron", help='Cron expression, e.g. "0 3 * * *".')] = "",
    every: Annotated[str, typer.Option("--every", help='Fixed interval instead of --cron, e.g. "15m".')] = "",
    timezone: Annotated[str, typer.Option("--timezone", help="IANA time zone of --cron.")] = "UTC",
    payload: Annotated[str, typer.Option("--payload", help="The jobs' payload (text).")] = "",
    encoding: Annotated[str, typer.Option("--encoding", help="The payload's encoding label.")] = "application/json",
    custom: Annotated[list[str] | None, typer.Option("--custom", help="KEY=VALUE or KEY:TYPE=VALUE (repeat).")] = None,
    priority: Annotated[int | None, typer.Option("--priority", help="0..9; default: the queue's.")] = None,
    max_attempts: Annotated[int | None, typer.Option("--max-attempts", help="Default: the queue's.")] = None,
    catch_up: Annotated[str, typer.Option("--catch-up", help='After downtime: "latest" or "none".')] = "latest",
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 30.0,
) -> None:
    """Create a schedule, or replace the definition of the one of that name (its pause and
    last run are kept). The server checks it: a bad cron expression, time zone or interval
    is refused with the field."""
    msg = ppb.PeriodicSchedule(name=name, cron=cron, every=every, timezone=timezone, queue=queue, job_type=job_type,
                               payload=payload.encode(), encoding=encoding, catch_up=catch_up)
    for spec in custom or ():
        try:
            key, value = parse_custom(spec)
        except ValueError as exc:
            admin_fail(str(exc), as_json, EXIT_USAGE)
        msg.custom[key].CopyFrom(custom_to_proto(value))
    if priority is not None:
        msg.priority = priority
    if max_attempts is not None:
        msg.max_attempts = max_attempts
    with admin_client(server, token, timeout, as_json) as client:
        info, created = client.declare_periodic(msg)
    if as_json:
        print_admin_json({**periodic_json(info), "created": created})
        return
    nxt = ", ".join(iso_time(t) or "" for t in info.next_runs) or "–"
    admin_out().print(f"{'Created' if created else 'Updated'} schedule {escape(name)} "
                      f"({escape(timing(info.schedule))}); next runs {nxt}")
