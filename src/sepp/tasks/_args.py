"""A task's arguments on the wire: bound against the function's signature, carried as JSON.

The payload of a task's job (``application/json``, UTF-8; docs/tasks.md "The payload")::

    {"args": [42], "kwargs": {"locale": "de"}}

``args`` are the positional arguments, ``kwargs`` the keyword ones, as the caller gave them
(after binding; a parameter converted by pydantic may move from ``kwargs`` to ``args``, as
``inspect.BoundArguments`` places it). A worker binds them the same way, so a sender may give
any parameter that can be passed by keyword in either. A worker also accepts a payload
without one of the keys, and an empty payload (no arguments at all), so another language
may send ``{"args": [42]}`` or nothing.

Values: what JSON carries as it is (``str``, ``int`` of any size, finite ``float``, ``bool``,
``None``, lists — a ``tuple`` is sent as a list — and objects with ``str`` keys, nested). A
parameter annotated with anything else (a pydantic model, a dataclass, ``datetime``,
``UUID``, ``Decimal``, an ``Enum``, ``set[int]``, ``tuple[int, int]``, a union holding one…)
is converted by pydantic on both sides: validated and dumped to JSON at enqueue, validated
from the JSON in the worker, so the function receives the annotated type. Anything JSON
cannot carry (NaN, infinities, ``bytes``, a ``set``, a non-``str`` key, another object) is
refused at enqueue with a ``TypeError``/``ValueError`` naming the argument.
"""

from __future__ import annotations

import inspect
import json
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sepp.request._jsontext import UNCHECKED as _UNCHECKED
from sepp.request._jsontext import json_text
from sepp.tasks._argtypes import TypeCheck, bound_refusal, check_json, is_plain, type_check
from sepp.tasks._receiving import PREPEND_MODES, Receives

#: The payload of a call without arguments (what the worker sees most often in benchmarks).
EMPTY_PAYLOAD = b'{"args":[],"kwargs":{}}'

#: ``_fits``' position of a keyword-only parameter: past every positional argument.
_NO_POSITION = 1 << 30
_NO_ARGS: tuple[Any, ...] = ()
_NO_KWARGS: dict[str, Any] = {}
_INF, _NEG_INF = math.inf, -math.inf


class Custom:
    """Marks a task parameter whose value also goes into the job's typed custom map, under the
    parameter's name, searchable in the UI and the admin API: ``user_id: Annotated[int,
    sepp.Custom]``. The value must be a custom-map value (``str``, ``int`` in int64, ``float``,
    ``bool``); it still travels in the payload too, so the function receives it as usual."""


class ArgumentsError(ValueError):
    """A job's payload does not hold arguments the task accepts (malformed JSON, not the
    documented shape, a wrong name or count, a value its annotation refuses). Raised in the
    worker: the job can never succeed, so the task's handler dead-letters it."""


