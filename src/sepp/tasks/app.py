"""``App`` / ``AsyncApp``: where tasks are defined, enqueued from, and run.

::

    app = sepp.App("127.0.0.1:7700")

    @app.task(queue="emails", max_attempts=5, priority=7)
    async def send_welcome(user_id: int, locale: str = "en") -> str:
        ...
        return "sent"

    ack = send_welcome.enqueue(42, locale="de")      # TaskAck: job_id, deduplicated
    text = ack.result(timeout=30)                    # str, as the function returns

and in the worker process, ``sepp worker myapp:app`` (or ``app.worker().run_sync()``): one
``Worker`` with every task's handler registered in its registry, reserving from the tasks'
queues. ``AsyncApp`` is the same over an ``AsyncClient``: ``await task.enqueue(…)``. The
twins follow ``Client`` / ``AsyncClient``. docs/tasks.md has the whole story.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from sepp.tasks.signature import TaskOptions
from sepp.tasks.task import AsyncTask, Task, _TaskBase

if TYPE_CHECKING:
    from sepp.client import AsyncClient, Client
    from sepp.worker import Worker
    from sepp.worker.job import Job

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T", bound=_TaskBase[Any, Any])

#: The queue of a task defined without one (``App(default_queue=…)`` changes it).
DEFAULT_QUEUE = "default"
#: Where a client connects when neither ``target``, ``client`` nor ``SEPP_SERVER`` says.
DEFAULT_TARGET = "127.0.0.1:7700"


def job_type_of(fn: Callable[..., Any]) -> str:
    """A task's default job type: ``module.qualname`` of its function (``myapp.jobs.send_welcome``)."""
    module = getattr(fn, "__module__", None) or "__main__"
    return f"{module}.{getattr(fn, '__qualname__', getattr(fn, '__name__', repr(fn)))}"


class _Decorator(Generic[T]):
    """What ``app.task(queue=…, …)`` returns: applied to a function, it defines the task.
    Typed per function shape (first parameter a ``Job`` or not; ``async def`` or not)."""

    def __init__(self, make: Callable[[Callable[..., Any]], Any]) -> None:
        self._make = make

    def __call__(self, fn: Callable[..., Any]) -> Any:
        return self._make(fn)


class _AppBase(Generic[T]):
    """The parts ``App`` and ``AsyncApp`` share (see the module docstring); ``T`` its task class."""

    _task_class: type[T]

    def __init__(
        self,
        target: str | None = None,
        *,
        client: Any = None,
        default_queue: str = DEFAULT_QUEUE,
        token: str | None = None,
        **worker_options: Any,
    ) -> None:
        if target is None:
            target = getattr(client, "target", None) or os.environ.get("SEPP_SERVER") or DEFAULT_TARGET
        #: The server's ``host:port`` (the client's and the worker's).
        self.target: str = target
        self._client = client
        self._own_client = client is None
        self._token = token
        #: Keyword arguments for the ``Worker`` of ``worker()`` (``Worker``'s own names).
        self.worker_options = worker_options
        self.default_queue = default_queue
        #: Every task, by job type, in the order they were defined.
        self.tasks: dict[str, T] = {}
        #: Eager mode (``run_inline``): ``None`` off, else whether exceptions propagate.
        self._inline: bool | None = None

    # ------------------------------------------------------------------ defining

    def _define(
        self,
        fn: Callable[..., Any],
        name: str | None,
        queue: str | None,
        priority: int | None,
        max_attempts: int | None,
    ) -> Any:
        if not callable(fn):
            raise TypeError(f"@app.task decorates a function, not {fn!r}")
        job_type = name or job_type_of(fn)
        if job_type in self.tasks:
            raise ValueError(
                f"a task with job type {job_type!r} is already defined: {self.tasks[job_type].fn!r} (give one a name=)"
            )
        options = TaskOptions(queue or self.default_queue, priority, max_attempts)
        task = self._task_class(self, fn, job_type, options)
        self.tasks[job_type] = task
        return task

    @property
    def queues(self) -> list[str]:
        """The queues of the tasks, in the order they were first used."""
        return list(dict.fromkeys(task.queue for task in self.tasks.values()))

    # ------------------------------------------------------------------ running

    def worker(self, queues: str | list[str] | None = None, **options: Any) -> Worker:
        """A ``Worker`` running every task of this app: each task's handler registered for its
        job type in the worker's registry; it reserves from ``queues`` (default: every task's
        queue). ``options``: ``Worker`` keyword arguments, over the app's ``worker_options``.
        Raises ``ValueError`` as ``Worker`` does."""
        from sepp.worker import Worker

        settings = {**self.worker_options, **options}
        if self._token is not None:
            settings.setdefault("token", self._token)
        worker = Worker(self.target, queues if queues is not None else self.queues, **settings)
        for job_type, task in self.tasks.items():
            worker.register(job_type, task.handler)
        return worker

    @contextlib.contextmanager
    def run_inline(self, *, propagate: bool = True) -> Iterator[None]:
        """Eager mode, for unit tests: inside the ``with``, enqueuing a task runs it in this
        process at once — arguments bound and sent through JSON as for a server, the job
        ``current_job()`` — and its ack holds the outcome (``result()`` asks no server).
        With ``propagate`` (the default) an exception of the task is raised from ``enqueue``;
        without, a failure is retried at once up to ``max_attempts`` and ``result()`` raises
        ``JobFailed``. Nothing is scheduled, deduplicated or stored (docs/tasks.md "Eager
        mode" lists what differs from a real run)."""
        before = self._inline
        self._inline = propagate
        try:
            yield
        finally:
            self._inline = before

    def _make_client(self) -> Any:
        raise NotImplementedError


