"""A task on the worker's side, and in eager mode: its handler for the ``Worker``'s registry,
``current_job()``, and the in-process run of ``App.run_inline`` (docs/tasks.md).

The handler a ``Worker`` registers for a task's job type takes the ``Job``, decodes its
payload into the function's arguments (``sepp.tasks._args``), makes the job
``current_job()`` and calls the function (passing the job first when its first parameter is
annotated ``sepp.Job``); what the function returns is the job's result. A payload the
function cannot take (not the documented JSON shape, a wrong argument, a value its
annotation refuses) dead-letters the job: it would fail the same way every time. A payload
with ``"prepend"`` (a workflow step: ``sepp.tasks._receiving``) gets its dependencies'
results as its first argument.
``Retry``/``DeadLetter`` and any other exception mean what they mean for every handler.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import traceback
import uuid
from collections.abc import Callable
from typing import Any

from sepp.job_result import result_of
from sepp.request import Payload
from sepp.request.outcomes import COMPLETED, DEAD_LETTERED, JobOutcome
from sepp.tasks._args import ArgsCodec, ArgumentsError
from sepp.tasks._receiving import Receives, first_argument, first_argument_async
from sepp.tasks.signature import TASK_ENCODING, TaskOptions
from sepp.worker.job import Job, detached_job
from sepp.worker.outcome import DeadLetter, Retry, returned

_CURRENT: contextvars.ContextVar[Job] = contextvars.ContextVar("sepp_current_job")


def current_job() -> Job:
    """The ``Job`` whose task is running (in a worker, or in eager mode): its id, attempt,
    custom map, ``set_progress``… Raises ``LookupError`` outside a task's run."""
    try:
        return _CURRENT.get()
    except LookupError:
        raise LookupError(
            "sepp.current_job() is only known while a task runs (in a worker, or in eager "
            "mode); a plain @worker.handler receives its job as its argument"
        ) from None


def task_handler(codec: ArgsCodec, is_async: bool) -> Callable[[Job], Any]:
    """The ``Worker`` handler of a task (see the module docstring): ``async def`` when the
    function is, else a plain function (run in the worker's thread pool). Raises
    ``NameError`` for an annotation that names nothing (resolved here at the latest)."""
    codec.resolve()
    fn = codec.fn
    decode = codec.decode
    dump = codec.dump_result if codec.converts_result else None
    with_job = codec.job_param is not None
    current = _CURRENT

    def received(first: Any, call: Receives) -> tuple[Any, dict[str, Any]]:
        try:
            return codec.bind_received(first, call.call_args, call.call_kwargs)
        except ArgumentsError as exc:
            raise DeadLetter(str(exc)) from None

    if is_async:

        async def run_async(job: Job) -> Any:
            try:
                args, kwargs = decode(job.payload)
            except ArgumentsError as exc:
                raise DeadLetter(str(exc)) from None
            except Receives as call:  # a workflow step given its dependencies' results
                first = await first_argument_async(job, call.mode)
                args, kwargs = received(first, call)
            token = current.set(job)
            try:
                value = await (fn(job, *args, **kwargs) if with_job else fn(*args, **kwargs))
            finally:
                current.reset(token)
            return value if dump is None else dump(value)

        run_async.__qualname__ = run_async.__name__ = f"task:{codec.name}"
        return run_async

    def run(job: Job) -> Any:
        try:
            args, kwargs = decode(job.payload)
        except ArgumentsError as exc:
            raise DeadLetter(str(exc)) from None
        except Receives as call:  # a workflow step given its dependencies' results
            args, kwargs = received(first_argument(job, call.mode), call)
        token = current.set(job)
        try:
            value = fn(job, *args, **kwargs) if with_job else fn(*args, **kwargs)
        finally:
            current.reset(token)
        return value if dump is None else dump(value)

    run.__qualname__ = run.__name__ = f"task:{codec.name}"
    return run


def _attempts_of(options: TaskOptions) -> int:
    return options.max_attempts if options.max_attempts is not None else 1


def _outcome(job: Job, state: str, result: Payload | None, error: str, attempt: int, reason: str) -> JobOutcome:
    return JobOutcome(job.id, state, result, error, attempt, (), None, job.queue, job.job_type, reason)


async def run_inline_async(
    handler: Callable[[Job], Any], is_async: bool, job_type: str, payload: bytes, options: TaskOptions, propagate: bool
) -> JobOutcome:
    """Run one task call in this process, as a worker would (eager mode), attempt after
    attempt up to ``options.max_attempts`` (1 when not set), without delays. With
    ``propagate`` the first exception the function raises (``Retry``/``DeadLetter`` too) is
    raised here; else a failure is retried at once and the job's outcome records it, and a
    return value JSON cannot encode dead-letters the job at once, as a worker does."""
    job_id = str(uuid.uuid4())
    last_error = ""
    attempts = _attempts_of(options)
    for attempt in range(1, attempts + 1):
        job = detached_job(
            job_id,
            options.queue,
            job_type,
            payload,
            TASK_ENCODING,
            custom=options.custom,
            priority=options.priority or 0,
            max_attempts=attempts,
            attempt=attempt,
            idempotency_key=options.idempotency_key or "",
        )
        try:
            value = await handler(job) if is_async else handler(job)
        except BaseException as exc:
            if propagate or not isinstance(exc, Exception):
                raise
            last_error = str(exc) or type(exc).__name__
            if isinstance(exc, DeadLetter):
                return _outcome(job, DEAD_LETTERED, None, last_error, attempt, f"NACK_DEAD_LETTER: {exc}")
            if not isinstance(exc, Retry):
                last_error = "".join(traceback.format_exception_only(exc)).strip()
            continue
        try:
            stored = result_of(value)
        except (TypeError, ValueError, RecursionError):
            if propagate:
                raise
            # As a worker does: a value JSON cannot encode dead-letters the job at once.
            why = returned(value, None).reason
            return _outcome(job, DEAD_LETTERED, None, why, attempt, f"NACK_DEAD_LETTER: {why}")
        result = None if stored is None else Payload(stored.data, stored.encoding)
        return _outcome(job, COMPLETED, result, "", attempt, "")
    return _outcome(job, DEAD_LETTERED, None, last_error, attempts, "ATTEMPTS_EXHAUSTED")


def run_inline(
    handler: Callable[[Job], Any], is_async: bool, job_type: str, payload: bytes, options: TaskOptions, propagate: bool
) -> JobOutcome:
    """``run_inline_async`` from blocking code: an async task runs in ``asyncio.run`` (in a
    thread of its own when this thread already runs an event loop)."""
    coro = run_inline_async(handler, is_async, job_type, payload, options, propagate)
    if not is_async:  # nothing is awaited: the coroutine ends on its first step
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        raise RuntimeError("an inline run of a plain task awaited something")  # pragma: no cover
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: list[Any] = []

    def in_thread() -> None:
        try:
            box.append(asyncio.run(coro))
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=in_thread, name="sepp-inline-task")
    thread.start()
    thread.join()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]  # type: ignore[no-any-return]


__all__ = ["current_job", "run_inline", "run_inline_async", "task_handler"]
