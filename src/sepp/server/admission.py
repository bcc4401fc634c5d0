"""Admission: enqueue, batch and atomic enqueue, and the plain fast path — protobuf requests
in, validated with the shared ``Validator``, rows built and handed to the store (one commit
per call), acks out.

Transport-agnostic: errors are ``sepp.server.errors`` exceptions (``JobRejected``,
``AtomicRejected``, ``InvalidRequest``, ``BacklogFull``) that ``rpc.status`` maps to the wire.
Everything it shares with the other services (clock, store, queues, notifier, events,
limits, log lines) comes from ``ServerParts``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from itertools import islice, repeat
from typing import Any, cast

from uuid_utils import UUID

from sepp.api.v1 import common_pb2 as pb
from sepp.domain.ids import job_id_text
from sepp.limits import QueueLimits
from sepp.rejections import RejectionCode
from sepp.server.custom_index import index_entries
from sepp.server.errors import AtomicRejected, BacklogFull, InvalidRequest, JobRejected
from sepp.server.fast_rows import job_row, plain_rows
from sepp.server.parts import EngineService, ServerParts
from sepp.storage.base import Dedups, JobRow, QueueRecord, State
from sepp.storage.dependencies import CANCEL, RUN, WAIT
from sepp.storage.errors import DependencyMissing
from sepp.storage.search import CustomEntry
from sepp.validation import Checked, dependency_ids, server_fix

_SCHEDULED, _READY = int(State.SCHEDULED), int(State.READY)
_DNF = RejectionCode.DEPENDENCY_NOT_FOUND.to_wire()

#: A stored (or deduplicated) job as the engine reports it: (job id text, deduplicated).
Ack = tuple[str, bool]

#: ``EnqueueRequest.on_dependency_failure`` → the store's policy (``storage.dependencies``).
POLICY_OF = {pb.DEPENDENCY_FAILURE_UNSPECIFIED: CANCEL, pb.DEPENDENCY_FAILURE_CANCEL: CANCEL,
             pb.DEPENDENCY_FAILURE_RUN: RUN, pb.DEPENDENCY_FAILURE_WAIT: WAIT}


class Deps(dict[int, list[bytes]]):
    """The dependencies of the rows of one enqueue call: row index → the 16-byte ids it
    depends on; ``policies``: row index → its failure policy, for the rows that are not
    "cancel" (``Store.enqueue``'s ``depends_on`` and ``on_failure``)."""

    def __init__(self) -> None:
        super().__init__()
        self.policies: dict[int, int] = {}

    def keep(self, kept: list[int]) -> None:
        """Re-index after the rows ``kept`` (old indexes, in their new order) are all that is left."""
        moved = {new: self[old] for new, old in enumerate(kept) if old in self}
        policies = {new: self.policies[old] for new, old in enumerate(kept) if old in self.policies}
        self.clear()
        self.update(moved)
        self.policies = policies


def dependency_rejection(job_id: bytes) -> pb.Rejection:
    """``DependencyNotFound`` naming ``job_id`` (16 bytes): a dependency that is no stored job."""
    return pb.Rejection(code=_DNF, field="depends_on",  # type: ignore[arg-type]
                        message=f"job {job_id_text(job_id)} in depends_on does not exist (never enqueued, or "
                                "purged after its retention)")


def expand_plain(plain: Sequence[pb.PlainJobs]) -> list[pb.EnqueueRequest]:
    """The ``EnqueueRequest`` each job of ``plain`` stands for, in order (a run's job is
    queue, job type and a payload of its data and the run's encoding; nothing else set)."""
    return [pb.EnqueueRequest(queue=run.queue, job_type=run.job_type,
                              payload=pb.Payload(data=data, encoding=run.encoding))
            for run in plain for data in run.data]


class Admission(EngineService):
    """Enqueue on top of the parts' ``Store``: ``enqueue`` (one job), ``enqueue_batch`` (best
    effort, with the plain fast path), ``enqueue_atomic`` (all or nothing).

    Every enqueue reads the time once from ``parts.clock``; a call is shed with
    ``BacklogFull`` when the store's commit backlog would pass ``max_commit_backlog``. After
    each commit it emits ``events.stored`` (and ``events.scheduled`` with the earliest run_at
    of new SCHEDULED jobs) and wakes the long polls of the queues that got READY jobs.
    """

    def __init__(self, parts: ServerParts) -> None:
        super().__init__(parts)  # the enqueue path reads the time once per call, through _clock_now
        self.config = parts.config
        self.validator = parts.validator
        self._max_backlog = parts.config.max_commit_backlog

    def _check_backlog(self, jobs: int) -> None:
        """Raise ``BacklogFull`` (logged, rate-limited; ``events.overloaded``) when ``jobs``
        more would pass the commit backlog limit and the store has a backlog at all."""
        backlog = self.store.backlog
        if backlog + jobs > self._max_backlog and backlog > 0:
            self.events.overloaded(jobs)
            self._logs.overload.log(
                logging.WARNING, "overloaded: %d job(s) refused with OVERLOADED (commit backlog %d, "
                "max_commit_backlog %d; clients retry after %g s)", jobs, backlog, self._max_backlog,
                self.config.overload_retry_after,
                extra={"event": "overload", "count": jobs, "backlog": backlog, "max_commit_backlog": self._max_backlog})
            raise BacklogFull(self.config.overload_retry_after, backlog)

    def _build(self, req: pb.EnqueueRequest, checked: Checked, now: int,
               new_queues: list[QueueRecord], custom: list[CustomEntry], uid: UUID,
               deps: Deps | None = None, index: int = 0) -> tuple[JobRow, str, int]:
        """Row for a validated request (``checked``: what ``Validator.check`` read from it)
        with id ``uid`` (``Store.new_job_ids``), its id text and its dedup deadline (µs, 0 =
        no key).

        Registers an on-demand queue (non-strict mode) and adds it to ``new_queues``
        until it is persisted; appends the job's custom-index entries to ``custom``
        (``index_entries``; a job without a custom map adds none and costs one test). A job
        with dependencies adds their ids to ``deps`` under ``index``, its row's index in the call.
        """
        name, job_type, data, encoding, priority, max_attempts, at_ns, has_extras, key = checked
        q = self.queues.get(name)
        if q is None:
            q = self.queues.on_demand(name)
        if not q.persisted and all(r.name != name for r in new_queues):
            new_queues.append(q.record())
        settings = q.settings
        if priority is None:
            priority = settings.default_priority
        if max_attempts is None:
            max_attempts = settings.default_max_attempts
        state, run_at = _READY, now
        if at_ns is not None:
            at = at_ns // 1000
            if at > now:  # run_at = max(scheduled_at, enqueue time)
                state, run_at = _SCHEDULED, at
        extras = None
        if has_extras:
            extras = pb.EnqueueRequest(custom=req.custom, trace_context=req.trace_context).SerializeToString()
        if has_extras and req.custom:
            custom.extend(index_entries(uid.bytes, req.custom))
        row = job_row((uid.bytes, name, job_type, state, priority, run_at, now, max_attempts, data, encoding, extras,
                       key))
        if req.depends_on and deps is not None:
            deps[index] = cast("list[bytes]", dependency_ids(req.depends_on))
            policy = POLICY_OF.get(req.on_dependency_failure, CANCEL)
            if policy != CANCEL:
                deps.policies[index] = policy
        return row, str(uid), (now + q.dedup_us if key else 0)

    def build_rows(self, reqs: Sequence[pb.EnqueueRequest], verdicts: Sequence[Any], uids: Sequence[UUID],
                   now: int) -> tuple[list[JobRow], list[QueueRecord], list[CustomEntry], Deps]:
        """``_build`` for each of ``reqs`` (all valid: ``verdicts`` their ``Checked``, ``uids``
        their ids) as rows of one call (a workflow's nodes, an ack's children): the rows, the
        queues to create, the custom-index entries and the dependencies by row index."""
        new_queues: list[QueueRecord] = []
        custom: list[CustomEntry] = []
        deps = Deps()
        rows = [self._build(req, cast("Checked", checked), now, new_queues, custom, uid, deps, i)[0]
                for i, (req, checked, uid) in enumerate(zip(reqs, verdicts, uids, strict=True))]
        return rows, new_queues, custom, deps

    async def _commit(self, rows: list[JobRow], dedup_until: list[int], now: int,
                      new_queues: list[QueueRecord], custom: list[CustomEntry],
                      deps: Deps | None = None) -> Dedups:
        """Store ``rows`` in one commit, then tell: ``events.stored``, new queues persisted,
        READY queues' reservers woken, ``events.scheduled``. Returns the store's dedups.
        ``deps``: row index → the ids it depends on. Raises ``DependencyMissing`` (nothing
        stored) when one is no stored job."""
        dedups = await self.store.enqueue(rows, dedup_until, now, new_queues, custom, deps or None,
                                          deps.policies if deps else None)
        self.stored(rows, dedups, new_queues)
        return dedups

    def stored(self, rows: list[JobRow], dedups: Dedups, new_queues: list[QueueRecord]) -> None:
        """Tell of ``rows`` just committed (``dedups``: those deduplicated instead):
        ``events.stored``, the live job events, new queues persisted, READY queues'
        reservers woken, ``events.scheduled``."""
        self.events.stored(rows, dedups)
        if self.job_events.active:
            self.job_events.enqueued(rows, dedups)
        if new_queues:
            # A local change (generation): a cluster refresh that read the rows before this
            # commit must not apply them, or it would forget these queues, now persisted but
            # absent from its read, as deleted elsewhere (their READY jobs then reservable
            # from no queue until the next refresh).
            self.queues.touch()
        for rec in new_queues:
            q = self.queues.get(rec.name)
            if q is not None:
                q.persisted = True
        earliest = 0
        woke: set[str] = set()
        for i, row in enumerate(rows):
            if row.state == _READY:
                woke.add(row.queue)
            elif (earliest == 0 or row.run_at < earliest) and i not in dedups:
                earliest = row.run_at
        for name in woke:
            self.notifier.ready(name)
        if earliest:
            self.events.scheduled(earliest)

    async def enqueue(self, req: pb.EnqueueRequest) -> pb.EnqueueAck:
        """Validate and store one job. Raises ``JobRejected`` or ``BacklogFull``."""
        now = self._clock_now()
        self.queues.begin_admission()
        checked = self.validator.check(req, now * 1000)
        if type(checked) is pb.Rejection:
            self.events.rejected(((req.queue, checked),))
            raise JobRejected(checked)
        # The backlog is checked before the id and again after it: a wait for the id (a
        # PostgreSQL node's block of seqs) counts in the store's backlog, so requests arriving
        # meanwhile are shed, and those that waited would otherwise all pass at once.
        self._check_backlog(1)
        uid = (await self.store.new_job_ids(1))[0]
        self._check_backlog(1)
        new_queues: list[QueueRecord] = []
        custom: list[CustomEntry] = []
        deps = Deps()
        row, text, until = self._build(req, checked, now, new_queues, custom, uid, deps)
        try:
            dedups = await self._commit([row], [until], now, new_queues, custom, deps)
        except DependencyMissing as exc:
            rejection = dependency_rejection(exc.missing[0])
            self.events.rejected(((req.queue, rejection),))
            raise JobRejected(rejection) from None
        if dedups:
            return pb.EnqueueAck(job_id=job_id_text(dedups[0][0]), deduplicated=True)
        return pb.EnqueueAck(job_id=text)

    def _plain_count(self, plain: Sequence[pb.PlainJobs]) -> int:
        """The number of jobs in ``plain``; ``InvalidRequest`` (field ``plain``) for more runs
        than ``max_enqueue_batch``: runs without data hold no job, and would otherwise let one
        request make the server check any number of (queue, job type, encoding) shapes."""
        cap = self.limits.max_enqueue_batch
        if len(plain) > cap:
            raise InvalidRequest(f"a batch holds at most {cap} runs of plain jobs{server_fix('max_enqueue_batch')}",
                                 "plain", cap, len(plain))
        return sum(len(run.data) for run in plain)

    def _check_count(self, n: int) -> None:
        """Refuse a batch of ``n`` jobs outside 1..``max_enqueue_batch`` (``InvalidRequest``,
        field ``jobs``)."""
        cap = self.limits.max_enqueue_batch
        if n == 0:
            raise InvalidRequest("a batch needs at least one job", "jobs", cap, 0)
        if n > cap:
            raise InvalidRequest(f"a batch holds at most {cap} jobs{server_fix('max_enqueue_batch')}", "jobs", cap, n)

    def _plain_cap(self, queue: str, job_type: str, encoding: str, now_ns: int) -> int:
        """The largest payload (bytes) with which a plain request of ``queue``, ``job_type``
        and payload ``encoding`` (nothing but those and the payload set) passes every check,
        or -1 when such a request fails a check other than the payload size.

        A plain request meets only checks 1–6 of the catalogue, and only check 5 (the payload
        size) depends on its data: the full check of a probe with empty data decides the rest.
        Valid for one enqueue call: the registry does not change while its jobs are checked
        (no await), and a queue name admitted or refused stays so until ``begin_admission``."""
        probe = pb.EnqueueRequest(queue=queue, job_type=job_type, payload=pb.Payload(encoding=encoding))
        if type(self.validator.check(probe, now_ns)) is pb.Rejection:
            return -1
        limits = self.queues.limits_for(queue)
        return limits.max_payload_bytes if isinstance(limits, QueueLimits) else -1

    def _plain_runs(self, plain: Sequence[pb.PlainJobs], caps: dict[tuple[str, str, str], int],
                    now_ns: int) -> list[tuple[pb.PlainJobs, list[bytes]]] | None:
        """Each run of ``plain`` with its data when every job of every run passes every check
        (``_plain_cap``: one check per run, then one ``max`` over the sizes), else None: then
        the caller checks each job alone (``expand_plain``), so a failing job gets exactly the
        rejection it would get sent as an ``EnqueueRequest``."""
        runs: list[tuple[pb.PlainJobs, list[bytes]]] = []
        for run in plain:
            key = (run.queue, run.job_type, run.encoding)
            cap = caps.get(key)
            if cap is None:
                cap = caps[key] = self._plain_cap(run.queue, run.job_type, run.encoding, now_ns)
            datas = list(run.data)
            if datas and (cap < 0 or max(map(len, datas)) > cap):
                return None
            runs.append((run, datas))
        return runs

    async def enqueue_batch(self, reqs: Sequence[pb.EnqueueRequest],
                            min_dedup_us: Sequence[int] | None = None,
                            plain: Sequence[pb.PlainJobs] = ()) -> list[pb.Rejection | Ack]:
        """Best effort: each job validated alone; the valid ones stored in one commit.

        ``plain``: more jobs, by column (``EnqueueBatchRequest.plain``): they follow ``reqs``,
        run after run, each exactly the plain ``EnqueueRequest`` it stands for. When every one
        passes, each run is checked once and its rows built column by column; otherwise every
        run is expanded into requests (``expand_plain``) and each job checked alone.

        ``min_dedup_us`` (in-process callers only; one per request, µs): the shortest claim
        each request's idempotency key gets — its queue's ``dedup_window`` or this, whichever
        is longer. The periodic scheduler passes the span in which another node (or this one
        after a restart) may still fire the same tick, so a queue with a short or zero
        window still gets one job per tick.

        Returns one ``(job_id, deduplicated)`` or ``Rejection`` per job, in order. Raises
        ``InvalidRequest`` for an empty or over-cap batch and ``BacklogFull`` when the
        commit backlog is full (then nothing is stored).

        A plain request (queue, job type and payload, nothing else set) is checked through a
        memo of ``_plain_cap`` per (queue, job type, encoding) — its verdict is the full
        check's, for a fraction of the cost — and its row built from a memo of its queue's
        defaults; any other request goes through ``Validator.check`` and ``_build``.
        """
        n_plain = self._plain_count(plain) if plain else 0
        self._check_count(len(reqs) + n_plain)
        now = self._clock_now()
        now_ns = now * 1000
        self.queues.begin_admission()
        check = self.validator.check
        caps: dict[tuple[str, str, str], int] = {}
        runs: list[tuple[pb.PlainJobs, list[bytes]]] = []
        if n_plain:
            passed = self._plain_runs(plain, caps, now_ns)
            if passed is None:
                reqs = [*reqs, *expand_plain(plain)]
                if min_dedup_us is not None:
                    min_dedup_us = [*min_dedup_us, *([0] * n_plain)]
            else:
                runs = passed
        out: list[pb.Rejection | Ack] = []
        rows: list[JobRow] = []
        untils: list[int] = []
        slots: list[int] = []
        deps = Deps()
        new_queues: list[QueueRecord] = []
        custom: list[CustomEntry] = []
        # Pass 1, the verdicts (nothing created or registered yet): a Rejection, a Checked
        # tuple, or, for a valid plain request, its (queue, job type, encoding) key with its
        # data in ``datas`` (None for every other request).
        verdicts: list[Any] = []
        datas: list[bytes | None] = []
        valid = 0
        for req in reqs:
            has = req.HasField
            if (not req.idempotency_key and not req.custom and not req.trace_context and not has("priority")
                    and not has("max_attempts") and not has("scheduled_at") and not req.depends_on):
                payload = req.payload
                data = payload.data
                key = (req.queue, req.job_type, payload.encoding)
                cap = caps.get(key)
                if cap is None:
                    cap = caps[key] = self._plain_cap(key[0], key[1], key[2], now_ns)
                if len(data) <= cap:
                    verdicts.append(key)
                    datas.append(data)
                    valid += 1
                    continue
            verdict = check(req, now_ns)
            verdicts.append(verdict)
            datas.append(None)
            if type(verdict) is not pb.Rejection:
                valid += 1
        stored = valid + (n_plain if runs else 0)
        ids: Iterator[UUID] = iter(())
        if stored:
            # Shed before building: _build registers on-demand queues (nothing of
            # a shed request may be stored or created).
            self._check_backlog(stored)  # before and after the ids: see enqueue
            ids = iter(await self.store.new_job_ids(stored))
            self._check_backlog(stored)
        if valid < len(verdicts):
            self.events.rejected([(req.queue, v) for req, v in zip(reqs, verdicts, strict=True)
                                  if type(v) is pb.Rejection])
        # Pass 2, the rows.
        build, row_of = self._build, job_row
        append_out, append_row, append_until, append_slot = out.append, rows.append, untils.append, slots.append
        defaults_of: dict[tuple[str, str, str], tuple[int, int]] = {}
        for i, (req, verdict, blob) in enumerate(zip(reqs, verdicts, datas, strict=True)):
            if blob is not None:
                defaults = defaults_of.get(verdict)
                if defaults is None:
                    defaults = defaults_of[verdict] = self._plain_defaults(verdict[0], new_queues)
                uid = next(ids)
                append_slot(len(out))
                append_out((str(uid), False))
                append_row(row_of((uid.bytes, verdict[0], verdict[1], _READY, defaults[0], now, now, defaults[1],
                                   blob, verdict[2], None, None)))
                append_until(0)
                continue
            if type(verdict) is pb.Rejection:
                append_out(verdict)
                continue
            row, text, until = build(req, verdict, now, new_queues, custom, next(ids), deps, len(rows))
            if until and min_dedup_us is not None:
                until = max(until, now + min_dedup_us[i])
            append_slot(len(out))
            append_out((text, False))
            append_row(row)
            append_until(until)
        for run, blobs in runs:
            self._plain_rows(run, blobs, now, new_queues, out, rows, slots, ids)
            untils.extend(repeat(0, len(blobs)))
        if rows:
            dedups = await self._commit_best_effort(rows, untils, now, new_queues, custom, deps, slots, out)
            for i, (original, _state) in dedups.items():
                out[slots[i]] = (job_id_text(original), True)
        return out

    async def _commit_best_effort(self, rows: list[JobRow], untils: list[int], now: int,
                                  new_queues: list[QueueRecord], custom: list[CustomEntry],
                                  deps: Deps, slots: list[int],
                                  out: list[pb.Rejection | Ack]) -> Dedups:
        """``_commit`` for a best-effort batch: a row whose dependency is no stored job gets
        its ``DependencyNotFound`` in ``out`` (at ``slots[i]``) and the others are stored
        without it (the store wrote nothing of the refused call). ``slots`` is left matching
        the rows stored. The dedups, by index of the rows stored."""
        while True:
            try:
                return await self._commit(rows, untils, now, new_queues, custom, deps)
            except DependencyMissing as exc:
                refused = exc.missing
                self.events.rejected([(rows[i].queue, dependency_rejection(dep)) for i, dep in refused.items()])
                for i, dep in refused.items():
                    out[slots[i]] = dependency_rejection(dep)
                keep = [i for i in range(len(rows)) if i not in refused]
                gone = {rows[i].id for i in refused}
                rows[:] = [rows[i] for i in keep]
                untils[:] = [untils[i] for i in keep]
                slots[:] = [slots[i] for i in keep]
                custom[:] = [e for e in custom if e[0] not in gone]
                deps.keep(keep)
                if not rows:
                    return {}

    def _plain_rows(self, run: pb.PlainJobs, blobs: list[bytes], now: int, new_queues: list[QueueRecord],
                    out: list[pb.Rejection | Ack], rows: list[JobRow], slots: list[int], ids: Iterator[UUID]) -> None:
        """Append the rows, acks and result slots of a run of plain jobs that all passed
        (``_plain_runs``), column by column (``fast_rows.plain_rows``): one id of ``ids`` per job."""
        n = len(blobs)
        if not n:
            return
        priority, max_attempts = self._plain_defaults(run.queue, new_queues)
        uids = list(islice(ids, n))
        base = len(out)
        out.extend(zip(map(str, uids), repeat(False)))
        slots.extend(range(base, base + n))
        rows.extend(plain_rows([u.bytes for u in uids], run.queue, run.job_type, priority, max_attempts, now, blobs,
                               run.encoding))

    def _plain_defaults(self, name: str, new_queues: list[QueueRecord]) -> tuple[int, int]:
        """(priority, max_attempts) of a plain job of queue ``name`` (the queue's defaults),
        registering the queue as ``_build`` does (on demand; in ``new_queues`` until persisted)."""
        q = self.queues.get(name)
        if q is None:
            q = self.queues.on_demand(name)
        if not q.persisted and all(r.name != name for r in new_queues):
            new_queues.append(q.record())
        return q.settings.default_priority, q.settings.default_max_attempts

    async def enqueue_atomic(self, reqs: Sequence[pb.EnqueueRequest],
                             plain: Sequence[pb.PlainJobs] = ()) -> list[Ack]:
        """All or nothing: every job valid → all stored in one commit, else
        ``AtomicRejected`` listing every failure by index, and nothing stored.
        Deduplicated jobs count as success. ``plain``: more jobs by column, after ``reqs``
        (``expand_plain``)."""
        if plain:
            self._plain_count(plain)
            reqs = [*reqs, *expand_plain(plain)]
        self._check_count(len(reqs))
        now = self._clock_now()
        now_ns = now * 1000
        self.queues.begin_admission()
        check = self.validator.check
        verdicts = [check(req, now_ns) for req in reqs]
        failures = [pb.IndexedRejection(index=i, rejection=v) for i, v in enumerate(verdicts)
                    if type(v) is pb.Rejection]
        if failures:
            self.events.rejected([(reqs[f.index].queue, f.rejection) for f in failures])
            raise AtomicRejected(failures)
        self._check_backlog(len(reqs))  # before and after the ids: see enqueue
        uids = await self.store.new_job_ids(len(reqs))
        self._check_backlog(len(reqs))
        new_queues: list[QueueRecord] = []
        custom: list[CustomEntry] = []
        rows, untils, out = [], [], []
        deps = Deps()
        for i, (req, checked, uid) in enumerate(zip(reqs, verdicts, uids, strict=True)):
            row, text, until = self._build(req, cast("Checked", checked), now, new_queues, custom, uid, deps, i)
            rows.append(row)
            untils.append(until)
            out.append((text, False))
        try:
            dedups = await self._commit(rows, untils, now, new_queues, custom, deps)
        except DependencyMissing as exc:
            failures = [pb.IndexedRejection(index=i, rejection=dependency_rejection(dep))
                        for i, dep in sorted(exc.missing.items())]
            self.events.rejected([(reqs[f.index].queue, f.rejection) for f in failures])
            raise AtomicRejected(failures) from None
        for i, (original, _state) in dedups.items():
            out[i] = (job_id_text(original), True)
        return out


__all__ = ["POLICY_OF", "Ack", "Admission", "Deps", "dependency_rejection", "expand_plain"]
