"""The in-memory queue registry: declared and on-demand queues with their settings.

Loaded from the store at start (plus the keys the config's ``[queues.NAME]`` name, which win) and
kept in step with every change, so the enqueue path never reads the database for a
queue's limits.

A stored row whose settings are out of range or malformed (a database written by
a version without these bounds) is clamped into range when it is loaded, with one warning per
queue at start — never an error: every read (GetServerInfo, ListQueues, the UI) and
every policy use (backoff, retention, dedup) sees valid settings. The row itself is left
as stored until the queue is next changed.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from sepp.domain.params import FlowLimits
from sepp.limits import QueueLimits, QueueSettings, ServerLimits, clamp_settings, parse_rate
from sepp.quoting import quote
from sepp.storage.base import PolicyTable, QueuePolicy, QueueRecord
from sepp.storage.config import ConfigError
from sepp.validation import QueueRefused

log = logging.getLogger("sepp.queues")

_US = 1_000_000
#: Bumped by every change that can alter a queue's policy (QueueRegistry.policies caches by it).
_generation = [0]


@dataclass(slots=True)
class QueueState:
    """One queue: settings, flags and the derived values the hot paths need (µs)."""

    name: str
    settings: QueueSettings
    paused: bool = False
    declared: bool = False
    persisted: bool = False
    policy: QueuePolicy = field(init=False)
    lease_us: int = field(init=False)
    dedup_us: int = field(init=False)
    #: The queue's flow limits as the store enforces them, or None when it has none.
    flow: FlowLimits | None = field(init=False)

    def __post_init__(self) -> None:
        self.apply(self.settings)

    def apply(self, settings: QueueSettings) -> None:
        """Take new settings (admin update) and recompute the derived values."""
        self.settings = settings
        self.lease_us = int(settings.lease_duration * _US)
        self.dedup_us = int(settings.dedup_window * _US)
        self.policy = QueuePolicy(
            backoff_base=int(settings.retry_base * _US), backoff_cap=int(settings.retry_cap * _US),
            jitter=settings.retry_jitter, completed_retention=int(settings.completed_retention * _US),
            dead_retention=int(settings.dead_letter_retention * _US),
            max_result_bytes=settings.limits.max_result_bytes)
        flow = flow_limits(settings)
        self.flow = flow if flow.active else None
        if flow.max_in_flight or flow.max_per_key:
            # A settle of its jobs frees a slot: wake reservers (every node). A rate limit alone
            # frees nothing on a settle (tokens come with time; a held-back long-poll retries
            # when the next one is due), so its settles pay no NOTIFY.
            self.policy = replace(self.policy, wake_on_settle=True)
        _generation[0] += 1

    @property
    def limits(self) -> QueueLimits:
        """The queue's validation limits."""
        return self.settings.limits

    def record(self) -> QueueRecord:
        """The persisted form."""
        return QueueRecord(self.name, self.settings.model_dump_json(), self.paused, self.declared)


def no_consumer(paused: bool, ready: int, oldest_ready_at: int | None, last_reserve: int | None,
                consumer_timeout: float, now: int) -> bool:
    """The "no consumer" signal of a queue (docs/flow-control.md): not ``paused``,
    ``ready`` > 0 READY jobs, ``consumer_timeout`` > 0 seconds, and both the oldest READY job
    (run_at ``oldest_ready_at``, µs UTC) and the latest Reserve of the queue by any worker
    (``last_reserve``, µs UTC, None = none seen) older than ``consumer_timeout`` at ``now``
    (µs UTC). A queue just given its first job is not flagged at once."""
    if paused or ready <= 0 or consumer_timeout <= 0 or oldest_ready_at is None:
        return False
    age = max(0.0, (now - oldest_ready_at) / 1e6)
    since = math.inf if last_reserve is None else (now - last_reserve) / 1e6
    return min(age, since) > consumer_timeout


