"""Handlers by job type: ``job_type → function(job)``.

A handler is ``async def f(job)`` (run on the worker's event loop) or a plain
``def f(job)`` (run in the worker's thread pool, so it may block). Returning means success
(ack), and the value returned is the job's result, stored with the ack: ``None`` none,
``bytes`` as ``application/octet-stream``, a ``sepp.Result`` as given, anything else as JSON
(``sepp.job_result``; one JSON cannot encode dead-letters the job at once, one over the
queue's ``max_result_bytes`` fails the attempt instead).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from sepp.worker.job import Job

#: A handler: ``(job) -> result`` or ``async (job) -> result`` (what it returns is the job's
#: result; ``None`` for none).
Handler = Callable[["Job"], Awaitable[Any]] | Callable[["Job"], Any]
H = TypeVar("H", bound=Callable[..., Any])


def is_async_handler(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a coroutine function (or an object whose ``__call__`` is one)."""
    call = type(fn).__call__ if not inspect.isroutine(fn) else None
    return inspect.iscoroutinefunction(fn) or (call is not None and inspect.iscoroutinefunction(call))


@dataclass(frozen=True, slots=True)
class Registered:
    """One registered handler and whether it runs on the loop (``is_async``) or in a thread."""

    job_type: str
    fn: Handler
    is_async: bool


class HandlerRegistry:
    """``job_type → Registered``. Registering a type twice is an error (``ValueError``)."""

    def __init__(self) -> None:
        self._handlers: dict[str, Registered] = {}

    def register(self, job_type: str, fn: H) -> H:
        """Register ``fn`` for ``job_type`` and return it unchanged.

        Raises ``TypeError`` when ``job_type`` is not a non-empty ``str`` or ``fn`` is not
        callable, and ``ValueError`` when ``job_type`` already has a handler.
        """
        if not isinstance(job_type, str) or not job_type:
            raise TypeError(f"job_type must be a non-empty str, not {job_type!r}")
        if not callable(fn):
            raise TypeError(f"the handler for {job_type!r} is not callable: {fn!r}")
        if job_type in self._handlers:
            raise ValueError(f"job type {job_type!r} already has a handler: {self._handlers[job_type].fn!r}")
        self._handlers[job_type] = Registered(job_type, fn, is_async_handler(fn))
        return fn

    def handler(self, job_type: str) -> Callable[[H], H]:
        """Decorator form of :meth:`register`: ``@registry.handler("welcome")``."""

        def decorate(fn: H) -> H:
            return self.register(job_type, fn)

        return decorate

    def get(self, job_type: str) -> Registered | None:
        """The handler of ``job_type``, or ``None``."""
        return self._handlers.get(job_type)

    def __contains__(self, job_type: object) -> bool:
        return job_type in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._handlers))

    def __len__(self) -> int:
        return len(self._handlers)


__all__ = ["Handler", "HandlerRegistry", "Registered", "is_async_handler"]
