"""Parsing and bounding of CLI flag values, with errors that name the flag and the value.

One grammar for every duration flag (``sepp queues declare --lease/--dedup-window/…``,
``sepp enqueue --in``, ``sepp jobs requeue --after/--before``):

* a number of seconds: ``45``, ``1.5``, ``1e3``;
* a number with a unit — ``ms``, ``s``, ``m``, ``h``, ``d`` — also after an exponent:
  ``250ms``, ``30s``, ``1.5h``, ``1e3s``;
* several such parts, largest first or not: ``1h30m``, ``1d12h``.

No sign, no spaces, no ``inf``/``nan``/``_``. A refusal is a ``FlagValueError`` whose text is
``<flag> <value>: <problem>`` — e.g. ``--dedup-window 999999999d: must be at most 315360000 s
(10 years)`` — with the value quoted up to 200 characters (and its length beyond that).
Bounds of queue-setting flags come from ``sepp.limits.QueueSettings`` / ``QueueLimits``
(``setting_bounds``), the very model the server validates with, so the CLI and the server
cannot disagree.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from sepp.hard_limits import DAY, HOUR, YEAR, fmt_number

if TYPE_CHECKING:
    from pydantic import BaseModel

#: Accepted duration forms, for error messages.
DURATION_FORMS = "seconds (45, 1.5, 1e3) or number+unit parts with ms, s, m, h, d (250ms, 30s, 1e3s, 1h30m)"

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_BARE = re.compile(_NUMBER)
_PART = re.compile(rf"({_NUMBER})(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": HOUR, "d": DAY}
#: Longest user value quoted in an error, characters (bounded error payloads).
QUOTE_LIMIT = 200


def quote(text: str) -> str:
    """``text`` as it appears in an error: at most ``QUOTE_LIMIT`` characters, then its length."""
    return text if len(text) <= QUOTE_LIMIT else f"{text[:QUOTE_LIMIT]}… ({len(text)} chars)"


def one_line(text: object) -> str:
    """An error message as one line whatever the terminal: line breaks are shown
    as ``\\n`` / ``\\r`` instead of breaking the line."""
    return str(text).replace("\r", "\\r").replace("\n", "\\n")


class FlagValueError(ValueError):
    """A flag value refused by the CLI before any call.

    ``str()`` is ``"<flag> <value>: <problem>"``; ``flag``, ``value`` (as typed, unclipped),
    ``problem`` and ``limit`` (the bound crossed, or None) are kept for ``--json`` output.
    """

    def __init__(self, flag: str, value: str, problem: str, limit: float | None = None) -> None:
        self.flag, self.value, self.problem, self.limit = flag, value, problem, limit
        super().__init__(f"{flag} {quote(value)}: {problem}")


def human_seconds(seconds: float) -> str:
    """A bound in words: ``10 years``, ``365 days``, ``1 day``, ``2 hours``, ``0.001 s``."""
    for name, size in (("year", YEAR), ("day", DAY), ("hour", HOUR), ("minute", 60.0)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {name}{'s' if n != 1 else ''}"
    return f"{fmt_number(seconds)} s"


def _limit_text(limit: float, duration: bool) -> str:
    if not duration:
        return fmt_number(limit)
    words = human_seconds(limit)
    return f"{fmt_number(limit)} s" + ("" if words.endswith(" s") else f" ({words})")


def check_bounds(flag: str, text: str, value: float, lo: float | None, hi: float | None,
                 duration: bool) -> None:
    """Raise ``FlagValueError`` when ``value`` (parsed from ``text``) is outside ``lo..hi``."""
    if lo is not None and value < lo:
        raise FlagValueError(flag, text, f"must be at least {_limit_text(lo, duration)}", lo)
    if hi is not None and value > hi:
        raise FlagValueError(flag, text, f"must be at most {_limit_text(hi, duration)}", hi)


def parse_seconds(flag: str, text: str, lo: float | None = 0.0, hi: float | None = None) -> float:
    """Parse a duration flag value (module docstring grammar) → seconds, within ``lo..hi``.

    Raises ``FlagValueError`` naming ``flag`` and ``text``: not a duration (the message lists
    the accepted forms), negative, not finite (``1e400``) or outside the bounds.
    """
    s = text.strip()
    if _BARE.fullmatch(s):
        value = float(s)
    else:
        parts = list(_PART.finditer(s))
        if not s or "".join(p.group(0) for p in parts) != s:
            if s.startswith("-") and s[1:] and (_BARE.fullmatch(s[1:]) or _PART.match(s[1:])):
                raise FlagValueError(flag, text, "a duration must not be negative", lo)
            raise FlagValueError(flag, text, f"not a duration; use {DURATION_FORMS}")
        value = sum(float(p.group(1)) * _UNITS[p.group(2)] for p in parts)
    if not math.isfinite(value):
        if hi is not None:
            raise FlagValueError(flag, text, f"must be at most {_limit_text(hi, True)}", hi)
        raise FlagValueError(flag, text, "is too large a duration")
    check_bounds(flag, text, value, lo, hi, duration=True)
    return value


def setting_bounds(path: str) -> tuple[float | None, float | None]:
    """The server's bounds of a queue setting (``dedup_window``, ``limits.max_payload_bytes``),
    read from ``QueueSettings`` / ``QueueLimits`` (sepp.limits; imported here, not at
    the top, so the commands without queue settings — ``sepp worker`` — load no pydantic)."""
    from sepp.limits import QueueLimits, QueueSettings, field_bounds

    model: type[BaseModel] = QueueSettings
    name = path
    if path.startswith("limits."):
        model, name = QueueLimits, path.removeprefix("limits.")
    return field_bounds(model, name)


def max_items(path: str) -> int | None:
    """The most items a list setting may hold (``limits.allowed_encodings``: 64), or None."""
    from sepp.limits import QueueLimits, QueueSettings

    model: type[BaseModel] = QueueLimits if path.startswith("limits.") else QueueSettings
    for meta in model.model_fields[path.removeprefix("limits.")].metadata:
        size: Any = getattr(meta, "max_length", None)
        if size is not None:
            return int(size)
    return None


def parse_where(values: list[str]) -> list[tuple[str, str]]:
    """``--where KEY=VALUE`` flags (``sepp jobs list``) as (key, value)
    terms, in the order given: split at the first ``=``, the key taken literally (no
    ``custom.`` prefix: that is the UI search box's spelling), the value as text. Bounds
    (at most 8 terms, 256 bytes each) are the server's. Raises ``FlagValueError`` for a
    value without ``=``, or with an empty key or value."""
    out: list[tuple[str, str]] = []
    for text in values:
        key, sep, value = text.partition("=")
        if not sep:
            raise FlagValueError("--where", text, "expected KEY=VALUE (a custom-map entry, e.g. user_id=42)")
        if not key.strip():
            raise FlagValueError("--where", text, "the key before = is empty")
        if not value:
            raise FlagValueError("--where", text, "the value after = is empty")
        out.append((key, value))
    return out
