"""``sepp queues …`` and ``sepp jobs …``: the admin side of the CLI, over ``AdminClient``.

Every command takes ``--server HOST:PORT`` (env ``SEPP_SERVER``, default
127.0.0.1:7700), ``--token`` (env ``SEPP_ADMIN_TOKEN``) and ``--json``. People get rich
tables; ``--json`` prints one JSON document (times RFC 3339 UTC, durations seconds).
Destructive commands (purge, delete, cancel, bulk requeue) ask first; ``--yes`` skips
the question, and without a terminal they refuse unless ``--yes`` is given.

Exit codes: 0 done; 1 declined at the confirmation; 2 refused by the server or bad
input (unknown queue or job, wrong state, bad value, wrong token); 3 transport error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.cli.admin_views import (
    STATE_ORDER,
    held_back_line,
    human_duration,
    job_json,
    print_job,
    queue_json,
    seconds_of,
    settings_json,
    summary_json,
    summary_table,
)
from sepp.cli.flags import FlagValueError, check_bounds, max_items, parse_seconds, parse_where, setting_bounds
from sepp.cli.main import app
from sepp.cli.shell import (
    DEFAULT_SERVER,
    EXIT_REFUSED,
    EXIT_TRANSPORT,
    JsonOpt,
    ServerOpt,
    TokenOpt,
    YesOpt,
    confirm,
    err_console,
    escape,
    fail,
    fail_auth,
    out_console,
    print_json,
)
from sepp.cli.shell import WaitTimeoutOpt as TimeoutOpt
from sepp.cli.shell import parse_moment as parse_moment
from sepp.cli.tls import client_tls
from sepp.cli.type_figures_view import type_stats_json, type_stats_table
from sepp.client.admin import AdminClient, AdminError, state_number
from sepp.domain.states import state_label, state_name
from sepp.errors import PermissionDenied, TransportError, Unauthenticated
from sepp.limits import parse_rate

queues_app = typer.Typer(name="queues", help="List, inspect, declare, update, pause, resume, purge and delete queues.",
                         no_args_is_help=True)
jobs_app = typer.Typer(name="jobs", help="List, inspect, cancel, requeue (redrive) and delete jobs.",
                       no_args_is_help=True)
app.add_typer(queues_app)
app.add_typer(jobs_app)

_DURATION_SETTINGS = ("lease_duration", "dedup_window", "retry_base", "retry_cap", "completed_retention",
                      "dead_letter_retention", "consumer_timeout")

T = TypeVar("T")


# ---------------------------------------------------------------------- output helpers


def _out() -> Console:
    return out_console(tables=True)


def _print_json(obj: Any) -> None:
    print_json(obj, pretty=True)


def _fail(message: str, as_json: bool, exit_code: int = EXIT_REFUSED, **extra: Any) -> NoReturn:
    fail(message, as_json, exit_code, {"error": message, **extra})


def _fail_flag(exc: FlagValueError, as_json: bool) -> NoReturn:
    """A refused flag value: exit 2; ``--json`` adds ``flag``, ``limit`` and ``value``."""
    _fail(str(exc), as_json, EXIT_REFUSED, flag=exc.flag, limit=exc.limit, value=exc.value[:200])


@contextmanager
def _client(server: str, token: str | None, timeout: float, as_json: bool) -> Iterator[AdminClient]:
    """An ``AdminClient``; server refusals and transport errors become exit codes 2 and 3."""
    client = AdminClient(server, token=token, timeout=timeout, **client_tls())
    try:
        yield client
    except AdminError as exc:
        _fail(exc.message, as_json, EXIT_REFUSED, reason=exc.reason, status=exc.code.name, metadata=exc.metadata)
    except (Unauthenticated, PermissionDenied) as exc:  # exit 2, not a transport failure
        fail_auth(exc, as_json, " (SEPP_ADMIN_TOKEN works too)")
    except TransportError as exc:
        _fail(f"cannot reach {server}: {exc.message}", as_json, EXIT_TRANSPORT, kind=type(exc).__name__)
    finally:
        client.close()


# ---------------------------------------------------------------------- queues


@queues_app.command("list")
def queues_list(server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
                timeout: TimeoutOpt = 30.0) -> None:
    """Every queue with its counts per state and the age of its oldest ready job."""
    with _client(server, token, timeout, as_json) as client:
        queues = client.list_queues()
        stats = {s.queue: s for s in client.queue_stats()}
    if as_json:
        _print_json([queue_json(q, stats.get(q.name), with_settings=False) for q in queues])
        return
    if not queues:
        _out().print("No queues.")
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
    _out().print(table)


@queues_app.command("show")
def queues_show(name: Annotated[str, typer.Argument(help="Queue name.")], server: ServerOpt = DEFAULT_SERVER,
                token: TokenOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 30.0) -> None:
    """One queue: settings, counts per state, oldest-ready age, throughput of the last hour,
    and per job type the completed / retried / dead-lettered counts and run time p50 / p95 /
    max of the last hour and 24 hours."""
    with _client(server, token, timeout, as_json) as client:
        q = client.get_queue(name)
        s = client.queue_stats([name])[0]
        types = client.job_type_stats(name)
    if as_json:
        _print_json({**queue_json(q, s), "job_types": type_stats_json(types)})
        return
    out = _out()
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
        elif key in _DURATION_SETTINGS:
            table.add_row(key, human_duration(float(value)))
        elif key == "retry_jitter":
            table.add_row(key, f"±{float(value) * 100:g}%")
        else:
            table.add_row(key, escape(str(value)))
    out.print(table)


#: ``sepp queues declare`` flag of each setting path (for error messages).
SETTING_FLAGS = {
    "default_priority": "--priority", "default_max_attempts": "--max-attempts", "lease_duration": "--lease",
    "dedup_window": "--dedup-window", "retry_base": "--retry-base", "retry_cap": "--retry-cap",
    "retry_jitter": "--retry-jitter", "completed_retention": "--completed-retention",
    "dead_letter_retention": "--dead-letter-retention", "limits.max_payload_bytes": "--max-payload-bytes",
    "limits.allowed_encodings": "--allowed-encoding", "limits.max_custom_entries": "--max-custom-entries",
    "limits.max_custom_key_bytes": "--max-custom-key-bytes", "limits.max_custom_bytes": "--max-custom-bytes",
    "max_in_flight": "--max-in-flight", "rate_limit": "--rate-limit", "rate_burst": "--rate-burst",
    "concurrency_key": "--concurrency-key", "max_in_flight_per_key": "--max-in-flight-per-key",
    "consumer_timeout": "--consumer-timeout",
}


def _settings_from_flags(**flags: Any) -> tuple[pb.QueueSettings | None, list[str]]:
    """The settings and the mask paths of the flags that were given (keys: setting names,
    ``limits.`` dropped; durations as typed, numbers as parsed).

    Every value is checked against the bounds the server validates with — the ``ge``/``le``
    of ``sepp.limits.QueueSettings`` / ``QueueLimits`` — so a refusal names the
    flag, the limit and the value before any call. Raises ``FlagValueError``
    (``--dedup-window 3651d: must be at most 315360000 s (10 years)``, ``--priority 10: must be
    at most 9``, ``--lease soon: not a duration; use …``).
    """
    settings = pb.QueueSettings()
    paths: list[str] = []
    for name, value in flags.items():
        if value is None or value == []:
            continue
        path = name if name in SETTING_FLAGS else f"limits.{name}"
        flag = SETTING_FLAGS[path]
        if path == "limits.allowed_encodings":
            labels = [] if value == ["*"] else list(value)
            most = max_items(path)
            if most is not None and len(labels) > most:
                raise FlagValueError(flag, f"(given {len(labels)} times)", f"at most {most} labels are allowed", most)
            settings.limits.allowed_encodings.extend(labels)
        elif path == "rate_limit":
            if value.strip():
                try:
                    parse_rate(value)
                except ValueError as exc:
                    raise FlagValueError(flag, value, str(exc)) from None
            settings.rate_limit = value
        elif path == "concurrency_key":
            settings.concurrency_key = value
        elif name in _DURATION_SETTINGS:
            lo, hi = setting_bounds(path)
            seconds = parse_seconds(flag, value, lo, hi)
            d = getattr(settings, name)
            d.seconds = int(seconds)
            d.nanos = round((seconds - int(seconds)) * 1e9)
        else:
            lo, hi = setting_bounds(path)
            if isinstance(value, float) and not math.isfinite(value):
                raise FlagValueError(flag, str(value), "must be a finite number")
            check_bounds(flag, str(value), value, lo, hi, duration=False)
            target = settings.limits if path.startswith("limits.") else settings
            setattr(target, path.removeprefix("limits."), value)
        paths.append(path)
    return (settings if paths else None), paths


# The queue-setting flags of ``sepp queues declare`` and ``sepp queues update`` (one set).
PriorityFlag = Annotated[int | None, typer.Option("--priority", help="Default priority 0–9.")]
MaxAttemptsFlag = Annotated[int | None, typer.Option("--max-attempts", help="Default max attempts.")]
LeaseFlag = Annotated[str | None, typer.Option("--lease", help="Lease duration, e.g. 30s.")]
DedupFlag = Annotated[str | None, typer.Option("--dedup-window", help="Idempotency window, e.g. 24h.")]
RetryBaseFlag = Annotated[str | None, typer.Option("--retry-base", help="Backoff base, e.g. 1s.")]
RetryCapFlag = Annotated[str | None, typer.Option("--retry-cap", help="Backoff cap, e.g. 1h.")]
JitterFlag = Annotated[float | None, typer.Option("--retry-jitter", help="Jitter fraction, e.g. 0.2.")]
CompletedFlag = Annotated[str | None, typer.Option("--completed-retention", help="Keep completed jobs, e.g. 1d.")]
DeadFlag = Annotated[str | None, typer.Option("--dead-letter-retention", help="Keep dead letters, e.g. 14d.")]
PayloadFlag = Annotated[int | None, typer.Option(
    "--max-payload-bytes", help="Largest payload accepted, bytes (at most the server's max_message_bytes).")]
EncodingFlag = Annotated[list[str] | None, typer.Option(
    "--allowed-encoding", help="Allowed payload encoding (repeatable; '*' = any).")]
EntriesFlag = Annotated[int | None, typer.Option("--max-custom-entries", help="Most custom-map entries of a job.")]
KeyBytesFlag = Annotated[int | None, typer.Option(
    "--max-custom-key-bytes", help="Longest custom-map key, UTF-8 bytes.")]
CustomBytesFlag = Annotated[int | None, typer.Option(
    "--max-custom-bytes", help="Largest custom map, the sum of key bytes + value sizes, bytes.")]
InFlightFlag = Annotated[int | None, typer.Option(
    "--max-in-flight", help="Most jobs RESERVED at once, across workers and nodes (0 = unlimited).")]
RateFlag = Annotated[str | None, typer.Option(
    "--rate-limit", help="Most reservations per period, e.g. 50/s or 1000/m ('' = unlimited).")]
BurstFlag = Annotated[int | None, typer.Option(
    "--rate-burst", help="Token bucket size for --rate-limit (0 = the per-period amount).")]
KeyFlag = Annotated[str | None, typer.Option(
    "--concurrency-key", help="Custom-map entry grouping jobs for --max-in-flight-per-key (tenant_id).")]
PerKeyFlag = Annotated[int | None, typer.Option(
    "--max-in-flight-per-key", help="Most jobs RESERVED at once per value of --concurrency-key (0 = unlimited).")]
ConsumerFlag = Annotated[str | None, typer.Option(
    "--consumer-timeout", help="Flag the queue 'no consumer' after READY jobs wait this long with no "
    "Reserve, e.g. 60s (0 = never).")]


def _queue_flags(as_json: bool, **flags: Any) -> tuple[pb.QueueSettings | None, list[str]]:
    """``_settings_from_flags`` of the flags of declare / update (CLI names: ``priority``,
    ``lease``, …); a refused value exits 2 (``_fail_flag``)."""
    try:
        return _settings_from_flags(
            default_priority=flags["priority"], default_max_attempts=flags["max_attempts"],
            lease_duration=flags["lease"], dedup_window=flags["dedup_window"], retry_base=flags["retry_base"],
            retry_cap=flags["retry_cap"], retry_jitter=flags["retry_jitter"],
            completed_retention=flags["completed_retention"], dead_letter_retention=flags["dead_letter_retention"],
            max_payload_bytes=flags["max_payload_bytes"], allowed_encodings=flags["allowed_encodings"] or [],
            max_custom_entries=flags["max_custom_entries"], max_custom_key_bytes=flags["max_custom_key_bytes"],
            max_custom_bytes=flags["max_custom_bytes"], max_in_flight=flags["max_in_flight"],
            rate_limit=flags["rate_limit"], rate_burst=flags["rate_burst"], concurrency_key=flags["concurrency_key"],
            max_in_flight_per_key=flags["max_in_flight_per_key"], consumer_timeout=flags["consumer_timeout"])
    except FlagValueError as exc:
        _fail_flag(exc, as_json)


@queues_app.command("declare")
def queues_declare(
    name: Annotated[str, typer.Argument(help="Queue name: [A-Za-z0-9._:-], starting with a letter or digit.")],
    priority: PriorityFlag = None, max_attempts: MaxAttemptsFlag = None, lease: LeaseFlag = None,
    dedup_window: DedupFlag = None, retry_base: RetryBaseFlag = None, retry_cap: RetryCapFlag = None,
    retry_jitter: JitterFlag = None, completed_retention: CompletedFlag = None,
    dead_letter_retention: DeadFlag = None, max_payload_bytes: PayloadFlag = None,
    allowed_encodings: EncodingFlag = None, max_custom_entries: EntriesFlag = None,
    max_custom_key_bytes: KeyBytesFlag = None, max_custom_bytes: CustomBytesFlag = None,
    max_in_flight: InFlightFlag = None, rate_limit: RateFlag = None, rate_burst: BurstFlag = None,
    concurrency_key: KeyFlag = None, max_in_flight_per_key: PerKeyFlag = None,
    consumer_timeout: ConsumerFlag = None,
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Create a queue, or mark an existing one declared and change the settings given (at once)."""
    settings, paths = _queue_flags(
        as_json, priority=priority, max_attempts=max_attempts, lease=lease, dedup_window=dedup_window,
        retry_base=retry_base, retry_cap=retry_cap, retry_jitter=retry_jitter,
        completed_retention=completed_retention, dead_letter_retention=dead_letter_retention,
        max_payload_bytes=max_payload_bytes, allowed_encodings=allowed_encodings,
        max_custom_entries=max_custom_entries, max_custom_key_bytes=max_custom_key_bytes,
        max_custom_bytes=max_custom_bytes, max_in_flight=max_in_flight, rate_limit=rate_limit,
        rate_burst=rate_burst, concurrency_key=concurrency_key, max_in_flight_per_key=max_in_flight_per_key,
        consumer_timeout=consumer_timeout)
    with _client(server, token, timeout, as_json) as client:
        q, created = client.declare_queue(name, settings, paths)
    if as_json:
        _print_json({**queue_json(q), "created": created, "changed": paths})
        return
    what = "created" if created else ("updated: " + ", ".join(paths) if paths else "declared (unchanged)")
    _out().print(f"queue [bold]{escape(q.name)}[/] {escape(what)}")


