"""``sepp queues …``: list, show, declare, update, pause, resume, purge and delete queues,
over ``AdminClient`` (``sepp jobs …`` is sepp.cli.jobs_cmd).

Every command takes ``--server HOST:PORT`` (env ``SEPP_SERVER``, default
127.0.0.1:7700), ``--token`` (env ``SEPP_ADMIN_TOKEN``) and ``--json``. People get rich
tables; ``--json`` prints one JSON document (times RFC 3339 UTC, durations seconds).
Destructive commands (purge, delete, cancel, bulk requeue) ask first; ``--yes`` skips
the question, and without a terminal they refuse unless ``--yes`` is given.

Exit codes: 0 done; 1 declined at the confirmation; 2 refused by the server or bad
input (unknown queue or job, wrong state, bad value, wrong token); 3 transport error.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.table import Table

from sepp.cli.admin_calls import admin_client, admin_fail, admin_out, print_admin_json
from sepp.cli.admin_views import STATE_ORDER, held_back_line, human_duration, queue_json, seconds_of, settings_json
from sepp.cli.main import app
from sepp.cli.queue_flags import (
    DURATION_SETTINGS,
    BurstFlag,
    CompletedFlag,
    ConsumerFlag,
    CustomBytesFlag,
    DeadFlag,
    DedupFlag,
    EncodingFlag,
    EntriesFlag,
    InFlightFlag,
    JitterFlag,
    KeyBytesFlag,
    KeyFlag,
    LeaseFlag,
    MaxAttemptsFlag,
    PayloadFlag,
    PerKeyFlag,
    PriorityFlag,
    RateFlag,
    ResultFlag,
    RetryBaseFlag,
    RetryCapFlag,
    queue_flags,
)
from sepp.cli.shell import (
    DEFAULT_SERVER,
    JsonOpt,
    ServerOpt,
    TokenOpt,
    YesOpt,
    confirm,
    err_console,
    escape,
)
from sepp.cli.shell import WaitTimeoutOpt as TimeoutOpt
from sepp.cli.type_figures_view import type_stats_json, type_stats_table
from sepp.client.admin import state_number
from sepp.domain.states import state_label, state_name

queues_app = typer.Typer(name="queues", help="List, inspect, declare, update, pause, resume, purge and delete queues.",
                         no_args_is_help=True)
app.add_typer(queues_app)


@queues_app.command("list")
def queues_list(server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
                timeout: TimeoutOpt = 30.0) -> None:
    """Every queue with its counts per state and the age of its oldest ready job."""
    with admin_client(server, token, timeout, as_json) as client:
        queues = client.list_queues()
        stats = {s.queue: s for s in client.queue_stats()}
    if as_json:
        print_admin_json([queue_json(q, stats.get(q.name), with_settings=False) for q in queues])
        return
    if not queues:
        admin_out().print("No queues.")
        return
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("queue")
    for name in STATE_ORDER:
        table.add_column(name.upper(), justify="right")
    table.add_column("oldest ready", justify="right")
    for q in queues:
        s = stats.get(q.name)
        label = escape(q.name) + (" [yellow](paused)[/]" if q.paused else "") + (
            " [red](no consumer)[/]" if s is not None and s.no_consumer else "")
        counts = [f"{getattr(s, n):,}" if s else "–" for n in STATE_ORDER]
        age = human_duration(seconds_of(s.oldest_ready_age)) if s and s.HasField("oldest_ready_age") else "–"
        table.add_row(label, *counts, age)
    admin_out().print(table)


@queues_app.command("show")
def queues_show(name: Annotated[str, typer.Argument(help="Queue name.")], server: ServerOpt = DEFAULT_SERVER,
                token: TokenOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 30.0) -> None:
    """One queue: settings, counts per state, oldest-ready age, throughput of the last hour,
    and per job type the completed / retried / dead-lettered counts and run time p50 / p95 /
    max of the last hour and 24 hours."""
    with admin_client(server, token, timeout, as_json) as client:
        q = client.get_queue(name)
        s = client.queue_stats([name])[0]
        types = client.job_type_stats(name)
    if as_json:
        print_admin_json({**queue_json(q, s), "job_types": type_stats_json(types)})
        return
    out = admin_out()
    flags = ("paused" if q.paused else "active") + (", declared" if q.declared else ", created on demand")
    out.print(f"[bold]{escape(q.name)}[/] ({flags})")
    counts = Table(box=box.SIMPLE_HEAD)
    for n in STATE_ORDER:
        counts.add_column(n.upper(), justify="right")
    counts.add_row(*[f"{getattr(s, n):,}" for n in STATE_ORDER])
    out.print(counts)
    age = human_duration(seconds_of(s.oldest_ready_age)) if s.HasField("oldest_ready_age") else "–"
    enq = sum(m.enqueued for m in s.throughput)
    done = sum(m.completed for m in s.throughput)
    dead = sum(m.dead_lettered for m in s.throughput)
    out.print(f"oldest ready job waiting: {age}")
    if s.no_consumer:   # as `sepp queues list` and the UI's queue page flag it
        timeout_s = human_duration(seconds_of(q.settings.consumer_timeout))
        out.print(f"[red]no consumer[/]: READY jobs are waiting and no worker has reserved from this queue "
                  f"for {timeout_s} (its consumer_timeout)")
    out.print(f"last hour: {enq:,} enqueued, {done:,} completed, {dead:,} dead-lettered")
    held = held_back_line(s, q.settings)
    if held is not None:
        out.print(escape(held))
    if types.job_types:
        out.print(type_stats_table(types))
    else:
        out.print("job types: no job settled in the last 24 hours")
    table = Table(box=box.SIMPLE_HEAD, title="settings", title_justify="left")
    table.add_column("setting")
    table.add_column("value")
    for key, value in settings_json(q.settings).items():
        if key == "limits":
            for lkey, lvalue in value.items():
                table.add_row(f"limits.{lkey}", escape(", ".join(lvalue) or "any")
                              if isinstance(lvalue, list) else f"{lvalue:,}")
        elif key in DURATION_SETTINGS:
            table.add_row(key, human_duration(float(value)))
        elif key == "retry_jitter":
            table.add_row(key, f"±{float(value) * 100:g}%")
        else:
            table.add_row(key, escape(str(value)))
    out.print(table)


@queues_app.command("declare")
def queues_declare(
    name: Annotated[str, typer.Argument(help="Queue name: [A-Za-z0-9._:-], starting with a letter or digit.")],
    priority: PriorityFlag = None, max_attempts: MaxAttemptsFlag = None, lease: LeaseFlag = None,
    dedup_window: DedupFlag = None, retry_base: RetryBaseFlag = None, retry_cap: RetryCapFlag = None,
    retry_jitter: JitterFlag = None, completed_retention: CompletedFlag = None,
    dead_letter_retention: DeadFlag = None, max_payload_bytes: PayloadFlag = None,
    allowed_encodings: EncodingFlag = None, max_custom_entries: EntriesFlag = None,
    max_custom_key_bytes: KeyBytesFlag = None, max_custom_bytes: CustomBytesFlag = None,
    max_result_bytes: ResultFlag = None, max_in_flight: InFlightFlag = None, rate_limit: RateFlag = None,
    rate_burst: BurstFlag = None,
    concurrency_key: KeyFlag = None, max_in_flight_per_key: PerKeyFlag = None,
    consumer_timeout: ConsumerFlag = None,
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Create a queue, or mark an existing one declared and change the settings given (at once)."""
    settings, paths = queue_flags(
        as_json, priority=priority, max_attempts=max_attempts, lease=lease, dedup_window=dedup_window,
        retry_base=retry_base, retry_cap=retry_cap, retry_jitter=retry_jitter,
        completed_retention=completed_retention, dead_letter_retention=dead_letter_retention,
        max_payload_bytes=max_payload_bytes, allowed_encodings=allowed_encodings,
        max_custom_entries=max_custom_entries, max_custom_key_bytes=max_custom_key_bytes,
        max_custom_bytes=max_custom_bytes, max_result_bytes=max_result_bytes, max_in_flight=max_in_flight,
        rate_limit=rate_limit,
        rate_burst=rate_burst, concurrency_key=concurrency_key, max_in_flight_per_key=max_in_flight_per_key,
        consumer_timeout=consumer_timeout)
    with admin_client(server, token, timeout, as_json) as client:
        q, created = client.declare_queue(name, settings, paths)
    if as_json:
        print_admin_json({**queue_json(q), "created": created, "changed": paths})
        return
    what = "created" if created else ("updated: " + ", ".join(paths) if paths else "declared (unchanged)")
    admin_out().print(f"queue [bold]{escape(q.name)}[/] {escape(what)}")


