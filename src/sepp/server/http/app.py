"""Starlette app for the HTTP port: /healthz, /metrics (Prometheus text)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from sepp.server.admin import AdminEngine
from sepp.server.auth import Authenticator
from sepp.server.engine import JobEngine


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
                   auth: Authenticator | None = None) -> Starlette:
    """The HTTP app. ``healthy`` says whether the server is serving (false while stopping).

    With ``admin`` the web UI is mounted too (``sepp.server.http.ui``); ``started``
    (monotonic) and ``node`` feed its server info. ``sweep_skipped`` gives the sweeper's
    skipped rows by pass (``Sweeper.skipped``) for ``sepp_sweep_skipped_total``. ``auth`` is
    the server's ``Authenticator`` (issue 11; built from the engine's config when None): the UI
    logs in with a token that has role ``admin``. ``/healthz`` and ``/metrics`` stay open.
    """
    registry = CollectorRegistry()
    backlog = Gauge("sepp_commit_backlog_jobs", "Jobs waiting for the committer", registry=registry)
    registry.register(_CommitsCollector(engine))  # type: ignore[arg-type]
    if sweep_skipped is not None:
        registry.register(_SweepSkippedCollector(sweep_skipped))  # type: ignore[arg-type]
    queues = Gauge("sepp_queues", "Queues known to the server", registry=registry)

    async def healthz(_request: Request) -> Response:
        ok = healthy()
        return JSONResponse({"status": "ok" if ok else "stopping"}, status_code=200 if ok else 503)

    async def metrics(_request: Request) -> Response:
        backlog.set(engine.store.figures().backlog)
        queues.set(len(engine.queues.all()))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    routes: list[BaseRoute] = [Route("/healthz", healthz), Route("/metrics", metrics)]
    if admin is None:
        return Starlette(routes=routes)
    from sepp.server.http.ui import AdminUI
    from sepp.server.rpc.producer import server_info

    if auth is None:
        auth = Authenticator.from_config(engine.config.auth, engine.config.admin_token)
    ui = AdminUI(admin, lambda: server_info(engine, started, node), auth)
    return Starlette(routes=routes + ui.routes(), middleware=ui.middleware())