def flow_limits(settings: QueueSettings) -> FlowLimits:
    """The store's form of a queue's flow-control settings: ``rate_limit`` as
    tokens per period in µs, the bucket size ``rate_burst`` or else the per-period amount."""
    amount, period = parse_rate(settings.rate_limit) if settings.rate_limit else (0, 0.0)
    return FlowLimits(max_in_flight=settings.max_in_flight, rate_amount=amount, rate_period=int(period * _US),
                      rate_burst=(settings.rate_burst or amount) if amount else 0,
                      key=settings.concurrency_key, max_per_key=settings.max_in_flight_per_key)


def stored_settings(rec: QueueRecord, max_encoding_bytes: int | None = None, *, quiet: bool = False) -> QueueSettings:
    """The settings of a persisted queue row, clamped into range (``clamp_settings``; labels
    longer than ``max_encoding_bytes`` dropped) and logged once (a warning naming the queue
    and each value changed) when they were not — unless ``quiet`` (a periodic refresh, which
    would repeat the warning given at start)."""
    try:
        data = json.loads(rec.settings_json)
    except (TypeError, ValueError):
        settings, notes = QueueSettings(), ["the stored settings are not JSON; using the defaults"]
    else:
        settings, notes = clamp_settings(data, max_encoding_bytes)
    if notes and not quiet:
        log.warning("queue %r: stored settings out of range, clamped (the row is rewritten on the next change): %s",
                    rec.name, "; ".join(notes))
    return settings


def configured_keys(settings: QueueSettings) -> list[str]:
    """The setting paths a config declaration names (``default_priority``,
    ``limits.max_payload_bytes``, …), in field order: the keys its table (file or
    ``SEPP_QUEUES__…`` variable) gave, not the defaults filled in around them."""
    paths: list[str] = []
    for key in QueueSettings.model_fields:
        if key not in settings.model_fields_set:
            continue
        if key == "limits":
            paths += [f"limits.{k}" for k in QueueLimits.model_fields if k in settings.limits.model_fields_set]
        else:
            paths.append(key)
    return paths


def overlay(name: str, base: QueueSettings, declared: QueueSettings) -> QueueSettings:
    """``base`` (a stored queue's settings) with the keys ``declared`` names
    (``configured_keys``) taken from it. Raises ``ConfigError`` naming queue ``name`` when
    the result is invalid as a whole."""
    merged = base.model_dump()
    given = declared.model_dump()
    for path in configured_keys(declared):
        head, _, rest = path.partition(".")
        if rest:
            merged[head][rest] = given[head][rest]
        else:
            merged[head] = given[head]
    try:
        return QueueSettings.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"queues.{name}: the keys the config file names do not fit the queue's stored settings "
                          f"({problems}); name the other key in [queues.{name}] too, or change it with "
                          "sepp queues update first") from None


def setting_changes(old: QueueSettings, new: QueueSettings) -> dict[str, tuple[Any, Any]]:
    """Path → (old value, new value) of every setting that differs, in field order."""
    before, after = old.model_dump(), new.model_dump()
    out: dict[str, tuple[Any, Any]] = {}
    for key in QueueSettings.model_fields:
        if key == "limits":
            for sub in QueueLimits.model_fields:
                if before[key][sub] != after[key][sub]:
                    out[f"limits.{sub}"] = (before[key][sub], after[key][sub])
        elif before[key] != after[key]:
            out[key] = (before[key], after[key])
    return out


