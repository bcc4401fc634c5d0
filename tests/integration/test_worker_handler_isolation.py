"""Attacks on the Worker's handler runners (``_run_handlers``, ``_execute``/``_execute_rest``/
``_resumed``) against a real server: one slot runs, one after another, handlers that set a
context variable (and return, suspend, raise, raise BaseException subclasses, cancel
themselves, run in a thread, return a coroutine from a thread) — the next job on the slot
never sees the variable, every job gets exactly one settled outcome, none is left
RESERVED."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from support.servers import module_server
from support.worker import count_states, fast_queue, make_worker, running, until, wire_for

from sepp.testing import ServerProcess
from sepp.worker import Job

pytestmark = pytest.mark.timeout(60)

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("slot_var", default="unset")


class Custom(BaseException):
    """A BaseException of a handler's own."""


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, queue_defaults=fast_queue(lease_duration=5.0))


def _kinds() -> dict[str, tuple[Any, str]]:
    """job type → (handler, the outcome its job must get)."""

    async def set_return(job: Job) -> None:
        VAR.set(job.id)

    async def set_suspend_return(job: Job) -> None:
        VAR.set(job.id)
        await asyncio.sleep(0)

    async def set_raise(job: Job) -> None:
        VAR.set(job.id)
        raise ValueError("boom")

    async def set_suspend_raise(job: Job) -> None:
        VAR.set(job.id)
        await asyncio.sleep(0.001)
        raise ValueError("late boom")

    async def set_custom_base(job: Job) -> None:
        VAR.set(job.id)
        raise Custom("mine")

    async def set_suspend_system_exit(job: Job) -> None:
        VAR.set(job.id)
        await asyncio.sleep(0)
        raise SystemExit(3)

    async def set_generator_exit(job: Job) -> None:
        VAR.set(job.id)
        raise GeneratorExit

    async def set_suspend_generator_exit(job: Job) -> None:
        VAR.set(job.id)
        await asyncio.sleep(0)
        raise GeneratorExit

    async def cancel_self(job: Job) -> None:
        VAR.set(job.id)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)

    async def raise_cancelled(job: Job) -> None:
        VAR.set(job.id)
        raise asyncio.CancelledError

    def sync_set(job: Job) -> None:
        VAR.set(job.id)

    def sync_returns_coroutine(job: Job) -> Any:
        async def later() -> None:
            VAR.set(job.id)

        return later()

    return {"set-return": (set_return, "completed"), "set-suspend-return": (set_suspend_return, "completed"),
            "set-raise": (set_raise, "retry"), "set-suspend-raise": (set_suspend_raise, "retry"),
            "custom-base": (set_custom_base, "retry"), "system-exit": (set_suspend_system_exit, "retry"),
            "generator-exit": (set_generator_exit, "retry"),
            "suspend-generator-exit": (set_suspend_generator_exit, "retry"),
            "cancel-self": (cancel_self, "retry"), "raise-cancelled": (raise_cancelled, "retry"),
            "sync-set": (sync_set, "completed"), "sync-coroutine": (sync_returns_coroutine, "completed")}


async def test_no_context_variable_leaks_to_the_next_job_and_every_job_is_settled_once(
        fast: ServerProcess, fresh_queue: str) -> None:
    worker, reports = make_worker(fast, fresh_queue, concurrency=1)
    kinds = _kinds()
    for job_type, (fn, _) in kinds.items():
        worker.register(job_type, fn)
    seen: list[tuple[str, str]] = []

    async def read(job: Job) -> None:
        seen.append((job.id, VAR.get()))

    worker.register("read", read)
    order: list[str] = []
    with wire_for(fast, fresh_queue) as w:
        for _round in range(2):
            for job_type in kinds:
                order.append(job_type)
                w.enqueue(fresh_queue, job_type, max_attempts=1)
                order.append("read")
                w.enqueue(fresh_queue, "read", max_attempts=1)
    async with running(worker):
        await until(lambda: len(reports) == len(order), within=30, what="every job's report")
    type_of = {r.job.id: r.job.job_type for r in reports}
    leaked = Counter(type_of.get(value, value) for _, value in seen if value != "unset")
    assert not leaked, f"a context variable seen by a later job, set by (job type: reads): {dict(leaked)}"
    got = Counter((r.job.job_type, r.outcome) for r in reports)
    want = Counter((t, kinds[t][1] if t in kinds else "completed") for t in order)
    assert got == want
    assert len({r.job.id for r in reports}) == len(order)  # one report per job
    assert all(not r.refused for r in reports), [r for r in reports if r.refused]
    counts = count_states(fast, fresh_queue)
    assert counts.get("RESERVED", 0) == 0, counts


async def test_a_stop_whose_grace_is_exceeded_leaves_no_job_reserved(fast: ServerProcess, fresh_queue: str) -> None:
    # Four slots hold handlers suspended in their runners (one that ignores a cancellation
    # once, one blocked in a thread, one that sets a context variable first); a stop with a
    # short grace abandons them: each is released, and nothing stays RESERVED.
    worker, reports = make_worker(fast, fresh_queue, concurrency=4)
    started: list[str] = []
    release_thread = threading.Event()

    async def hold(job: Job) -> None:
        VAR.set(job.id)
        started.append(job.id)
        await asyncio.Event().wait()

    async def stubborn(job: Job) -> None:
        started.append(job.id)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # ignores the first cancellation a moment, then gives in
            raise

    def blocked(job: Job) -> None:
        started.append(job.id)
        release_thread.wait(10)

    worker.register("hold", hold)
    worker.register("stubborn", stubborn)
    worker.register("blocked", blocked)
    with wire_for(fast, fresh_queue) as w:
        for job_type in ("hold", "hold", "stubborn", "blocked"):
            w.enqueue(fresh_queue, job_type, max_attempts=5)
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    try:
        await until(lambda: len(started) == 4, what="four handlers to start")
        await worker.stop(0.2)
        await asyncio.wait_for(task, 15)
    finally:
        release_thread.set()
    counts = count_states(fast, fresh_queue)
    assert counts.get("RESERVED", 0) == 0, counts
    assert counts.get("READY", 0) == 4, counts
    assert sorted(r.outcome for r in reports) == ["released"] * 4, reports
