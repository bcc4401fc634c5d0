"""The sepp worker runtime: register handlers by job type and run them.

::

    from sepp.worker import DeadLetter, Job, Retry, Worker

    worker = Worker("127.0.0.1:7700", queues=["emails"], concurrency=8)

    @worker.handler("welcome")
    async def welcome(job: Job) -> None:
        user = job.json()["user_id"]          # payload bytes parsed as JSON
        if job.custom.get("dry_run"):         # typed custom map: bool stays bool
            return                            # return = ack (COMPLETED)
        if not await mailer_up():
            raise Retry("mailer down", after=30)   # retry in exactly 30 s
        if user is None:
            raise DeadLetter("no user")            # dead-letter now
        return await send(user)                    # any other exception = retry with backoff;
                                                   # the value returned is the job's result

    worker.run_sync()    # until SIGTERM/SIGINT, then drains gracefully

Run from the command line with ``sepp worker module:worker``.
"""

from __future__ import annotations

from sepp.worker.config import WorkerConfig
from sepp.worker.errors import LeaseError, ResultError
from sepp.worker.job import Job, JobAttempt
from sepp.worker.outcome import DeadLetter, Retry
from sepp.worker.registry import Handler, HandlerRegistry
from sepp.worker.runtime import JobReport, Worker

__all__ = ["DeadLetter", "Handler", "HandlerRegistry", "Job", "JobAttempt", "JobReport", "LeaseError",
           "ResultError", "Retry", "Worker", "WorkerConfig"]
