"""The admin side of periodic schedules: list, show, declare, pause, resume,
trigger and delete — what ``AdminService``'s periodic calls, ``sepp periodic …`` and the UI's
Periodic page do. Every read goes to the store, so any node answers for the whole cluster;
every change is made in the store and then applied to this node's scheduler at once (the
other nodes see it at their next tick of the schedule, and within ``REFRESH_EVERY``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from sepp.domain.ids import job_id_bytes, job_id_text
from sepp.domain.records import PeriodicRecord, PeriodicRun
from sepp.quoting import clip, quote
from sepp.rejections import Reason, code_name
from sepp.server.errors import JobRejected, NotFound, PeriodicInvalid
from sepp.server.parts import ServerParts
from sepp.server.periodic.jobs import job_request
from sepp.server.periodic.scheduler import PeriodicScheduler, parse
from sepp.server.periodic.spec import PeriodicSettings
from sepp.server.periodic.timetable import rfc3339

__all__ = ["NEXT_RUNS", "PeriodicAdmin", "PeriodicView", "check_job", "settings_from"]

#: How many upcoming run times a view lists ("the next three run times").
NEXT_RUNS = 3

#: The scheduler's logger: its warnings, and here the admin changes of a schedule (declared,
#: changed, paused, resumed, triggered, deleted; by the API or the UI), as ``sepp.queues``
#: logs a queue's (docs/operations.md "Events").
log = logging.getLogger("sepp.periodic")


def _event(event: str, name: str, what: str, **fields: Any) -> None:
    """One ``sepp.periodic`` info line for an admin change of schedule ``name``: text
    ``periodic schedule 'NAME' WHAT (admin)``; JSON with ``event``, ``schedule``,
    ``source`` = ``admin`` and ``fields`` (never the payload or custom values)."""
    log.info("periodic schedule %s %s (admin)", quote(name), what,
             extra={"event": event, "schedule": name, "source": "admin", **fields})


def _timing_text(spec: PeriodicSettings) -> str:
    """``cron '0 3 * * *' (Europe/Berlin)`` or ``every '15m'``, for a log line."""
    return f"cron {quote(spec.cron)} ({spec.timezone})" if spec.cron else f"every {quote(spec.every)}"


def _changed_fields(before: str, spec: PeriodicSettings) -> list[str]:
    """The fields of ``spec`` that differ from the stored definition ``before`` (JSON text),
    in field order; every field when ``before`` does not read as a JSON object."""
    try:
        old = json.loads(before)
    except ValueError:
        old = None
    new = spec.model_dump()
    if not isinstance(old, dict):
        return list(new)
    return [key for key, value in new.items() if old.get(key) != value]


@dataclass(frozen=True, slots=True)
class PeriodicView:
    """One schedule as the admin API, the CLI and the UI show it: the ``record`` (row),
    its parsed ``spec`` (None when the stored definition no longer validates: ``broken``
    says why), the next run times (µs UTC; none while paused) and the last job's id text."""

    record: PeriodicRecord
    spec: PeriodicSettings | None
    broken: str
    next_runs: tuple[int, ...]

    @property
    def name(self) -> str:
        """The schedule's name."""
        return self.record.name

    @property
    def last_job_id(self) -> str:
        """The last run's job id (canonical text), "" when none."""
        raw = self.record.last_job_id
        return job_id_text(raw) if len(raw) == 16 else ""


def view(record: PeriodicRecord, now: int) -> PeriodicView:
    """The view of ``record`` at ``now`` (µs UTC)."""
    spec, timetable, broken = parse(record)
    upcoming: tuple[int, ...] = ()
    if timetable is not None and not record.paused:
        upcoming = tuple(timetable.upcoming(now, NEXT_RUNS))
    return PeriodicView(record, spec, broken, upcoming)


def settings_from(fields: Mapping[str, Any]) -> PeriodicSettings:
    """``fields`` (a ``[[periodic]]`` table's keys) as ``PeriodicSettings``. Raises
    ``PeriodicInvalid`` naming the first bad field (an unknown field by its name)."""
    try:
        return PeriodicSettings.model_validate(dict(fields))
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "schedule"
        if err["type"] == "extra_forbidden":
            problem = f"unknown field; a schedule takes {', '.join(PeriodicSettings.model_fields)}"
        else:
            problem = str(err["msg"]).removeprefix("Value error, ")
        name = fields.get("name")
        raise PeriodicInvalid(f"periodic schedule {clip(repr(name), 140)}: {field}: {problem}", field,
                              name if isinstance(name, str) else "") from None


def check_job(parts: ServerParts, spec: PeriodicSettings) -> None:
    """Refuse a schedule whose job its queue would reject (strict mode and an undeclared
    queue, a payload over the queue's limit, …), checked with the server's own validator
    (``parts.validator``, at ``parts.clock``'s now).
    Raises ``PeriodicInvalid`` with the job field and the rejection code."""
    now = parts.clock.now()
    verdict = parts.validator.validate(job_request(spec, now, f"periodic:{spec.name}:{rfc3339(now)}"), now * 1000)
    if verdict is not None:
        code = code_name(verdict.code)
        raise PeriodicInvalid(f"periodic schedule {spec.name!r}: its job would be rejected: {code}: "
                              f"{verdict.message}", verdict.field or "queue", spec.name)


