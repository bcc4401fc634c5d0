"""A task argument's JSON types (docs/tasks.md "Arguments and types"): which annotations are
plain JSON (``is_plain``: passed through, not converted by pydantic), which values JSON can
carry (``check_json``), and the check of a value against a plain annotation (``type_check``):
``n: int`` takes an ``int`` and nothing else, in the producer (``TypeError`` at
enqueue) and in the worker (the job is dead-lettered), so a value another language or the CLI
sent that the annotation refuses never reaches the function.

What each plain annotation accepts (by the value's type, as JSON decodes it):

* ``str``, ``bool``, ``None``: exactly that; ``int``: an ``int`` but not a ``bool`` (JSON's
  ``true`` is no number); ``float``: a ``float`` or an ``int`` (``1`` is a valid float in JSON),
  not a ``bool``;
* ``list[X]`` (and a bare ``list``): a list (a ``tuple`` in the producer), each item as ``X``;
  ``dict[str, X]`` / ``Mapping[str, X]`` (and a bare ``dict``): an object, each value as ``X``;
* a union of those (``X | None``, ``Optional[X]``): any member's; ``Annotated[X, …]``: ``X``'s.

``Any``, ``object``, no annotation and ``Literal[…]`` check nothing; annotations pydantic
converts are not checked here (pydantic validates them).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Annotations passed through as they are (JSON carries them; nothing to convert).
_PLAIN: frozenset[Any] = frozenset(
    {int, str, float, bool, type(None), None, Any, object, list, dict, inspect.Parameter.empty}
)
#: Generic origins whose arguments decide (``list[int]`` is plain, ``list[UUID]`` is not).
_PLAIN_ORIGINS: frozenset[Any] = frozenset({list, dict, typing.Union, types.UnionType, Mapping})

_NONE = type(None)
#: The plain scalar annotations → the value types each accepts (by type identity).
_SCALARS: dict[Any, tuple[frozenset[type], str]] = {
    str: (frozenset({str}), "str"),
    int: (frozenset({int}), "int"),
    float: (frozenset({float, int}), "float"),
    bool: (frozenset({bool}), "bool"),
    None: (frozenset({_NONE}), "None"),
    _NONE: (frozenset({_NONE}), "None"),
}


@dataclass(frozen=True, slots=True)
class TypeCheck:
    """What one plain annotation accepts. ``types``: the value types accepted by identity (the
    fast check, ``type(value) in types``); ``expected``: how messages name it (``int | None``);
    ``items`` / ``values``: the check of a list's items / an object's values (``None``: any);
    ``deep``: set from those, not given."""

    types: frozenset[type]
    expected: str
    items: TypeCheck | None = None
    values: TypeCheck | None = None
    #: Whether a fitting type is not enough (items or values to check too).
    deep: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "deep", self.items is not None or self.values is not None)

    def refusal(self, value: Any, where: str) -> str | None:
        """Why ``value`` does not fit (``"{where} must be int, not str"``), or ``None`` when it
        does. ``where`` names the value (``argument 'n'``)."""
        kind = type(value)
        if kind not in self.types and not self._fits_subclass(value):
            return f"{where} must be {self.expected}, not {_type_name(value)}"
        if self.items is not None and (kind is list or kind is tuple or isinstance(value, list | tuple)):
            for i, item in enumerate(value):
                why = self.items.refusal(item, f"{where}[{i}]")
                if why is not None:
                    return why
        if self.values is not None and isinstance(value, dict):
            for key, item in value.items():
                why = self.values.refusal(item, f"{where}[{key!r}]")
                if why is not None:
                    return why
        return None

    def _fits_subclass(self, value: Any) -> bool:
        """Whether a value of a subclass (an ``IntEnum`` for ``int``, …) fits: JSON writes it as
        its base value. ``bool`` is never an ``int`` or a ``float`` here."""
        if isinstance(value, bool):
            return bool in self.types
        return any(t is not _NONE and isinstance(value, t) for t in self.types)


def type_check(annotation: Any) -> TypeCheck | None:
    """The check of a plain annotation (see the module docstring), or ``None`` when it checks
    nothing (``Any``, ``object``, no annotation, ``Literal``, a union holding one of those)."""
    scalar = _SCALARS.get(annotation) if _hashable(annotation) else None
    if scalar is not None:
        return TypeCheck(*scalar)
    if annotation is list:
        return TypeCheck(frozenset({list, tuple}), "list")
    if annotation is dict or annotation is Mapping:
        return TypeCheck(frozenset({dict}), "dict")
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_check(args[0])
    if origin is list:
        return TypeCheck(frozenset({list, tuple}), f"list[{_name(args[0])}]", items=type_check(args[0]))
    if origin is dict or origin is Mapping:
        inner = args[1] if len(args) == 2 else Any
        return TypeCheck(frozenset({dict}), f"dict[str, {_name(inner)}]", values=type_check(inner))
    if origin is typing.Union or origin is types.UnionType:
        members = [type_check(a) for a in args]
        if any(m is None for m in members):
            return None
        checks = typing.cast(list[TypeCheck], members)
        containers = [m for m in checks if m.items is not None or m.values is not None]
        items = containers[0].items if len(containers) == 1 else None
        values = containers[0].values if len(containers) == 1 else None
        accepted = frozenset().union(*(m.types for m in checks))
        return TypeCheck(accepted, " | ".join(m.expected for m in checks), items=items, values=values)
    return None


def _name(annotation: Any) -> str:
    check = type_check(annotation)
    return check.expected if check is not None else getattr(annotation, "__name__", repr(annotation))


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def is_plain(annotation: Any) -> bool:
    """Whether values of ``annotation`` travel as JSON without conversion (see the module
    docstring); ``Annotated[X, …]`` is judged by ``X``, ``Literal`` of JSON values is plain."""
    if annotation in _PLAIN if _hashable(annotation) else False:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return is_plain(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return all(type(v) in (int, str, bool, type(None)) for v in typing.get_args(annotation))
    if origin in _PLAIN_ORIGINS:
        args = typing.get_args(annotation)
        if origin in (dict, Mapping) and args and args[0] is not str:
            return False
        return all(is_plain(a) for a in args)
    return False


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def check_json(value: Any, where: str) -> None:
    """Refuse a value JSON cannot carry exactly: ``TypeError`` for a type JSON has no form for
    (``bytes``, ``set``, another object) or a non-``str`` object key, ``ValueError`` for NaN or
    an infinity. ``where`` names the value in the message (``argument 'x'[2]``)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return
    if kind is float:
        if not math.isfinite(value):
            raise ValueError(f"{where} is {value!r}, which JSON cannot carry (NaN and infinities are not JSON)")
        return
    if kind is list or kind is tuple:
        for i, item in enumerate(value):
            check_json(item, f"{where}[{i}]")
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(
                    f"{where} has the key {key!r} ({type(key).__name__}): JSON object keys are "
                    "text, so it would come back as a different key; use str keys"
                )
            check_json(item, f"{where}[{key!r}]")
        return
    if isinstance(value, bool | int | str):  # subclasses (an IntEnum…) JSON writes as their base value
        return
    if isinstance(value, float):
        check_json(float(value), where)
        return
    hint = ""
    if isinstance(value, bytes | bytearray | memoryview):
        hint = " (send text, e.g. base64, or annotate the parameter as bytes so pydantic converts it)"
    elif isinstance(value, set | frozenset):
        hint = " (send a list, or annotate the parameter as set[...] so pydantic converts it)"
    elif dataclasses.is_dataclass(value) or hasattr(value, "model_dump") or isinstance(value, enum.Enum):
        hint = " (annotate the parameter with its type so pydantic converts it)"
    raise TypeError(f"{where} is a {kind.__name__}, which JSON cannot carry{hint}")


def bound_refusal(checks: Mapping[str, TypeCheck], arguments: Mapping[str, Any], var_positional: str | None,
                  var_keyword: str | None) -> str | None:
    """Why a bound argument (``BoundArguments.arguments``) does not fit its parameter's check
    (``checks``: parameter name → check), or ``None``; the values of ``*args`` / ``**kwargs``
    (the parameters named ``var_positional`` / ``var_keyword``) are checked one by one."""
    for name, check in checks.items():
        if name not in arguments:
            continue
        value = arguments[name]
        if name == var_positional:
            values = [(f"argument {name!r}[{i}]", v) for i, v in enumerate(value)]
        elif name == var_keyword:
            values = [(f"argument {key!r}", v) for key, v in value.items()]
        else:
            values = [(f"argument {name!r}", value)]
        for where, v in values:
            why = check.refusal(v, where)
            if why is not None:
                return why
    return None


__all__ = ["TypeCheck", "bound_refusal", "check_json", "is_plain", "type_check"]
