"""The UI's Nodes and Workers pages (``/nodes``, ``/workers`` and their htmx partials):
the nodes sharing the store and every worker that called within the last hour."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sepp.domain.store_errors import StoreError
from sepp.server.cluster import HEARTBEAT_EVERY, NODE_GONE_AFTER
from sepp.server.http.ui.kit import PageKit
from sepp.server.http.ui.views import node_views, storage_label

#: Most rows the Workers page shows (live ones first; the rest are counted).
WORKERS_SHOWN = 200


class ClusterPages:
    """The Nodes and Workers pages over ``kit`` (each with its htmx partial)."""

    def __init__(self, kit: PageKit) -> None:
        self.kit = kit
        self.admin = kit.admin

    # ------------------------------------------------------------------ nodes

    async def _nodes_context(self) -> dict[str, Any]:
        parts = self.kit.parts
        cfg = parts.config
        try:  # read at once: parts.nodes is as old as this node's last heartbeat (up to 5 s)
            parts.nodes = await parts.store.nodes()
        except StoreError:  # the database is away: show what was last read
            pass
        nodes = node_views(parts.nodes, parts.clock.now(), parts.node, NODE_GONE_AFTER)
        return {"nodes": nodes, "this_node": parts.node, "gone_after": NODE_GONE_AFTER,
                "heartbeat_every": HEARTBEAT_EVERY,
                "storage": storage_label(cfg.storage, cfg.postgres.schema, str(cfg.data_dir), cfg.persist_mode)}

    async def nodes_page(self, request: Request) -> Response:
        """The nodes sharing the store: name, address, version, started, last seen
        (gone after ``NODE_GONE_AFTER`` s without a heartbeat), and the storage backend."""
        return self.kit.render(request, "nodes.html", {"title": "Nodes", **(await self._nodes_context())})

    async def nodes_partial(self, request: Request) -> Response:
        """The nodes table for htmx polling."""
        return self.kit.render(request, "_nodes.html", await self._nodes_context())

    # ------------------------------------------------------------------ workers

    async def _workers_context(self) -> dict[str, Any]:
        workers = await self.admin.workers()
        quiet = sum(w.quiet for w in workers)
        stopped = sum(bool(w.stopped_at) for w in workers)
        # At most WORKERS_SHOWN rows (worker ids are caller input; the page polls every few s).
        return {"workers": workers[:WORKERS_SHOWN], "total": len(workers), "quiet": quiet, "stopped": stopped,
                "live": len(workers) - quiet - stopped, "now": self.kit.parts.clock.now(),
                "heartbeat_every": HEARTBEAT_EVERY}

    async def workers_page(self, request: Request) -> Response:
        """Every worker that called within the last hour, on any node: id, status
        (quiet = no call within two lease periods), host, queues, concurrency, jobs in flight,
        last reserve, jobs done and failed in the last minute, nodes, client version."""
        return self.kit.render(request, "workers.html", {"title": "Workers", **(await self._workers_context())})

    async def workers_partial(self, request: Request) -> Response:
        """The workers table for htmx polling."""
        return self.kit.render(request, "_workers.html", await self._workers_context())
