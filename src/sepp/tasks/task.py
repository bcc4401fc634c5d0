"""``Task`` / ``AsyncTask``: a function made a job type, enqueued like a call.

``@app.task(…)`` (``sepp.tasks.app``) makes one. Its ``enqueue(*args, **kwargs)`` has the
function's parameters (``ParamSpec``: mypy and editors check each call) and returns a
``TaskAck`` whose ``result()`` has the function's return type. The arguments are bound
against the signature before anything is sent (a wrong name or count is a ``TypeError``
here) and travel as the JSON payload of ``sepp.tasks._args`` (docs/tasks.md).

``options(…)`` gives the same task with other enqueue options (``TaskOptions``);
``s(…)`` / ``si(…)`` a ``Signature``; ``handler`` is what a ``Worker`` registers for the
task's job type; ``fn`` is the function itself (call it to run it here, now).
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Self, TypeVar

from sepp.request import EnqueueAck, EnqueueRequest, Rejection
from sepp.tasks._args import ArgsCodec
from sepp.tasks.ack import AsyncTaskAck, TaskAck, _AckBase
from sepp.tasks.running import run_inline, run_inline_async, task_handler
from sepp.tasks.signature import Signature, TaskOptions
from sepp.wire import CustomPrimitive
from sepp.worker.registry import is_async_handler

if TYPE_CHECKING:
    from sepp.client import _many
    from sepp.request.outcomes import JobOutcome
    from sepp.worker.job import Job

P = ParamSpec("P")
R = TypeVar("R")
A = TypeVar("A", bound=_AckBase[Any])
_new = object.__new__
_NO_KWARGS: dict[str, Any] = {}  # never written to (encode only reads it)
_ACK_SLOTS = tuple(
    getattr(cls, name).__set__
    for cls, name in (
        (EnqueueAck, "job_id"),
        (EnqueueAck, "deduplicated"),
        (_AckBase, "_codec"),
        (_AckBase, "_client"),
        (_AckBase, "_outcome"),
    )
)


def _acks(results: list[EnqueueAck | Rejection], kind: type[A], codec: ArgsCodec, client: Any) -> list[A | Rejection]:
    """``results`` with every ``EnqueueAck`` as a ``kind`` ack (filled with slot setters: no
    constructor call per job), rejections as they are."""
    set_id, set_dedup, set_codec, set_client, set_outcome = _ACK_SLOTS
    out: list[A | Rejection] = []
    append = out.append
    for item in results:
        if type(item) is Rejection:
            append(item)
            continue
        ack = _new(kind)
        set_id(ack, item.job_id)  # type: ignore[union-attr]
        set_dedup(ack, item.deduplicated)  # type: ignore[union-attr]
        set_codec(ack, codec)
        set_client(ack, client)
        set_outcome(ack, None)
        append(ack)
    return out


class _Requests:
    """The requests of ``enqueue_many``'s calls, every call bound and checked already
    (``_TaskBase._many_requests``): ``items`` holds each request built, or a call's tuple of
    arguments that ``ArgsCodec.fits_positional``, whose payload (``write``) and request
    (``make``) are built as the client reads it — which cannot fail —, so the first batch is
    on its way before the last request is built. Sized: the client's ``progress`` knows the
    total."""

    __slots__ = ("_items", "_make", "_write")

    def __init__(
        self,
        items: list[EnqueueRequest | tuple[Any, ...]],
        write: Callable[[tuple[Any, ...]], bytes],
        make: Callable[[bytes], EnqueueRequest] | None,
    ) -> None:
        self._items = items
        self._write = write
        self._make = make

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[EnqueueRequest]:
        write, make = self._write, self._make
        for item in self._items:
            yield make(write(item)) if type(item) is tuple else item  # type: ignore[misc,arg-type]


class _TaskBase(Generic[P, R]):
    """What ``Task`` and ``AsyncTask`` share: the definition, options, signatures, the handler."""

    def __init__(self, app: Any, fn: Callable[..., Any], job_type: str, options: TaskOptions) -> None:
        #: The function itself (calling it runs it here and now, as a plain call).
        self.fn = fn
        #: The app that defined the task (an ``App`` or ``AsyncApp``: typed ``Any`` here, as
        #: ``sepp.tasks.app`` imports this module).
        self.app: Any = app
        #: The job type its jobs carry and its worker dispatches on.
        self.job_type = job_type
        #: How its jobs are enqueued (``options(…)`` makes a copy with others).
        self.default_options = options
        self._codec = ArgsCodec(fn, job_type)
        #: Whether the function is a coroutine function (run on the worker's loop).
        self.is_async = is_async_handler(fn)
        self._handler: Callable[[Job], Any] | None = None
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", job_type)
        self.__wrapped__ = fn

    @property
    def name(self) -> str:
        """The task's job type (``@app.task(name=...)``, else ``module.qualname``): the same
        as ``job_type``."""
        return self.job_type

    @property
    def queue(self) -> str:
        """The queue its jobs go to."""
        return self.default_options.queue

    def options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        delay: dt.timedelta | float | None = None,
        scheduled_at: dt.datetime | None = None,
        custom: Mapping[str, CustomPrimitive] | None = None,
    ) -> Self:
        """The same task, enqueued with these options (``None``: as before; ``custom``
        entries are added): see ``TaskOptions``. ``delay`` (a ``timedelta`` or seconds)
        counts from each enqueue. Raises ``TypeError`` for a naive ``scheduled_at`` or a
        ``delay`` of another type."""
        changed = self.default_options.merged(
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            idempotency_key=idempotency_key,
            delay=delay,
            scheduled_at=scheduled_at,
            custom=custom,
        )
        other = copy.copy(self)
        other.default_options = changed
        return other

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A ``Signature`` of this call, not sent: arguments bound (missing ones allowed: a
        workflow may pass the previous step's result as the first, so the type checker does
        not check these; ``si`` it does) and converted to JSON. Raises ``TypeError`` /
        ``ValueError`` as ``enqueue`` does."""
        out_args, out_kwargs = self._codec.bind(args, kwargs, partial=True)
        if len(out_args) > len(args):  # binding moved keywords into args: keep them keywords, so a
            names = list(self._codec.signature.parameters)  # result put first cannot shift them
            out_kwargs = {**dict(zip(names[len(args):len(out_args)], out_args[len(args):], strict=True)), **out_kwargs}
            out_args = out_args[:len(args)]
        return Signature(self.job_type, tuple(out_args), out_kwargs, self.default_options,
                         check=self._codec.check_receiving)

    def si(self, *args: P.args, **kwargs: P.kwargs) -> Signature:
        """An immutable ``Signature``: every argument given now (bound as ``enqueue`` binds),
        nothing added by a workflow."""
        out_args, out_kwargs = self._codec.bind(args, kwargs)
        return Signature(self.job_type, tuple(out_args), out_kwargs, self.default_options, immutable=True)

    @property
    def handler(self) -> Callable[[Job], Any]:
        """The ``Worker`` handler of this task (``sepp.tasks.running.task_handler``)."""
        if self._handler is None:
            self._handler = task_handler(self._codec, self.is_async)
        return self._handler

    def request(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueRequest:
        """The ``EnqueueRequest`` of this call (to send with ``Client.enqueue_atomic``, say).
        Raises as ``enqueue`` does."""
        return self._call_request(args, kwargs, self.default_options)

    def _call_request(self, args: tuple[Any, ...], kwargs: dict[str, Any], options: TaskOptions) -> EnqueueRequest:
        """The request of one call: the payload, plus the ``Custom`` parameters' values in the
        custom map (raises as ``enqueue``)."""
        codec = self._codec
        payload = codec.encode(args, kwargs)
        if codec.custom_params:
            options = options.merged(custom=codec.custom_entries(args, kwargs))
        return options.request(self.job_type, payload)

    def _many_requests(self, calls: Iterable[tuple[Any, ...] | Signature]) -> _Requests:
        """Every call's request, all bound before any is sent (``TypeError`` names the call)."""
        items: list[EnqueueRequest | tuple[Any, ...]] = []
        append = items.append
        options, job_type, codec = self.default_options, self.job_type, self._codec
        encode, fits = codec.encode, codec.fits_positional
        plain = not codec.custom_params
        bare = plain and options.bare
        make: Callable[[bytes], EnqueueRequest] | None = None  # options.request_maker, on first use
        for index, call in enumerate(calls):
            if type(call) is tuple:
                try:
                    if bare and fits(call):  # checked now, written when the client reads it
                        if make is None:
                            make = options.request_maker(job_type)
                        append(call)
                    elif plain:
                        append(options.request(job_type, encode(call, _NO_KWARGS)))
                    else:
                        append(self._call_request(call, {}, options))
                except (TypeError, ValueError) as exc:
                    exc.add_note(f"in call {index} of enqueue_many")
                    raise
            elif isinstance(call, Signature):
                if call.job_type != job_type:
                    raise TypeError(
                        f"call {index} of enqueue_many is a signature of {call.job_type!r}, not of {job_type!r}"
                    )
                codec.bind(call.args, dict(call.kwargs))  # complete, as enqueue needs
                if plain:
                    append(call.request())
                else:
                    append(self._call_request(call.args, dict(call.kwargs), call.options))
            else:
                raise TypeError(
                    f"call {index} of enqueue_many must be a tuple of positional arguments or a "
                    f"signature (task.s(...)), not {type(call).__name__}"
                )
        return _Requests(items, codec.write_positional, make)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.job_type} queue={self.queue}>"


