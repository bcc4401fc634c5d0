"""Settlement: acks and nacks (``settle``, ``settle_one``) and lease extensions (``extend``)
on top of the parts' ``Store``.

A settle is one commit for any number of items; afterwards it wakes the long polls of the
queues that got READY jobs (or a flow slot) back, emits ``events.finished`` for jobs that
reached COMPLETED or DEAD_LETTERED, ``events.scheduled`` for retries with a delay and
``events.settled`` for every call, and logs each dead-letter (rate-limited). Errors are
``sepp.server.errors`` exceptions (``LeaseRefused``, ``InvalidRequest``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from sepp.domain.ids import job_id_text
from sepp.limits import MAX_LEASE, MAX_PROGRESS_BYTES, MIN_LEASE
from sepp.quoting import clip
from sepp.server.errors import InvalidRequest, LeaseRefused
from sepp.server.parts import EngineService
from sepp.storage.base import ExtendResult, SettleKind, SettleParams, SettleResult, State

_SCHEDULED, _READY, _DEAD = int(State.SCHEDULED), int(State.READY), int(State.DEAD_LETTERED)
#: Terminal states the throughput statistics count.
_COUNTED = (int(State.COMPLETED), int(State.DEAD_LETTERED))


class Settlement(EngineService):
    """Settle and extend leases; every time read from ``parts.clock``, every commit through
    ``parts.store``, the queue policies (retry, wake on settle) from ``parts.queues``."""

    async def settle(self, items: Sequence[SettleParams]) -> list[SettleResult]:
        """Apply acks/nacks in one commit; wakes reservers of queues that got READY jobs back."""
        results = await self.store.settle(items, self.queues.policies())
        finished: dict[tuple[str, int], int] = {}
        woke: set[str] = set()
        waking: dict[str, bool] = {}  # queue → its policy's wake_on_settle, looked up once a call
        for i, (error, state, run_at, attempt, queue, _started, _type) in enumerate(results):
            if error is not None:
                continue
            wake = waking.get(queue)
            if wake is None:
                wake = waking[queue] = self.queues.policy_for(queue).wake_on_settle
            if wake:
                woke.add(queue)  # a flow-limited queue got a slot back
            if state in _COUNTED:
                if run_at:  # run_at 0: a repeated ack, counted already
                    key = (queue, state)
                    finished[key] = finished.get(key, 0) + 1
                    if state == _DEAD:
                        self._dead_lettered(items[i], queue, attempt)
            elif state == _SCHEDULED:
                self.events.scheduled(run_at)
            elif state == _READY:
                woke.add(queue)
        for (queue, state), count in finished.items():
            self.events.finished(queue, state, count)
        for name in woke:
            self.notifier.ready(name)  # jobs given back (release, retry without delay)
        self.events.settled(items, results)
        if self.job_events.active:
            self.job_events.settled(items, results)
        return results

    def _dead_lettered(self, item: SettleParams, queue: str, attempt: int) -> None:
        """The log line of a job a settle dead-lettered: its id, queue,
        attempt and reason (``nack_dead_letter`` or ``attempts_exhausted``, the metric's
        label), the error message the worker sent (else the stored reason) clipped — never the payload. At most
        ``DEAD_LOG_BURST`` lines per ``DEAD_LOG_EVERY`` seconds; the rest are counted."""
        reason = "nack_dead_letter" if item.kind is SettleKind.DEAD_LETTER else "attempts_exhausted"
        detail = clip(item.error_message or item.reason, 200)
        job_id = job_id_text(item.job_id) if len(item.job_id) == 16 else item.job_id.hex()
        self._logs.dead.log(logging.WARNING, "job %s of queue %s dead-lettered (%s, attempt %d)%s", job_id,
                           clip(repr(queue), 200), reason, attempt, f": {detail}" if detail else "",
                           extra={"event": "job_dead_lettered", "queue": queue, "job_id": job_id,
                                  "reason": reason, "attempt": attempt, "detail": detail})

    async def settle_one(self, item: SettleParams) -> SettleResult:
        """One ack/nack. Raises ``LeaseRefused`` when the lease does not hold."""
        result = (await self.settle([item]))[0]
        if result.error is not None:
            raise LeaseRefused(result.error, job_id_text(item.job_id))
        return result

    async def extend(self, job_id: bytes, lease_id: bytes, extend_by_s: float,
                     progress: str | None = None) -> ExtendResult:
        """New expiry = ``extend_by_s`` from when the store writes it (the extension is judged
        by the lease as it stood when the call came). ``progress``: the handler's latest
        progress (JSON text of at most ``MAX_PROGRESS_BYTES`` UTF-8 bytes), stored in the same
        write and announced as a live job event; refused with the extension when the lease
        does not hold. Raises ``LeaseRefused`` or ``InvalidRequest`` (fields ``extend_by``,
        ``progress``)."""
        if not MIN_LEASE <= extend_by_s <= MAX_LEASE:
            raise InvalidRequest(f"extend_by must be between {MIN_LEASE:g} and {MAX_LEASE:g} s",
                                 "extend_by", MIN_LEASE if extend_by_s < MIN_LEASE
                                 else MAX_LEASE, extend_by_s)
        if progress is not None:
            check_progress(progress)
        now = self._clock_now()
        result = await self.store.extend(job_id, lease_id, now, now + int(extend_by_s * 1_000_000), self.clock,
                                         progress)
        if result.error is not None:
            raise LeaseRefused(result.error, job_id_text(job_id))
        if progress is not None and self.job_events.active:
            self.job_events.progressed(job_id, result.queue, result.job_type, result.attempt, progress, now)
        return result


def check_progress(progress: str) -> None:
    """Refuse a progress text that is not JSON or longer than ``MAX_PROGRESS_BYTES`` UTF-8
    bytes: ``InvalidRequest`` (field ``progress``, with the limit and the size)."""
    size = len(progress) if progress.isascii() else len(progress.encode("utf-8", "surrogatepass"))
    if size > MAX_PROGRESS_BYTES:
        raise InvalidRequest(f"progress is {size} bytes of JSON; at most {MAX_PROGRESS_BYTES} are kept "
                             "(report a fraction, a few counters or a short text)", "progress",
                             MAX_PROGRESS_BYTES, size)
    try:
        json.loads(progress)
    except ValueError:
        raise InvalidRequest("progress must be JSON text (Job.set_progress encodes the value)",
                             "progress") from None


__all__ = ["Settlement", "check_progress"]
