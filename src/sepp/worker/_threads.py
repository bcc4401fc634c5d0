"""A small pool of daemon threads for blocking handlers.

Unlike ``ThreadPoolExecutor`` its threads are daemons and never joined at interpreter
exit, so a handler still stuck after the shutdown grace period cannot keep the
process alive (its job has been released by then). Each call runs in a copy of the
caller's ``contextvars`` context, like ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Item = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]", asyncio.AbstractEventLoop,
              contextvars.Context]


def _deliver(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():  # cancelled: the job was abandoned at shutdown
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


class DaemonThreadPool:
    """Up to ``size`` daemon threads, started on demand, named ``<name>-N``."""

    def __init__(self, size: int, name: str = "sepp-handler") -> None:
        if size < 1:
            raise ValueError("a thread pool needs at least one thread")
        self._size = size
        self._name = name
        self._q: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run ``fn(*args)`` in a thread; the future (on the running loop) gets its result.

        Cancelling the future does not stop the thread: the result is dropped.
        Raises ``RuntimeError`` after ``shutdown()``.
        """
        if self._closed:
            raise RuntimeError("the thread pool is shut down")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._idle == 0 and len(self._threads) < self._size:
                name = f"{self._name}-{len(self._threads) + 1}"
                t = threading.Thread(target=self._loop, name=name, daemon=True)
                self._threads.append(t)
                t.start()
            else:
                self._idle -= 1 if self._idle else 0
        self._q.put((fn, args, fut, loop, contextvars.copy_context()))
        return fut

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, args, fut, loop, ctx = item
            value: Any = None
            error: BaseException | None = None
            if not fut.cancelled():
                try:
                    value = ctx.run(fn, *args)
                except BaseException as exc:  # handed to the awaiting coroutine
                    error = exc
                try:
                    loop.call_soon_threadsafe(_deliver, fut, value, error)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    pass
            del item, fn, args, fut, value, error
            with self._lock:
                self._idle += 1

    def shutdown(self) -> None:
        """Ask idle threads to exit; busy ones finish their call first (never joined)."""
        self._closed = True
        for _ in self._threads:
            self._q.put(None)


__all__ = ["DaemonThreadPool"]
