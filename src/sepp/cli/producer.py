"""``sepp enqueue`` and ``sepp info``: the producer side of the CLI, over the sync Client.

Exit codes: 0 success; 2 a rejection or bad input (nothing, or only the accepted
jobs of a best-effort batch, was enqueued); 3 a transport error (no verdict); 130 a
``--batch-file`` run stopped by Ctrl-C (what was stored is listed first).
Human output goes through rich; ``--json`` prints machine-readable JSON instead.
Results go to stdout, errors to stderr (as JSON with ``--json``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from sepp.cli.batch_file import enqueue_file
from sepp.cli.enqueue_report import ack_json, fail_input, fail_rejected, fail_transport, open_client
from sepp.cli.job_input import CUSTOM_HELP, JobDefaults, parse_custom
from sepp.cli.main import app
from sepp.cli.progress import wanted
from sepp.cli.shell import DEFAULT_SERVER, ClientTokenOpt, JsonOpt, ServerOpt, out_console, print_json
from sepp.cli.shell import AttemptTimeoutOpt as TimeoutOpt
from sepp.cli.shell import parse_duration as parse_duration
from sepp.cli.shell import parse_when as parse_when
from sepp.request import JSON_ENCODING, CustomPrimitive, EnqueueRequest, Payload


def _read_payload(payload: str | None, payload_file: Path | None, as_json: bool) -> bytes | None:
    if payload is not None and payload_file is not None:
        fail_input("give the payload as an argument or with --payload-file, not both", as_json)
    if payload_file is not None:
        if str(payload_file) == "-":
            return sys.stdin.buffer.read()
        try:
            return payload_file.read_bytes()
        except OSError as exc:
            fail_input(f"cannot read payload file: {exc}", as_json)
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
            fail_input(str(exc), as_json)
        custom_map[key] = value
    if at is not None and in_ is not None:
        fail_input("give --at or --in, not both", as_json)
    when: dt.datetime | None = None
    try:
        if at is not None:
            when = parse_when(at)
        elif in_ is not None:
            when = dt.datetime.now(dt.UTC) + parse_duration(in_)
    except ValueError as exc:
        fail_input(str(exc), as_json)

    if batch_file is not None:
        if payload is not None or payload_file is not None or json_payload or encoding is not None:
            fail_input("a payload cannot be combined with --batch-file (put it in each line)", as_json)
        if idempotency_key is not None:
            fail_input("--idempotency-key cannot apply to a whole batch (put one in each line)", as_json)
        defaults = JobDefaults(queue, job_type, custom_map, priority, max_attempts, when)
        enqueue_file(batch_file, defaults, atomic, server, timeout, not no_local_validation, as_json, token,
                      progress=wanted(progress, as_json))
        return
    if atomic:
        fail_input("--atomic needs --batch-file", as_json)
    if queue is None or job_type is None:
        fail_input("QUEUE and JOB_TYPE are required (or use --batch-file)", as_json)

    data = _read_payload(payload, payload_file, as_json)
    if json_payload:
        if data is None:
            fail_input("--json-payload needs a payload", as_json)
        try:
            json.loads(data)
        except ValueError as exc:
            fail_input(f"the payload is not valid JSON: {exc}", as_json)
    label = encoding if encoding is not None else (JSON_ENCODING if json_payload else "")
    try:
        request = EnqueueRequest(
            queue, job_type,
            payload=Payload(data or b"", label) if data is not None or encoding is not None else None,
            custom=custom_map, priority=priority, max_attempts=max_attempts, scheduled_at=when,
            idempotency_key=idempotency_key)
    except (TypeError, ValueError, OverflowError) as exc:
        fail_input(str(exc), as_json)

    with open_client(server, timeout, not no_local_validation, token) as client:
        try:
            ack = client.enqueue(request)
        except RejectedError as exc:
            fail_rejected(exc.rejection, as_json)
        except TransportError as exc:
            fail_transport(exc, server, as_json)
    if as_json:
        print_json(ack_json(ack))
    elif ack.deduplicated:
        out_console().print(f"deduplicated: job {ack.job_id} was already enqueued on {queue}")
    else:
        out_console().print(f"enqueued job {ack.job_id} on {queue}")


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

    with open_client(server, timeout, token=token) as client:
        try:
            info = client.get_server_info()
        except TransportError as exc:
            fail_transport(exc, server, as_json)
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
