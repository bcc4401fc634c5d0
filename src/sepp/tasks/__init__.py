"""Tasks: define a job once, enqueue it like a function call, typed end to end.

::

    import sepp

    app = sepp.App("127.0.0.1:7700")

    @app.task(queue="emails", max_attempts=5)
    async def send_welcome(user_id: int, locale: str = "en") -> str:
        return f"sent to {user_id} in {locale}"

    ack = send_welcome.enqueue(42, locale="de")      # checked against the signature, sent as JSON
    text: str = ack.result(timeout=30)

    # the worker process:  sepp worker myapp:app

The parts: ``app`` (``App``, ``AsyncApp``), ``task`` (``Task``, ``AsyncTask``), ``ack``
(``TaskAck``, ``AsyncTaskAck``), ``signature`` (``Signature``, ``TaskOptions``), ``running``
(the worker's side, ``current_job``, eager mode) and ``_args`` (binding and the JSON
payload). docs/tasks.md describes the payload other languages send.
"""

from __future__ import annotations

from sepp.tasks._args import ArgumentsError, Custom
from sepp.tasks.ack import AsyncTaskAck, TaskAck
from sepp.tasks.app import App, AsyncApp, job_type_of
from sepp.tasks.running import current_job
from sepp.tasks.signature import Signature, TaskOptions
from sepp.tasks.task import AsyncTask, Task

__all__ = [
    "App",
    "ArgumentsError",
    "AsyncApp",
    "AsyncTask",
    "AsyncTaskAck",
    "Custom",
    "Signature",
    "Task",
    "TaskAck",
    "TaskOptions",
    "current_job",
    "job_type_of",
]
