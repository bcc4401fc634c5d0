"""Applying a settings patch to a queue (DeclareQueue / UpdateQueue, the UI's queue form;
every value bounded: docs/configuration.md "Maxima")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from sepp.limits import MESSAGE_BOUNDED, QueueSettings, long_encoding_label
from sepp.quoting import clip, quote
from sepp.server.errors import InvalidRequest
from sepp.server.rpc_args import invalid_from_pydantic


def merge_settings(current: QueueSettings, patch: Mapping[str, Any], paths: Sequence[str],
                   max_message_bytes: int, max_encoding_bytes: int | None = None) -> QueueSettings:
    """``current`` with the fields named by ``paths`` taken from ``patch`` (empty = every
    field of ``patch``). Paths are QueueSettings field names, ``limits.<name>`` for a limit.

    Raises ``InvalidRequest`` (field = the path) for an unknown path or an invalid value:
    also for ``max_payload_bytes`` above ``max_message_bytes``, or a ``max_result_bytes`` the
    patch names above it (one it does not name is lowered to it) and, when
    ``max_encoding_bytes`` is given, an ``allowed_encodings`` label longer than that
    (field ``limits.allowed_encodings[i]``).
    """
    merged = current.model_dump()
    for path in paths or _all_paths(patch):
        head, _, rest = path.partition(".")
        if head not in QueueSettings.model_fields or (rest and head != "limits"):
            raise InvalidRequest(f"unknown queue setting {quote(path)}", "update_mask")
        if head not in patch:
            raise InvalidRequest(f"setting {quote(path)} is named but not given", clip(path))
        if not rest:
            merged[head] = patch[head]
            continue
        limits = patch[head] if isinstance(patch[head], Mapping) else {}
        if rest not in merged["limits"] or rest not in limits:
            raise InvalidRequest(f"unknown queue setting {quote(path)}", "update_mask")
        merged["limits"][rest] = limits[rest]
    try:
        settings = QueueSettings.model_validate(merged)
    except ValidationError as exc:
        raise invalid_from_pydantic(exc) from None
    named = set(paths or _all_paths(patch))
    for name in MESSAGE_BOUNDED:  # a payload travels in an enqueue, a result in an ack: one message each
        value = getattr(settings.limits, name)
        if value <= max_message_bytes:
            continue
        if name == "max_result_bytes" and not named & {"limits", "limits.max_result_bytes"}:
            # Not asked for: the default (or a row stored before results) over a small message
            # cap is lowered to the cap, as at start (limits.fit_result_limit).
            settings = settings.model_copy(update={"limits": settings.limits.model_copy(
                update={"max_result_bytes": max_message_bytes})})
            continue
        raise InvalidRequest(f"limits.{name} must not exceed max_message_bytes ({max_message_bytes})",
                             f"limits.{name}", max_message_bytes, value)
    if max_encoding_bytes is not None:
        long_label = long_encoding_label(settings.limits, max_encoding_bytes)
        if long_label is not None:
            i, size = long_label
            raise InvalidRequest(f"limits.allowed_encodings[{i}] is {size} bytes long; a label is at most "
                                 f"max_encoding_bytes ({max_encoding_bytes})", f"limits.allowed_encodings[{i}]",
                                 max_encoding_bytes, size)
    return settings


def _all_paths(patch: Mapping[str, Any]) -> list[str]:
    return [k for k in patch if k in QueueSettings.model_fields]
