"""Periodic schedules on the wire: ``PeriodicSchedule`` ⇄ ``PeriodicSettings``, and
a ``PeriodicView`` as ``PeriodicInfo``. Used by ``AdminServicer``'s periodic calls.

A field the server does not know (a newer client's) is refused, not dropped: protobuf keeps
it as an unknown field, and ``settings_from_proto`` names it (PERIODIC_INVALID)."""

from __future__ import annotations

from typing import Any

from google.protobuf import unknown_fields

from sepp import wire
from sepp.api.v1 import periodic_pb2 as ppb
from sepp.server.errors import PeriodicInvalid
from sepp.server.periodic.admin import PeriodicView, settings_from
from sepp.server.periodic.jobs import fill_job_options
from sepp.server.periodic.spec import PeriodicSettings
from sepp.server.rpc.convert import ts

__all__ = ["periodic_info", "schedule_proto", "settings_from_proto"]


def settings_from_proto(msg: ppb.PeriodicSchedule) -> PeriodicSettings:
    """The schedule a ``DeclarePeriodic`` carries, checked like a ``[[periodic]]`` table
    (empty ``timezone``, ``encoding`` and ``catch_up`` mean their defaults). Raises
    ``PeriodicInvalid`` naming the field: an unknown field by its number, a payload that is
    not UTF-8, a custom value with no type, or whatever ``PeriodicSettings`` refuses."""
    fields_seen = unknown_fields.UnknownFieldSet(msg)
    unknown = sorted({fields_seen[i].field_number for i in range(len(fields_seen))})
    if unknown:
        raise PeriodicInvalid(f"periodic schedule {msg.name!r}: unknown field number {unknown[0]} (this server "
                              "does not know it: a newer client?)", f"#{unknown[0]}", msg.name)
    try:
        payload = msg.payload.decode()
    except UnicodeDecodeError:
        raise PeriodicInvalid(f"periodic schedule {msg.name!r}: payload must be UTF-8 text", "payload",
                              msg.name) from None
    custom: dict[str, Any] = {}
    for key, value in msg.custom.items():
        got = wire.custom_from_proto(value)
        if got is None:
            raise PeriodicInvalid(f"periodic schedule {msg.name!r}: custom[{key!r}] has no value", f"custom.{key}",
                                  msg.name)
        custom[key] = got
    fields: dict[str, Any] = {"name": msg.name, "cron": msg.cron, "every": msg.every,
                              "timezone": msg.timezone or "UTC", "queue": msg.queue, "job_type": msg.job_type,
                              "payload": payload, "encoding": msg.encoding or "application/json", "custom": custom,
                              "catch_up": msg.catch_up or "latest"}
    if msg.HasField("priority"):
        fields["priority"] = msg.priority
    if msg.HasField("max_attempts"):
        fields["max_attempts"] = msg.max_attempts
    return settings_from(fields)


def schedule_proto(spec: PeriodicSettings) -> ppb.PeriodicSchedule:
    """``spec`` as the wire's ``PeriodicSchedule``."""
    msg = ppb.PeriodicSchedule(name=spec.name, cron=spec.cron, every=spec.every, timezone=spec.timezone,
                               queue=spec.queue, job_type=spec.job_type, payload=spec.payload.encode(),
                               encoding=spec.encoding, catch_up=spec.catch_up)
    fill_job_options(msg, spec)
    return msg


def periodic_info(v: PeriodicView) -> ppb.PeriodicInfo:
    """A ``PeriodicView`` as ``PeriodicInfo`` (a broken definition: the name and ``invalid``)."""
    r = v.record
    msg = ppb.PeriodicInfo(source=r.source, paused=r.paused, next_runs=[ts(t) for t in v.next_runs],
                           last_job_id=v.last_job_id, last_error=r.last_error, invalid=v.broken)
    msg.schedule.CopyFrom(schedule_proto(v.spec) if v.spec is not None else ppb.PeriodicSchedule(name=r.name))
    if r.last_tick:
        msg.last_tick.CopyFrom(ts(r.last_tick))
    if r.last_run_at:
        msg.last_run_at.CopyFrom(ts(r.last_run_at))
    return msg
