"""Bounded quoting of user input in messages, error details and logs.

A refusal that echoed its whole input could exceed gRPC's metadata limit (8 KiB by default:
the message travels in ``grpc-message`` and again inside ``grpc-status-details-bin``) and
come back as ``RESOURCE_EXHAUSTED`` with no ErrorInfo. Every message or detail that quotes
a value a caller sent goes through ``quote`` (or ``clip`` for a bare metadata value), so it
carries at most ``QUOTE_LIMIT`` bytes of it plus its length.

No dependencies: used by ``validation`` (client and server), ``wire``, the server and the
store alike (``sepp.wire`` re-exports both functions).
"""

from __future__ import annotations

#: Most UTF-8 bytes of one user-supplied value quoted in a message or detail.
QUOTE_LIMIT = 200

#: Marks a value that was cut.
ELLIPSIS = "…"


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def clip(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``value`` as text, cut to at most ``limit`` UTF-8 bytes (never inside a character)
    followed by ``…`` when it was longer; unchanged when it fits. For ErrorInfo metadata
    values and other places that carry the bare value (no quotes, no length)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit // 4 or len(raw := _utf8(text)) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore") + ELLIPSIS


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``value`` quoted for a message: ``repr`` of it when it has at most ``limit`` UTF-8
    bytes (``'abc'``), else the first ``limit`` bytes, an ellipsis and the full length:
    ``'xxxx…' (10240 bytes)``. Escapes (``\\x00``) can make the quoted text up to ~4× the
    bytes it quotes; it stays far below gRPC's 8 KiB metadata limit."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit // 4:
        return repr(text)
    raw = _utf8(text)
    if len(raw) <= limit:
        return repr(text)
    shown = repr(raw[:limit].decode("utf-8", "ignore"))
    return f"{shown[:-1]}{ELLIPSIS}{shown[-1]} ({len(raw)} bytes)"
