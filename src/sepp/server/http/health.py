"""``/healthz`` and ``/readyz`` (docs/operations.md "Health and readiness").

* ``/healthz``: the process is alive and its HTTP side answers — always 200, also while
  stopping (``{"status": "ok"}``, ``{"status": "stopping"}``). A liveness probe that fails
  only when the process hangs; earlier versions answered 503 while stopping, which made a
  supervisor kill a server in the middle of its graceful drain.
* ``/readyz``: the storage answers a trivial query within 1 s (a fresh ``Store.ping``
  through ``sepp.server.readiness.Readiness.check``, shared with a probe already in
  flight) → 200 ``{"status": "ready"}``; else 503 ``{"status": "not ready", "reason": …}``,
  and 503 ``{"status": "stopping"}`` from the moment the server begins to stop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sepp.server.readiness import Verdict


def health_routes(serving: Callable[[], bool], ready: Callable[[], Awaitable[Verdict]] | None) -> list[Route]:
    """The two routes. ``serving()`` is false once the server began to stop; ``ready()``
    gives a fresh readiness verdict (None: ``/readyz`` follows ``serving`` alone, for an
    app built without a server)."""

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok" if serving() else "stopping"}, status_code=200)

    async def readyz(_request: Request) -> Response:
        if not serving():
            return JSONResponse({"status": "stopping"}, status_code=503)
        verdict = Verdict(True) if ready is None else await ready()
        if verdict.ready:
            return JSONResponse({"status": "ready"}, status_code=200)
        if verdict.reason == "stopping":
            return JSONResponse({"status": "stopping"}, status_code=503)
        return JSONResponse({"status": "not ready", "reason": verdict.reason}, status_code=503)

    return [Route("/healthz", healthz), Route("/readyz", readyz)]


__all__ = ["health_routes"]
