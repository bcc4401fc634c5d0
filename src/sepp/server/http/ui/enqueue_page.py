"""The UI's enqueue form: ``GET /enqueue`` (with a fresh idempotency key) and ``POST
/enqueue`` (the request built from the form, enqueued in-process, the ack or the rejection
shown)."""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sepp.api.v1 import producer_pb2 as ppb
from sepp.rejections import RejectionCode
from sepp.server.engine import JobEngine
from sepp.server.errors import BacklogFull, EngineError, JobRejected
from sepp.server.http.ui.enqueue_form import FormError, build_request, fresh_idempotency_key, limits_json
from sepp.server.http.ui.kit import PageKit

#: Where the enqueue form reads the live limits and queue names (``rpc.producer.server_info``).
ServerInfoSource = Callable[[], ppb.ServerInfo]


class EnqueuePage:
    """The enqueue form over ``kit``, enqueuing through ``engine``; ``server_info`` returns the live ``ServerInfo`` (the
    limits the form checks)."""

    def __init__(self, kit: PageKit, engine: JobEngine, server_info: ServerInfoSource) -> None:
        self.kit = kit
        self.engine = engine
        self.server_info = server_info

    # ------------------------------------------------------------------ enqueue

    def _enqueue_context(self, values: Mapping[str, str], customs: Sequence[tuple[str, str, str]],
                         **extra: Any) -> dict[str, Any]:
        info = self.server_info()
        rows = list(customs) or [("", "string", "")]
        return {"title": "Enqueue", "v": values, "customs": rows, "limits": limits_json(info),
                "queue_names": [q.name for q in info.queues], "strict": info.strict,
                "zones": sorted(zoneinfo.available_timezones()), "result": None, "rejection": None,
                "form_error": None, **extra}

    async def enqueue_page(self, request: Request) -> Response:
        """The enqueue form (``?queue=`` pre-fills the queue) with a fresh idempotency key, so
        submitting one loaded form twice stores one job."""
        values = {"queue": request.query_params.get("queue", ""), "payload_format": "text",
                  "encoding": "application/json", "scheduled_tz": "UTC", "payload": "{}",
                  "idempotency_key": fresh_idempotency_key()}
        return self.kit.render(request, "enqueue.html", self._enqueue_context(values, []))

    async def enqueue_submit(self, request: Request) -> Response:
        """Build the EnqueueRequest, call ``JobEngine.enqueue`` in-process, show the ack or the rejection."""
        form = await self.kit.form(request)
        values = {k: v for k, v in form.items() if isinstance(v, str) and not k.startswith("custom_")}
        keys, types, raws = (form.getlist(n) for n in ("custom_key", "custom_type", "custom_value"))
        customs = [(str(k), str(t), str(r)) for k, t, r in zip(keys, types, raws, strict=False)]
        status = 200
        try:
            req = build_request(values, customs)
            ack = await self.engine.enqueue(req)
            ctx = self._enqueue_context(values, customs, result={"job_id": ack.job_id,
                                                                  "deduplicated": ack.deduplicated})
        except FormError as exc:
            status = 400
            ctx = self._enqueue_context(values, customs, rejection={
                "code": RejectionCode.INVALID_ARGUMENT.value, "message": str(exc), "field": exc.field,
                "limit": None, "actual": None, "local": True})
        except JobRejected as exc:
            status = 400 if exc.rejection.code != RejectionCode.UNKNOWN_QUEUE.to_wire() else 404
            r = exc.rejection
            ctx = self._enqueue_context(values, customs, rejection={
                "code": RejectionCode.from_wire(r.code).value, "message": r.message, "field": r.field,
                "limit": r.limit if r.HasField("limit") else None,
                "actual": r.actual if r.HasField("actual") else None, "local": False})
        except BacklogFull as exc:
            status = 503
            ctx = self._enqueue_context(values, customs, form_error=f"The server is overloaded (commit backlog "
                                        f"{exc.backlog:,}); nothing was stored. Retry in a moment.")
        except EngineError as exc:
            status = 500
            ctx = self._enqueue_context(values, customs, form_error=str(exc))
        return self.kit.render(request, "enqueue.html", ctx, status)
