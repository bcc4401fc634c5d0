"""Job ids (16-byte UUIDs) in their two forms: the raw bytes a store keeps and the
canonical text (8-4-4-4-12 lowercase hex) the wire, the UI and the logs show.

Used by every front end (RPC, UI, periodic schedules, admin) and by the engine; pure
functions, no state.
"""

from __future__ import annotations

import uuid


def job_id_text(raw: bytes) -> str:
    """Canonical text form (8-4-4-4-12 lowercase hex) of a 16-byte UUID ``raw``."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def job_id_bytes(text: str) -> bytes | None:
    """The 16 bytes of a UUID's text form (canonical, or any form ``uuid.UUID`` accepts);
    None when ``text`` is not one (never raises)."""
    if len(text) == 36 and text[8] == text[13] == text[18] == text[23] == "-":
        try:
            # Any further "-" shortens the hex below 32 digits: caught by the length check.
            raw = bytes.fromhex(text.replace("-", ""))
        except ValueError:
            return None
        return raw if len(raw) == 16 else None
    try:
        return uuid.UUID(text).bytes
    except (ValueError, AttributeError, TypeError):
        return None


__all__ = ["job_id_bytes", "job_id_text"]
