"""The throughput chart of the dashboard and queue pages, drawn server-side as SVG points (no
JavaScript), over the last hour, 6 hours or 24 hours.

The store keeps one row per (queue, minute) for a day (``AdminEngine`` ``KEEP_MINUTES``); a
window longer than an hour is drawn in buckets of several minutes so the chart has 60–72
points whatever the window.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from sepp.domain.admin import MinuteRow
from sepp.server.admin import QueueStatsView
from sepp.server.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class Window:
    """A chart window: its URL name (``1h``), its length and its bucket, in minutes."""

    name: str
    minutes: int
    bucket: int

    @property
    def per(self) -> str:
        """What one point counts: ``per minute`` or ``per 5 minutes``."""
        return "per minute" if self.bucket == 1 else f"per {self.bucket} minutes"

    @property
    def label(self) -> str:
        """``the last hour`` / ``the last 6 hours``."""
        hours = self.minutes // 60
        return "the last hour" if hours == 1 else f"the last {hours} hours"


#: The windows the pages offer (``?window=1h|6h|24h``), the first the default.
WINDOWS: dict[str, Window] = {w.name: w for w in (Window("1h", 60, 1), Window("6h", 360, 5),
                                                   Window("24h", 1440, 20))}


def window_param(value: str | None) -> Window:
    """``?window=`` → its ``Window`` (the hour when absent). Raises ``InvalidRequest`` (a
    400 page naming the windows) for anything else."""
    if value is None or not value.strip():
        return WINDOWS["1h"]
    window = WINDOWS.get(value.strip().lower())
    if window is None:
        raise InvalidRequest(f"unknown chart window {value[:32]!r}: one of {', '.join(WINDOWS)}", "window")
    return window


@dataclass(frozen=True, slots=True)
class Chart:
    """A throughput line chart, drawn server-side (no JS).

    The SVG (viewBox ``0 0 width height``, stretched to its box) holds only the lines;
    the axis labels are HTML around it so they keep their size on any screen. ``series``
    holds (css class, label, total, points of the complete buckets, points of the last
    segment up to the current, still partial, bucket), drawn in that order: enqueued first,
    as a wide pale band, so the completed line drawn over it stays visible where the two
    are equal (the enqueued line hid under the completed one).
    """

    width: int
    height: int
    series: list[tuple[str, str, int, str, str]]
    x_labels: list[str]
    y_labels: list[str]
    grid: list[float]
    summary: str
    window: Window


def axis_ceiling(peak: int) -> int:
    """The y axis top for a largest value ``peak``: the smallest of 2, 4, 6, 10, 20, 40, 60,
    100, … that is ≥ ``peak`` (at least 2), so the half-way label is a whole number — a
    peak of 1 reads 2 / 1 / 0, not 1 / 0 / 0."""
    magnitude = 1
    while True:
        for m in (2, 4, 6, 10):
            if m * magnitude >= peak:
                return m * magnitude
        magnitude *= 10


def bucket_rows(rows: Sequence[MinuteRow], size: int) -> list[tuple[int, int, int]]:
    """Sum per-minute ``rows`` (oldest first, the current minute last) into buckets of
    ``size`` minutes aligned on the newest minute: the last bucket holds the current minute."""
    out: list[tuple[int, int, int]] = []
    start = len(rows) % size or size
    edges = [0, *range(start, len(rows), size), len(rows)] if rows else []
    for lo, hi in itertools.pairwise(edges):
        part = rows[lo:hi]
        out.append((sum(r.enqueued for r in part), sum(r.completed for r in part), sum(r.dead_lettered for r in part)))
    return out


def _span_label(minutes: float) -> str:
    """``−45 min`` under two hours, else ``−4.5 h`` / ``−18 h``."""
    return f"−{minutes / 60:g} h" if minutes >= 120 else f"−{round(minutes)} min"


def build_chart(rows: Sequence[MinuteRow], window: Window = WINDOWS["1h"], width: int = 600,
                height: int = 100) -> Chart:
    """A chart of enqueued / completed / dead-lettered for ``rows`` (one per minute, oldest
    first, the last one the current minute), in buckets of ``window.bucket`` minutes."""
    buckets = bucket_rows(rows, window.bucket)
    series_values = [("enq", "enqueued", [b[0] for b in buckets]),
                     ("done", "completed", [b[1] for b in buckets]),
                     ("dead", "dead-lettered", [b[2] for b in buckets])]
    peak = max([0, *[v for _, _, vals in series_values for v in vals]])
    ceiling = axis_ceiling(peak)
    n = max(1, len(buckets) - 1)

    def point(i: int, v: int) -> str:
        return f"{round(width * i / n, 2)},{round(height * (1 - v / ceiling), 2)}"

    series = []
    for cls, label, vals in series_values:
        whole = " ".join(point(i, v) for i, v in enumerate(vals[:-1]))
        tail = " ".join(point(i, vals[i]) for i in range(max(0, len(vals) - 2), len(vals)))
        series.append((cls, label, sum(vals), whole, tail))
    x_labels = [_span_label(window.minutes * (1 - k / 4)) for k in range(4)] + ["now"]
    summary = (f"{window.label.capitalize()}: " + ", ".join(f"{total:,} {label}" for _, label, total, _, _ in series)
               + f"; at most {peak:,} {window.per}.")
    return Chart(width, height, series, x_labels, [f"{ceiling:,}", f"{ceiling // 2:,}", "0"],
                 [0.0, height / 2, float(height)], summary, window)


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
