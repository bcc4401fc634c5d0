"""The admin web UI: Starlette routes + Jinja2 templates + htmx, served by ``sepp serve``.

Pages (all HTML, server-rendered; JavaScript only enhances):

========================================  ==============================================
``GET /``                                 dashboard: queues, counts, oldest-ready age, chart
``GET /ui/partials/dashboard``            the dashboard body (htmx polls it every 5 s)
``GET /queues/{name}``                    queue: settings, counts, jobs by state (paged)
``GET /ui/partials/queue/{name}``         the queue's live counts + chart (polled)
``GET /ui/partials/queue/{name}/types``   its job-type figures (polled)
``POST /queues/{name}/bulk[/run]``        bulk cancel / requeue / delete (``ui.bulk``)
``GET /queues/{name}/bulk``, ``/bulk/…``  the dry-run count; a bulk run's progress
``POST /queues/{name}/pause|resume|purge``
``GET /jobs``                             every queue's jobs by state (``ui.lists``)
``GET /busy``, ``/ui/partials/busy``      the job each worker runs now (``ui.lists``)
``GET /retries``                          SCHEDULED jobs waiting for a retry (``ui.lists``)
``POST /jobs/bulk``                       the ticked rows of a list: requeue / cancel / delete
``GET /jobs/{id}``                        job: every field, payload, custom map, attempts
``POST /jobs/{id}/cancel|requeue|delete``
``GET /dead``                             dead letters: filters, dry-run count, list
``POST /dead/requeue``                    bulk redrive of the filtered dead letters
``GET /enqueue`` / ``POST /enqueue``      enqueue form → ``JobEngine.enqueue`` in-process
``GET /find``                             job id or (queue, idempotency key) → job page
``GET /login`` / ``POST /login|logout``   only when an admin token is configured
``GET /static/...``                       CSS, JS, vendored htmx (no CDN)
========================================  ==============================================

Safety: Jinja2 autoescaping is on for every template (payloads, custom values, errors,
names are user data and are never marked safe); every POST must carry the session's
CSRF token (form field ``csrf_token`` or header ``X-CSRF-Token``), else 403; responses
carry a strict Content-Security-Policy (scripts and styles from ``/static`` only). When
a token is configured (``[[auth.tokens]]`` or ``admin_token``), every page but
``/login`` and ``/static`` redirects to the login page until a token with role ``admin`` was
entered; the session is a signed cookie holding the token's name and a digest marker (so a
removed or changed token logs its sessions out), signed with a key derived from the
configured digests, else a random per-process key.

Layout: ``routes`` (``AdminUI``: the route table over the page groups), ``kit``
(``PageKit``, what every page shares: templates, render, flash, form, the login / CSRF
guards), the page groups ``queue_pages`` (dashboard, queue), ``job_pages`` (job, dead
letters, find, search), ``enqueue_page``, ``cluster_pages`` (nodes, workers), ``login``,
``bulk`` (the bulk-action routes), ``lists`` (Jobs, Busy, Retries, the ticked-rows form)
and ``periodic``; ``views`` (formatters, payload view / hex dump, job and settings
context), ``chart`` (the throughput SVG), ``forms`` (enqueue form → request, dead-letter
filter), ``figures_view`` (the job-type table's formatting), ``security`` (CSP headers,
session key, login marker, CSRF). The page groups import ``kit``, never ``routes``.
Templates and static files stay in ``sepp/server/http/templates`` and ``static``.
"""

from __future__ import annotations

from sepp.server.http.ui.routes import AdminUI

__all__ = ["AdminUI"]
