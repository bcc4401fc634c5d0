"""sepp — a durable job-queue server and its Python client.

::

    from sepp import Client, EnqueueRequest, Payload

    with Client("127.0.0.1:7700") as client:
        ack = client.enqueue(EnqueueRequest("emails", "welcome", payload=Payload.json({"user_id": 42})))

The names below are the public API. They are loaded on first access, so
``import sepp`` (and every ``sepp.*`` import, such as the server's) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sepp import _lazy
from sepp._version import __version__

if TYPE_CHECKING:
    from sepp.client import AsyncClient, Client, ClientOptions, RetryPolicy
    from sepp.client.watch import JobEvent
    from sepp.errors import (
        AtomicEnqueueError,
        DeadlineExceeded,
        EnqueueInterrupted,
        JobCancelled,
        JobFailed,
        JobNotFound,
        MessageTooLarge,
        Overloaded,
        PermissionDenied,
        RejectedError,
        SeppError,
        ServerError,
        TransportError,
        Unauthenticated,
        Unavailable,
        WaitTimeout,
        WatchBehind,
    )
    from sepp.job_result import Result
    from sepp.rejections import RejectionCode
    from sepp.request import (
        EnqueueAck,
        EnqueueRequest,
        IndexedRejection,
        NodeInfo,
        Payload,
        QueueInfo,
        Rejection,
        ServerInfo,
    )
    from sepp.request.outcomes import JobOutcome
    from sepp.request.workflow import Workflow, WorkflowAck, chain, chord, group
    from sepp.tasks import App, AsyncApp, AsyncTask, AsyncTaskAck, Custom, Signature, Task, TaskAck, current_job
    from sepp.worker import DeadLetter, Job, Retry, Worker

#: Public name → the module that defines it.
_EXPORTS: dict[str, str] = {
    "AsyncClient": "sepp.client",
    "Client": "sepp.client",
    "ClientOptions": "sepp.client",
    "RetryPolicy": "sepp.client",
    "EnqueueAck": "sepp.request",
    "EnqueueRequest": "sepp.request",
    "IndexedRejection": "sepp.request",
    "Payload": "sepp.request",
    "NodeInfo": "sepp.request",
    "QueueInfo": "sepp.request",
    "Rejection": "sepp.request",
    "ServerInfo": "sepp.request",
    "RejectionCode": "sepp.rejections",
    "Result": "sepp.job_result",
    "Worker": "sepp.worker",
    "Job": "sepp.worker",
    "Retry": "sepp.worker",
    "DeadLetter": "sepp.worker",
    "AtomicEnqueueError": "sepp.errors",
    "DeadlineExceeded": "sepp.errors",
    "EnqueueInterrupted": "sepp.errors",
    "JobCancelled": "sepp.errors",
    "JobFailed": "sepp.errors",
    "JobNotFound": "sepp.errors",
    "JobOutcome": "sepp.request.outcomes",
    "MessageTooLarge": "sepp.errors",
    "Overloaded": "sepp.errors",
    "PermissionDenied": "sepp.errors",
    "RejectedError": "sepp.errors",
    "SeppError": "sepp.errors",
    "ServerError": "sepp.errors",
    "TransportError": "sepp.errors",
    "Unauthenticated": "sepp.errors",
    "Unavailable": "sepp.errors",
    "WaitTimeout": "sepp.errors",
    "WatchBehind": "sepp.errors",
    "JobEvent": "sepp.client.watch",
    "App": "sepp.tasks",
    "AsyncApp": "sepp.tasks",
    "AsyncTask": "sepp.tasks",
    "AsyncTaskAck": "sepp.tasks",
    "Custom": "sepp.tasks",
    "Signature": "sepp.tasks",
    "Task": "sepp.tasks",
    "TaskAck": "sepp.tasks",
    "current_job": "sepp.tasks",
    "Workflow": "sepp.request.workflow",
    "WorkflowAck": "sepp.request.workflow",
    "chain": "sepp.request.workflow",
    "chord": "sepp.request.workflow",
    "group": "sepp.request.workflow",
}

__all__ = [
    "App",
    "AsyncApp",
    "AsyncClient",
    "AsyncTask",
    "AsyncTaskAck",
    "AtomicEnqueueError",
    "Client",
    "ClientOptions",
    "Custom",
    "DeadLetter",
    "DeadlineExceeded",
    "EnqueueAck",
    "EnqueueInterrupted",
    "EnqueueRequest",
    "IndexedRejection",
    "Job",
    "JobCancelled",
    "JobEvent",
    "JobFailed",
    "JobNotFound",
    "JobOutcome",
    "MessageTooLarge",
    "NodeInfo",
    "Overloaded",
    "Payload",
    "PermissionDenied",
    "QueueInfo",
    "RejectedError",
    "Rejection",
    "RejectionCode",
    "Result",
    "Retry",
    "RetryPolicy",
    "SeppError",
    "ServerError",
    "ServerInfo",
    "Signature",
    "Task",
    "TaskAck",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
    "WaitTimeout",
    "WatchBehind",
    "Worker",
    "Workflow",
    "WorkflowAck",
    "__version__",
    "chain",
    "chord",
    "current_job",
    "group",
]


def __getattr__(name: str) -> Any:
    """A public name (``_EXPORTS``), imported on first access; AttributeError for anything else."""
    return _lazy.load(globals(), name, _EXPORTS)


def __dir__() -> list[str]:
    return _lazy.names(globals())
