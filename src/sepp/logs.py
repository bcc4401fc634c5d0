"""How sepp's processes log: plain text lines by default, one JSON object
per line with ``log_format = "json"`` (``sepp serve --log-format json``, ``SEPP_LOG_FORMAT``;
``sepp worker --log-format json``).

Every line names the node. A text line reads
``2026-01-01 12:00:00,123 INFO sepp.server [node-a]: serving: …``; a JSON line is
``{"ts": "2026-01-01T12:00:00.123Z", "level": "info", "logger": "sepp.server", "node":
"node-a", "msg": "serving: …", …}`` with ``ts`` RFC 3339 in UTC (milliseconds), ``level`` one
of debug, info, warning, error, critical, then the event's own fields — what the code passes
with ``extra=`` (``queue``, ``job_id``, ``reason``, ``count``, …) — and ``exc`` (the formatted
traceback) when the line carries an exception. Text lines show the same facts in the message.

Secrets are never written: the start line carries a masked config summary
(``sepp.server.startlog``), no log call passes a payload, and the handler
:func:`configure` installs replaces every secret it is given (the admin token, the
PostgreSQL password) by ``***`` in any line, whatever logged it.

The SQLite writer process logs the same way: ``child_settings`` goes to it with its
settings and ``configure_child`` applies them there.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from collections.abc import Iterable
from typing import Any, Literal, TextIO

LogFormat = Literal["text", "json"]
#: The accepted ``log_format`` values.
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

#: Attributes every ``LogRecord`` has: anything else on a record came from ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}

#: What this process configured (``configure``): handed to the SQLite writer process.
_current: dict[str, Any] = {}


def text_format(node: str) -> str:
    """The ``logging`` format of a text line naming ``node``, e.g. ``2026-01-01 12:00:00,123
    INFO sepp.server [node-a]: stopping …`` (a ``%`` in the name is escaped)."""
    return f"%(asctime)s %(levelname)s %(name)s [{node.replace('%', '%%')}]: %(message)s"


def rfc3339(created: float) -> str:
    """``created`` (seconds since the epoch) as RFC 3339 UTC with milliseconds:
    ``2026-01-01T12:00:00.123Z``."""
    when = dt.datetime.fromtimestamp(created, dt.UTC)
    return f"{when:%Y-%m-%dT%H:%M:%S}.{when.microsecond // 1000:03d}Z"


def _jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it: str/int/float/bool/None as they are, lists and dicts of
    them, anything else as its ``str``."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring for the fields).

    Args:
        node: This node's name, the ``node`` field of every line.
    """

    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON (no newline inside: JSON escapes them)."""
        out: dict[str, Any] = {"ts": rfc3339(record.created), "level": record.levelname.lower(),
                               "logger": record.name, "node": self.node, "msg": record.getMessage()}
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in out and not key.startswith("_"):
                out[key] = _jsonable(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False)


class _Redacting(logging.Formatter):
    """Wraps a formatter: every secret in a formatted line becomes ``***``."""

    def __init__(self, inner: logging.Formatter, secrets: Iterable[str]) -> None:
        super().__init__()
        self.inner = inner
        # Longest first, so a secret containing another is replaced whole; JSON lines hold the
        # secrets JSON-escaped, so those forms are replaced too.
        forms = {s for secret in secrets if secret for s in (secret, json.dumps(secret)[1:-1])}
        self.secrets = sorted(forms, key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        line = self.inner.format(record)
        for secret in self.secrets:
            if secret in line:
                line = line.replace(secret, "***")
        return line


def formatter(log_format: LogFormat, node: str, secrets: Iterable[str] = ()) -> logging.Formatter:
    """The formatter of ``log_format`` lines naming ``node``, with ``secrets`` masked.

    Raises ``ValueError`` for a format other than ``text`` or ``json``."""
    if log_format == "json":
        inner: logging.Formatter = JsonFormatter(node)
    elif log_format == "text":
        inner = logging.Formatter(text_format(node))
    else:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    wanted = [s for s in secrets if s]
    return _Redacting(inner, wanted) if wanted else inner


def configure(level: str, log_format: LogFormat, node: str, *, secrets: Iterable[str] = (),
              stream: TextIO | None = None) -> None:
    """Send every log record of this process at ``level`` (debug … error, any case) and up
    to ``stream`` (stderr) in ``log_format``, lines naming ``node`` and with ``secrets``
    masked; replaces any handler already on the root logger (what ``logging.basicConfig``
    did for ``sepp serve`` in earlier versions). Raises ``ValueError`` for an unknown format or
    level."""
    secrets = [s for s in secrets if s]
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter(log_format, node, secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # Python warnings as log lines too (JSON in json mode)
    _current.clear()
    _current.update(level=level.lower(), format=log_format, node=node)


def child_settings() -> dict[str, Any]:
    """What ``configure`` set up in this process (empty when it was never called), for a
    child process of sepp's own to log the same way (``configure_child``). The secrets are
    not included (the child's command line is visible to other users; the SQLite writer
    has none to log)."""
    return dict(_current)


def configure_child(settings: dict[str, Any] | None, default_name: str) -> None:
    """In a child process (the SQLite writer): log like the parent did (``child_settings``,
    the node shown as ``<node>/<default_name>``), or, without settings, text lines at INFO
    naming ``default_name``."""
    settings = settings or {}
    node = settings.get("node")
    name = f"{node}/{default_name}" if node else default_name
    log_format = settings.get("format", "text")
    configure(settings.get("level", "info"), log_format if log_format in LOG_FORMATS else "text", name)


__all__ = ["LOG_FORMATS", "JsonFormatter", "LogFormat", "child_settings", "configure", "configure_child",
           "formatter", "rfc3339", "text_format"]
