"""JobEngine: the queue semantics, transport-agnostic.

Takes protobuf requests from the RPC layer, validates them with the shared
``Validator``, builds rows and hands them to the store (one commit per call), and
turns store results into acks. It never touches gRPC status codes: errors are
``sepp.server.errors`` exceptions that ``rpc.status`` maps to the wire.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice, repeat
from typing import Any, cast

from uuid_utils import UUID

from sepp.api.v1 import common_pb2 as pb
from sepp.domain.clock import SYSTEM_CLOCK, Clock
from sepp.domain.clock import now_us as now_us  # re-exported: importers outside the engine
from sepp.domain.records import NodeRecord
from sepp.limits import MAX_LEASE, MIN_LEASE, QueueLimits
from sepp.quoting import clip
from sepp.server.config import ServerConfig
from sepp.server.custom_index import index_entries
from sepp.server.errors import AtomicRejected, BacklogFull, InvalidRequest, JobRejected, LeaseRefused
from sepp.server.eventlog import RateLimited
from sepp.server.events import EngineEvents, Event
from sepp.server.notifier import Notifier
from sepp.server.queues import QueueRegistry, QueueState
from sepp.server.workers import WorkerRegistry
from sepp.storage.base import (
    DAMAGED_ROW,
    NO_FLOW,
    Dedups,
    ExtendResult,
    JobRecord,
    JobRow,
    QueueRecord,
    ReserveParams,
    SettleKind,
    SettleParams,
    SettleResult,
    State,
    Store,
)
from sepp.storage.rows import describe
from sepp.storage.search import CustomEntry
from sepp.validation import Checked, Validator, server_fix

log = logging.getLogger("sepp.engine")
#: Dead-letter lines: at most this many per ``DEAD_LOG_EVERY`` seconds (the rest counted).
DEAD_LOG_BURST, DEAD_LOG_EVERY = 20, 5.0
#: Overload lines: at most one per this many seconds, with the count of the refusals in between.
OVERLOAD_LOG_EVERY = 5.0
_SCHEDULED, _READY, _DEAD = int(State.SCHEDULED), int(State.READY), int(State.DEAD_LETTERED)
#: Shortest wait of a long-polling Reserve for the next token of a rate-limited queue, seconds.
_MIN_TOKEN_WAIT = 0.001
#: Longest lease a Reserve or ExtendLease may ask for, seconds (one day; refused, not clamped).
MAX_LEASE_SECONDS = MAX_LEASE
#: Shortest lease or extension, seconds: the server keeps time in µs, and a lease shorter than
#: this would be over before its reservation reached the worker.
MIN_LEASE_SECONDS = MIN_LEASE

#: Terminal states the throughput statistics count.
_COUNTED = (int(State.COMPLETED), int(State.DEAD_LETTERED))

#: A stored (or deduplicated) job as the engine reports it: (job id text, deduplicated).
Ack = tuple[str, bool]


_new_row = tuple.__new__


def expand_plain(plain: Sequence[pb.PlainJobs]) -> list[pb.EnqueueRequest]:
    """The ``EnqueueRequest`` each job of ``plain`` stands for, in order (a run's job is
    queue, job type and a payload of its data and the run's encoding; nothing else set)."""
    return [pb.EnqueueRequest(queue=run.queue, job_type=run.job_type,
                              payload=pb.Payload(data=data, encoding=run.encoding))
            for run in plain for data in run.data]


def job_id_text(raw: bytes) -> str:
    """Canonical text form (8-4-4-4-12 lowercase hex) of a 16-byte UUID."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def job_id_bytes(text: str) -> bytes | None:
    """Parse a UUID's text form (canonical, or any form ``uuid.UUID`` accepts); None when
    it is not one."""
    if len(text) == 36 and text[8] == text[13] == text[18] == text[23] == "-":
        try:
            # Any further "-" shortens the hex below 32 digits: caught by the length check.
            raw = bytes.fromhex(text.replace("-", ""))
        except ValueError:
            return None
        return raw if len(raw) == 16 else None
    try:
        return uuid.UUID(text).bytes
    except (ValueError, AttributeError, TypeError):
        return None


class _Reserving:
    """One ``JobEngine.reserve`` call in progress: the notifier event its long-poll waits on,
    whether it waits on it right now (``parked``), and whether ``stop_reserving`` stopped it
    ."""

    __slots__ = ("event", "parked", "stopped")

    def __init__(self, event: asyncio.Event) -> None:
        self.event = event
        self.parked = False
        self.stopped = False


def _stop_calls(calls: Iterable[_Reserving]) -> int:
    """Mark each of ``calls`` not stopped yet as stopped and wake it (``stop_reserving``,
    ``end_long_polls``); returns how many it stopped."""
    woken = 0
    for call in calls:
        if not call.stopped:
            call.stopped = True
            call.event.set()
            woken += 1
    return woken


class JobEngine:
    """Enqueue, reserve and settle on top of a ``Store``.

    ``events`` (``on_scheduled`` / ``on_stored`` / ``on_finished`` name the same ``Event``
    objects) are subscriber lists: ``on_scheduled`` gets the earliest run_at
    (µs) of newly stored SCHEDULED jobs so the promotion sweep can wake in time; ``on_stored``
    and ``on_finished`` feed the admin throughput stats. Subscribe, do not assign.

    ``clock`` is the one source of time of the server: every reading the
    engine makes (enqueue time, lease start and expiry, settle time) comes from it, and the
    sweeper, the admin engine and the RPC servicers read ``engine.clock`` too, so a test
    drives all of them with one ``FakeClock``. The long-poll of ``reserve`` waits in real
    time (the event loop's clock), like every sleep.
    """

    def __init__(self, config: ServerConfig, store: Store, registry: QueueRegistry, notifier: Notifier, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        #: This node's name (``node_name``, else the host name — the rule of ``SeppServer.node``):
        #: stored on each job it leases and named in that attempt's history.
        self.node = config.node_name or socket.gethostname()
        #: The injected clock: ``clock.now`` (µs UTC) and ``clock.monotonic`` (seconds).
        self.clock = clock
        # Bound once: the enqueue path reads the time once per call, through one attribute.
        self._clock_now = clock.now
        self.store = store
        self.queues = registry
        self.notifier = notifier
        # A Reserve promotes every queue's due jobs: wake this node's long polls of the
        # queues it promoted (the sweep would find nothing left, so wake nobody).
        store.on_promoted(notifier.ready)
        self.limits = config.limits
        self.validator = Validator(config.limits, registry.limits_for)
        #: The engine's events; subscribers are called in order, one that raises is logged and skipped.
        self.events = EngineEvents()
        self._max_backlog = config.max_commit_backlog
        #: The nodes sharing the store as last read (``sepp.server.cluster.Cluster``, every
        #: heartbeat): what GetServerInfo and the UI list.
        self.nodes: list[NodeRecord] = []
        #: The workers this node sees: fed by the worker servicer, reported with
        #: each heartbeat (``sepp.server.cluster``).
        self.workers = WorkerRegistry(clock)
        #: The ``reserve`` calls in progress by worker id (calls with an empty id are not
        #: kept): what ``stop_reserving`` wakes.
        self._reserving: dict[str, set[_Reserving]] = {}
        #: Every ``reserve`` call in progress, with or without a worker id: what
        #: ``end_long_polls`` wakes when the server stops.
        self._calls: set[_Reserving] = set()
        #: Set by ``end_long_polls``: no ``reserve`` waits any more (the server is stopping).
        self._no_waits = False
        #: Give-back tasks of abandoned reservations (kept referenced until done).
        self._background: set[asyncio.Future[Any]] = set()
        # Significant-event lines that can come in floods are rate-limited.
        self._dead_log = RateLimited(log, burst=DEAD_LOG_BURST, every=DEAD_LOG_EVERY)
        self._overload_log = RateLimited(log, burst=1, every=OVERLOAD_LOG_EVERY)

    @property
    def on_scheduled(self) -> Event[[int]]:
        """``events.scheduled``: emitted with the earliest run_at (µs) of newly SCHEDULED jobs."""
        return self.events.scheduled

    @property
    def on_stored(self) -> Event[[Sequence[JobRow], Dedups]]:
        """``events.stored``: emitted after each enqueue commit with the rows and their dedups."""
        return self.events.stored

    @property
    def on_finished(self) -> Event[[str, int, int]]:
        """``events.finished``: emitted with (queue, state, count) when jobs reach COMPLETED or DEAD_LETTERED."""
        return self.events.finished

    # ------------------------------------------------------------------ enqueue

    def _check_backlog(self, jobs: int) -> None:
        backlog = self.store.backlog
        if backlog + jobs > self._max_backlog and backlog > 0:
            self.events.overloaded(jobs)
            self._overload_log.log(
                logging.WARNING, "overloaded: %d job(s) refused with OVERLOADED (commit backlog %d, "
                "max_commit_backlog %d; clients retry after %g s)", jobs, backlog, self._max_backlog,
                self.config.overload_retry_after,
                extra={"event": "overload", "count": jobs, "backlog": backlog, "max_commit_backlog": self._max_backlog})
            raise BacklogFull(self.config.overload_retry_after, backlog)

    def _build(self, req: pb.EnqueueRequest, checked: Checked, now: int,
               new_queues: list[QueueRecord], custom: list[CustomEntry], uid: UUID) -> tuple[JobRow, str, int]:
        """Row for a validated request (``checked``: what ``Validator.check`` read from it)
        with id ``uid`` (``Store.new_job_ids``), its id text and its dedup deadline (µs, 0 =
        no key).

        Registers an on-demand queue (non-strict mode) and adds it to ``new_queues``
        until it is persisted; appends the job's custom-index entries to ``custom``
        (``index_entries``; a job without a custom map adds none and costs one test).
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
        # tuple.__new__ skips JobRow's Python-level __new__ (−0.2 µs a job on the batched path).
        row = _new_row(JobRow, (uid.bytes, name, job_type, state, priority, run_at, now, max_attempts, data,
                                encoding, extras, key))
        return row, str(uid), (now + q.dedup_us if key else 0)

    async def _store(self, rows: list[JobRow], dedup_until: list[int], now: int,
                     new_queues: list[QueueRecord], custom: list[CustomEntry]) -> Dedups:
        dedups = await self.store.enqueue(rows, dedup_until, now, new_queues, custom)
        self.on_stored(rows, dedups)
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
            self.on_scheduled(earliest)
        return dedups

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
        row, text, until = self._build(req, checked, now, new_queues, custom, uid)
        dedups = await self._store([row], [until], now, new_queues, custom)
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
                    and not has("max_attempts") and not has("scheduled_at")):
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
        build = self._build
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
                append_row(_new_row(JobRow, (uid.bytes, verdict[0], verdict[1], _READY, defaults[0], now, now,
                                             defaults[1], blob, verdict[2], None, None)))
                append_until(0)
                continue
            if type(verdict) is pb.Rejection:
                append_out(verdict)
                continue
            row, text, until = build(req, verdict, now, new_queues, custom, next(ids))
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
            dedups = await self._store(rows, untils, now, new_queues, custom)
            for i, (original, _state) in dedups.items():
                out[slots[i]] = (job_id_text(original), True)
        return out

    def _plain_rows(self, run: pb.PlainJobs, blobs: list[bytes], now: int, new_queues: list[QueueRecord],
                    out: list[pb.Rejection | Ack], rows: list[JobRow], slots: list[int], ids: Iterator[UUID]) -> None:
        """Append the rows, acks and result slots of a run of plain jobs that all passed
        (``_plain_runs``), column by column: one id of ``ids`` per job, the rest C-level ``zip``/``map``
        over the run's shared values (about 1 µs a job, against about 5 µs for the same jobs
        as ``EnqueueRequest`` messages)."""
        n = len(blobs)
        if not n:
            return
        priority, max_attempts = self._plain_defaults(run.queue, new_queues)
        uids = list(islice(ids, n))
        base = len(out)
        out.extend(zip(map(str, uids), repeat(False)))
        slots.extend(range(base, base + n))
        rows.extend(map(_new_row, repeat(JobRow), zip(
            [u.bytes for u in uids], repeat(run.queue), repeat(run.job_type), repeat(_READY), repeat(priority),
            repeat(now), repeat(now), repeat(max_attempts), blobs, repeat(run.encoding), repeat(None), repeat(None))))

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
        for req, checked, uid in zip(reqs, verdicts, uids, strict=True):
            row, text, until = self._build(req, cast("Checked", checked), now, new_queues, custom, uid)
            rows.append(row)
            untils.append(until)
            out.append((text, False))
        dedups = await self._store(rows, untils, now, new_queues, custom)
        for i, (original, _state) in dedups.items():
            out[i] = (job_id_text(original), True)
        return out

    # ------------------------------------------------------------------ worker side

    async def reserve(self, queues: Sequence[str], max_jobs: int, lease_s: float | None, wait_s: float,
                      worker_id: str, *, host: str = "", concurrency: int = 0,
                      client_version: str = "") -> list[JobRecord]:
        """Lease up to ``max_jobs`` jobs from ``queues`` (in order), long-polling up to ``wait_s``.

        Unknown and paused queues give nothing. A call with a ``worker_id`` is kept, for its
        whole length, where ``stop_reserving(worker_id)`` finds it, and is noted in
        ``workers`` (the Workers page, with the caller's ``host``, handler slots
        ``concurrency`` and ``client_version``) twice: once its arguments are accepted, before
        any wait — so a worker idle in its first long poll is listed at once, not up to
        ``wait_s`` later — and again when it ends (its latest Reserve; not when the worker
        stopped cleanly in the meantime, ``stop_reserving(stopped=True)``). Raises
        ``InvalidRequest`` for bad arguments (then nothing is noted).

        Each lease runs from when the store grants it — the engine's clock read in the
        transaction that writes it, after any wait for the store — not from when the call
        came: a job's ``lease_expires_at`` is its ``started_at`` plus the lease
        (docs/decisions.md "A lease runs from when it is granted").
        """
        lim = self.limits
        if not queues:
            raise InvalidRequest("reserve needs at least one queue", "queues")
        if not 1 <= max_jobs <= lim.max_reserve_batch:
            raise InvalidRequest(f"max_jobs must be between 1 and {lim.max_reserve_batch} (got {max_jobs})", "max_jobs",
                                 1 if max_jobs < 1 else lim.max_reserve_batch, max_jobs)
        if not 0 <= wait_s <= lim.max_reserve_wait:
            raise InvalidRequest(f"wait must be between 0 and {lim.max_reserve_wait:g} s", "wait",
                                 0 if wait_s < 0 else lim.max_reserve_wait, wait_s)
        if lease_s is not None and not MIN_LEASE_SECONDS <= lease_s <= MAX_LEASE_SECONDS:
            raise InvalidRequest(f"lease_duration must be between {MIN_LEASE_SECONDS:g} and {MAX_LEASE_SECONDS:g} s",
                                 "lease_duration", MIN_LEASE_SECONDS if lease_s < MIN_LEASE_SECONDS
                                 else MAX_LEASE_SECONDS, lease_s)
        if "\x00" in worker_id:  # a label; PostgreSQL text cannot hold U+0000 (docs/decisions.md)
            raise InvalidRequest("worker_id must not contain a NUL character (U+0000)", "worker_id")
        names = list(dict.fromkeys(queues))
        began = self.workers.reserved(worker_id, host, queues, concurrency, client_version)  # "" is not noted
        # The long-poll waits in real time, on the event loop's clock (the one wait_for uses).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        event = self.notifier.register(names)
        me = _Reserving(event)
        self._calls.add(me)
        if worker_id:
            self._reserving.setdefault(worker_id, set()).add(me)
        try:
            while True:
                # Clear before trying, never after: a wake-up that lands while the store is
                # leasing (a job released or stored in the meantime) must end the next wait.
                event.clear()
                if me.stopped:  # woken by stop_reserving: answer at once, lease nothing more
                    return []
                active: list[QueueState] = []
                for name in names:
                    q = self.queues.get(name)
                    if q is not None and not q.paused:
                        active.append(q)
                if active:
                    lease_for = {q.name: int(lease_s * 1_000_000) if lease_s else q.lease_us for q in active}
                    # Payloads beyond one message's worth are not leased at all (the servicer
                    # gives back the few that still do not fit exactly).
                    flow = {q.name: q.flow for q in active if q.flow is not None}
                    # The store reads the clock again when it writes the leases: a lease runs
                    # from when it is granted, not from now (a wait in the commit queue is not
                    # taken out of it; docs/decisions.md "A lease runs from when it is granted").
                    params = ReserveParams([q.name for q in active], max_jobs, self._clock_now(), lease_for, worker_id,
                                           self.limits.max_message_bytes, self.node, flow or NO_FLOW, self.clock)
                    jobs = await self._lease(params)
                    if jobs:
                        return jobs  # stopped while leasing or not: what was leased is answered
                remaining = deadline - loop.time()
                if remaining <= 0 or me.stopped or self._no_waits:
                    return []
                # A rate limit frees capacity by time, which notifies nobody: try again when
                # the next token is due, or when woken, whichever comes first.
                poll = min((q.flow.token_wait() for q in active if q.flow is not None and q.flow.rate_amount),
                           default=remaining)
                me.parked = True
                try:
                    await asyncio.wait_for(event.wait(), min(remaining, max(poll, _MIN_TOKEN_WAIT)))
                except TimeoutError:
                    if poll >= remaining:
                        return []
                finally:
                    me.parked = False
        finally:
            self.notifier.unregister(names, event)
            self._calls.discard(me)
            if worker_id:
                self.workers.reserved(worker_id, host, queues, concurrency, client_version, began)
                calls = self._reserving.get(worker_id)
                if calls is not None:
                    calls.discard(me)
                    if not calls:
                        del self._reserving[worker_id]

    def parked(self, worker_id: str | None = None) -> int:
        """How many ``reserve`` calls with ``worker_id`` (None: any, an empty id included)
        wait in their long-poll right now (tests and diagnostics)."""
        calls = self._calls if worker_id is None else self._reserving.get(worker_id, ())
        return sum(1 for call in calls if call.parked)

    def stop_reserving(self, worker_id: str, stopped: bool = False) -> int:
        """End the long-polls of the ``reserve`` calls in progress with ``worker_id`` (a
        stopping worker): each is marked stopped and woken. One parked in its
        wait returns ``[]`` at once without leasing again; one inside the store's lease returns
        what it leased, as usual (the worker gives it back). Calls that start later are not
        affected. Returns how many calls this stopped (0 when none is open or all were stopped
        already: idempotent). Every call with that id is stopped, whichever process sent it
        (two processes sharing an id: the other's parked call just answers empty early).
        ``stopped``: the worker's session is over (its last call): ``workers`` lists it as
        stopped until its next Reserve.

        Raises ``InvalidRequest`` (field ``worker_id``) when ``worker_id`` is empty.
        """
        if not worker_id:
            raise InvalidRequest("stop_reserving needs the worker_id its reserves were sent with", "worker_id")
        woken = _stop_calls(self._reserving.get(worker_id, ()))
        if stopped:
            self.workers.stopped(worker_id)
        return woken

    def end_long_polls(self) -> int:
        """The server is stopping: every ``reserve`` call waiting in its long-poll answers
        ``[]`` now (one inside the store's lease answers what it leased), and no later one
        waits, so a graceful stop is not held up by idle workers' long-polls (up to
        ``max_reserve_wait``). Workers then see the server go away and reconnect as usual.
        Returns how many calls it woke. Idempotent."""
        self._no_waits = True
        return _stop_calls(self._calls)

    async def _lease(self, params: ReserveParams) -> list[JobRecord]:
        """``store.reserve``, but if the caller goes away (deadline, cancel, disconnect) while the
        store is leasing, the jobs it leased are given back (released: attempt and place kept)
        instead of staying held by nobody until their lease expires."""
        leasing = asyncio.ensure_future(self.store.reserve(params))
        try:
            return await asyncio.shield(leasing)
        except asyncio.CancelledError:
            leasing.add_done_callback(self._give_back_leased)
            self._background.add(leasing)  # type: ignore[arg-type]
            leasing.add_done_callback(self._background.discard)  # type: ignore[arg-type]
            raise

    async def quiesce(self) -> None:
        """Wait until every give-back of an abandoned reservation is done: the lease it waits
        for and the release that follows (tests; the store may run operations in any order)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def _give_back_leased(self, leasing: asyncio.Future[list[JobRecord]]) -> None:
        if leasing.cancelled() or leasing.exception() is not None or not leasing.result():
            return
        task = asyncio.ensure_future(self.release(leasing.result(), "the reserve call ended before delivery"))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def give_back(self, jobs: Sequence[JobRecord], why: str) -> None:
        """``release`` ``jobs`` in the background (a task kept referenced until done; ``quiesce``
        waits for it): for callbacks that cannot await. A failure is logged; the leases then
        expire as usual."""
        async def run() -> None:
            try:
                await self.release(jobs, why)
            except Exception:
                log.warning("giving back %d job(s) of a cancelled reserve failed; their leases will expire",
                            len(jobs), exc_info=True)

        task = asyncio.ensure_future(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def release(self, jobs: Sequence[JobRecord], why: str) -> None:
        """Give leased-but-undelivered ``jobs`` back at once (nack ``release``: attempt and place kept)."""
        now = self._clock_now()
        items = [SettleParams(j.id, j.lease_id or b"", SettleKind.RELEASE, now, outcome="released",
                              error_message=why) for j in jobs]
        await self.settle(items)  # wakes the reservers of their queues

    async def bury_damaged(self, jobs: Sequence[tuple[JobRecord, Exception]]) -> None:
        """Dead-letter leased ``jobs`` that could not be converted into a message (a damaged
        row, with the error) with reason ``DAMAGED_ROW`` instead of handing them out; each is
        logged with its id, queue and the error. A failure here is logged too:
        the lease then expires and the sweeps deal with the row."""
        for rec, exc in jobs:
            log.warning("job %s in queue %s cannot be delivered (%s): dead-lettered with %s",
                        describe(rec), clip(repr(rec.queue), 200), clip(f"{type(exc).__name__}: {exc}", 300),
                        DAMAGED_ROW)
        try:
            await self.store.reserve_damaged([(rec.id, rec.lease_id or b"") for rec, _ in jobs], self._clock_now())
        except Exception:
            log.exception("dead-lettering %d damaged job(s) failed; their leases will expire", len(jobs))

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
                self.on_scheduled(run_at)
            elif state == _READY:
                woke.add(queue)
        for (queue, state), count in finished.items():
            self.on_finished(queue, state, count)
        for name in woke:
            self.notifier.ready(name)  # jobs given back (release, retry without delay)
        self.events.settled(items, results)
        return results

    def _dead_lettered(self, item: SettleParams, queue: str, attempt: int) -> None:
        """The log line of a job a settle dead-lettered: its id, queue,
        attempt and reason (``nack_dead_letter`` or ``attempts_exhausted``, the metric's
        label), the error message the worker sent (else the stored reason) clipped — never the payload. At most
        ``DEAD_LOG_BURST`` lines per ``DEAD_LOG_EVERY`` seconds; the rest are counted."""
        reason = "nack_dead_letter" if item.kind is SettleKind.DEAD_LETTER else "attempts_exhausted"
        detail = clip(item.error_message or item.reason, 200)
        job_id = job_id_text(item.job_id) if len(item.job_id) == 16 else item.job_id.hex()
        self._dead_log.log(logging.WARNING, "job %s of queue %s dead-lettered (%s, attempt %d)%s", job_id,
                           clip(repr(queue), 200), reason, attempt, f": {detail}" if detail else "",
                           extra={"event": "job_dead_lettered", "queue": queue, "job_id": job_id,
                                  "reason": reason, "attempt": attempt, "detail": detail})

    async def settle_one(self, item: SettleParams) -> SettleResult:
        """One ack/nack. Raises ``LeaseRefused`` when the lease does not hold."""
        result = (await self.settle([item]))[0]
        if result.error is not None:
            raise LeaseRefused(result.error, job_id_text(item.job_id))
        return result

    async def extend(self, job_id: bytes, lease_id: bytes, extend_by_s: float) -> ExtendResult:
        """New expiry = ``extend_by_s`` from when the store writes it (the extension is judged
        by the lease as it stood when the call came). Raises ``LeaseRefused`` or
        ``InvalidRequest``."""
        if not MIN_LEASE_SECONDS <= extend_by_s <= MAX_LEASE_SECONDS:
            raise InvalidRequest(f"extend_by must be between {MIN_LEASE_SECONDS:g} and {MAX_LEASE_SECONDS:g} s",
                                 "extend_by", MIN_LEASE_SECONDS if extend_by_s < MIN_LEASE_SECONDS
                                 else MAX_LEASE_SECONDS, extend_by_s)
        now = self._clock_now()
        result = await self.store.extend(job_id, lease_id, now, now + int(extend_by_s * 1_000_000), self.clock)
        if result.error is not None:
            raise LeaseRefused(result.error, job_id_text(job_id))
        return result