class Task(_TaskBase[P, R]):
    """A task of an ``App``: blocking ``enqueue`` / ``enqueue_many`` (see the module docstring)."""

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskAck[R]:
        """Enqueue one call; return once its job is durably stored (or deduplicated).

        Raises:
            TypeError: the arguments do not fit the signature, or a value JSON cannot carry.
            ValueError: NaN or an infinity; a value its annotation refuses
                (``pydantic.ValidationError``).
            RejectedError, TransportError: as ``Client.enqueue``.
        In eager mode (``App.run_inline``) the task runs here instead, before this returns.
        """
        request = self._call_request(args, kwargs, self.default_options)
        inline = self.app._inline
        if inline is not None:
            return self._inline_ack(request, inline)
        ack = self.app._get_client().enqueue(request)
        return TaskAck(ack.job_id, ack.deduplicated, self._codec, self.app._get_client)

    def enqueue_many(
        self,
        calls: Iterable[tuple[Any, ...] | Signature],
        *,
        in_flight: int = 4,
        progress: _many.Progress | None = None,
        on_batch: _many.OnBatch | None = None,
    ) -> list[TaskAck[R] | Rejection]:
        """Enqueue many calls through ``Client.enqueue_many`` (best-effort batches; each job's
        ack or rejection, in order). Each call is a tuple of positional arguments or a
        ``Signature`` of this task (``task.s(…)``, ``task.options(…).s(…)``: keyword arguments
        and per-call options). Every call is bound before anything is sent; raises
        ``TypeError`` / ``ValueError`` (with a note naming the call) as ``enqueue``, then as
        ``Client.enqueue_many``. In eager mode each call runs here, in order."""
        requests = self._many_requests(calls)
        inline = self.app._inline
        if inline is not None:
            return [self._inline_ack(r, inline) for r in requests]
        results = self.app._get_client().enqueue_many(
            requests, in_flight=in_flight, progress=progress, on_batch=on_batch
        )
        return _acks(results, TaskAck, self._codec, self.app._get_client)

    def _inline_ack(self, request: EnqueueRequest, propagate: bool) -> TaskAck[R]:
        options = self.default_options.merged(queue=request.queue, custom=request.custom)
        data = request.payload.data if request.payload is not None else b""
        outcome = run_inline(self.handler, self.is_async, self.job_type, data, options, propagate)
        return TaskAck(outcome.job_id, False, self._codec, self.app._get_client, outcome)