class App(_AppBase[Task[Any, Any]]):
    """Tasks over a blocking ``Client`` (created on first enqueue unless ``client`` is given).

    Args:
        target: ``host:port`` of the server; ``None``: ``client.target``, else
            ``$SEPP_SERVER``, else ``127.0.0.1:7700``.
        client: A ``Client`` to enqueue with (the app does not close it).
        default_queue: The queue of a task defined without one.
        token: The token the app's own client and worker send (``None``: ``$SEPP_TOKEN``).
        worker_options: ``Worker`` keyword arguments for ``worker()`` (``concurrency=``…).
    """

    _task_class = Task

    @overload
    def task(self, fn: Callable[Concatenate[Job, P], Awaitable[R]], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: Callable[Concatenate[Job, P], R], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: Callable[P, Awaitable[R]], /) -> Task[P, R]: ...  # type: ignore[overload-overlap]
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(
        self,
        /,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        name: str | None = None,
    ) -> TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        name: str | None = None,
    ) -> Any:
        """Define a task: ``@app.task`` or ``@app.task(queue=…, priority=…, max_attempts=…,
        name=…)``. ``name`` is its job type (default ``module.qualname``); ``queue`` its
        queue (default ``default_queue``); ``priority`` (0–9) and ``max_attempts`` (≥ 1) are
        sent with each job (``None``: the queue's). Returns the ``Task``. Raises
        ``ValueError`` when the job type is already defined, ``TypeError`` for a parameter
        annotated ``sepp.Job`` that is not the first."""
        if fn is not None:
            return self._define(fn, name, queue, priority, max_attempts)
        return TaskDecorator(lambda f: self._define(f, name, queue, priority, max_attempts))

    def _get_client(self) -> Client:
        """The app's ``Client`` (made on first use)."""
        if self._client is None:
            from sepp.client import Client

            self._client = Client(self.target, token=self._token)
        return self._client  # type: ignore[no-any-return]

    @property
    def client(self) -> Client:
        """The ``Client`` the tasks are enqueued with (made on first use)."""
        return self._get_client()

    def close(self) -> None:
        """Close the app's own client (not one given to it)."""
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TaskDecorator(_Decorator[Task[Any, Any]]):
    """``app.task(…)`` of an ``App``: decorating a function returns its ``Task``."""

    @overload
    def __call__(self, fn: Callable[Concatenate[Job, P], Awaitable[R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[Job, P], R], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> Task[P, R]: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Any:
        return self._make(fn)


class AsyncApp(_AppBase[AsyncTask[Any, Any]]):
    """``App`` over an ``AsyncClient``: ``await task.enqueue(…)``, ``await ack.result()``.
    Arguments as ``App``'s (``client`` an ``AsyncClient``). Its client is made on the first
    enqueue, in that event loop; ``await app.close()`` closes it."""

    _task_class = AsyncTask

    @overload
    def task(self, fn: Callable[Concatenate[Job, P], Awaitable[R]], /) -> AsyncTask[P, R]: ...
    @overload
    def task(self, fn: Callable[Concatenate[Job, P], R], /) -> AsyncTask[P, R]: ...
    @overload
    def task(self, fn: Callable[P, Awaitable[R]], /) -> AsyncTask[P, R]: ...  # type: ignore[overload-overlap]
    @overload
    def task(self, fn: Callable[P, R], /) -> AsyncTask[P, R]: ...
    @overload
    def task(
        self,
        /,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        name: str | None = None,
    ) -> AsyncTaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        name: str | None = None,
    ) -> Any:
        """See :meth:`App.task`; returns an ``AsyncTask``."""
        if fn is not None:
            return self._define(fn, name, queue, priority, max_attempts)
        return AsyncTaskDecorator(lambda f: self._define(f, name, queue, priority, max_attempts))

    async def _get_client(self) -> AsyncClient:
        """The app's ``AsyncClient`` (made on first use)."""
        if self._client is None:
            from sepp.client import AsyncClient

            self._client = AsyncClient(self.target, token=self._token)
        return self._client  # type: ignore[no-any-return]

    async def close(self) -> None:
        """Close the app's own client (not one given to it)."""
        if self._own_client and self._client is not None:
            await self._client.close()
            self._client = None

    async def __aenter__(self) -> AsyncApp:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncTaskDecorator(_Decorator[AsyncTask[Any, Any]]):
    """``app.task(…)`` of an ``AsyncApp``: decorating a function returns its ``AsyncTask``."""

    @overload
    def __call__(self, fn: Callable[Concatenate[Job, P], Awaitable[R]], /) -> AsyncTask[P, R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[Job, P], R], /) -> AsyncTask[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> AsyncTask[P, R]: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(self, fn: Callable[P, R], /) -> AsyncTask[P, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Any:
        return self._make(fn)


__all__ = ["DEFAULT_QUEUE", "App", "AsyncApp", "AsyncTaskDecorator", "TaskDecorator", "job_type_of"]
