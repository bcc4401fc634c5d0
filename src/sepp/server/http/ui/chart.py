"""The per-minute throughput chart of the dashboard and queue pages, drawn server-side as
SVG points (no JavaScript; SPEC §4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sepp.server.admin import QueueStatsView
from sepp.storage.admin import MinuteRow


@dataclass(frozen=True, slots=True)
class Chart:
    """A per-minute throughput line chart, drawn server-side (no JS).

    The SVG (viewBox ``0 0 width height``, stretched to its box) holds only the lines;
    the axis labels are HTML around it so they keep their size on any screen. ``series``
    holds (css class, label, total, points of the complete minutes, points of the last
    segment up to the current, still partial, minute).
    """

    width: int
    height: int
    series: list[tuple[str, str, int, str, str]]
    x_labels: list[str]
    y_labels: list[str]
    grid: list[float]
    summary: str


def build_chart(rows: Sequence[MinuteRow], width: int = 600, height: int = 100) -> Chart:
    """A chart of enqueued / completed / dead-lettered per minute for ``rows`` (oldest first,
    the last one the current minute)."""
    series_values = [("enq", "enqueued", [r.enqueued for r in rows]),
                     ("done", "completed", [r.completed for r in rows]),
                     ("dead", "dead-lettered", [r.dead_lettered for r in rows])]
    peak = max([1, *[v for _, _, vals in series_values for v in vals]])
    # Round the axis up to 1/2/5 × 10^k.
    magnitude: int = 10 ** max(0, len(str(peak)) - 1)
    ceiling = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= peak)
    n = max(1, len(rows) - 1)

    def point(i: int, v: int) -> str:
        return f"{round(width * i / n, 2)},{round(height * (1 - v / ceiling) , 2)}"

    series = []
    for cls, label, vals in series_values:
        whole = " ".join(point(i, v) for i, v in enumerate(vals[:-1]))
        tail = " ".join(point(i, vals[i]) for i in range(max(0, len(vals) - 2), len(vals)))
        series.append((cls, label, sum(vals), whole, tail))
    span = len(rows) - 1
    x_labels = [f"−{round(span * (1 - k / 4))} min" for k in range(4)] + ["now"]
    summary = (f"Last {len(rows)} minutes: " + ", ".join(f"{total:,} {label}" for _, label, total, _, _ in series)
               + f"; at most {peak:,} in one minute.")
    return Chart(width, height, series, x_labels, [f"{ceiling:,}", f"{ceiling // 2:,}", "0"],
                 [0.0, height / 2, float(height)], summary)


def merge_rows(views: Sequence[QueueStatsView]) -> list[MinuteRow]:
    """Sum per-minute rows across queues (the dashboard's all-queues chart)."""
    if not views:
        return []
    out = []
    for i, first in enumerate(views[0].throughput):
        out.append(MinuteRow("", first.minute, sum(v.throughput[i].enqueued for v in views),
                             sum(v.throughput[i].completed for v in views),
                             sum(v.throughput[i].dead_lettered for v in views)))
    return out
