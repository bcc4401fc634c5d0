"""The UI's route table: ``AdminUI`` over an ``AdminEngine``.

``AdminUI`` builds the shared ``PageKit`` (``kit``: templates, rendering, flashes, login and
CSRF guards) and the page groups over it — ``queue_pages``, ``job_pages``, ``enqueue_page``,
``cluster_pages``, ``login``, ``lists``, ``bulk``, ``periodic``, ``workflow_pages`` — and lists their routes in
one table, in the order Starlette matches them. Formatting lives in ``views`` and ``chart``,
form parsing in ``forms``, CSRF / session / headers in ``security``.
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from sepp.server.admin import AdminEngine
from sepp.server.auth import Authenticator
from sepp.server.engine import JobEngine
from sepp.server.http.ui.bulk import BulkUI
from sepp.server.http.ui.cluster_pages import ClusterPages
from sepp.server.http.ui.enqueue_page import EnqueuePage, ServerInfoSource
from sepp.server.http.ui.job_pages import JobPages
from sepp.server.http.ui.kit import STATIC, PageKit
from sepp.server.http.ui.lists import ListPages
from sepp.server.http.ui.login import LoginPages
from sepp.server.http.ui.periodic import PeriodicPages
from sepp.server.http.ui.queue_pages import QueuePages
from sepp.server.http.ui.security import SecurityHeaders, session_secret
from sepp.server.http.ui.workflow_pages import WorkflowPages
from sepp.server.parts import ServerParts


class AdminUI:
    """Routes and middleware of the web UI over an ``AdminEngine``, with the node's ``parts``
    (config, limits, clock, nodes) and the ``engine`` the enqueue form enqueues through.

    ``server_info`` returns the live ``ServerInfo`` (limits for the enqueue form);
    ``auth`` holds the tokens: when admin is checked the UI logs in with any token
    that has role ``admin``, else it is open.
    """

    def __init__(self, parts: ServerParts, engine: JobEngine, admin: AdminEngine, server_info: ServerInfoSource,
                 auth: Authenticator) -> None:
        self.parts = parts
        self.admin = admin
        self.auth = auth
        #: What every page shares (``ui.kit``).
        self.kit = PageKit(parts, admin, auth)
        self.queues = QueuePages(self.kit)
        self.jobs = JobPages(self.kit)
        self.enqueue = EnqueuePage(self.kit, engine, server_info)
        self.cluster = ClusterPages(self.kit)
        self.login = LoginPages(self.kit)
        #: Bulk cancel / requeue / delete (``ui.bulk``).
        self.bulk_ui = BulkUI(self.kit)
        self.lists = ListPages(self.kit)
        self.periodic = PeriodicPages(self.kit)
        #: The workflow list and pages (``ui.workflow_pages``).
        self.workflows = WorkflowPages(self.kit)

    def routes(self) -> list[BaseRoute]:
        """Every UI route (mount them on the HTTP app)."""
        kit, queues, jobs, cluster, login = self.kit, self.queues, self.jobs, self.cluster, self.login
        page, post = kit.page, kit.post
        return [
            Route("/", page(queues.dashboard)),
            Route("/queues", kit.open(login.queues_index)),
            Route("/ui/partials/dashboard", page(queues.dashboard_partial)),
            Route("/queues/{name}", page(queues.queue_page)),
            Route("/ui/partials/queue/{name}", page(queues.queue_partial)),
            Route("/ui/partials/queue/{name}/types", page(queues.queue_types_partial)),
            *self.bulk_ui.routes(),
            Route("/queues/{name}/pause", post(queues.queue_pause), methods=["POST"]),
            Route("/queues/{name}/resume", post(queues.queue_resume), methods=["POST"]),
            Route("/queues/{name}/purge", post(queues.queue_purge), methods=["POST"]),
            *self.lists.routes(),
            Route("/jobs/{job_id}", page(jobs.job_page)),
            Route("/ui/partials/jobs/{job_id}", page(jobs.job_partial)),
            Route("/jobs/{job_id}/cancel", post(jobs.job_cancel), methods=["POST"]),
            Route("/jobs/{job_id}/requeue", post(jobs.job_requeue), methods=["POST"]),
            Route("/jobs/{job_id}/delete", post(jobs.job_delete), methods=["POST"]),
            Route("/dead", page(jobs.dead_page)),
            Route("/dead/requeue", post(jobs.dead_requeue), methods=["POST"]),
            Route("/enqueue", page(self.enqueue.enqueue_page)),
            Route("/enqueue", post(self.enqueue.enqueue_submit), methods=["POST"]),
            Route("/workers", page(cluster.workers_page)),
            Route("/ui/partials/workers", page(cluster.workers_partial)),
            *self.periodic.routes(),
            *self.workflows.routes(),
            Route("/nodes", page(cluster.nodes_page)),
            Route("/ui/partials/nodes", page(cluster.nodes_partial)),
            Route("/find", page(jobs.find)),
            Route("/search", page(jobs.search)),
            Route("/login", kit.open(login.login_page)),
            Route("/login", kit.open_post(login.login_submit), methods=["POST"]),
            Route("/logout", post(login.logout), methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
            Route("/favicon.ico", kit.open(login.favicon)),
        ]

    def middleware(self) -> list[Middleware]:
        """Session (signed cookie) and security headers."""
        return [Middleware(SecurityHeaders),
                Middleware(SessionMiddleware, secret_key=session_secret(self.auth), session_cookie="sepp_session",
                           max_age=12 * 3600, same_site="lax",
                           # Served over TLS: the cookie never travels in clear.
                           https_only=bool(self.parts.config.tls_cert))]
