"""An example worker: run it with ``sepp worker examples.worker:worker`` (see README.md).

Handlers are registered by job type. ``async def`` handlers run on the worker's event
loop; plain ``def`` handlers run in its thread pool, so they may block.
"""

from __future__ import annotations

import asyncio
import logging
import time

from sepp.worker import DeadLetter, Job, Retry, Worker

worker = Worker("127.0.0.1:7700", queues=["emails"], concurrency=4, shutdown_grace=10.0)
#: What handlers have to say goes to the log (stderr), so stdout keeps only the outcome lines.
log = logging.getLogger("examples.worker")


@worker.handler("welcome")
async def welcome(job: Job) -> dict[str, object]:
    """Return = success (ack): the job is COMPLETED, and what it returns is the job's result
    (a dict: stored as JSON; ``sepp jobs show ID`` prints it)."""
    user_id = job.json()["user_id"]          # payload bytes parsed as JSON
    vip = job.custom.get("vip", False)        # typed custom map: a bool stays a bool
    await asyncio.sleep(0.2)                  # pretend to send a mail
    if user_id is None:
        raise DeadLetter("no user id")        # give up now: NACK_DEAD_LETTER
    log.info("sent welcome mail to user %s%s", user_id, " (vip)" if vip else "")
    return {"mailed": user_id, "vip": vip}


def thumbnail(job: Job) -> None:
    """A blocking handler: runs in a thread. ``Retry(after=...)`` asks for a fixed delay."""
    if job.attempt == 1 and job.custom.get("busy", False):
        raise Retry("image service busy", after=2.0)
    time.sleep(0.5)


worker.register("thumbnail", thumbnail)


@worker.handler("reminder")
async def reminder(job: Job) -> None:
    """The README's CLI examples enqueue these (``sepp enqueue emails reminder …``); the
    payload is optional, a JSON text when given."""
    note = job.json() if job.payload else "(no text)"
    log.info("sent reminder %s: %s", job.id, note)


@worker.handler("flaky")
async def flaky(job: Job) -> None:
    """Always fails: each failure is retried with the queue's backoff until max_attempts,
    then the job is dead-lettered (ATTEMPTS_EXHAUSTED). The error and traceback are kept
    in the job's attempt history."""
    raise RuntimeError(f"the flaky service failed (attempt {job.attempt} of {job.max_attempts})")
