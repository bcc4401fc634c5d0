"""Page tokens of ``ListJobs`` (keyset paging).

A token is URL-safe base64 (no padding) of ``{"f": fingerprint, "k": sort key}``: the sort
key of the last row of the previous page (what ``AdminStore.list_jobs`` returns as
``next_key``) bound to the filters it was made for. The wire strings must not change: a
client may hold a token across a server upgrade.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from sepp.server.errors import InvalidRequest
from sepp.storage.admin import JobQuery


def fingerprint(query: JobQuery) -> str:
    """12 hex digits naming a listing's filters: a token only pages the listing it was made for.
    The search filters are part of it only when given, so a token of a listing
    without them is the same string as before they existed."""
    fields: list[object] = [query.queue, query.state, query.job_type, query.reason_prefix, query.finished_after,
                            query.finished_before]
    if query.job_id is not None or query.idempotency_key is not None or query.error_contains is not None \
            or query.custom:
        fields += [None if query.job_id is None else query.job_id.hex(), query.idempotency_key,
                   query.error_contains, [list(term) for term in query.custom]]
    if query.retries:  # likewise: a token of the SCHEDULED listing stays what it was
        fields.append("retries")
    raw = json.dumps(fields)
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


def encode_cursor(query: JobQuery, key: list[Any]) -> str:
    """An opaque page token: the last row's sort key, bound to the query's filters."""
    raw = json.dumps({"f": fingerprint(query), "k": key}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(query: JobQuery, token: str) -> list[Any] | None:
    """The sort key in ``token`` (None for an empty token). Raises ``InvalidRequest`` when it
    is malformed or was made for other filters."""
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError):
        raise InvalidRequest("page_token is malformed", "page_token") from None
    if not isinstance(data, dict) or not isinstance(data.get("k"), list):
        raise InvalidRequest("page_token is malformed", "page_token")
    if data.get("f") != fingerprint(query):
        raise InvalidRequest("page_token was issued for other filters", "page_token")
    key: list[Any] = data["k"]
    return key