class ArgsCodec:
    """The arguments of one task's function: binding, conversion and the JSON payload.

    ``fn``: the task's function; ``name``: how messages name it. A first parameter annotated
    ``sepp.Job`` is the job (``job_param``), given by the worker and not by the caller.
    Annotations are read with ``typing.get_type_hints`` (so ``from __future__ import
    annotations`` works); one that cannot be resolved yet (a name defined later in the module)
    is resolved on first use.

    Raises ``TypeError`` when a parameter annotated ``sepp.Job`` is not the first one.
    """

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self.fn = fn
        self.name = name
        self._resolved = False
        #: The parameter that receives the ``Job`` (first, annotated ``sepp.Job``), or None.
        self.job_param: str | None = None
        self._signature = inspect.signature(fn)
        #: The signature the caller sees: the function's without the Job parameter.
        self.signature = self._signature
        self._adapters: dict[str, Any] = {}
        self._return_adapter: Any = None
        self._var_positional: str | None = None
        self._var_keyword: str | None = None
        #: Parameters marked ``Custom`` → their defaults (``inspect.Parameter.empty``: none).
        self.custom_params: dict[str, Any] = {}
        #: Parameters with a plain annotation that checks values (``n: int``) → the check
        #: (``sepp.tasks._argtypes``); see also ``_positional_checks``.
        self._checks: dict[str, TypeCheck] = {}
        #: See ``_simple_tables``; nothing fits until the annotations are read.
        self._positional_range = (_NO_POSITION, 0)
        self._positional_checks: tuple[TypeCheck | None, ...] = ()
        try:
            self.resolve()
        except NameError:  # a forward reference defined later in the module: on first use
            pass

    def resolve(self) -> None:
        """Read the annotations (once). Raises ``NameError`` for one that names nothing."""
        if self._resolved:
            return
        from sepp.worker.job import Job

        hints = typing.get_type_hints(self.fn, include_extras=True)
        params = list(self._signature.parameters.values())
        for index, param in enumerate(params):
            annotation = hints.get(param.name, inspect.Parameter.empty)
            if _is_job(annotation, Job):
                if index != 0 or param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                    raise TypeError(
                        f"{self.name}: the parameter {param.name!r} annotated sepp.Job must be the "
                        "first positional parameter (or use sepp.current_job())"
                    )
                self.job_param = param.name
                continue
            if param.kind is param.VAR_POSITIONAL:
                self._var_positional = param.name
            elif param.kind is param.VAR_KEYWORD:
                self._var_keyword = param.name
            if typing.get_origin(annotation) is typing.Annotated and any(
                m is Custom or isinstance(m, Custom) for m in typing.get_args(annotation)[1:]
            ):
                self.custom_params[param.name] = param.default
            if not is_plain(annotation):
                self._adapters[param.name] = annotation
            elif (check := type_check(annotation)) is not None:
                self._checks[param.name] = check
        if self.job_param is not None:
            self.signature = self._signature.replace(parameters=params[1:])
        returns = hints.get("return", inspect.Parameter.empty)
        if not is_plain(returns):
            self._return_adapter = returns
        if self._adapters or self._return_adapter is not None:
            from pydantic import TypeAdapter

            self._adapters = {name: TypeAdapter(a) for name, a in self._adapters.items()}
            if self._return_adapter is not None:
                try:
                    self._return_adapter = TypeAdapter(self._return_adapter)
                except Exception:  # a return type pydantic has no schema for: passed as it is
                    self._return_adapter = None
        self._simple_tables()
        self._resolved = True

    def _simple_tables(self) -> None:
        """The tables of ``_fits``: set when every parameter is positional-or-keyword or
        keyword-only and none is converted (``_simple``)."""
        params = list(self.signature.parameters.values())
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        self._simple = not self._adapters and all(p.kind in kinds for p in params)
        positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        #: Parameter name → its position (keyword-only ones: past every position).
        self._index = {p.name: positional.index(p.name) if p.name in positional else _NO_POSITION for p in params}
        self._names = positional
        self._required = [(p.name, self._index[p.name]) for p in params if p.default is inspect.Parameter.empty]
        #: ``(least, most)`` positional arguments a call with no keyword ones may have (the
        #: fastest check of ``_fits``); ``(1 << 30, 0)`` — nothing fits — when it is not simple
        #: or a keyword-only parameter is required.
        self._positional_range = (len(self._required), len(positional))
        #: The check of each positional parameter, in order (``()`` when none has one).
        self._positional_checks = tuple(self._checks.get(name) for name in positional) if self._checks else ()
        if not self._simple or any(at == _NO_POSITION for _name, at in self._required):
            self._positional_range = (_NO_POSITION, 0)

    def _fits(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        """Whether ``args`` / ``kwargs`` bind to a simple signature (``_simple``): as
        ``Signature.bind`` decides, without building ``BoundArguments`` (a call that does not
        fit goes through ``bind``, which says why)."""
        n = len(args)
        if n > len(self._names):
            return False
        if kwargs:
            index = self._index
            for key in kwargs:
                at = index.get(key)
                if at is None or at < n:
                    return False
        for name, at in self._required:
            if at >= n and name not in kwargs:
                return False
        return True

    # ------------------------------------------------------------------ producer side

    def bind(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], *, partial: bool = False
    ) -> tuple[list[Any], dict[str, Any]]:
        """``(args, kwargs)`` bound against the signature, converted to JSON-ready values.

        Raises ``TypeError`` for a wrong argument name or count (``partial``: missing ones
        allowed) or a value JSON cannot carry, ``ValueError`` for NaN / an infinity and
        ``pydantic.ValidationError`` (a ``ValueError``) for a value its annotation refuses."""
        if not self._resolved:
            self.resolve()
        least, most = self._positional_range
        if not partial and ((not kwargs and least <= len(args) <= most) or (self._simple and self._fits(args, kwargs))):
            # the common case, without inspect
            names = self._names
            for i, value in enumerate(args):
                kind = type(value)
                if kind is not int and kind is not str and kind is not bool and value is not None:
                    check_json(value, f"{self.name}(): argument {names[i]!r}")
            for key, value in kwargs.items():
                kind = type(value)
                if kind is not int and kind is not str and kind is not bool and value is not None:
                    check_json(value, f"{self.name}(): argument {key!r}")
            if self._checks:
                why = self._sent_refusal(args, kwargs)
                if why is not None:
                    raise TypeError(f"{self.name}(): {why}")
            return list(args), kwargs
        try:
            bound = (self.signature.bind_partial if partial else self.signature.bind)(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {self._unexpected(kwargs) or exc}") from None
        if self._adapters:
            arguments = bound.arguments
            for name, adapter in self._adapters.items():
                if name in arguments:
                    arguments[name] = self._dump(name, adapter, arguments[name])
        for key, value in bound.arguments.items():
            check_json(value, f"{self.name}(): argument {key!r}")
        if self._checks:
            why = bound_refusal(self._checks, bound.arguments, self._var_positional, self._var_keyword)
            if why is not None:
                raise TypeError(f"{self.name}(): {why}")
        return list(bound.args), bound.kwargs

    def _unexpected(self, kwargs: dict[str, Any]) -> str | None:
        """Python's own complaint about a keyword the function has no parameter for (it is
        what a call of the function itself reports first, before a missing argument), or None."""
        if self._var_keyword:
            return None
        params = self.signature.parameters
        for key in kwargs:
            param = params.get(key)
            if param is None or param.kind is param.POSITIONAL_ONLY:
                return f"got an unexpected keyword argument {key!r}"
        return None

    def _dump(self, name: str, adapter: Any, value: Any) -> Any:
        if name == self._var_positional:
            return tuple(adapter.dump_python(adapter.validate_python(v), mode="json") for v in value)
        if name == self._var_keyword:
            return {k: adapter.dump_python(adapter.validate_python(v), mode="json") for k, v in value.items()}
        return adapter.dump_python(adapter.validate_python(value), mode="json")

    def encode(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        """The payload of a call with ``args`` / ``kwargs`` (raises as :meth:`bind`)."""
        if not kwargs and self.fits_positional(args):
            return self.write_positional(args)
        if not args and not kwargs and not self.signature.parameters:
            return EMPTY_PAYLOAD
        out_args, out_kwargs = self.bind(args, kwargs)
        return payload_bytes(out_args, out_kwargs)

    def fits_positional(self, args: tuple[Any, ...]) -> bool:
        """Whether ``args`` alone (no keyword arguments) is the commonest call, which
        :meth:`write_positional` writes without failing: as many as the signature takes, a
        simple signature (no converted parameter, no ``*args`` / ``**kwargs``), every value a
        ``str`` (valid UTF-8), ``int``, finite ``float``, ``bool`` or ``None``. False says
        nothing about the call: :meth:`encode` binds it the whole way."""
        least, most = self._positional_range
        if not least <= len(args) <= most or _UNCHECKED is None:
            return False
        if self._positional_checks:  # n: int takes an int only (a plain str, int… here: no depth)
            for value, check in zip(args, self._positional_checks, strict=False):
                if check is not None and type(value) not in check.types:
                    return False
        for value in args:
            kind = type(value)
            if kind is int or kind is bool or value is None:
                continue
            if kind is str:
                if not value.isascii() and not _is_utf8(value):
                    return False
            elif kind is not float or not _NEG_INF < value < _INF:  # NaN or an infinity fails
                return False
        return True

    def write_positional(self, args: tuple[Any, ...]) -> bytes:
        """The payload of the call ``args`` that :meth:`fits_positional`: what :meth:`encode`
        writes, without binding's intermediate list and dict."""
        return f'{{"args":{"".join(_UNCHECKED(args, 0))},"kwargs":{{}}}}'.encode()

    def custom_entries(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The custom-map entries of a call (its ``Custom`` parameters' values, by name; one not
        given and without default is left out). Call after :meth:`bind` accepted the call."""
        out: dict[str, Any] = {}
        index = self._index
        for name, default in self.custom_params.items():
            at = index.get(name, _NO_POSITION)
            value = args[at] if at < len(args) else kwargs.get(name, default)
            if value is not inspect.Parameter.empty:
                out[name] = value
        return out

    # ------------------------------------------------------------------ worker side

    def decode(self, data: bytes) -> tuple[Sequence[Any], dict[str, Any]]:
        """The call's ``(args, kwargs)`` from a job's payload, converted to the annotated
        types. Raises ``ArgumentsError`` for a payload the task cannot take."""
        if data.startswith(_ARGS_HEAD) and data.endswith(_ARGS_TAIL):
            # as encode writes a positional call: only the list is parsed (anything else the
            # scanner or the count does not accept goes the whole way, which says why)
            try:
                text = data.decode("utf-8")
                args, end = _SCAN(text, _ARGS_AT)
            except (StopIteration, ValueError):
                pass
            else:
                least, most = self._positional_range
                if end == len(text) - _TAIL_LEN and least <= len(args) <= most:
                    if self._positional_checks:
                        self._check_sent(args, _NO_KWARGS)
                    return args, {}
        if not self._resolved:
            self.resolve()
        if data == EMPTY_PAYLOAD or not data:
            if self.signature.parameters:
                return self._bind_sent((), {})
            return (), {}
        try:
            obj = _parse(data)
        except ValueError as exc:
            raise ArgumentsError(f"{self.name}: the payload is not JSON: {exc}") from None
        if type(obj) is not dict:
            raise ArgumentsError(
                f"{self.name}: the payload must be a JSON object "
                f'{{"args": [...], "kwargs": {{...}}}}, not {type(obj).__name__}'
            )
        args = obj.get("args", _NO_ARGS)
        kwargs = obj.get("kwargs", _NO_KWARGS)
        if (type(args) is not list and args is not _NO_ARGS) or type(kwargs) is not dict:
            raise ArgumentsError(f'{self.name}: the payload\'s "args" must be a list and "kwargs" an object')
        if "prepend" in obj:
            mode = obj["prepend"]
            if mode not in PREPEND_MODES:
                raise ArgumentsError(f'{self.name}: the payload\'s "prepend" must be "result" or "results", '
                                     f"not {repr(mode)[:64]}")
            raise Receives(mode, args, kwargs)
        least, most = self._positional_range
        if (not kwargs and least <= len(args) <= most) or (self._simple and self._fits(args, kwargs)):
            if self._checks:
                self._check_sent(args, kwargs)
            return args, kwargs  # the common case: nothing to convert
        return self._bind_sent(args, kwargs)

    def bind_received(self, first: Any, args: Sequence[Any],
                      kwargs: dict[str, Any]) -> tuple[Sequence[Any], dict[str, Any]]:
        """The call ``(first, *args, **kwargs)`` — ``first`` what the job's dependencies
        returned (``Receives``) — bound and converted as ``decode`` does. Raises
        ``ArgumentsError`` when the function cannot take it."""
        return self._bind_sent([first, *args], kwargs)

    def check_receiving(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Raise ``TypeError`` when the call ``(args, kwargs)`` (already bound partially) would
        not bind with one more argument put first — a workflow step that receives its
        dependencies' results (``Signature.request_receiving``). Counts and names only: the
        value is not known before the step runs."""
        try:
            self.signature.bind(None, *args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): as a workflow step it receives the previous result as its first "
                            f"argument, and then: {exc} (use .si() for a step that takes no result)") from None

    def _bind_sent(self, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Sequence[Any], dict[str, Any]]:
        self.resolve()
        if self._simple and self._fits(args, kwargs):
            if self._checks:
                self._check_sent(args, kwargs)
            return args, kwargs
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentsError(f"{self.name}(): {exc}") from None
        if self._checks:
            why = bound_refusal(self._checks, bound.arguments, self._var_positional, self._var_keyword)
            if why is not None:
                raise ArgumentsError(f"{self.name}(): {why}")
        if self._adapters:
            arguments = bound.arguments
            for name, adapter in self._adapters.items():
                if name in arguments:
                    try:
                        arguments[name] = self._load(name, adapter, arguments[name])
                    except ValueError as exc:  # pydantic.ValidationError
                        raise ArgumentsError(f"{self.name}(): argument {name!r}: {exc}") from None
        return bound.args, bound.kwargs

    def _check_sent(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise ``ArgumentsError`` when a value of a call that fits the simple signature does
        not fit its parameter's plain annotation (``sepp.tasks._argtypes``)."""
        why = self._sent_refusal(args, kwargs)
        if why is not None:
            raise ArgumentsError(f"{self.name}(): {why}")

    def _sent_refusal(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """Why a value of a call that fits the simple signature (``_fits``) does not fit its
        parameter's plain annotation (``argument 'n' must be int, not str``), or ``None``."""
        for value, check, name in zip(args, self._positional_checks, self._names, strict=False):
            if check is not None and (type(value) not in check.types or check.deep):
                why = check.refusal(value, f"argument {name!r}")
                if why is not None:
                    return why
        if kwargs:
            checks = self._checks
            for key, value in kwargs.items():
                check = checks.get(key)
                if check is not None and (type(value) not in check.types or check.deep):
                    why = check.refusal(value, f"argument {key!r}")
                    if why is not None:
                        return why
        return None

    def _load(self, name: str, adapter: Any, value: Any) -> Any:
        if name == self._var_positional:
            return tuple(adapter.validate_python(v) for v in value)
        if name == self._var_keyword:
            return {k: adapter.validate_python(v) for k, v in value.items()}
        return adapter.validate_python(value)

    # ------------------------------------------------------------------ results

    @property
    def converts_result(self) -> bool:
        """Whether return values are converted by pydantic (``dump_result``/``load_result``)."""
        self.resolve()
        return self._return_adapter is not None

    def dump_result(self, value: Any) -> Any:
        """A return value as the job's result: converted to JSON-ready values by pydantic when
        the return annotation is not plain JSON (a model, a dataclass…), else as it is."""
        adapter = self._return_adapter
        if adapter is None or value is None or isinstance(value, bytes):
            return value
        return adapter.dump_python(value, mode="json")

    def load_result(self, value: Any) -> Any:
        """A result read back by the producer, converted to the return annotation (see
        :meth:`dump_result`). Raises ``pydantic.ValidationError`` when it does not fit."""
        self.resolve()
        adapter = self._return_adapter
        if adapter is None or value is None:
            return value
        return adapter.validate_python(value)


_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
#: What ``encode`` writes around a positional call's arguments (``decode``'s fast path).
_ARGS_HEAD, _ARGS_TAIL = b'{"args":[', b'],"kwargs":{}}'
#: Where the list starts in the text, and the length of what follows it.
_ARGS_AT, _TAIL_LEN = len(_ARGS_HEAD) - 1, len(_ARGS_TAIL) - 1


def _parse(data: bytes) -> Any:
    """``json.loads(data)`` (UTF-8), through the C scanner directly when the text is one
    value with nothing around it (a task payload as written): a third of ``loads``' cost.
    Raises ``ValueError`` (``JSONDecodeError`` / ``UnicodeDecodeError``)."""
    text = data.decode("utf-8")
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)  # raises, or copes with what is around the value
    if end != len(text):
        return json.loads(text)
    return value


def payload_bytes(args: list[Any], kwargs: Mapping[str, Any], prepend: str | None = None) -> bytes:
    """``{"args": args, "kwargs": kwargs}`` as compact UTF-8 JSON (values already checked),
    with ``Payload.json``'s encoder (``sepp.request._jsontext``); with ``prepend`` (one of
    ``PREPEND_MODES``) also ``"prepend": prepend``."""
    body: dict[str, Any] = {"args": args, "kwargs": kwargs}
    if prepend is not None:
        body["prepend"] = prepend
    return json_text(body).encode("utf-8")


def _is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_job(annotation: Any, job_class: type) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return isinstance(annotation, type) and issubclass(annotation, job_class)


__all__ = ["EMPTY_PAYLOAD", "ArgsCodec", "ArgumentsError", "check_json", "is_plain", "payload_bytes"]
