"""The admin's job operations: read one job, list and search jobs, find a job by its
idempotency key, cancel, requeue (redrive one or in bulk) and delete.

Transport-agnostic like the rest of ``sepp.server.admin``: ``AdminEngine`` hands these out,
``BulkActions`` applies them to many jobs. Errors are ``sepp.server.errors`` exceptions
(``NotFound``, ``InvalidRequest``) and ``StateConflict`` (``admin.checks``); a store failure
propagates as ``StoreError``. Times are µs UTC, read from the server's clock (``parts.clock``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sepp.domain.admin import Outcome
from sepp.domain.ids import job_id_text
from sepp.domain.listing import DeadFilter, JobQuery
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.quoting import clip, quote
from sepp.rejections import Reason
from sepp.server.admin.checks import StateConflict, existing_queue, parse_job_id, state_name
from sepp.server.admin.cursor import decode_cursor, encode_cursor
from sepp.server.admin.views import JobListing
from sepp.server.errors import InvalidRequest, NotFound
from sepp.server.job_events import CANCELLED, REQUEUED
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueState
from sepp.storage.admin import AdminStore

#: Page sizes of ListJobs.
DEFAULT_PAGE, MAX_PAGE = 50, 1000
#: Rows one purge / redrive transaction touches at most (keeps the single writer responsive).
CHUNK = 2000
ALL_STATES = tuple(int(s) for s in State)


class JobAdmin:
    """Job inspection and the single-job and redrive writes over the node's ``ServerParts`` (store,
    queues, notifier, config and clock) and an ``AdminStore``.

    ``changed`` is called after every write that changes how many jobs a state holds (the
    admin's cached counts are read anew then).
    """

    def __init__(self, parts: ServerParts, store: AdminStore, changed: Callable[[], None]) -> None:
        self.parts = parts
        self.store = store
        self.clock = parts.clock
        self._clock_now = parts.clock.now
        self._changed = changed

    def queue(self, name: str) -> QueueState:
        """The queue, or ``NotFound`` (QUEUE_NOT_FOUND)."""
        return existing_queue(self.parts.queues, name)

    async def get_job(self, job_id: str) -> JobRecord:
        """The full job, or ``NotFound`` (JOB_NOT_FOUND); ``InvalidRequest`` for an id that is
        not a UUID."""
        rec = await self.parts.store.get_job(parse_job_id(job_id))
        if rec is None:
            raise NotFound(f"job {clip(job_id, 64)} does not exist", Reason.JOB_NOT_FOUND)
        return rec

    async def count_jobs(self, query: JobQuery) -> int:
        """How many jobs match ``query`` now. Raises ``StoreError``."""
        return await self.store.count_jobs(query)

    async def list_jobs(self, query: JobQuery, page_token: str = "", page_size: int = 0) -> JobListing:
        """One page of jobs matching ``query`` (order: see ``sepp.storage.sqlite.admin``).

        Raises ``InvalidRequest`` for a bad page size, state or token.
        """
        if page_size < 0 or page_size > MAX_PAGE:
            raise InvalidRequest(f"page_size must be between 1 and {MAX_PAGE} (0 = {DEFAULT_PAGE}; got {page_size})",
                                 "page_size", 0 if page_size < 0 else MAX_PAGE, page_size)
        if query.state is not None and query.state not in ALL_STATES:
            raise InvalidRequest(f"unknown job state {query.state}", "state")
        after = decode_cursor(query, page_token)
        try:
            page = await self.store.list_jobs(query, after, page_size or DEFAULT_PAGE,
                                              self.parts.config.search_scan_rows)
        except ValueError as exc:
            raise InvalidRequest(f"page_token is malformed: {clip(exc)}", "page_token") from None
        return JobListing(page.jobs, encode_cursor(query, page.next_key) if page.next_key is not None else "",
                          page.scan_limited, page.examined)

    async def find_by_key(self, queue: str, key: str) -> tuple[str, int, JobRecord | None]:
        """(job id, key expiry µs, the job or None if deleted) for a live idempotency key.

        Raises ``NotFound`` (IDEMPOTENCY_KEY_NOT_FOUND) when the key is not claimed (or expired).
        """
        hit = await self.store.find_idempotency(queue, key)
        if hit is None or hit[1] <= self._clock_now():
            raise NotFound(f"no live idempotency key {quote(key)} in queue {quote(queue)}",
                           Reason.IDEMPOTENCY_KEY_NOT_FOUND)
        job = await self.parts.store.get_job(hit[0])
        return job_id_text(hit[0]), hit[1], job

    async def cancel(self, job_id: str, reason: str = "") -> JobRecord:
        """SCHEDULED/READY/DEFERRED → CANCELLED; RESERVED → cancel requested (the worker sees it on
        ExtendLease). Returns the job as read after. Raises ``NotFound`` or ``StateConflict``
        (JOB_STATE)."""
        await self.cancel_outcome(job_id, reason)
        return await self.get_job(job_id)

    async def cancel_outcome(self, job_id: str, reason: str = "") -> Outcome:
        """``cancel`` without the read after: ``Outcome.DONE`` (now CANCELLED),
        ``CANCEL_REQUESTED`` (it was RESERVED) or ``UNCHANGED`` (CANCELLED already) — what the
        cancel itself did, which a read after it may no longer show (a worker can complete a
        job between the two). Raises ``NotFound`` or ``StateConflict`` (JOB_STATE)."""
        raw = parse_job_id(job_id)
        # A NUL cannot be stored as text by PostgreSQL: the free-form reason keeps U+FFFD instead.
        text = reason[:1024].replace("\x00", "\ufffd") if reason else ""
        result = await self.store.cancel(raw, self._clock_now(), self.parts.queues.policies(), text)
        if result.outcome is Outcome.NOT_FOUND:
            raise NotFound(f"job {clip(job_id, 64)} does not exist", Reason.JOB_NOT_FOUND)
        if result.outcome is Outcome.WRONG_STATE:
            raise StateConflict(Reason.JOB_STATE,
                                f"job {clip(job_id, 64)} is {state_name(result.state)}; only SCHEDULED, "
                                "READY and RESERVED jobs can be cancelled", {"state": state_name(result.state)})
        self._changed()
        if result.outcome is Outcome.DONE:
            self.parts.events.ended([raw], ())  # waits for it answer now
        if result.outcome is Outcome.DONE and self.parts.job_events.active:
            rec = await self.parts.store.get_job(raw)
            if rec is not None:
                self.parts.job_events.emit(CANCELLED, rec.id, rec.queue, rec.job_type, rec.state,
                                           rec.finished_at or self._clock_now(), rec.attempt,
                                           reason=rec.reason or "")
        return result.outcome

    async def requeue(self, job_id: str, revive_dependents: bool = True) -> JobRecord:
        """Redrive a DEAD_LETTERED or CANCELLED job (DEFERRED again if it still waits for
        dependencies) and, unless ``revive_dependents`` is False, the jobs cancelled because it
        failed (docs/workflows.md). Raises ``NotFound`` or ``StateConflict``."""
        result = await self.store.requeue(parse_job_id(job_id), self._clock_now(), revive_dependents)
        if result.outcome is Outcome.NOT_FOUND:
            raise NotFound(f"job {clip(job_id, 64)} does not exist", Reason.JOB_NOT_FOUND)
        if result.outcome is Outcome.WRONG_STATE:
            raise StateConflict(Reason.JOB_STATE, f"job {clip(job_id, 64)} is {state_name(result.state)}; only "
                                "DEAD_LETTERED and CANCELLED jobs can be requeued", {"state": state_name(result.state)})
        self.parts.notifier.ready(result.queue)
        self._changed()
        rec = await self.get_job(job_id)
        if self.parts.job_events.active:
            self.parts.job_events.emit(REQUEUED, rec.id, rec.queue, rec.job_type, rec.state, self._clock_now(),
                                       rec.attempt, reason="requeued", run_at=rec.run_at)
        return rec

    async def requeue_dead(self, where: DeadFilter, dry_run: bool = False, max_jobs: int = 0,
                           revive_dependents: bool = True) -> tuple[int, int]:
        """Bulk redrive: (matched, requeued). Only jobs dead-lettered before the call started
        are taken, so a job that fails again meanwhile is not redriven twice. Unless
        ``revive_dependents`` is False, the jobs cancelled because they failed wait again."""
        if max_jobs < 0:
            raise InvalidRequest(f"max_jobs must not be negative (0 = every match; got {max_jobs})", "max_jobs", 0,
                                 max_jobs)
        now = self._clock_now()
        before = now + 1 if where.before is None else min(where.before, now + 1)
        snapshot = DeadFilter(where.queue, where.job_type, where.reason_prefix, where.after, before)
        matched = await self.store.count_dead(snapshot)
        if dry_run or matched == 0:
            return matched, 0
        goal = matched if max_jobs == 0 else min(max_jobs, matched)
        done = 0
        while done < goal:
            at = self._clock_now()
            jobs = await self.store.requeue_dead(snapshot, at, min(CHUNK, goal - done), revive_dependents)
            for name in sorted({queue for _id, queue, _type in jobs}):
                self.parts.notifier.ready(name)
            if jobs and self.parts.job_events.active:
                self.parts.job_events.redriven(jobs, at)
            done += len(jobs)
            if not jobs:
                break
        self._changed()
        return matched, done

    async def delete_job(self, job_id: str, state: int | None = None) -> None:
        """Delete one job in any state (a RESERVED one of a flow-limited queue wakes this
        node's long-polls of it: its slot is free); with ``state`` only while the job is in
        that state (a ticked row, a bulk run: ``AdminStore.delete_job``). Raises
        ``NotFound``, or ``StateConflict`` (JOB_STATE) for a job in another state than
        ``state``."""
        raw = parse_job_id(job_id)
        result = await self.store.delete_job(raw, state)
        if result.outcome is Outcome.NOT_FOUND:
            raise NotFound(f"job {clip(job_id, 64)} does not exist", Reason.JOB_NOT_FOUND)
        if result.outcome is Outcome.WRONG_STATE:
            raise StateConflict(Reason.JOB_STATE, f"job {clip(job_id, 64)} is {state_name(result.state)}, no longer "
                                f"{state_name(state or 0)}; not deleted", {"state": state_name(result.state)})
        self._changed()
        self.freed(result.queue, (result.state,))
        self.parts.events.ended([raw], ())  # waits for it learn it is gone

    def freed(self, name: str, states: Iterable[int]) -> None:
        """Wake this node's long-polls of a flow-limited queue ``name`` when jobs in ``states``
        were deleted and RESERVED is among them (their slots are free)."""
        q = self.parts.queues.get(name)
        if q is not None and q.flow is not None and int(State.RESERVED) in states:
            self.parts.notifier.ready(name)
