"""What ``sepp queues …`` / ``sepp jobs …`` print: the JSON shapes of ``--json``
(times RFC 3339 UTC, durations seconds) and the tables and job view people get."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2
from rich import box
from rich.console import Console
from rich.table import Table

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.cli.shell import escape, out_console
from sepp.domain.states import STATE_NAMES, state_label
from sepp.wire import custom_from_proto, progress_value

#: State names in number order, as the counts columns and ``--json`` counts spell them.
STATE_ORDER = tuple(STATE_NAMES.values())


def iso_time(t: timestamp_pb2.Timestamp | None, present: bool = True) -> str | None:
    """A Timestamp as RFC 3339 UTC (``2030-01-01T09:00:00Z``); None when absent or zero."""
    if t is None or not present or (t.seconds == 0 and t.nanos == 0):
        return None
    return t.ToDatetime(dt.UTC).isoformat().replace("+00:00", "Z")


def seconds_of(d: duration_pb2.Duration) -> float:
    """A Duration in seconds."""
    return d.seconds + d.nanos / 1e9


def human_duration(seconds: float | None) -> str:
    """Seconds for a table cell: ``1h``, ``90s``, ``250ms``, ``1.5h``; ``–`` for None."""
    if seconds is None:
        return "–"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def reason_note(reason: str, last_error: str) -> str:
    """A listing's "reason / last error" cell: both when they differ, one when the reason
    already quotes the error (``NACK_DEAD_LETTER: boom`` and ``boom`` would show the text
    twice)."""
    if last_error and last_error not in reason:
        return f"{reason} / {last_error}" if reason else last_error
    return reason


def settings_json(s: pb.QueueSettings) -> dict[str, Any]:
    """Queue settings as plain JSON (durations in seconds)."""
    lim = s.limits
    return {"default_priority": s.default_priority, "default_max_attempts": s.default_max_attempts,
            "lease_duration": seconds_of(s.lease_duration), "dedup_window": seconds_of(s.dedup_window),
            "retry_base": seconds_of(s.retry_base), "retry_cap": seconds_of(s.retry_cap),
            "retry_jitter": s.retry_jitter, "completed_retention": seconds_of(s.completed_retention),
            "dead_letter_retention": seconds_of(s.dead_letter_retention),
            "max_in_flight": s.max_in_flight, "rate_limit": s.rate_limit, "rate_burst": s.rate_burst,
            "concurrency_key": s.concurrency_key, "max_in_flight_per_key": s.max_in_flight_per_key,
            "consumer_timeout": seconds_of(s.consumer_timeout),
            "limits": {"max_payload_bytes": lim.max_payload_bytes, "allowed_encodings": list(lim.allowed_encodings),
                       "max_custom_entries": lim.max_custom_entries,
                       "max_custom_key_bytes": lim.max_custom_key_bytes, "max_custom_bytes": lim.max_custom_bytes,
                       "max_result_bytes": lim.max_result_bytes}}


def held_back_json(s: apb.QueueStats) -> dict[str, Any] | None:
    """The queue's held-back view (``QueueStats.held_back``) as plain JSON, or None
    when the queue has no flow limit."""
    if not s.HasField("held_back"):
        return None
    h = s.held_back
    return {"max_in_flight": h.max_in_flight, "rate_limit": h.rate_limit, "per_key": h.per_key, "total": h.total,
            "per_key_scan_limited": h.per_key_scan_limited}


def held_back_line(s: apb.QueueStats, settings: pb.QueueSettings) -> str | None:
    """``held back now: max_in_flight 5, rate_limit 0, per key 2 (all limits 5)`` for the
    limits ``settings`` has, or None when the queue has no flow limit."""
    if not s.HasField("held_back"):
        return None
    h = s.held_back
    parts = []
    if settings.max_in_flight:
        parts.append(f"max_in_flight {h.max_in_flight:,}")
    if settings.rate_limit:
        parts.append(f"rate_limit {h.rate_limit:,}")
    if settings.concurrency_key and settings.max_in_flight_per_key:
        parts.append(f"per key {h.per_key:,}{'+ (first 10,000 READY looked at)' if h.per_key_scan_limited else ''}")
    return f"held back now: {', '.join(parts)} (all limits {h.total:,})"


def stats_json(s: apb.QueueStats) -> dict[str, Any]:
    """Queue stats as plain JSON."""
    return {"counts": {name: getattr(s, name) for name in STATE_ORDER},
            "oldest_ready_age": seconds_of(s.oldest_ready_age) if s.HasField("oldest_ready_age") else None,
            "oldest_ready_at": iso_time(s.oldest_ready_at, s.HasField("oldest_ready_at")),
            "oldest_deferred_age": seconds_of(s.oldest_deferred_age) if s.HasField("oldest_deferred_age") else None,
            "no_consumer": s.no_consumer,
            "last_reserve_at": iso_time(s.last_reserve_at, s.HasField("last_reserve_at")),
            "held_back": held_back_json(s),
            "throughput": [{"minute": iso_time(m.minute), "enqueued": m.enqueued, "completed": m.completed,
                            "dead_lettered": m.dead_lettered} for m in s.throughput]}


def queue_json(q: pb.QueueInfo, stats: apb.QueueStats | None = None, with_settings: bool = True) -> dict[str, Any]:
    """A queue (and its stats) as plain JSON."""
    out: dict[str, Any] = {"name": q.name, "paused": q.paused, "declared": q.declared}
    if with_settings:
        out["settings"] = settings_json(q.settings)
    if stats is not None:
        out.update(stats_json(stats))
    return out


def payload_json(data: bytes, encoding: str) -> dict[str, Any]:
    """A payload as plain JSON: ``text`` when it is UTF-8, else ``base64``; ``encoding``
    (its label) and ``bytes`` (its size)."""
    try:
        payload: dict[str, Any] = {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        payload = {"base64": base64.b64encode(data).decode()}
    payload["encoding"] = encoding
    payload["bytes"] = len(data)
    return payload


def custom_json(custom: Mapping[str, pb.CustomValue]) -> dict[str, dict[str, Any]]:
    """A custom map as plain JSON, by key: ``{"type": "int_value", "value": 5}``."""
    return {k: {"type": v.WhichOneof("kind"), "value": custom_from_proto(v)} for k, v in sorted(custom.items())}


def job_json(job: pb.Job) -> dict[str, Any]:
    """A job as plain JSON (payload and result as UTF-8 text when they decode, else base64;
    ``result`` null when the job has none)."""
    payload = payload_json(job.payload.data, job.payload.encoding)
    result = payload_json(job.result.data, job.result.encoding) if job.HasField("result") else None
    return {
        "id": job.id, "queue": job.queue, "job_type": job.job_type, "state": state_label(job.state),
        "priority": job.priority, "attempt": job.attempt, "max_attempts": job.max_attempts,
        "run_at": iso_time(job.run_at), "enqueued_at": iso_time(job.enqueued_at),
        "finished_at": iso_time(job.finished_at, job.HasField("finished_at")),
        "idempotency_key": job.idempotency_key or None, "reason": job.dead_letter_reason or None,
        "lease_id": job.lease_id or None, "lease_expires_at": iso_time(job.lease_expires_at,
                                                                  job.HasField("lease_expires_at")),
        "worker_id": job.worker_id or None, "node": job.node or None, "cancel_requested": job.cancel_requested,
        "progress": progress_value(job.progress),
        "waiting_on": list(job.waiting_on),
        "payload": payload,
        "result": result,
        "custom": custom_json(job.custom),
        "trace_context": dict(job.trace_context),
        "attempts": [{"attempt": a.attempt, "worker_id": a.worker_id, "node": a.node,
                      "started_at": iso_time(a.started_at),
                      "ended_at": iso_time(a.ended_at), "outcome": a.outcome, "error_message": a.error_message,
                      "error_detail": a.error_detail} for a in job.attempts],
    }


def summary_json(s: apb.JobSummary) -> dict[str, Any]:
    """A listed job as plain JSON."""
    j = s.job
    return {"id": j.id, "queue": j.queue, "job_type": j.job_type, "state": state_label(j.state),
            "priority": j.priority, "attempt": j.attempt, "max_attempts": j.max_attempts,
            "run_at": iso_time(j.run_at), "enqueued_at": iso_time(j.enqueued_at),
            "finished_at": iso_time(j.finished_at, j.HasField("finished_at")), "reason": j.dead_letter_reason or None,
            "payload_bytes": s.payload_bytes, "attempts_recorded": s.attempts_recorded,
            "last_error": s.last_error or None, "cancel_requested": j.cancel_requested}


def summary_table(rows: list[apb.JobSummary]) -> Table:
    """The ``sepp jobs list`` table of listed jobs (user text escaped for the terminal)."""
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("id", no_wrap=True, min_width=36)
    for col, justify in (("queue", "left"), ("type", "left"), ("state", "left"), ("prio", "right"),
                         ("attempt", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    table.add_column("when (UTC)", no_wrap=True)
    table.add_column("reason / last error", overflow="fold")
    for s in rows:
        j = s.job
        stamp = j.finished_at if j.HasField("finished_at") else j.run_at
        when = stamp.ToDatetime(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        note = reason_note(j.dead_letter_reason, s.last_error)
        if j.cancel_requested:
            note = ("cancel requested; " + note).rstrip("; ")
        table.add_row(j.id, escape(j.queue), escape(j.job_type), state_label(j.state), str(j.priority),
                      f"{j.attempt}/{j.max_attempts}", when, escape(note[:120]))
    return table


def print_payload(out: Console, payload: dict[str, Any], title: str = "payload") -> None:
    """A payload (or a job's result: ``title``) as ``job_json`` spells it (``text`` or
    ``base64``, ``encoding``, ``bytes``): a ``payload (N bytes, encoding E)`` heading, then
    its first 4000 characters — JSON re-indented when the encoding says JSON and it parses,
    binary as base64."""
    out.print(f"[bold]{title}[/] ({payload['bytes']:,} bytes, encoding {escape(payload['encoding'] or '(none)')})")
    if "text" in payload:
        text = payload["text"]
        if "json" in payload["encoding"]:
            try:
                text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            except ValueError:
                pass
        out.print(escape(text[:4000]) or "(empty)")
    else:
        out.print(f"(binary, base64) {payload['base64'][:4000]}")


def custom_table(custom: dict[str, dict[str, Any]]) -> Table:
    """A custom map as ``job_json`` spells it (key → ``{"type": "int_value", "value": 5}``):
    a key / type / value table; a float as Python writes it (``0.1``, ``1e-07``)."""
    table = Table(box=box.SIMPLE_HEAD, title="custom", title_justify="left")
    for col in ("key", "type", "value"):
        table.add_column(col)
    for k, v in custom.items():
        table.add_row(escape(k), str(v["type"]).removesuffix("_value"), escape(repr(v["value"])
                                                                             if v["type"] == "float_value"
                                                                             else str(v["value"])))
    return table


def print_job(job: pb.Job) -> None:
    """``sepp jobs show`` for people: fields, payload (first 4000 characters), result (the
    same, when there is one), custom map, trace context, attempts and the last error
    detail, on stdout."""
    out = out_console(tables=True)
    data = job_json(job)
    out.print(f"[bold]job {job.id}[/]  {data['state']}" + ("  [yellow]cancel requested[/]"
                                                           if job.cancel_requested else ""))
    table = Table(box=box.SIMPLE, show_header=False)
    table.add_column("field", style="dim")
    table.add_column("value")
    keys = ["queue", "job_type", "priority", "attempt", "max_attempts", "enqueued_at", "run_at", "finished_at",
            "reason", "idempotency_key"]
    if job.state == pb.RESERVED:  # a finished or waiting job keeps its last lease only as history
        keys += ["lease_id", "lease_expires_at", "worker_id", "node"]
    for key in keys:
        value = data[key]
        if value is not None:
            table.add_row(key, escape(str(value)))
    if job.progress:
        table.add_row("progress", escape(job.progress[:400]))
    if job.waiting_on:  # a DEFERRED job: the dependencies it still waits for
        table.add_row("waiting_on", escape(" ".join(job.waiting_on)))
    out.print(table)
    print_payload(out, data["payload"])
    if data["result"] is not None:
        print_payload(out, data["result"], "result")
    if data["custom"]:
        out.print(custom_table(data["custom"]))
    if data["trace_context"]:
        out.print("trace_context: " + escape(json.dumps(data["trace_context"])))
    if data["attempts"]:
        attempts = Table(box=box.SIMPLE_HEAD, title="attempts", title_justify="left")
        for col in ("#", "worker", "node", "started", "ended", "outcome", "error"):
            attempts.add_column(col)
        for a in data["attempts"]:
            attempts.add_row(str(a["attempt"]), escape(a["worker_id"]), escape(a["node"]), a["started_at"] or "",
                             a["ended_at"] or "", a["outcome"], escape(a["error_message"][:200]))
        out.print(attempts)
        last = next((a for a in reversed(data["attempts"]) if a["error_detail"]), None)
        if last is not None:  # e.g. the traceback of the last failure (all of them: --json)
            out.print(f"[bold]error detail of attempt {last['attempt']}[/]")
            out.print(escape(last["error_detail"][:8000]))
