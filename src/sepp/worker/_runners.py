"""Handler runners: run async handlers' coroutines inside a slot task, without a task each.

A handler slot (``sepp.worker._slots``) runs one job after another; an async handler's
first step runs inline in the slot (``runner.send(coro)``), and only a handler that
suspends is finished by awaiting ``resume`` — as ``await coro`` would, step for step.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Callable, Generator
from typing import Any

#: What a handler runner (``run_handlers``) yields once the handler it ran returned ``None``.
RETURNED: Any = object()


class Returned:
    """What a handler runner (``run_handlers``) yields once the handler it ran returned
    ``value`` (not ``None``: that is ``RETURNED``): the job's result to be."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class Raised:
    """What a handler runner (``run_handlers``) yields once the handler it ran raised ``exc``."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


@types.coroutine
def run_handlers() -> Generator[Any, Any, None]:
    """Run the handler coroutines sent in, one after another, as ``await coro`` would
    (``yield from``, PEP 380). ``runner.send(coro)`` runs ``coro``'s first step and returns
    what it yields when it suspends — its later steps are the runner's (``send``/``throw``,
    forwarded to ``coro``: ``resume``) — or, once it ended, ``RETURNED`` (it returned
    ``None``), a ``Returned`` holding the value it returned, or a ``Raised`` holding its
    exception; then the runner waits for the next coroutine. Unlike
    ``coro.send(None)``, a handler that returns raises no ``StopIteration`` (catching it was
    about a third of the runtime's cost of a no-op handler's first step). Start one with
    ``send(None)``; closing it closes the coroutine it is in (``GeneratorExit`` is not
    caught)."""
    coro = yield None
    while True:
        ended: Any
        try:
            value = yield from coro
            ended = RETURNED if value is None else Returned(value)
            value = None
        except GeneratorExit:
            raise
        except BaseException as exc:  # the handler's failure, told (not raised) to the caller
            ended = Raised(exc)
        coro = yield ended  # (yielded outside the except block: no __context__ for the next job)
        ended = None


def new_runner() -> Generator[Any, Any, None]:
    """A started ``run_handlers``."""
    runner = run_handlers()
    runner.send(None)
    return runner


@types.coroutine
def resume(runner: Generator[Any, Any, None], first: Any,
           ctx: contextvars.Context | None = None) -> Generator[Any, Any, Any]:
    """Finish the handler coroutine whose first step ``runner`` (a ``run_handlers``) ran and
    which yielded ``first``, as ``await coro`` would: what the task sends or throws in goes
    on to the handler (through ``runner``) and what it yields goes out to the task (``yield
    from``, PEP 380). With ``ctx``, every step runs in that context (``Context.run``), as
    each step of a task runs in the task's own context. Returns ``runner``'s end marker
    (``RETURNED``, a ``Returned`` or a ``Raised``) once the handler ended; ``runner`` may then
    run the next one."""
    send: Callable[[Any], Any] = runner.send
    throw: Callable[[BaseException], Any] = runner.throw
    if ctx is not None:
        run = ctx.run

        def send(value: Any) -> Any:
            return run(runner.send, value)

        def throw(exc: BaseException) -> Any:
            return run(runner.throw, exc)

    yielded = first
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            runner.close()
            raise
        except BaseException as exc:  # a cancellation thrown in by the task, as a rule
            yielded = throw(exc)
        else:
            yielded = send(sent)
        if yielded is RETURNED or type(yielded) is Raised or type(yielded) is Returned:
            return yielded


__all__ = ["RETURNED", "Raised", "Returned", "new_runner", "resume", "run_handlers"]
