"""Cheap in-process counters and histograms, exposed as prometheus_client metric families.

prometheus_client's own ``Histogram.observe`` takes a lock and walks the buckets in Python
(~1.5 µs); the job-runtime histogram is observed once per settled job, so sepp keeps its own:
``Histogram.observe`` is one ``bisect`` (C) and two additions (~0.2 µs). Everything here is
touched only on the event loop's thread (no locks), except ``from_counts`` which turns a
store's snapshot (``sepp.storage.commit_stats``) into a family.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from sepp.server.metrics.definitions import MetricDef


class Histogram:
    """One histogram series: ``counts[i]`` observations ≤ ``bounds[i]`` (and above the bound
    before), the last one above every bound; ``total`` their sum."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        """One observation (seconds, jobs: the unit of the metric)."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value


def _buckets(bounds: Sequence[float], counts: Sequence[int]) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    running = 0
    for le, n in zip(bounds, counts, strict=False):
        running += n
        out.append((_le(le), float(running)))
    running += counts[-1]
    out.append(("+Inf", float(running)))
    return out


def _le(bound: float) -> str:
    return repr(float(bound))


def histogram_family(d: MetricDef, series: Mapping[Any, Histogram]) -> Metric:
    """The family of ``d`` with one sample set per label values in ``series``."""
    family = HistogramMetricFamily(d.family, d.help, labels=list(d.labels))
    for labels, h in sorted(series.items()):
        family.add_metric(list(labels), _buckets(h.bounds, h.counts), h.total)
    return family


def from_counts(d: MetricDef, counts: Sequence[int], total: float) -> Metric:
    """The unlabelled histogram family of ``d`` from per-bucket ``counts`` (``d.buckets`` + 1)."""
    family = HistogramMetricFamily(d.family, d.help, labels=[])
    family.add_metric([], _buckets(d.buckets, counts), total)
    return family


def counter_family(d: MetricDef, values: Iterable[tuple[Any, float]]) -> Metric:
    """The counter family of ``d`` with the given (label values, value) samples."""
    family = CounterMetricFamily(d.family, d.help, labels=list(d.labels))
    for labels, value in sorted(values):
        family.add_metric(list(labels), float(value))
    return family
