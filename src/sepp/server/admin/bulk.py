"""Bulk actions over jobs: cancel, requeue (redrive) or delete a selection
of jobs, or every job that matches a listing's filter, with progress.

Semantics are not duplicated: each job goes through the admin's own single-job
operation (``JobAdmin.cancel`` / ``requeue`` / ``delete_job``) — or, for a requeue of
every matching DEAD_LETTERED job, its own bulk redrive (``JobAdmin.requeue_dead``, the
operation behind ``RequeueDeadLettered`` and the dead-letter page) — so a bulk cancel of a
RESERVED job asks its worker exactly as a single cancel does, a bulk requeue resets the
attempt and keeps the history exactly as a single requeue does, and a job whose state no
longer allows the action is skipped with the same refusal (counted, not fatal).

Bounded (documented choice, docs/decisions.md "Bulk actions"):

* a selection holds at most ``MAX_SELECTED`` job ids and runs within the request;
* "every job matching the filter" first counts the matches (``count``: the dry run), and a
  run (``start``) then walks the listing (``JobAdmin.list_jobs``, keyset pages of
  ``chunk`` jobs) and applies the operation to each job, at most ``concurrency`` at a time.
  Every operation is its own short transaction (on SQLite they share group commits), so
  1,000,000 jobs never sit in one transaction and the single writer stays responsive. A
  requeue of dead letters instead calls the bulk redrive ``REDRIVE_STEP`` jobs at a time
  (``jobs.CHUNK`` = 2,000 jobs a commit): the same bound, ~10× the pace;
* a run touches at most the number of jobs the operator confirmed (the dry-run count),
  so it ends even while producers keep adding matching jobs; for the finished states
  (COMPLETED, DEAD_LETTERED, CANCELLED) it only takes jobs that finished before the count
  (a requeued job that fails again meanwhile is not requeued twice);
* at most ``MAX_RUNNING`` runs at once per node; the last ``KEEP_RUNS`` are kept (in memory,
  on the node that runs them) for their progress pages. A stopping server stops its runs
  between two operations.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from sepp.domain.admin import Outcome
from sepp.domain.ids import job_id_text
from sepp.domain.listing import DeadFilter, JobQuery
from sepp.domain.states import FINISHED, State
from sepp.quoting import clip, quote
from sepp.server.admin.checks import StateConflict
from sepp.server.admin.jobs import JobAdmin
from sepp.server.errors import InvalidRequest, NotFound

log = logging.getLogger("sepp.admin")

Action = Literal["cancel", "requeue", "delete"]
#: The actions and the states whose jobs each applies to (what the single-job operations accept).
ACTION_STATES: dict[str, tuple[int, ...]] = {
    "cancel": (int(State.SCHEDULED), int(State.READY), int(State.RESERVED)),
    "requeue": (int(State.DEAD_LETTERED), int(State.CANCELLED)),
    "delete": tuple(int(s) for s in State),
}
#: Most job ids one selection may hold.
MAX_SELECTED = 1000
#: Jobs listed per page of a run, and single-job operations in flight at once.
CHUNK, CONCURRENCY = 500, 32
#: Runs at once per node, and finished runs kept for their progress pages.
MAX_RUNNING, KEEP_RUNS = 4, 20
#: The cancel reason a bulk cancel records.
BULK_CANCEL_REASON = "cancelled in bulk (admin UI)"
_FINISHED = tuple(int(s) for s in FINISHED)
_DEAD = int(State.DEAD_LETTERED)
#: ``_one``'s answer for a cancel that found its job RESERVED: requested, not done.
REQUESTED = "cancel requested"
#: Jobs one bulk-redrive call takes (a few of the engine's commits; the progress step).
REDRIVE_STEP = 10_000


@dataclass(slots=True)
class BulkOutcome:
    """What a selection or a run did: ``done`` jobs changed; ``requested`` jobs a cancel
    found RESERVED (a worker runs them: their cancel is *requested*, the worker may still
    complete them — counted apart, not as cancelled); ``skipped`` jobs that were gone or
    whose state no longer allowed the action, by why (``"gone"``, ``"were READY"``, …)."""

    done: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    requested: int = 0

    def requested_text(self) -> str:
        """``12 running: cancel requested``, or ``""`` when none was."""
        return f"{self.requested:,} running: cancel requested" if self.requested else ""

    @property
    def skipped_total(self) -> int:
        """Every skipped job."""
        return sum(self.skipped.values())

    def skipped_text(self) -> str:
        """``3 skipped (2 were READY, 1 gone)``, or ``""`` when none was skipped."""
        if not self.skipped:
            return ""
        parts = ", ".join(f"{n:,} {why}" for why, n in self.skipped.most_common())
        return f"{self.skipped_total:,} skipped ({parts})"


@dataclass(slots=True)
class BulkRun:
    """One "every matching job" run: its filter (``query``, the finished-state snapshot
    applied), ``expected`` jobs at most, how many it has taken (``seen``) and what it did
    (``outcome``). Times µs UTC; ``error`` set when it stopped early."""

    id: str
    action: str
    query: JobQuery
    expected: int
    started_at: int
    seen: int = 0
    outcome: BulkOutcome = field(default_factory=BulkOutcome)
    finished_at: int | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = None

    @property
    def finished(self) -> bool:
        """Whether the run has ended (done, failed or stopped)."""
        return self.finished_at is not None

    def rate(self, now: int) -> float:
        """Jobs taken per second so far."""
        end = self.finished_at if self.finished_at is not None else now
        seconds = max(1e-6, (end - self.started_at) / 1e6)
        return self.seen / seconds


class BulkActions:
    """Bulk cancel / requeue / delete over the admin's job operations (``JobAdmin``; see the
    module docstring). Transport-agnostic: the web UI calls it in-process (``AdminEngine.bulk``)."""

    def __init__(self, jobs: JobAdmin, *, chunk: int = CHUNK, concurrency: int = CONCURRENCY) -> None:
        self.jobs = jobs
        self.chunk = chunk
        self.concurrency = concurrency
        self._runs: dict[str, BulkRun] = {}

    # ------------------------------------------------------------------ checks

    @staticmethod
    def check(action: str, state: int | None) -> Action:
        """``action`` when it applies to jobs in ``state``; else ``InvalidRequest``."""
        states = ACTION_STATES.get(action)
        if states is None:
            raise InvalidRequest(f"unknown bulk action {quote(action)} (cancel, requeue or delete)", "action")
        if state is None or state not in states:
            raise InvalidRequest(f"jobs in this state cannot be {_verb(action)}", "state")
        return action  # type: ignore[return-value]

    def snapshot(self, query: JobQuery) -> JobQuery:
        """``query`` bounded to the jobs that finished by now (finished states only)."""
        if query.state not in _FINISHED:
            return query
        now = self.jobs.clock.now() + 1
        before = now if query.finished_before is None else min(query.finished_before, now)
        return replace(query, finished_before=before)

    async def count(self, action: str, query: JobQuery) -> tuple[JobQuery, int]:
        """The dry run: (the query a run would use, how many jobs match it now). ``query``
        needs a queue (``NotFound`` if unknown) and a state the action applies to
        (``InvalidRequest``). Raises ``StoreError``."""
        self.check(action, query.state)
        if query.queue is None:
            raise InvalidRequest("a bulk action needs a queue", "queue")
        self.jobs.queue(query.queue)
        query = self.snapshot(query)
        return query, await self.jobs.count_jobs(query)

    # ------------------------------------------------------------------ one job, a selection

    async def _one(self, action: str, job_id: str, state: int | None = None) -> str | None:
        """Apply ``action`` to one job with the engine's own operation; None when done,
        ``REQUESTED`` when a cancel found the job RESERVED (only requested), else why it was
        skipped. A delete takes the job only while it is still in ``state`` (the state of
        the listing it was picked from, when given): one that left it since is skipped like
        any other refusal. A store failure propagates."""
        admin = self.jobs
        try:
            if action == "cancel":
                if await admin.cancel_outcome(job_id, BULK_CANCEL_REASON) is Outcome.CANCEL_REQUESTED:
                    return REQUESTED
            elif action == "requeue":
                await admin.requeue(job_id)
            else:
                await admin.delete_job(job_id, state)
        except NotFound:
            return "gone"
        except StateConflict as exc:
            return f"were {exc.metadata.get('state', 'in another state')}"
        except InvalidRequest:
            return "not a job id"
        return None

    async def _apply(self, action: str, job_ids: Sequence[str], outcome: BulkOutcome, state: int | None,
                     progress: BulkRun | None = None) -> None:
        step = self.concurrency
        for start in range(0, len(job_ids), step):
            part = job_ids[start:start + step]
            for why in await asyncio.gather(*(self._one(action, j, state) for j in part)):
                if why is None:
                    outcome.done += 1
                elif why is REQUESTED:
                    outcome.requested += 1
                else:
                    outcome.skipped[why] += 1
            if progress is not None:
                progress.seen += len(part)

    async def apply(self, action: str, state: int | None, job_ids: Sequence[str]) -> BulkOutcome:
        """Apply ``action`` to the selected jobs (listed in ``state``), each with the engine's
        single-job operation; at most ``MAX_SELECTED`` ids (``InvalidRequest`` beyond; a repeated
        id counts once). Raises ``StoreError`` (the jobs before the failure stay changed)."""
        self.check(action, state)
        ids = list(dict.fromkeys(job_ids))
        if len(ids) > MAX_SELECTED:
            raise InvalidRequest(f"select at most {MAX_SELECTED:,} jobs (got {len(ids):,}); use \"every matching "
                                 "job\" for more", "job_id", MAX_SELECTED, len(ids))
        outcome = BulkOutcome()
        await self._apply(action, ids, outcome, state)
        log.info("bulk %s of %d selected job(s): %d done%s%s", action, len(ids), outcome.done,
                 f", {outcome.requested_text()}" if outcome.requested else "",
                 f", {outcome.skipped_text()}" if outcome.skipped else "",
                 extra={"event": "bulk_action", "action": action, "jobs": len(ids), "done": outcome.done})
        return outcome

    # ------------------------------------------------------------------ runs over a filter

    def running(self) -> int:
        """Runs not finished yet."""
        return sum(not r.finished for r in self._runs.values())

    def run(self, run_id: str) -> BulkRun | None:
        """A run by id (None when unknown or forgotten)."""
        return self._runs.get(run_id)

    async def start(self, action: str, query: JobQuery, confirmed: int) -> BulkRun:
        """Start applying ``action`` to the jobs matching ``query`` in the background: at most
        ``confirmed`` of them (the count the operator confirmed) and at most as many as match
        now. Raises what ``count`` raises, and ``InvalidRequest`` when ``MAX_RUNNING`` runs are
        busy or ``confirmed`` is negative."""
        if confirmed < 0:
            raise InvalidRequest(f"the confirmed count must not be negative (got {confirmed})", "expected", 0,
                                 confirmed)
        if self.running() >= MAX_RUNNING:
            raise InvalidRequest(f"{MAX_RUNNING} bulk actions are running on this node; wait for one to finish",
                                 "action")
        query, matched = await self.count(action, query)
        run = BulkRun(secrets.token_urlsafe(12), action, query, min(confirmed, matched), self.jobs.clock.now())
        self._remember(run)
        run.task = asyncio.create_task(self._run(run), name=f"sepp-bulk-{run.id}")
        log.info("bulk %s of every %s job of type %s in queue %s started: %d job(s)", action,
                 STATE_LABELS.get(query.state or 0, "?"), quote(query.job_type or "any"), quote(query.queue or ""),
                 run.expected, extra={"event": "bulk_started", "action": action, "run": run.id,
                                      "queue": query.queue, "jobs": run.expected})
        return run

    def _remember(self, run: BulkRun) -> None:
        self._runs[run.id] = run
        done = [r for r in self._runs.values() if r.finished]
        for old in done[:max(0, len(self._runs) - KEEP_RUNS)]:
            del self._runs[old.id]

    async def _redrive(self, run: BulkRun) -> None:
        """A requeue of DEAD_LETTERED jobs: the engine's own bulk redrive
        (``JobAdmin.requeue_dead``: ``jobs.CHUNK`` jobs a commit), one call per
        ``REDRIVE_STEP`` jobs for the progress, the run's snapshot as its upper bound."""
        q = run.query
        where = DeadFilter(q.queue, q.job_type, None, q.finished_after, q.finished_before)
        while run.seen < run.expected:
            _matched, n = await self.jobs.requeue_dead(where, max_jobs=min(REDRIVE_STEP, run.expected - run.seen))
            if n == 0:
                break
            run.seen += n
            run.outcome.done += n

    async def _walk(self, run: BulkRun) -> None:
        """Any other run: the listing's keyset pages, each job through its single-job operation."""
        token = ""
        while run.seen < run.expected:
            page = await self.jobs.list_jobs(run.query, token, min(self.chunk, run.expected - run.seen))
            if not page.jobs:
                break
            await self._apply(run.action, [job_id_text(s.record.id) for s in page.jobs], run.outcome, run.query.state,
                              run)
            token = page.next_token
            if not token:
                break

    async def _run(self, run: BulkRun) -> None:
        try:
            if run.action == "requeue" and run.query.state == _DEAD:
                await self._redrive(run)
            else:
                await self._walk(run)
        except asyncio.CancelledError:
            run.error = "stopped: the server is shutting down"
            raise
        except Exception as exc:
            run.error = clip(f"{type(exc).__name__}: {exc}", 300)
            log.warning("bulk %s run %s stopped after %d job(s): %s", run.action, run.id, run.seen, run.error)
        finally:
            run.finished_at = self.jobs.clock.now()
            log.info("bulk %s run %s ended: %d of %d job(s) done%s%s", run.action, run.id, run.outcome.done,
                     run.expected, f", {run.outcome.requested_text()}" if run.outcome.requested else "",
                     f", {run.outcome.skipped_text()}" if run.outcome.skipped else "",
                     extra={"event": "bulk_finished", "action": run.action, "run": run.id, "done": run.outcome.done})

    async def wait(self, run_id: str) -> BulkRun | None:
        """Wait until a run ends (tests, and a caller that wants the result)."""
        run = self._runs.get(run_id)
        if run is not None and run.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(run.task)
        return run

    async def stop(self) -> None:
        """Stop every running run (between two operations). Idempotent."""
        tasks = [r.task for r in self._runs.values() if r.task is not None and not r.task.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


#: States as the log lines spell them.
STATE_LABELS = {int(s): s.name for s in State}


def _verb(action: str) -> str:
    return {"cancel": "cancelled", "requeue": "requeued", "delete": "deleted"}.get(action, action)
