"""Form parsing for the UI: the dead-letter filter, and reading a form with a part size
large enough for a whole payload (the enqueue form itself: ``enqueue_form``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request

from sepp.domain.listing import DeadFilter
from sepp.server.errors import InvalidRequest


def dead_filter(params: Mapping[str, Any]) -> tuple[DeadFilter, dict[str, str]]:
    """The dead-letter page's filter from query or form fields (queue, job_type, reason
    prefix, after / before as ISO 8601, UTC when no offset is given) and the raw stripped
    values to echo back. Raises ``InvalidRequest`` for a time that does not parse."""
    raw = {k: str(params.get(k, "") or "").strip() for k in ("queue", "job_type", "reason", "after", "before")}

    def when(text: str, field: str) -> int | None:
        if not text:
            return None
        try:
            moment = dt.datetime.fromisoformat(text)
        except ValueError:
            raise InvalidRequest(f"{field}: {text!r} is not a date and time (UTC)", field) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return int(moment.timestamp() * 1_000_000)

    where = DeadFilter(queue=raw["queue"] or None, job_type=raw["job_type"] or None,
                       reason_prefix=raw["reason"] or None, after=when(raw["after"], "after"),
                       before=when(raw["before"], "before"))
    return where, raw


async def read_form(request: Request, max_message_bytes: int) -> FormData:
    """The parsed form; a field may be as large as a whole gRPC message in base64 (the
    payload textarea: twice ``max_message_bytes``), beyond python-multipart's 1 MiB default."""
    return await request.form(max_part_size=max_message_bytes * 2)
