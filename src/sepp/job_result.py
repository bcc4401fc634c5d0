"""A job's result: what its handler returned, stored with the ack that completed it.

The rules, in both directions (the worker writes a result, a reader decodes one):

* ``result_of(value)`` — a handler's return value → the ``Result`` to store, or ``None``:
  ``None`` → no result; ``bytes`` (also ``bytearray`` / ``memoryview``) → the bytes,
  encoding ``application/octet-stream``; a ``Result`` → as given (a ``sepp.Payload`` too, as
  its data and encoding); anything else → compact UTF-8 JSON, ``application/json``, with the
  errors ``json.dumps`` raises for a value JSON cannot encode (``TypeError``, ``ValueError``
  for NaN / infinities or a circular reference, ``RecursionError``).
* ``result_value(data, encoding)`` — a stored result → the value a caller gets back: JSON
  decoded for ``application/json``, ``bytes`` for ``application/octet-stream``, else the
  ``Result`` itself.

Sizes are bytes. Imports no pydantic and no generated code (the Worker runtime uses it).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

#: The encoding label of a handler that returned ``bytes``.
OCTET_STREAM = "application/octet-stream"
#: The encoding label of a handler that returned a JSON-encodable value.
JSON_ENCODING = "application/json"
#: Longest encoding label of a ``Result``, UTF-8 bytes: the server's default
#: ``limits.max_encoding_bytes`` (a longer one would be refused with the ack).
MAX_RESULT_ENCODING_BYTES = 128

#: ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)``, made once:
#: the text ``Payload.json`` writes.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ENCODE = _ENCODER.encode

#: The C encoder ``_ENCODE`` builds on each call for a dict or a list (``JSONEncoder.iterencode``
#: with ``_one_shot``), built once (``_c_encoder``): the same settings, so the same text, but
#: without the circular-reference marks (``markers=None``). Without them it holds no state
#: between calls — no lock, any thread, re-entrant — and a value that contains itself runs
#: into ``RecursionError`` instead of ``ValueError("Circular reference detected")``:
#: ``result_parts`` then encodes it again with ``_ENCODE``, which raises the usual error.
def _c_encoder() -> Any:
    """The C encoder as ``JSONEncoder.iterencode`` builds it for ``_ENCODER`` but without
    markers, or ``None`` when this Python has none, builds it otherwise, or it writes a probe
    differently."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        encoder = make(None, _ENCODER.default, json.encoder.encode_basestring, None, _ENCODER.key_separator,
                       _ENCODER.item_separator, False, False, False)
        probe = {"a": [1, 2.5, None, True, "é\u2603\x00"], "b": {}}
        if "".join(encoder(probe, 0)) != _ENCODE(probe):
            return None
    except Exception:
        return None
    return encoder


_C_ENCODE: Any = _c_encoder()


