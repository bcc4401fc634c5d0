"""``TaskAck`` / ``AsyncTaskAck``: what enqueuing a task returns — an ``EnqueueAck`` (``job_id``,
``deduplicated``) that can also wait for the job and read its result, typed as the task's
return type.

``result`` and ``wait`` are the client's (``Client.result`` / ``Client.wait``, docs/results-and-events.md)
for this one job; the result is converted back to the task's return annotation when that is
not plain JSON (a pydantic model, a dataclass…: ``sepp.tasks._args``). An ack of a task run
in eager mode (``App.run_inline``) holds its outcome already: nothing is asked of a server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sepp.request import EnqueueAck
from sepp.request.outcomes import JobOutcome

if TYPE_CHECKING:
    from sepp.tasks._args import ArgsCodec

R = TypeVar("R")


class _AckBase(EnqueueAck, Generic[R]):
    """The parts both acks share: the task's codec and the client to ask (or the inline outcome)."""

    __slots__ = ("_client", "_codec", "_outcome")

    _client: Any
    _codec: ArgsCodec
    _outcome: JobOutcome | None

    def __init__(
        self, job_id: str, deduplicated: bool, codec: ArgsCodec, client: Any, outcome: JobOutcome | None = None
    ) -> None:
        EnqueueAck.__init__(self, job_id, deduplicated)
        object.__setattr__(self, "_codec", codec)
        object.__setattr__(self, "_client", client)
        object.__setattr__(self, "_outcome", outcome)

    def _value(self, outcome: JobOutcome) -> R:
        # JobOutcome.value raises JobFailed / JobCancelled as Client.result does.
        return self._codec.load_result(outcome.value())  # type: ignore[no-any-return]


class TaskAck(_AckBase[R]):
    """A task's job, stored (or matched by idempotency key): ``job_id``, ``deduplicated``, and
    the blocking ``result`` / ``wait`` of that job."""

    __slots__ = ()

    def result(self, timeout: float | None = None) -> R:
        """Wait until the job is finished and return what the task returned (converted to its
        return annotation). ``timeout``: seconds, ``None`` for as long as it takes.

        Raises ``JobFailed`` (dead-lettered), ``JobCancelled``, ``WaitTimeout``,
        ``JobNotFound`` and ``TransportError`` as ``Client.result`` does, and
        ``pydantic.ValidationError`` when the stored result does not fit the return annotation.
        """
        outcome = self._outcome
        if outcome is None:
            outcome = self.wait(timeout)
        return self._value(outcome)

    def wait(self, timeout: float | None = None) -> JobOutcome:
        """Wait until the job is finished; its ``JobOutcome`` (a dead-lettered or cancelled job
        is an outcome here, not an error). Raises ``WaitTimeout`` after ``timeout`` seconds
        and as ``Client.wait`` otherwise."""
        if self._outcome is not None:
            return self._outcome
        return self._client().wait([self.job_id], timeout=timeout)[self.job_id]  # type: ignore[no-any-return]


class AsyncTaskAck(_AckBase[R]):
    """``TaskAck`` of an ``AsyncApp``'s task: ``await ack.result()``, ``await ack.wait()``."""

    __slots__ = ()

    async def result(self, timeout: float | None = None) -> R:  # noqa: ASYNC109 - the wait's length, as Client's
        """See :meth:`TaskAck.result`."""
        outcome = self._outcome
        if outcome is None:
            outcome = await self.wait(timeout)
        return self._value(outcome)

    async def wait(self, timeout: float | None = None) -> JobOutcome:  # noqa: ASYNC109
        """See :meth:`TaskAck.wait`."""
        if self._outcome is not None:
            return self._outcome
        client = await self._client()
        done = await client.wait([self.job_id], timeout=timeout)
        return done[self.job_id]  # type: ignore[no-any-return]


__all__ = ["AsyncTaskAck", "TaskAck"]
