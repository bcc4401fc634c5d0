"""``sepp.worker._runners.run_handlers`` and ``resume``: a coroutine whose first step the
Worker ran inline (``runner.send(coro)``) is finished by a task exactly as ``await coro``
would (PEP 380): later steps, values and exceptions the task throws in (cancellation), bare
yields, and closing; a runner runs one coroutine after another, whether they returned,
raised or suspended first. Each case runs the same coroutine both ways and compares."""

from __future__ import annotations

import asyncio
import contextvars
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import pytest

from sepp.worker._runners import RETURNED as _RETURNED
from sepp.worker._runners import Raised as _Raised
from sepp.worker._runners import Returned as _Returned
from sepp.worker._runners import new_runner as _new_runner
from sepp.worker._runners import resume as _resume

Factory = Callable[[list[str]], Coroutine[Any, Any, Any]]


async def resumed(coro: Coroutine[Any, Any, Any]) -> str:
    """What the Worker does: the first step inline, the rest through ``_resume``; what the
    handler raised is raised again (``Worker._resumed``)."""
    runner = _new_runner()
    ended = runner.send(coro)
    how = "inline"
    if ended is not _RETURNED and type(ended) is not _Raised and type(ended) is not _Returned:
        ended = await _resume(runner, ended)
        how = "resumed"
    if type(ended) is _Raised:
        raise ended.exc
    assert ended is _RETURNED or type(ended) is _Returned  # (None, or the value returned: the job's result)
    return how


async def awaited(coro: Coroutine[Any, Any, Any]) -> str:
    await coro
    return "resumed"


async def run_both(factory: Factory, cancel_after: float | None = None) -> list[tuple[list[str], str]]:
    out = []
    for runner in (awaited, resumed):
        log: list[str] = []
        task = asyncio.ensure_future(runner(factory(log)))
        if cancel_after is not None:
            await asyncio.sleep(cancel_after)
            task.cancel()
        try:
            how = await task
        except BaseException as exc:  # compared, not handled
            how = type(exc).__name__
        out.append((log, how))
    return out


async def test_a_coroutine_that_never_suspends_is_done_inline() -> None:
    async def quick(log: list[str]) -> int:
        log.append("ran")
        return 1

    (a_log, _), (r_log, how) = await run_both(quick)
    assert a_log == r_log == ["ran"] and how == "inline"


async def test_later_steps_bare_yields_and_results_go_through() -> None:
    async def steps(log: list[str]) -> None:
        await asyncio.sleep(0)  # a bare yield
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_result, "value")
        log.append(await fut)
        await asyncio.sleep(0.01)
        log.append("end")

    (a_log, a_how), (r_log, r_how) = await run_both(steps)
    assert a_log == r_log == ["value", "end"] and a_how == r_how == "resumed"


async def test_an_exception_after_a_suspension_propagates_with_the_handlers_frames() -> None:
    async def fails(log: list[str]) -> None:
        await asyncio.sleep(0.001)
        raise ValueError("late")

    with pytest.raises(ValueError, match="late") as info:
        await resumed(fails([]))
    assert any(entry.name == "fails" for entry in info.traceback)


async def test_a_cancellation_reaches_the_coroutine_which_may_swallow_it_or_not() -> None:
    async def swallows(log: list[str]) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            log.append("cancelled")
        await asyncio.sleep(0.01)
        log.append("after")

    async def lets_it_through(log: list[str]) -> None:
        try:
            await asyncio.sleep(60)
        finally:
            log.append("finally")

    (a_log, a_how), (r_log, r_how) = await run_both(swallows, cancel_after=0.01)
    assert a_log == r_log == ["cancelled", "after"] and a_how == r_how == "resumed"
    (a_log, a_how), (r_log, r_how) = await run_both(lets_it_through, cancel_after=0.01)
    assert a_log == r_log == ["finally"] and a_how == r_how == "CancelledError"


@types.coroutine
def suspend_once() -> Generator[None, None, None]:
    yield


def test_closing_the_resumer_closes_the_coroutine() -> None:
    done: list[str] = []

    async def waits() -> None:
        try:
            await suspend_once()
            await suspend_once()
        finally:
            done.append("closed")

    async def outer() -> None:
        runner = _new_runner()
        first = runner.send(waits())
        await _resume(runner, first)

    gen = outer()
    gen.send(None)  # up to the first suspension of waits()
    gen.send(None)  # its second one, through _resume
    gen.close()
    assert done == ["closed"]


async def test_a_runner_runs_coroutines_one_after_another_whatever_their_end() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    async def quick() -> str:
        seen.append(var.get())
        var.set("quick")
        return "kept"

    async def fails_at_once() -> None:
        raise KeyError("first step")

    async def suspends_then_fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("later")

    async def suspends_then_returns() -> None:
        await asyncio.sleep(0)
        seen.append(var.get())

    runner = _new_runner()
    ended = contextvars.copy_context().run(runner.send, quick())
    assert type(ended) is _Returned and ended.value == "kept"  # what it returned (None: RETURNED)
    ended = runner.send(fails_at_once())
    assert type(ended) is _Raised and isinstance(ended.exc, KeyError)
    assert ended.exc.__context__ is None  # the runner does not chain one job's error to the next
    first = runner.send(suspends_then_fails())
    ended = await _resume(runner, first)
    assert type(ended) is _Raised and isinstance(ended.exc, ValueError) and ended.exc.__context__ is None
    ctx = contextvars.copy_context()
    first = ctx.run(runner.send, suspends_then_returns())
    assert await _resume(runner, first, ctx) is _RETURNED
    ended = runner.send(quick())
    assert type(ended) is _Returned and ended.value == "kept"
    assert seen == ["unset", "unset", "unset"]  # each step in its own context: nothing leaked


async def test_an_error_after_an_error_has_no_context() -> None:
    async def fails(n: int) -> None:
        raise ValueError(n)

    runner = _new_runner()
    first = runner.send(fails(1))
    second = runner.send(fails(2))
    assert type(first) is _Raised and type(second) is _Raised
    assert second.exc.__context__ is None


async def test_what_a_handler_returns_comes_back_whether_it_suspended_or_not() -> None:
    async def at_once() -> bytes:
        return b"now"

    async def later() -> dict[str, int]:
        await asyncio.sleep(0)
        return {"r": 1}

    async def nothing_later() -> None:
        await asyncio.sleep(0)

    runner = _new_runner()
    ended = runner.send(at_once())
    assert type(ended) is _Returned and ended.value == b"now"
    ended = await _resume(runner, runner.send(later()))
    assert type(ended) is _Returned and ended.value == {"r": 1}
    assert await _resume(runner, runner.send(nothing_later())) is _RETURNED
