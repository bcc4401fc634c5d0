"""The server's parts, handed out explicitly: one ``ServerParts`` object holding the clock,
the store, the queue registry, the notifier, the events, the limits and the log lines every
service of a node shares.

``sepp.server.app`` builds it once (``ServerParts.build``) and gives it to each service —
admission, leasing and settlement (``JobEngine``), the sweeper, the RPC servicers, the admin
engine, the HTTP app and UI, the periodic scheduler, the metrics and the cluster heartbeat —
so no service reaches through another for a part, and a test drives all of them with one
``FakeClock`` by building one ``ServerParts``. It holds state only; what is done with it lives
in the services (docs/architecture.md "The server's parts").
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field

from sepp.domain.clock import SYSTEM_CLOCK, Clock
from sepp.domain.records import NodeRecord
from sepp.limits import ServerLimits
from sepp.server.config import ServerConfig
from sepp.server.eventlog import RateLimited
from sepp.server.events import EngineEvents
from sepp.server.job_events import JobEvents
from sepp.server.notifier import Notifier
from sepp.server.queues import QueueRegistry
from sepp.server.workers import WorkerRegistry
from sepp.storage.base import Store
from sepp.validation import Validator

#: The logger of the engine's lines (admission, leasing, settlement): one name, as before the split.
ENGINE_LOG = logging.getLogger("sepp.engine")
#: Dead-letter lines: at most this many per ``DEAD_LOG_EVERY`` seconds (the rest counted).
DEAD_LOG_BURST, DEAD_LOG_EVERY = 20, 5.0
#: Overload lines: at most one per this many seconds, with the count of the refusals in between.
OVERLOAD_LOG_EVERY = 5.0


@dataclass(slots=True, eq=False)
class EngineLogs:
    """The engine's significant-event lines that can come in floods, rate-limited
    (``RateLimited`` on logger ``sepp.engine``): ``dead`` for jobs a settle dead-lettered,
    ``overload`` for enqueue calls shed with OVERLOADED."""

    dead: RateLimited = field(default_factory=lambda: RateLimited(ENGINE_LOG, burst=DEAD_LOG_BURST,
                                                                    every=DEAD_LOG_EVERY))
    overload: RateLimited = field(default_factory=lambda: RateLimited(ENGINE_LOG, burst=1,
                                                                        every=OVERLOAD_LOG_EVERY))


@dataclass(slots=True, eq=False)
class ServerParts:
    """What the services of one node share (build it with ``build``).

    - ``config``: the node's ``ServerConfig``; ``limits`` is ``config.limits``.
    - ``node``: this node's name (``node_name``, else the host name): stored on each job it
      leases and named in that attempt's history.
    - ``clock``: the one source of time of the server (``now`` µs UTC, ``monotonic`` s): every
      reading a service makes (enqueue time, lease start and expiry, settle time, sweeps,
      stats) comes from it. Waits (long-polls, loops) run in real time on the event loop.
    - ``store``: the ``Store`` (one commit per call).
    - ``queues``: the ``QueueRegistry`` (settings, flow state, on-demand queues).
    - ``notifier``: wakes long-polling reservers of a queue.
    - ``events``: the ``EngineEvents`` subscriber lists (subscribe, do not assign).
    - ``job_events``: the live job events (``JobEvents``: ``WatchJobs``); emitters check
      its ``active`` before building an event.
    - ``validator``: the shared ``Validator`` of enqueue requests, over ``limits`` and the registry.
    - ``workers``: the workers this node sees (fed by Reserve calls, reported each heartbeat).
    - ``nodes``: the nodes sharing the store as last read (every heartbeat, or the UI's nodes
      page): what GetServerInfo and the UI list. The one field that is reassigned.
    - ``logs``: the rate-limited engine lines (``EngineLogs``).
    """

    config: ServerConfig
    node: str
    clock: Clock
    store: Store
    queues: QueueRegistry
    notifier: Notifier
    events: EngineEvents
    limits: ServerLimits
    validator: Validator
    workers: WorkerRegistry
    logs: EngineLogs
    job_events: JobEvents
    nodes: list[NodeRecord] = field(default_factory=list)

    @classmethod
    def build(cls, config: ServerConfig, store: Store, registry: QueueRegistry, notifier: Notifier, *,
              clock: Clock = SYSTEM_CLOCK) -> ServerParts:
        """The parts of a node over ``store`` and ``registry``: fresh events, validator,
        worker registry and log limits; the node named by ``config`` (else the host name)."""
        node = config.node_name or socket.gethostname()
        return cls(config=config, node=node, clock=clock, store=store,
                   queues=registry, notifier=notifier, events=EngineEvents(), limits=config.limits,
                   validator=Validator(config.limits, registry.limits_for), workers=WorkerRegistry(clock),
                   logs=EngineLogs(), job_events=JobEvents(node, clock, config.watch_buffer))


class EngineService:
    """Base of the engine's services (admission, leasing, settlement): the parts they read on
    their hot paths bound as their own attributes, one attribute lookup each — ``clock`` and
    ``_clock_now`` (``clock.now``, µs UTC), ``store``, ``queues``, ``notifier``, ``events``, ``job_events``,
    ``limits`` and ``_logs``. They are bound once: a service sees the parts it was built over."""

    def __init__(self, parts: ServerParts) -> None:
        self.clock = parts.clock
        self._clock_now = parts.clock.now
        self.store = parts.store
        self.queues = parts.queues
        self.notifier = parts.notifier
        self.events = parts.events
        self.job_events = parts.job_events
        self.limits = parts.limits
        self._logs = parts.logs


__all__ = ["DEAD_LOG_BURST", "DEAD_LOG_EVERY", "ENGINE_LOG", "OVERLOAD_LOG_EVERY", "EngineLogs", "EngineService",
           "ServerParts"]
