"""``sepp.worker.runtime._resume``: a coroutine whose first step the Worker ran inline
(``coro.send(None)``) is finished by a task exactly as ``await coro`` would (PEP 380):
later steps, values and exceptions the task throws in (cancellation), bare yields, and
closing. Each case runs the same coroutine both ways and compares."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import pytest

from sepp.worker.runtime import _resume

Factory = Callable[[list[str]], Coroutine[Any, Any, Any]]


async def resumed(coro: Coroutine[Any, Any, Any]) -> str:
    """What the Worker does: the first step inline, the rest through ``_resume``."""
    try:
        first = coro.send(None)
    except StopIteration:
        return "inline"
    await _resume(coro, first)
    return "resumed"


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

    coro = fails([])
    first = coro.send(None)
    task = asyncio.ensure_future(_resume(coro, first))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="late") as info:
        await task
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
        coro = waits()
        first = coro.send(None)
        await _resume(coro, first)

    gen = outer()
    gen.send(None)  # up to the first suspension of waits()
    gen.send(None)  # its second one, through _resume
    gen.close()
    assert done == ["closed"]
