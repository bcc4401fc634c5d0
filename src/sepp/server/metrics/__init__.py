"""The node's Prometheus metrics: ``definitions`` names every metric with its help
text, ``Metrics`` keeps the figures (fed by the engine's events) and renders them,
``gauges.GaugeSampler`` reads the queue gauges off the scrape path."""
from __future__ import annotations

from sepp.server.metrics.collector import Metrics
from sepp.server.metrics.definitions import ALL, MetricDef

__all__ = ["ALL", "MetricDef", "Metrics"]