@queues_app.command("update")
def queues_update(
    name: Annotated[str, typer.Argument(help="Name of an existing queue.")],
    priority: PriorityFlag = None, max_attempts: MaxAttemptsFlag = None, lease: LeaseFlag = None,
    dedup_window: DedupFlag = None, retry_base: RetryBaseFlag = None, retry_cap: RetryCapFlag = None,
    retry_jitter: JitterFlag = None, completed_retention: CompletedFlag = None,
    dead_letter_retention: DeadFlag = None, max_payload_bytes: PayloadFlag = None,
    allowed_encodings: EncodingFlag = None, max_custom_entries: EntriesFlag = None,
    max_custom_key_bytes: KeyBytesFlag = None, max_custom_bytes: CustomBytesFlag = None,
    max_result_bytes: ResultFlag = None, max_in_flight: InFlightFlag = None, rate_limit: RateFlag = None,
    rate_burst: BurstFlag = None,
    concurrency_key: KeyFlag = None, max_in_flight_per_key: PerKeyFlag = None,
    consumer_timeout: ConsumerFlag = None,
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Change the settings given of an existing queue, at once (admin UpdateQueue); every other
    setting keeps its value. Does not create the queue (exit 2, QUEUE_NOT_FOUND) and does not
    mark it declared; give at least one setting (a value of 0 or '' is one: --max-in-flight 0
    lifts the limit)."""
    settings, paths = queue_flags(
        as_json, priority=priority, max_attempts=max_attempts, lease=lease, dedup_window=dedup_window,
        retry_base=retry_base, retry_cap=retry_cap, retry_jitter=retry_jitter,
        completed_retention=completed_retention, dead_letter_retention=dead_letter_retention,
        max_payload_bytes=max_payload_bytes, allowed_encodings=allowed_encodings,
        max_custom_entries=max_custom_entries, max_custom_key_bytes=max_custom_key_bytes,
        max_custom_bytes=max_custom_bytes, max_result_bytes=max_result_bytes, max_in_flight=max_in_flight,
        rate_limit=rate_limit,
        rate_burst=rate_burst, concurrency_key=concurrency_key, max_in_flight_per_key=max_in_flight_per_key,
        consumer_timeout=consumer_timeout)
    if settings is None:
        admin_fail("nothing to update: give at least one setting flag (see sepp queues update --help)", as_json)
    with admin_client(server, token, timeout, as_json) as client:
        q = client.update_queue(name, settings, paths)
    if as_json:
        print_admin_json({**queue_json(q), "changed": paths})
        return
    admin_out().print(f"queue [bold]{escape(q.name)}[/] updated: {escape(', '.join(paths))}")


@queues_app.command("pause")
def queues_pause(name: Annotated[str, typer.Argument(help="Queue name.")], server: ServerOpt = DEFAULT_SERVER,
                 token: TokenOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 30.0) -> None:
    """Stop handing out the queue's jobs (enqueues are still accepted)."""
    _set_paused(name, True, server, token, as_json, timeout)


@queues_app.command("resume")
def queues_resume(name: Annotated[str, typer.Argument(help="Queue name.")], server: ServerOpt = DEFAULT_SERVER,
                  token: TokenOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 30.0) -> None:
    """Hand out the queue's jobs again."""
    _set_paused(name, False, server, token, as_json, timeout)


def _set_paused(name: str, paused: bool, server: str, token: str | None, as_json: bool, timeout: float) -> None:
    """Pause or resume ``name`` and print the queue (JSON without settings) or one line."""
    with admin_client(server, token, timeout, as_json) as client:
        q = client.pause_queue(name) if paused else client.resume_queue(name)
    if as_json:
        print_admin_json(queue_json(q, with_settings=False))
    else:
        admin_out().print(f"queue [bold]{escape(q.name)}[/] {'paused' if paused else 'resumed'}")


def _states(values: list[str] | None, as_json: bool) -> list[int]:
    try:
        return [state_number(v) for v in values or []]
    except ValueError as exc:
        admin_fail(str(exc), as_json)


@queues_app.command("purge")
def queues_purge(
    name: Annotated[str, typer.Argument(help="Queue name.")],
    state: Annotated[list[str] | None, typer.Option(
        "--state", help="State to delete (repeatable): scheduled, ready, reserved, completed, dead_lettered, "
        "cancelled. Default: scheduled and ready.")] = None,
    yes: YesOpt = False, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Delete the queue's jobs in the given states."""
    states = _states(state, as_json)
    labels = ", ".join(state_label(s) for s in states) or "SCHEDULED, READY"
    with admin_client(server, token, timeout, as_json) as client:
        s = client.queue_stats([name])[0]
        count = sum(getattr(s, state_name(n)) for n in (states or [1, 2]))
        confirm(f"Delete about {count:,} job(s) ({labels}) of queue {name}?", yes, as_json)
        with err_console().status("purging…"):
            deleted = client.purge_queue(name, states)
    if as_json:
        print_admin_json({"queue": name, "deleted": deleted})
    else:
        admin_out().print(f"deleted {deleted:,} job(s) from [bold]{escape(name)}[/]")


@queues_app.command("delete")
def queues_delete(
    name: Annotated[str, typer.Argument(help="Queue name.")],
    force: Annotated[bool, typer.Option("--force", help="Also delete every job of the queue.")] = False,
    yes: YesOpt = False, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Forget a queue. Refused while it holds jobs, unless --force (which deletes them)."""
    with admin_client(server, token, timeout, as_json) as client:
        client.get_queue(name)
        what = f"Delete queue {name} and ALL its jobs?" if force else f"Delete queue {name}?"
        confirm(what, yes, as_json)
        deleted = client.delete_queue(name, force)
    if as_json:
        print_admin_json({"queue": name, "deleted": True, "jobs_deleted": deleted})
    else:
        admin_out().print(f"queue [bold]{escape(name)}[/] deleted" + (f" with {deleted:,} job(s)" if deleted else ""))
