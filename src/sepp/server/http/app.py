"""Starlette app for the HTTP port: /healthz, /readyz (``sepp.server.http.health``), /metrics (Prometheus text)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from sepp.server.admin import AdminEngine
from sepp.server.auth import Authenticator
from sepp.server.engine import JobEngine
from sepp.server.http.health import health_routes
from sepp.server.metrics import Metrics
from sepp.server.parts import ServerParts
from sepp.server.readiness import Verdict


def build_http_app(parts: ServerParts, engine: JobEngine, healthy: Callable[[], bool], *,
                   admin: AdminEngine | None = None,
                   started: float = 0.0, node: str = "",
                   sweep_skipped: Callable[[], Mapping[str, int]] | None = None,
                   metrics: Metrics | None = None,
                   ready: Callable[[], Awaitable[Verdict]] | None = None,
                   auth: Authenticator | None = None) -> Starlette:
    """The HTTP app over the node's ``parts`` and ``engine`` (the UI's enqueue). ``healthy``
    says whether the server is serving (false while stopping);
    ``ready`` gives a fresh readiness verdict for ``/readyz`` (``sepp.server.http.health``).

    With ``admin`` the web UI is mounted too (``sepp.server.http.ui``); ``started``
    (monotonic) and ``node`` feed its server info. ``/metrics`` renders ``metrics``
    (``sepp.server.metrics.Metrics``; one is made over ``parts`` when not given, with
    ``sweep_skipped`` — ``Sweeper.skipped`` — for ``sepp_sweep_skipped_total``). ``auth`` is
    the server's ``Authenticator`` (built from ``parts.config`` when None): the UI
    logs in with a token that has role ``admin``. ``/healthz``, ``/readyz`` and ``/metrics``
    stay open.
    """
    if metrics is None:
        metrics = Metrics(parts, gauge_interval=parts.config.metrics_gauge_interval, sweep_skipped=sweep_skipped)

    async def scrape(_request: Request) -> Response:
        await metrics.refresh_gauges()  # bounded: at most gauges.SCRAPE_WAIT seconds
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    routes: list[BaseRoute] = [*health_routes(healthy, ready), Route("/metrics", scrape)]
    if admin is None:
        return Starlette(routes=routes)
    from sepp.server.http.ui import AdminUI
    from sepp.server.rpc.producer import server_info

    if auth is None:
        auth = Authenticator.from_config(parts.config.auth, parts.config.admin_token)
    ui = AdminUI(parts, engine, admin, lambda: server_info(parts, started, node), auth)
    return Starlette(routes=routes + ui.routes(), middleware=ui.middleware())