@dataclass(frozen=True, slots=True)
class Result:
    """A job result with an encoding label of your choosing: return one from a handler to
    store ``data`` as it is, labelled ``encoding`` (usually a MIME type).

    Args:
        data: The result's bytes (``bytearray`` / ``memoryview`` are copied to ``bytes``);
            at most the queue's ``max_result_bytes`` (1 MiB by default) when it is stored.
        encoding: Its label: UTF-8 text of at most 128 bytes, without NUL (U+0000).

    Raises ``TypeError`` when ``data`` is not bytes-like or ``encoding`` not a ``str``, and
    ``ValueError`` for a label that is too long, holds a NUL or is not valid UTF-8.
    """

    data: bytes
    encoding: str

    def __post_init__(self) -> None:
        data: object = self.data
        if isinstance(data, bytearray | memoryview):
            object.__setattr__(self, "data", bytes(data))
        elif not isinstance(data, bytes):
            raise TypeError(f"result data must be bytes, not {type(data).__name__} (encode text first, or return "
                            "the value itself to store it as JSON)")
        encoding: object = self.encoding
        if not isinstance(encoding, str):
            raise TypeError(f"result encoding must be str, not {type(encoding).__name__}")
        try:
            size = len(encoding.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError("result encoding is not valid UTF-8 (it contains a lone surrogate)") from None
        if size > MAX_RESULT_ENCODING_BYTES:
            raise ValueError(f"result encoding is {size} bytes long; a label is at most {MAX_RESULT_ENCODING_BYTES}")
        if "\x00" in encoding:
            raise ValueError("result encoding contains a NUL character (U+0000)")

    def __len__(self) -> int:
        """Size of ``data`` in bytes."""
        return len(self.data)


def result_of(value: Any) -> Result | None:
    """The result a handler's return ``value`` becomes (the module docstring's rules), or
    ``None`` for no result.

    Raises what encoding ``value`` as JSON raises: ``TypeError`` (a type JSON has no form
    for), ``ValueError`` (NaN or an infinity, a circular reference), ``RecursionError``
    (nested too deep)."""
    if value is None:
        return None
    kind = type(value)
    if kind is bytes:
        return _labelled(value, OCTET_STREAM)
    if kind is Result:
        return value  # type: ignore[no-any-return]
    if isinstance(value, bytes | bytearray | memoryview):
        return _labelled(bytes(value), OCTET_STREAM)
    if isinstance(value, Result):
        return value
    if _is_payload(value):
        return Result(value.data, value.encoding)
    return _labelled(_ENCODE(value).encode("utf-8"), JSON_ENCODING)


def result_parts(value: Any) -> tuple[bytes, str] | None:
    """``result_of(value)`` as its ``(data, encoding)`` — bytes and label — or ``None`` for
    no result, with the same rules and errors; a ``dict``, ``list`` or ``bytes`` (what
    handlers return most) without building a ``Result`` on the way (the Worker calls this
    once per job that returned something)."""
    kind = type(value)
    if kind is dict or kind is list:
        if _C_ENCODE is not None:  # _ENCODE's text without building its encoder per call
            try:
                return "".join(_C_ENCODE(value, 0)).encode("utf-8"), JSON_ENCODING
            except RecursionError:
                pass  # nested too deep, or a circular reference: _ENCODE raises which one it is
        return _ENCODE(value).encode("utf-8"), JSON_ENCODING
    if kind is bytes:
        return value, OCTET_STREAM
    result = result_of(value)
    return None if result is None else (result.data, result.encoding)


_new = object.__new__
_set = object.__setattr__


def _labelled(data: bytes, encoding: str) -> Result:
    """``Result(data, encoding)`` for ``bytes`` ``data`` and one of this module's constant
    labels, which ``Result.__post_init__`` would only check again."""
    result = _new(Result)
    _set(result, "data", data)
    _set(result, "encoding", encoding)
    return result  # type: ignore[no-any-return]


def _is_payload(value: Any) -> bool:
    """Whether ``value`` is a ``sepp.Payload``. Looked up among the loaded modules, not
    imported: ``sepp.request`` loads pydantic, which the Worker runtime does without, and a
    ``Payload`` exists only once its module was loaded."""
    request = sys.modules.get("sepp.request")
    return request is not None and isinstance(value, request.Payload)


def result_value(data: bytes, encoding: str) -> Any:
    """A stored result as its reader gets it back: ``application/json`` decoded (``json.loads``
    of the UTF-8 text), ``application/octet-stream`` as ``bytes``, any other label as a
    ``Result``. Raises ``ValueError`` (``json.JSONDecodeError`` / ``UnicodeDecodeError``) for a
    JSON-labelled result that does not parse."""
    if encoding == JSON_ENCODING:
        return json.loads(data.decode("utf-8"))
    if encoding == OCTET_STREAM:
        return bytes(data)
    return Result(bytes(data), encoding)


__all__ = ["JSON_ENCODING", "MAX_RESULT_ENCODING_BYTES", "OCTET_STREAM", "Result", "result_of", "result_parts",
           "result_value"]