class AsyncTask(_TaskBase[P, R]):
    """A task of an ``AsyncApp``: ``await task.enqueue(…)``, ``await task.enqueue_many(…)``."""

    async def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> AsyncTaskAck[R]:
        """See :meth:`Task.enqueue` (binding and conversion happen before the first ``await``)."""
        request = self._call_request(args, kwargs, self.default_options)
        inline = self.app._inline
        if inline is not None:
            payload = request.payload.data if request.payload is not None else b""
            outcome = await self._run_here(payload, self.default_options.merged(custom=request.custom), inline)
            return AsyncTaskAck(outcome.job_id, False, self._codec, self.app._get_client, outcome)
        client = await self.app._get_client()
        ack = await client.enqueue(request)
        return AsyncTaskAck(ack.job_id, ack.deduplicated, self._codec, self.app._get_client)

    async def enqueue_many(
        self,
        calls: Iterable[tuple[Any, ...] | Signature],
        *,
        in_flight: int = 4,
        progress: _many.Progress | None = None,
        on_batch: _many.OnBatch | None = None,
    ) -> list[AsyncTaskAck[R] | Rejection]:
        """See :meth:`Task.enqueue_many` (through ``AsyncClient.enqueue_many``)."""
        requests = self._many_requests(calls)
        inline = self.app._inline
        if inline is not None:
            out: list[AsyncTaskAck[R] | Rejection] = []
            for request in requests:
                options = self.default_options.merged(queue=request.queue, custom=request.custom)
                data = request.payload.data if request.payload is not None else b""
                outcome = await self._run_here(data, options, inline)
                out.append(AsyncTaskAck(outcome.job_id, False, self._codec, self.app._get_client, outcome))
            return out
        client = await self.app._get_client()
        results = await client.enqueue_many(requests, in_flight=in_flight, progress=progress, on_batch=on_batch)
        return _acks(results, AsyncTaskAck, self._codec, self.app._get_client)

    async def _run_here(self, payload: bytes, options: TaskOptions, propagate: bool) -> JobOutcome:
        return await run_inline_async(self.handler, self.is_async, self.job_type, payload, options, propagate)


__all__ = ["AsyncTask", "Task"]
