"""A job body, ``Payload``: opaque bytes plus an encoding label (frozen, no I/O), and the
cheap way the frozen value types of ``sepp.request`` are filled in (``_fill``, below).

``sepp.request`` re-exports ``Payload`` and ``JSON_ENCODING``; import them from there.
"""

from __future__ import annotations

import dataclasses
import json as _json
from dataclasses import dataclass
from typing import Any

from sepp.api.v1 import common_pb2 as pb
from sepp.request._jsontext import JSON, UNCHECKED, json_text

#: The encoding label :meth:`Payload.json` sets.
JSON_ENCODING = "application/json"

_new = object.__new__


def _check_utf8(what: str, text: str) -> None:
    """Raise ``ValueError`` if ``text`` cannot be encoded as UTF-8 (a lone surrogate)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{what} is not valid UTF-8 (it contains a lone surrogate)") from None


def _check_str(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be str, not {type(value).__name__}")
    _check_utf8(what, value)
    return value


# ``_fill``: how the frozen value types are filled in cheaply. A frozen dataclass's
# ``__setattr__`` is a Python function that raises, so every field of a new instance costs a C
# call (``object.__setattr__`` or a slot setter). A draft class has the same ``__slots__``
# (the same memory layout) and Python's plain ``__setattr__``, so ``draft.field = value`` is
# one specialized store: a new instance is made a draft (``__class__`` assignment, which
# CPython allows between classes of the same layout), its fields are stored, and it is made
# the frozen class again before anyone else sees it. The result is an ordinary instance of the
# frozen class (type, repr, eq, hash and the frozen ``__setattr__`` all unchanged).
_set_class = object.__dict__["__class__"].__set__


@dataclass(frozen=True, slots=True)
class Payload:
    """A job body: opaque bytes plus a free-form encoding label.

    sepp never interprets either; producer and worker agree on the format. The queue
    caps ``data`` at its ``max_payload_bytes`` (1 MiB by default).

    Raises:
        TypeError: ``data`` is not bytes-like (a ``str`` must be encoded first, or use
            :meth:`json`) or ``encoding`` is not ``str``.
    """

    data: bytes = b""
    encoding: str = ""

    def __init__(self, data: bytes = b"", encoding: str = "") -> None:
        # Written out rather than generated (the client's per-job cost): a ``Payload`` is filled
        # in as a ``_PayloadDraft`` (``_fill``), else with slot setters, which cost half of a
        # frozen dataclass's ``object.__setattr__`` per field.
        if type(self) is Payload:
            _set_class(self, _PayloadDraft)
            draft: _PayloadDraft = self  # type: ignore[assignment]
            draft.data = data
            draft.encoding = encoding
            draft.__class__ = Payload  # type: ignore[assignment]
        else:
            _PAYLOAD_SET[0](self, data)
            _PAYLOAD_SET[1](self, encoding)
        if type(data) is bytes and type(encoding) is str and encoding.isascii():
            return  # the common case, checked in three C calls
        self.__post_init__()

    def __post_init__(self) -> None:
        data: object = self.data
        if type(data) is bytes and type(self.encoding) is str and self.encoding.isascii():
            return  # the common case, checked in three C calls
        if isinstance(data, bytearray | memoryview):
            object.__setattr__(self, "data", bytes(data))
        elif not isinstance(data, bytes):
            raise TypeError(f"payload data must be bytes, not {type(data).__name__} "
                            "(encode text first, or use Payload.json(obj))")
        _check_str("payload encoding", self.encoding)

    @classmethod
    def json(cls, obj: Any, *, encoding: str = JSON_ENCODING) -> Payload:
        """Serialize ``obj`` as compact UTF-8 JSON, labelled ``application/json``.

        Raises ``TypeError``/``ValueError`` when ``obj`` is not JSON-serializable
        (NaN and infinities are refused: they are not JSON).
        """
        if UNCHECKED is not None and type(obj) is dict:  # json_text's common case, inlined
            try:
                data = "".join(UNCHECKED(obj, 0)).encode("utf-8")
            except RecursionError:
                data = JSON(obj).encode("utf-8")
        else:
            data = json_text(obj).encode("utf-8")
        if cls is Payload and type(encoding) is str and encoding.isascii():
            draft: _PayloadDraft = _new(_PayloadDraft)  # __init__'s common case, without the call
            draft.data = data
            draft.encoding = encoding
            draft.__class__ = Payload  # type: ignore[assignment]
            return draft  # type: ignore[return-value]
        return cls(data, encoding)

    def decode_json(self) -> Any:
        """Parse ``data`` as UTF-8 JSON (whatever the label says).

        Raises ``ValueError`` (``json.JSONDecodeError`` or ``UnicodeDecodeError``).
        """
        return _json.loads(self.data.decode("utf-8"))

    def __len__(self) -> int:
        """Size of ``data`` in bytes."""
        return len(self.data)

    def to_proto(self) -> pb.Payload:
        """The wire ``Payload``."""
        return pb.Payload(data=self.data, encoding=self.encoding)

    @classmethod
    def from_proto(cls, msg: pb.Payload) -> Payload:
        """Build from a wire ``Payload``."""
        return cls(bytes(msg.data), msg.encoding)


class _PayloadDraft:
    """``Payload``'s layout with a plain ``__setattr__`` (``_fill``)."""

    __slots__ = Payload.__slots__
    data: bytes
    encoding: str


#: The slot setters ``Payload.__init__`` uses for a subclass's instance, in field order
#: (slots=True made new classes).
_PAYLOAD_SET = tuple(Payload.__dict__[f.name].__set__ for f in dataclasses.fields(Payload))