class PeriodicAdmin:
    """The operations of the module docstring over one node's ``PeriodicScheduler``, with the
    node's ``parts`` (clock, validator); a job run now is enqueued through the scheduler's engine."""

    def __init__(self, parts: ServerParts, scheduler: PeriodicScheduler) -> None:
        self.parts = parts
        self.scheduler = scheduler
        self.engine = scheduler.engine
        self.store = parts.store

    async def page(self, after: str = "", limit: int = 50) -> tuple[list[PeriodicView], str]:
        """At most ``limit`` schedules by name, those after ``after`` ("" = from the first):
        (their views, the name to page on from, "" on the last page). Keyset paging on the
        name, like ``list_jobs`` on its sort key: a schedule declared or deleted meanwhile
        neither shifts nor repeats a row. Only the page's timetables are computed."""
        rows = sorted((r for r in await self.store.load_periodic() if r.name > after), key=lambda r: r.name)
        now = self.parts.clock.now()
        shown = [view(r, now) for r in rows[:limit]]
        return shown, shown[-1].name if len(rows) > limit else ""

    async def list(self) -> list[PeriodicView]:
        """Every schedule, by name."""
        now = self.parts.clock.now()
        return [view(r, now) for r in await self.store.load_periodic()]

    async def _row(self, name: str) -> PeriodicRecord:
        rows = await self.store.load_periodic([name])
        if not rows:
            raise NotFound(f"no periodic schedule named {clip(repr(name), 140)}", Reason.PERIODIC_NOT_FOUND)
        return rows[0]

    async def get(self, name: str) -> PeriodicView:
        """One schedule. Raises ``NotFound`` (PERIODIC_NOT_FOUND)."""
        return view(await self._row(name), self.parts.clock.now())

    async def declare(self, spec: PeriodicSettings) -> tuple[PeriodicView, bool]:
        """Create ``spec``, or replace the definition of the schedule of that name (its
        pause and last run kept): (its view, created). Raises ``PeriodicInvalid`` when its
        job would be rejected."""
        check_job(self.parts, spec)
        before = await self.store.load_periodic([spec.name])
        created = await self.store.put_periodic(spec.name, spec.to_json(), "admin", self.parts.clock.now())
        await self.scheduler.reload([spec.name])
        if created or not before:
            _event("periodic_declared", spec.name, f"declared: {_timing_text(spec)}, queue {quote(spec.queue)}, "
                   f"job type {quote(spec.job_type)}", queue=spec.queue, job_type=spec.job_type)
        else:
            changed = _changed_fields(before[0].definition, spec)
            _event("periodic_changed", spec.name, f"changed: {', '.join(changed) or 'nothing'}", settings=changed,
                   queue=spec.queue, job_type=spec.job_type)
        return await self.get(spec.name), created

    async def set_paused(self, name: str, paused: bool) -> PeriodicView:
        """Pause (no job until resumed) or resume (the ticks of the pause are not caught up).
        Raises ``NotFound``."""
        row = await self.store.set_periodic_paused(name, paused, self.parts.clock.now())
        if row is None:
            raise NotFound(f"no periodic schedule named {clip(repr(name), 140)}", Reason.PERIODIC_NOT_FOUND)
        await self.scheduler.reload([name])
        _event("periodic_paused" if paused else "periodic_resumed", name, "paused" if paused else "resumed")
        return view(row, self.parts.clock.now())

    async def trigger(self, name: str) -> tuple[str, bool]:
        """Enqueue the schedule's job now, out of its timetable (paused or not): scheduled_at
        now, idempotency key ``periodic:<name>:trigger:<now, RFC 3339 with µs>``. Returns
        (job id, deduplicated); the run is recorded as the schedule's last run (its last tick
        is left alone). Raises ``NotFound``, ``PeriodicInvalid`` (a stored definition that no
        longer validates) and the enqueue's errors (``JobRejected``, ``BacklogFull``)."""
        row = await self._row(name)
        spec, _timetable, broken = parse(row)
        if spec is None:
            raise PeriodicInvalid(f"periodic schedule {name!r} cannot run: {broken}", "definition", name)
        now = self.parts.clock.now()
        stamp = rfc3339(now).removesuffix("Z") + f".{now % 1_000_000:06d}Z"
        req = job_request(spec, now, f"periodic:{name}:trigger:{stamp}")
        try:
            ack = await self.engine.enqueue(req)
        except JobRejected as exc:
            error = f"{code_name(exc.rejection.code)}: {exc.rejection.message}"
            await self.store.record_periodic_runs([PeriodicRun(name, 0, b"", clip(error, 500), now)])
            raise
        await self.store.record_periodic_runs([PeriodicRun(name, 0, job_id_bytes(ack.job_id) or b"", "", now)])
        _event("periodic_triggered", name, f"triggered: job {ack.job_id} of queue {quote(spec.queue)}"
               + (" (deduplicated)" if ack.deduplicated else ""), queue=spec.queue, job_id=ack.job_id,
               deduplicated=ack.deduplicated)
        return ack.job_id, ack.deduplicated

    async def delete(self, name: str) -> None:
        """Forget a schedule (its jobs stay). A ``[[periodic]]`` table of that name in a
        node's config writes it back when that node starts. Raises ``NotFound``."""
        if not await self.store.delete_periodic(name):
            raise NotFound(f"no periodic schedule named {clip(repr(name), 140)}", Reason.PERIODIC_NOT_FOUND)
        await self.scheduler.reload([name])
        _event("periodic_deleted", name, "deleted")

