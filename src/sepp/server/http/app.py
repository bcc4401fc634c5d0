"""Starlette app for the HTTP port: /healthz, /readyz (``sepp.server.http.health``), /metrics (Prometheus text)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from sepp.server.admin import AdminEngine
from sepp.server.engine import JobEngine
from sepp.server.http.health import health_routes
from sepp.server.readiness import Verdict


class _CommitsCollector:
    """``sepp_commits_total``: write transactions committed since start, a counter read from
    the store's figures (``Store.figures``) at each scrape."""

    def __init__(self, engine: JobEngine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("sepp_commits", "Write transactions committed")
        family.add_metric([], float(self._engine.store.figures().commits))
        yield family


class _SweepSkippedCollector:
    """``sepp_sweep_skipped_total{pass=promote|reclaim|prune}``: rows a sweep pass could not
    process and skipped since start (issue 14), read from the sweeper at each scrape."""

    def __init__(self, skipped: Callable[[], Mapping[str, int]]) -> None:
        self._skipped = skipped

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("sepp_sweep_skipped", "Rows a sweep pass could not process and skipped",
                                     labels=["pass"])
        for name, count in sorted(self._skipped().items()):
            family.add_metric([name], float(count))
        yield family


def build_http_app(engine: JobEngine, healthy: Callable[[], bool], *, admin: AdminEngine | None = None,
                   started: float = 0.0, node: str = "",
                   sweep_skipped: Callable[[], Mapping[str, int]] | None = None,
                   ready: Callable[[], Awaitable[Verdict]] | None = None) -> Starlette:
    """The HTTP app. ``healthy`` says whether the server is serving (false while stopping);
    ``ready`` gives a fresh readiness verdict for ``/readyz`` (``sepp.server.http.health``).

    With ``admin`` the web UI is mounted too (``sepp.server.http.ui``); ``started``
    (monotonic) and ``node`` feed its server info. ``sweep_skipped`` gives the sweeper's
    skipped rows by pass (``Sweeper.skipped``) for ``sepp_sweep_skipped_total``.
    """
    registry = CollectorRegistry()
    backlog = Gauge("sepp_commit_backlog_jobs", "Jobs waiting for the committer", registry=registry)
    registry.register(_CommitsCollector(engine))  # type: ignore[arg-type]
    if sweep_skipped is not None:
        registry.register(_SweepSkippedCollector(sweep_skipped))  # type: ignore[arg-type]
    queues = Gauge("sepp_queues", "Queues known to the server", registry=registry)

    async def metrics(_request: Request) -> Response:
        backlog.set(engine.store.figures().backlog)
        queues.set(len(engine.queues.all()))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    routes: list[BaseRoute] = [*health_routes(healthy, ready), Route("/metrics", metrics)]
    if admin is None:
        return Starlette(routes=routes)
    from sepp.server.http.ui import AdminUI
    from sepp.server.rpc.producer import server_info

    ui = AdminUI(admin, lambda: server_info(engine, started, node), engine.config.admin_token)
    return Starlette(routes=routes + ui.routes(), middleware=ui.middleware())