@queues_app.command("update")
def queues_update(
    name: Annotated[str, typer.Argument(help="Name of an existing queue.")],
    priority: PriorityFlag = None, max_attempts: MaxAttemptsFlag = None, lease: LeaseFlag = None,
    dedup_window: DedupFlag = None, retry_base: RetryBaseFlag = None, retry_cap: RetryCapFlag = None,
    retry_jitter: JitterFlag = None, completed_retention: CompletedFlag = None,
    dead_letter_retention: DeadFlag = None, max_payload_bytes: PayloadFlag = None,
    allowed_encodings: EncodingFlag = None, max_custom_entries: EntriesFlag = None,
    max_custom_key_bytes: KeyBytesFlag = None, max_custom_bytes: CustomBytesFlag = None,
    max_in_flight: InFlightFlag = None, rate_limit: RateFlag = None, rate_burst: BurstFlag = None,
    concurrency_key: KeyFlag = None, max_in_flight_per_key: PerKeyFlag = None,
    consumer_timeout: ConsumerFlag = None,
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Change the settings given of an existing queue, at once (admin UpdateQueue); every other
    setting keeps its value. Does not create the queue (exit 2, QUEUE_NOT_FOUND) and does not
    mark it declared; give at least one setting (a value of 0 or '' is one: --max-in-flight 0
    lifts the limit)."""
    settings, paths = _queue_flags(
        as_json, priority=priority, max_attempts=max_attempts, lease=lease, dedup_window=dedup_window,
        retry_base=retry_base, retry_cap=retry_cap, retry_jitter=retry_jitter,
        completed_retention=completed_retention, dead_letter_retention=dead_letter_retention,
        max_payload_bytes=max_payload_bytes, allowed_encodings=allowed_encodings,
        max_custom_entries=max_custom_entries, max_custom_key_bytes=max_custom_key_bytes,
        max_custom_bytes=max_custom_bytes, max_in_flight=max_in_flight, rate_limit=rate_limit,
        rate_burst=rate_burst, concurrency_key=concurrency_key, max_in_flight_per_key=max_in_flight_per_key,
        consumer_timeout=consumer_timeout)
    if settings is None:
        _fail("nothing to update: give at least one setting flag (see sepp queues update --help)", as_json)
    with _client(server, token, timeout, as_json) as client:
        q = client.update_queue(name, settings, paths)
    if as_json:
        _print_json({**queue_json(q), "changed": paths})
        return
    _out().print(f"queue [bold]{escape(q.name)}[/] updated: {escape(', '.join(paths))}")


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
    with _client(server, token, timeout, as_json) as client:
        q = client.pause_queue(name) if paused else client.resume_queue(name)
    if as_json:
        _print_json(queue_json(q, with_settings=False))
    else:
        _out().print(f"queue [bold]{escape(q.name)}[/] {'paused' if paused else 'resumed'}")


def _states(values: list[str] | None, as_json: bool) -> list[int]:
    try:
        return [state_number(v) for v in values or []]
    except ValueError as exc:
        _fail(str(exc), as_json)


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
    with _client(server, token, timeout, as_json) as client:
        s = client.queue_stats([name])[0]
        count = sum(getattr(s, state_name(n)) for n in (states or [1, 2]))
        confirm(f"Delete about {count:,} job(s) ({labels}) of queue {name}?", yes, as_json)
        with err_console().status("purging…"):
            deleted = client.purge_queue(name, states)
    if as_json:
        _print_json({"queue": name, "deleted": deleted})
    else:
        _out().print(f"deleted {deleted:,} job(s) from [bold]{escape(name)}[/]")


@queues_app.command("delete")
def queues_delete(
    name: Annotated[str, typer.Argument(help="Queue name.")],
    force: Annotated[bool, typer.Option("--force", help="Also delete every job of the queue.")] = False,
    yes: YesOpt = False, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Forget a queue. Refused while it holds jobs, unless --force (which deletes them)."""
    with _client(server, token, timeout, as_json) as client:
        client.get_queue(name)
        what = f"Delete queue {name} and ALL its jobs?" if force else f"Delete queue {name}?"
        confirm(what, yes, as_json)
        deleted = client.delete_queue(name, force)
    if as_json:
        _print_json({"queue": name, "deleted": True, "jobs_deleted": deleted})
    else:
        _out().print(f"queue [bold]{escape(name)}[/] deleted" + (f" with {deleted:,} job(s)" if deleted else ""))


# ---------------------------------------------------------------------- jobs


@jobs_app.command("list")
def jobs_list(
    queue: Annotated[str, typer.Option("--queue", "-q", help="Only this queue.")] = "",
    state: Annotated[str, typer.Option("--state", help="Only this state (ready, dead_lettered, …).")] = "",
    job_type: Annotated[str, typer.Option("--type", help="Only this job type.")] = "",
    reason: Annotated[str, typer.Option("--reason", help="Reason prefix (finished jobs).")] = "",
    where: Annotated[list[str] | None, typer.Option(
        "--where", metavar="KEY=VALUE",
        help="Only jobs whose custom map has KEY = VALUE (the value compared as text: user_id=42 finds the int "
             "42 and the string \"42\"). Repeat for AND; ANDed with every other filter too.")] = None,
    error: Annotated[str, typer.Option("--error", help="Text in the last error message (A-Z = a-z).")] = "",
    key: Annotated[str, typer.Option("--key", help="Only the job of this idempotency key (with --queue: "
                                                   "in that queue).")] = "",
    limit: Annotated[int, typer.Option("--limit", help="At most this many jobs (0 = all).")] = 50,
    page_token: Annotated[str, typer.Option("--page-token", help="Continue a listing (from --json output).")] = "",
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Jobs by queue, state and type, keyset-paginated (a job that keeps its state is listed once).

    Search (docs/operations.md "Search"): --where, --error and --key narrow the listing; every
    filter given must hold. A search by --where or --key lists in enqueue order.
    """
    try:
        state_number(state)
        terms = parse_where(where or [])
    except FlagValueError as exc:
        _fail_flag(exc, as_json)
    except ValueError as exc:
        _fail(str(exc), as_json)
    rows: list[apb.JobSummary] = []
    next_token = page_token
    with _client(server, token, timeout, as_json) as client, err_console().status("listing…") as status:
        while True:
            want = 1000 if limit == 0 else min(1000, limit - len(rows))
            page = client.list_jobs(queue=queue, state=state or None, job_type=job_type, reason_prefix=reason,
                                    page_size=want, page_token=next_token, idempotency_key=key,
                                    error_contains=error, where=terms)
            rows.extend(page.jobs)
            next_token = page.next_page_token
            status.update(f"listing… {len(rows):,} job(s)")
            if not next_token or (limit and len(rows) >= limit):
                break
    if as_json:
        _print_json({"jobs": [summary_json(s) for s in rows], "next_page_token": next_token or None})
        return
    if not rows:
        _out().print("No jobs match.")
        return
    _out().print(summary_table(rows))
    if next_token:
        err_console().print(f"more jobs follow: --page-token {next_token}")


@jobs_app.command("show")
def jobs_show(
    job_id: Annotated[str | None, typer.Argument(help="Job id (or use --queue with --key).")] = None,
    queue: Annotated[str, typer.Option("--queue", "-q", help="Queue of the idempotency key.")] = "",
    key: Annotated[str, typer.Option("--key", help="Find the job by its idempotency key.")] = "",
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Every field of one job: payload, custom map, attempt history."""
    if not job_id and not (queue and key):
        _fail("give a job id, or --queue and --key", as_json)
    with _client(server, token, timeout, as_json) as client:
        if job_id:
            job = client.get_job(job_id)
        else:
            found = client.find_job_by_key(queue, key)
            if not found.HasField("job"):
                _fail(f"key {key!r} points at job {found.job_id}, which was deleted", as_json,
                      job_id=found.job_id)
            job = found.job
    if as_json:
        _print_json(job_json(job))
        return
    print_job(job)


def _run_each(job_ids: list[str], action: Callable[[str], T]) -> list[T]:
    return [action(job_id) for job_id in job_ids]


@jobs_app.command("cancel")
def jobs_cancel(
    job_ids: Annotated[list[str], typer.Argument(help="Job id(s).")],
    reason: Annotated[str, typer.Option("--reason", help="Kept as the job's reason.")] = "",
    yes: YesOpt = False, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Cancel jobs: SCHEDULED/READY at once; RESERVED ones are asked to stop (via ExtendLease)."""
    confirm(f"Cancel {len(job_ids)} job(s)?", yes, as_json)
    with _client(server, token, timeout, as_json) as client:
        jobs = _run_each(job_ids, lambda i: client.cancel_job(i, reason))
    if as_json:
        _print_json([{"id": j.id, "state": state_label(j.state), "cancel_requested": j.cancel_requested}
                     for j in jobs])
        return
    for j in jobs:
        what = "cancel requested (the worker learns it on its next lease extension)" \
            if j.state == pb.RESERVED else state_label(j.state)
        _out().print(f"{j.id}: {what}")


@jobs_app.command("requeue")
def jobs_requeue(
    job_ids: Annotated[list[str] | None, typer.Argument(help="Job id(s) to redrive (DEAD_LETTERED or "
                                                           "CANCELLED). Omit them to redrive by filter.")] = None,
    all_dead: Annotated[bool, typer.Option("--all-dead", help="Redrive every dead letter matching the "
                                                              "filters below.")] = False,
    queue: Annotated[str, typer.Option("--queue", "-q", help="Filter: queue.")] = "",
    job_type: Annotated[str, typer.Option("--type", help="Filter: job type.")] = "",
    reason: Annotated[str, typer.Option("--reason", help="Filter: reason prefix, e.g. ATTEMPTS_EXHAUSTED.")] = "",
    after: Annotated[str, typer.Option("--after", help="Filter: dead-lettered at or after (RFC 3339, or a "
                                                       "duration ago such as 2h).")] = "",
    before: Annotated[str, typer.Option("--before", help="Filter: dead-lettered before (same forms).")] = "",
    max_jobs: Annotated[int, typer.Option("--max", help="Redrive at most this many (0 = all).")] = 0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count the matching dead letters.")] = False,
    yes: YesOpt = False, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Redrive jobs: READY again with attempt 0; id, payload, custom map, priority and history kept."""
    if job_ids and all_dead:
        _fail("give job ids or --all-dead, not both", as_json)
    if not job_ids and not all_dead:
        _fail("give job ids, or --all-dead with filters", as_json)
    with _client(server, token, timeout, as_json) as client:
        if job_ids:
            jobs = _run_each(job_ids, client.requeue_job)
            if as_json:
                _print_json([{"id": j.id, "state": state_label(j.state), "attempt": j.attempt} for j in jobs])
            else:
                for j in jobs:
                    _out().print(f"{j.id}: requeued ({state_label(j.state)}, attempt {j.attempt})")
            return
        try:
            since = parse_moment(after, "--after") if after else None
            until = parse_moment(before, "--before") if before else None
        except FlagValueError as exc:
            _fail_flag(exc, as_json)
        kw: dict[str, Any] = {"queue": queue, "job_type": job_type, "reason_prefix": reason, "after": since,
                              "before": until}
        matched, _ = client.requeue_dead_lettered(**kw, dry_run=True)
        if dry_run or matched == 0:
            if as_json:
                _print_json({"matched": matched, "requeued": 0, "dry_run": dry_run})
            else:
                _out().print(f"{matched:,} dead-lettered job(s) match" + (" (dry run)" if dry_run else ""))
            return
        goal = matched if not max_jobs else min(max_jobs, matched)
        confirm(f"Requeue {goal:,} of {matched:,} matching dead-lettered job(s)?", yes, as_json)
        with err_console().status(f"requeueing {goal:,} job(s)…"):
            matched, requeued = client.requeue_dead_lettered(**kw, max_jobs=max_jobs)
    if as_json:
        _print_json({"matched": matched, "requeued": requeued, "dry_run": False})
    else:
        _out().print(f"requeued {requeued:,} of {matched:,} matching dead-lettered job(s)")


@jobs_app.command("delete")
def jobs_delete(
    job_ids: Annotated[list[str], typer.Argument(help="Job id(s).")],
    yes: YesOpt = False, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Delete jobs for good (any state; their idempotency keys stay claimed until they expire)."""
    confirm(f"Delete {len(job_ids)} job(s) for good?", yes, as_json)
    with _client(server, token, timeout, as_json) as client:
        _run_each(job_ids, client.delete_job)
    if as_json:
        _print_json({"deleted": job_ids})
    else:
        for job_id in job_ids:
            _out().print(f"{job_id}: deleted")
