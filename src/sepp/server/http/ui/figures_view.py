"""How the queue page shows its job-type figures (the figures are
``sepp.server.admin.type_figures``): the run-time formatter of the table."""

from __future__ import annotations


def fmt_runtime(seconds: float | None) -> str:
    """A run time for a table cell: ``850 µs``, ``12.5 ms``, ``340 ms``, ``2.40 s``, ``42 s``,
    ``3.5 min``, ``2.1 h``; ``–`` for None (no timed run). Three significant digits at
    most: the percentiles themselves are within 5 %."""
    if seconds is None:
        return "–"
    s = max(0.0, seconds)
    if s < 0.001:
        return f"{s * 1e6:.0f} µs"
    if s < 0.01:
        return f"{s * 1000:.2f} ms"
    if s < 0.1:
        return f"{s * 1000:.1f} ms"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 10:
        return f"{s:.2f} s"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
