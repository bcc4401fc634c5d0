"""A task step that receives what its dependencies returned as its first argument
(docs/tasks.md "Chains pass results"), on the worker's side.

A payload may say ``"prepend": "result"`` — a ``chain`` step built from a mutable signature
(``task.s``): its first argument is the result of the job's first dependency (in a workflow
the node it runs after) — or ``"prepend": "results"`` — a ``chord`` callback: its first
argument is the list of the results of all its dependencies, in ``depends_on`` order (the
header's order). Any language may write it. The results are read only for such a payload
(``Job.dependency_results``), decoded as ``Client.result`` decodes them. A dependency whose
result cannot be passed — dead-lettered or cancelled (a "run" dependent), no longer stored,
a JSON result that does not decode — dead-letters the step: another attempt would read the
same. ``"result"`` on a job that depends on nothing dead-letters it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sepp.errors import JobNotFound, JobOutcomeError
from sepp.worker.job import Job
from sepp.worker.outcome import DeadLetter

#: A payload's ``prepend`` values: the first dependency's result, or all of them as a list.
PREPEND_MODES = ("result", "results")
#: What reading the results raises when a result can never be passed.
_FOR_GOOD = (JobOutcomeError, JobNotFound, ValueError)


class Receives(Exception):  # a signal to the task's handler, not an error
    """Raised by ``ArgsCodec.decode`` for a payload with ``"prepend"``: the call's arguments
    as sent (``call_args``, ``call_kwargs``) and ``mode`` (one of ``PREPEND_MODES``). The
    task's handler reads the dependencies' results (``first_argument`` /
    ``first_argument_async``) and binds the call with ``ArgsCodec.bind_received``."""

    def __init__(self, mode: str, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        super().__init__(mode)
        self.mode = mode
        self.call_args = args
        self.call_kwargs = kwargs


def _pick(job: Job, mode: str, results: Mapping[str, Any]) -> Any:
    if mode == "results":
        return list(results.values())
    if not results:
        raise DeadLetter(f'the payload asks for the previous step\'s result ("prepend": "result") but job {job.id} '
                         "depends on no job")
    return next(iter(results.values()))


def first_argument(job: Job, mode: str) -> Any:
    """What a blocking task's handler puts first (see the module docstring). Raises
    ``DeadLetter`` when it cannot be had, and what ``Job.dependency_results`` raises for a
    passing failure (a lease lost, the server unreachable: the attempt fails and is retried)."""
    try:
        results = job.dependency_results()
    except _FOR_GOOD as exc:
        raise DeadLetter(f"cannot pass the dependencies' results: {exc}") from None
    return _pick(job, mode, results)


async def first_argument_async(job: Job, mode: str) -> Any:
    """``first_argument`` for an async task's handler."""
    try:
        results = await job.dependency_results_async()
    except _FOR_GOOD as exc:
        raise DeadLetter(f"cannot pass the dependencies' results: {exc}") from None
    return _pick(job, mode, results)


__all__ = ["PREPEND_MODES", "Receives", "first_argument", "first_argument_async"]
