"""Plain data about a task call: ``TaskOptions`` (how its jobs are enqueued) and ``Signature``
(one call, not sent: ``task.s(…)`` / ``task.si(…)``).

A ``Signature`` is what a workflow is built from (docs/tasks.md "Signatures"): the task's job
type and queue, the call's arguments already bound and converted to JSON values, the
options, and whether it is immutable (``.si``: a workflow must not add the previous step's
result as its first argument). ``to_dict`` is its JSON form; ``request`` the
``EnqueueRequest`` that enqueues it. Nothing here talks to a server.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sepp.request import EnqueueRequest, Payload, request_maker
from sepp.tasks._args import payload_bytes
from sepp.tasks._receiving import PREPEND_MODES
from sepp.wire import CustomPrimitive

#: The encoding label of a task's payload.
TASK_ENCODING = "application/json"
_NO_CUSTOM: Mapping[str, CustomPrimitive] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """How a task's jobs are enqueued (each field ``None`` = not set: the queue's default).

    Attributes:
        queue: The queue its jobs go to.
        priority: 0 (lowest) … 9 (highest).
        max_attempts: Deliveries before the job is dead-lettered (≥ 1).
        idempotency_key: Dedup key (per queue, within its dedup window).
        delay: Run no earlier than this long after the enqueue (a ``timedelta``, or seconds);
            measured from each enqueue, by this host's clock.
        scheduled_at: Run no earlier than this aware datetime (wins over ``delay``).
        custom: The typed custom map (str → str | int | float | bool), searchable in the UI.

    Raises ``TypeError`` for a naive ``scheduled_at`` or a ``delay`` that is neither a
    ``timedelta`` nor a number of seconds.
    """

    queue: str = "default"
    priority: int | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    delay: dt.timedelta | None = None
    scheduled_at: dt.datetime | None = None
    custom: Mapping[str, CustomPrimitive] = field(default_factory=lambda: _NO_CUSTOM)

    def __post_init__(self) -> None:
        delay: object = self.delay
        if delay is not None and not isinstance(delay, dt.timedelta):
            if isinstance(delay, bool) or not isinstance(delay, int | float):
                raise TypeError(f"delay must be a timedelta or seconds, not {type(delay).__name__}")
            object.__setattr__(self, "delay", dt.timedelta(seconds=delay))
        when = self.scheduled_at
        if when is not None and (not isinstance(when, dt.datetime) or when.utcoffset() is None):
            raise TypeError("scheduled_at must be a timezone-aware datetime, e.g. datetime.now(timezone.utc)")
        if self.custom is not _NO_CUSTOM:
            object.__setattr__(self, "custom", MappingProxyType(dict(self.custom)))

    def merged(self, **changes: Any) -> TaskOptions:
        """A copy with ``changes`` (``TaskOptions`` field names; a ``None`` value leaves the
        field as it is, ``custom`` entries are added to the current ones). Raises
        ``TypeError`` for an unknown name."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise TypeError(f"unknown task option(s): {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
        given = {k: v for k, v in changes.items() if v is not None}
        if "custom" in given:
            given["custom"] = {**self.custom, **given["custom"]}
        return dataclasses.replace(self, **given) if given else self

    @property
    def bare(self) -> bool:
        """Whether its requests carry nothing but queue, job type and payload (no optional
        field set)."""
        return (
            self.priority is None
            and self.max_attempts is None
            and self.idempotency_key is None
            and self.delay is None
            and self.scheduled_at is None
            and self.custom is _NO_CUSTOM
        )

    def request(self, job_type: str, payload: bytes) -> EnqueueRequest:
        """The ``EnqueueRequest`` of one job of ``job_type`` with ``payload`` (the JSON
        arguments) under these options; ``delay`` counts from now. Raises as
        ``EnqueueRequest`` does."""
        body = Payload(payload, TASK_ENCODING)
        if self.bare:
            return EnqueueRequest(self.queue, job_type, payload=body)  # the request's own fast path
        when = self.scheduled_at
        if when is None and self.delay is not None:
            when = dt.datetime.now(dt.UTC) + self.delay
        extra: dict[str, Any] = {"custom": self.custom} if self.custom else {}
        return EnqueueRequest(
            self.queue,
            job_type,
            payload=body,
            priority=self.priority,
            max_attempts=self.max_attempts,
            scheduled_at=when,
            idempotency_key=self.idempotency_key,
            **extra,
        )

    def request_maker(self, job_type: str) -> Callable[[bytes], EnqueueRequest]:
        """``payload -> self.request(job_type, payload)`` for many jobs (``delay`` counts from
        each call); when ``bare``, the names are checked once, here, and each request costs a
        quarter (``sepp.request.request_maker``). Raises as ``EnqueueRequest`` does."""
        if self.bare:
            return request_maker(self.queue, job_type, TASK_ENCODING)
        return functools.partial(self.request, job_type)

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON values: ``delay`` in seconds, ``scheduled_at`` ISO 8601 (UTC);
        fields not set are left out (``queue`` always present)."""
        out: dict[str, Any] = {"queue": self.queue}
        for name in ("priority", "max_attempts", "idempotency_key"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.delay is not None:
            out["delay"] = self.delay.total_seconds()
        if self.scheduled_at is not None:
            out["scheduled_at"] = self.scheduled_at.astimezone(dt.UTC).isoformat()
        if self.custom:
            out["custom"] = dict(self.custom)
        return out


@dataclass(frozen=True, slots=True)
class Signature:
    """One task call, not sent: ``task.s(*args, **kwargs)`` (mutable: a workflow step may
    receive the previous step's result as its first argument) or ``task.si(…)`` (immutable).

    Attributes:
        job_type: The task's job type.
        args: The positional arguments, bound and converted to JSON values.
        kwargs: The keyword arguments, the same (read-only).
        options: How its job is enqueued (``options.queue`` is its queue).
        immutable: True for ``.si``: its arguments are complete and final.
        check: Raises ``TypeError`` when the call would not bind with one more argument put
            first (``check(args, kwargs)``): what ``request_receiving`` checks. Set by
            ``task.s``; None checks nothing.
    """

    job_type: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    options: TaskOptions
    immutable: bool = False
    check: Callable[[tuple[Any, ...], Mapping[str, Any]], None] | None = field(default=None, compare=False,
                                                                                repr=False)

    @property
    def queue(self) -> str:
        """The queue its job goes to."""
        return self.options.queue

    def payload(self) -> bytes:
        """The job's payload: ``{"args": [...], "kwargs": {...}}`` as UTF-8 JSON."""
        return payload_bytes(list(self.args), dict(self.kwargs))

    def request(self) -> EnqueueRequest:
        """The ``EnqueueRequest`` that enqueues this call (``delay`` counts from now)."""
        return self.options.request(self.job_type, self.payload())

    def request_receiving(self, prepend: str) -> EnqueueRequest:
        """The ``EnqueueRequest`` of this call as a workflow step that receives what its
        dependencies returned as its first argument (docs/tasks.md "Chains pass results"):
        ``prepend`` is ``"result"`` (a ``chain`` step: the result of the job it runs after) or
        ``"results"`` (a ``chord`` callback: the list of its header's results, in header
        order). The payload says so — ``{"args": [...], "kwargs": {...}, "prepend": "result"}``
        — and the worker puts the value first. An immutable signature (``.si``) receives
        nothing: its ``request()``.

        Raises ``TypeError`` when the call cannot take one more argument first (every
        positional parameter is given already, say) and ``ValueError`` for another
        ``prepend``."""
        if prepend not in PREPEND_MODES:
            raise ValueError(f"prepend is one of {', '.join(map(repr, PREPEND_MODES))}, not {prepend!r}")
        if self.immutable:
            return self.request()
        if self.check is not None:
            self.check(self.args, self.kwargs)
        return self.options.request(self.job_type, payload_bytes(list(self.args), dict(self.kwargs), prepend))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"job_type", "queue", "args", "kwargs", "options", "immutable"}``."""
        return {
            "job_type": self.job_type,
            "queue": self.queue,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "options": self.options.to_dict(),
            "immutable": self.immutable,
        }


__all__ = ["TASK_ENCODING", "Signature", "TaskOptions"]