def _shown(value: Any) -> str:
    """A setting's value in a log line: 3600 (not 3600.0), "50/s", ["json"]."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str | tuple | list):
        return json.dumps(list(value) if isinstance(value, tuple) else value, ensure_ascii=False)
    return str(value)


class QueueRegistry:
    """Name → ``QueueState``; strict mode decides what an unknown name means."""

    def __init__(self, defaults: QueueSettings, strict: bool, max_encoding_bytes: int | None = None,
                 max_queues: int = ServerLimits().max_queues) -> None:
        self.defaults = defaults
        self.strict = strict
        #: The server's ``limits.max_queues``: ``limits_for`` refuses to admit an
        #: unknown queue beyond it; loading (stored rows, config) never refuses one.
        self.max_queues = max_queues
        #: Unknown names ``limits_for`` admitted since ``begin_admission`` that ``on_demand`` has
        #: not created yet (a batch validates all its jobs before it creates any queue).
        self._admitted: set[str] = set()
        #: The server's ``limits.max_encoding_bytes``: longer stored encoding labels are dropped at load.
        self.max_encoding_bytes = max_encoding_bytes
        self._queues: dict[str, QueueState] = {}
        self._default_policy = QueueState("", defaults).policy
        self._table = PolicyTable(self._default_policy)
        self._table_generation = -1

    def load(self, records: list[QueueRecord], declared: dict[str, QueueSettings]) -> list[QueueState]:
        """Fill from persisted rows, then apply config declarations (``[queues.NAME]``).

        A declaration applies only the keys it names (``configured_keys``; a ``limits`` key
        one by one): over a stored queue's settings, which keep every other value (set by
        ``sepp queues update`` on any node, say), and over the defaults for a new queue. So
        the keys in the file win again at every start, and a node whose file names fewer
        keys than another's changes only those. A start that changes a stored queue logs one
        line naming each changed key, old → new.

        Returns the queues whose persisted row must be written (new or changed by config).
        Raises ``ConfigError`` when the named keys and the stored ones make invalid settings
        together (``max_in_flight_per_key`` without a ``concurrency_key``).
        """
        for rec in records:
            settings = stored_settings(rec, self.max_encoding_bytes)
            self._queues[rec.name] = QueueState(rec.name, settings, rec.paused, rec.declared, persisted=True)
        changed = []
        for name, settings in declared.items():
            current = self._queues.get(name)
            if current is None:
                current = self._queues[name] = QueueState(name, settings, declared=True)
                changed.append(current)
                log.info("queue %s declared by the config", quote(name),
                         extra={"event": "queue_declared", "queue": name, "source": "config",
                                "settings": configured_keys(settings)})
                continue
            merged = overlay(name, current.settings, settings)
            diff = setting_changes(current.settings, merged)
            if not diff and current.declared:
                continue
            current.apply(merged)
            current.declared = True
            changed.append(current)
            if diff:
                log.info("queue %s changed by the config: %s", quote(name),
                         ", ".join(f"{path} {_shown(old)} → {_shown(new)}" for path, (old, new) in diff.items()),
                         extra={"event": "queue_changed", "queue": name, "source": "config",
                                "settings": list(diff),
                                "changes": {path: {"old": old, "new": new} for path, (old, new) in diff.items()}})
            else:
                log.info("queue %s declared by the config (it existed; no setting changed)", quote(name),
                         extra={"event": "queue_declared", "queue": name, "source": "config", "settings": []})
        return changed

    @property
    def generation(self) -> int:
        """A number that changes with every local change of a queue (settings, flags, create,
        delete): ``refresh`` compares it to skip a read that a local change overtook."""
        return _generation[0]

    def touch(self) -> None:
        """Note a local change of a queue's flags (``generation`` moves on)."""
        _generation[0] += 1

    def refresh(self, records: list[QueueRecord], read_at: int) -> list[str] | None:
        """Take the queue rows as another node left them (several nodes share one
        database): new rows are added, changed settings and flags applied, queues whose row
        is gone (deleted on another node) forgotten; queues created here on demand and not
        stored yet are kept. ``read_at`` is ``generation`` before ``records`` were read: when
        a local change happened since, the read may predate it and nothing is applied
        (returns None; the caller reads again). Returns the queues that were resumed or are
        new and not paused (their waiting reservers should be woken)."""
        if read_at != _generation[0]:
            return None
        resumed: list[str] = []
        stored = {rec.name: rec for rec in records}
        for name, rec in stored.items():
            settings = stored_settings(rec, self.max_encoding_bytes, quiet=True)
            q = self._queues.get(name)
            if q is None:
                self._queues[name] = QueueState(name, settings, rec.paused, rec.declared, persisted=True)
                self._admitted.discard(name)
                if not rec.paused:
                    # A reserver may be long-polling it already: the other node's wake-up
                    # arrived before this refresh made the queue known here.
                    resumed.append(name)
                continue
            if q.settings != settings:
                q.apply(settings)
            if q.paused and not rec.paused:
                resumed.append(name)
            q.paused, q.declared, q.persisted = rec.paused, rec.declared, True
        for name in [n for n, q in self._queues.items() if q.persisted and n not in stored]:
            del self._queues[name]
        _generation[0] += 1
        return resumed

    def get(self, name: str) -> QueueState | None:
        """The queue, or None when unknown."""
        return self._queues.get(name)

    def limits_for(self, name: str) -> QueueLimits | QueueRefused | None:
        """Validation lookup: the queue's limits, the defaults for an unknown queue, or None
        for an unknown queue in strict mode (→ UnknownQueue), a ``QueueRefused`` for one that would be
        created beyond ``max_queues`` (→ UnknownQueue)."""
        q = self._queues.get(name)
        if q is not None:
            return q.settings.limits
        if self.strict:
            return None
        if name not in self._admitted:
            count = len(self._queues) + len(self._admitted)
            if count >= self.max_queues:
                return QueueRefused(f"the server's queue limit is reached (limits.max_queues = {self.max_queues}): "
                                    "delete unused queues (sepp queues delete NAME) or declare this one "
                                    "after raising [limits] max_queues in the server's config "
                                    "(SEPP_LIMITS__MAX_QUEUES)",
                                    self.max_queues, count)
            self._admitted.add(name)
        return self.defaults.limits

    def begin_admission(self) -> None:
        """Forget the names admitted by earlier enqueue calls that did not create their queue
        (refused by a later check, or shed). Called by the engine before each enqueue call's
        validation, which runs without awaiting until its queues are created."""
        if self._admitted:
            self._admitted.clear()

    def full(self) -> bool:
        """True when one more queue would exceed ``max_queues``."""
        return len(self._queues) >= self.max_queues

    def count(self) -> int:
        """How many queues there are (declared and created on demand)."""
        return len(self._queues)

    def policy_for(self, name: str) -> QueuePolicy:
        """Backoff/retention of ``name`` (defaults for an unknown queue). Thread-safe read."""
        q = self._queues.get(name)
        return self._default_policy if q is None else q.policy

    def policies(self) -> PolicyTable:
        """Every queue's backoff/retention as one picklable lookup (defaults for unknown names),
        rebuilt only after a change. What the store's writes get (they may run in the writer
        process)."""
        if self._table_generation != _generation[0]:
            default = self._default_policy
            self._table = PolicyTable(default, {name: q.policy for name, q in self._queues.items()
                                                if q.policy != default})
            self._table_generation = _generation[0]
        return self._table

    def on_demand(self, name: str) -> QueueState:
        """Create (in memory) a queue on first enqueue, non-strict mode only."""
        q = self._queues.get(name)
        if q is None:
            q = self._queues[name] = QueueState(name, self.defaults)
            self._admitted.discard(name)
            log.info("queue %s created on first enqueue (the server's queue_defaults)", quote(name),
                     extra={"event": "queue_declared", "queue": name, "source": "enqueue"})
        return q

    def put(self, state: QueueState) -> None:
        """Insert or replace a queue (admin declare)."""
        self._queues[state.name] = state
        _generation[0] += 1

    def remove(self, name: str) -> QueueState | None:
        """Forget a queue (admin delete)."""
        _generation[0] += 1
        return self._queues.pop(name, None)

    def all(self) -> list[QueueState]:
        """Every queue, sorted by name."""
        return [self._queues[n] for n in sorted(self._queues)]
