"""What ``sepp queues show`` prints of a queue's job-type figures: the
``--json`` shape and the table people get (``GetJobTypeStatsResponse``)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

from sepp.api.v1 import admin_pb2 as apb
from sepp.cli.admin_views import human_duration, seconds_of
from sepp.cli.shell import escape

_TIMES = ("run_time_p50", "run_time_p95", "run_time_max")


def run_time_text(seconds: float | None) -> str:
    """A run time for a table cell: ``850µs``, ``12.5ms``, ``340ms``, ``2.4s``, ``3m`` …; ``–``
    for None (no timed run)."""
    if seconds is None:
        return "–"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f}µs"
    if seconds < 0.1:
        return f"{seconds * 1000:.1f}ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return human_duration(seconds)


def _time(w: apb.JobTypeWindow, name: str) -> float | None:
    return seconds_of(getattr(w, name)) if w.HasField(name) else None  # type: ignore[arg-type]


def window_json(w: apb.JobTypeWindow) -> dict[str, Any]:
    """One window as plain JSON: counts, runs and run times in seconds (null without runs)."""
    return {"completed": w.completed, "retried": w.retried, "dead_lettered": w.dead_lettered, "runs": w.runs,
            **{name: _time(w, name) for name in _TIMES}}


def type_stats_json(resp: apb.GetJobTypeStatsResponse) -> list[dict[str, Any]]:
    """Every job type as plain JSON (``last_hour``, ``last_day``), busiest first."""
    return [{"job_type": t.job_type, "last_hour": window_json(t.last_hour), "last_day": window_json(t.last_day)}
            for t in resp.job_types]


def type_stats_table(resp: apb.GetJobTypeStatsResponse) -> Table:
    """Two rows per job type (the last hour, the last 24 hours): completed, retried,
    dead-lettered, run time p50 / p95 / max."""
    accuracy = f"±{resp.relative_accuracy * 100:g}%" if resp.relative_accuracy else ""
    table = Table(box=box.SIMPLE_HEAD, title=f"job types (run time reserve → settle; p50/p95 {accuracy})",
                  title_justify="left")
    for name, justify in (("job type", "left"), ("window", "left"), ("completed", "right"), ("retried", "right"),
                          ("dead-lettered", "right"), ("p50", "right"), ("p95", "right"), ("max", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for t in resp.job_types:
        for label, w in (("1h", t.last_hour), ("24h", t.last_day)):
            table.add_row(escape(t.job_type) if label == "1h" else "", label, f"{w.completed:,}", f"{w.retried:,}",
                          f"{w.dead_lettered:,}", *(run_time_text(_time(w, n)) for n in _TIMES))
    return table
