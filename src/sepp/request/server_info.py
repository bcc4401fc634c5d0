"""What a server says of itself (``GetServerInfo``): version, features, limits, queues and
nodes, as frozen dataclasses built from the wire message (``ServerInfo.from_proto``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.limits import QueueLimits, QueueSettings, ServerLimits

_PERSIST_MODES = {0: "unspecified", 1: "sync", 2: "group", 3: "async"}


def _duration(msg: Any) -> float:
    return float(msg.seconds + msg.nanos / 1e9)


def queue_limits_from_proto(msg: pb.QueueLimits) -> QueueLimits:
    """A wire ``QueueLimits`` as the pydantic model."""
    return QueueLimits(
        max_payload_bytes=msg.max_payload_bytes,
        allowed_encodings=tuple(msg.allowed_encodings),
        max_custom_entries=msg.max_custom_entries,
        max_custom_key_bytes=msg.max_custom_key_bytes,
        max_custom_bytes=msg.max_custom_bytes,
        max_result_bytes=msg.max_result_bytes,
    )


def queue_settings_from_proto(msg: pb.QueueSettings) -> QueueSettings:
    """A wire ``QueueSettings`` as the pydantic model (durations in seconds)."""
    return QueueSettings(
        default_priority=msg.default_priority,
        default_max_attempts=msg.default_max_attempts,
        lease_duration=_duration(msg.lease_duration),
        dedup_window=_duration(msg.dedup_window),
        retry_base=_duration(msg.retry_base),
        retry_cap=_duration(msg.retry_cap),
        retry_jitter=msg.retry_jitter,
        completed_retention=_duration(msg.completed_retention),
        dead_letter_retention=_duration(msg.dead_letter_retention),
        limits=queue_limits_from_proto(msg.limits),
        max_in_flight=msg.max_in_flight,
        rate_limit=msg.rate_limit,
        rate_burst=msg.rate_burst,
        concurrency_key=msg.concurrency_key,
        max_in_flight_per_key=msg.max_in_flight_per_key,
        consumer_timeout=_duration(msg.consumer_timeout),
    )


def server_limits_from_proto(msg: pb.ServerLimits) -> ServerLimits:
    """The advertised server limits as the pydantic model.

    Limits the server does not advertise (``max_message_bytes``, the worker-side
    ones) keep the model's defaults: they are *not* the server's values.
    """
    # An older server does not advertise max_wait (unset): keep the default, as for the others.
    max_wait = _duration(msg.max_wait) if msg.HasField("max_wait") else ServerLimits().max_wait_seconds
    return ServerLimits(
        max_enqueue_batch=msg.max_enqueue_batch,
        max_attempts_ceiling=msg.max_attempts_ceiling,
        max_queue_name_bytes=msg.max_queue_name_bytes,
        max_job_type_bytes=msg.max_job_type_bytes,
        max_schedule_horizon=_duration(msg.max_schedule_horizon),
        max_idempotency_key_bytes=msg.max_idempotency_key_bytes,
        max_encoding_bytes=msg.max_encoding_bytes,
        max_trace_entries=msg.max_trace_entries,
        max_trace_value_bytes=msg.max_trace_value_bytes,
        max_wait_seconds=max_wait,
    )


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue as the server advertises it.

    Attributes:
        name: The queue name.
        settings: Defaults and limits of the queue.
        paused: Whether reservation is paused (enqueue still works).
        declared: True when declared (config or admin API), False when created on demand.
    """

    name: str
    settings: QueueSettings
    paused: bool = False
    declared: bool = False

    @classmethod
    def from_proto(cls, msg: pb.QueueInfo) -> QueueInfo:
        """Build from a wire ``QueueInfo``."""
        return cls(msg.name, queue_settings_from_proto(msg.settings), bool(msg.paused), bool(msg.declared))


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One server process of a cluster, as ``GetServerInfo`` lists it.

    Attributes:
        name: Its node name (``node_name``, default the host name).
        address: Its gRPC address as it bound it, ``HOST:PORT``.
        version: Its sepp version.
        started_at: When it started, seconds since the epoch (UTC).
        last_seen: Its last heartbeat (every 5 s while it runs), seconds since the epoch (UTC).
    """

    name: str
    address: str = ""
    version: str = ""
    started_at: float = 0.0
    last_seen: float = 0.0

    @classmethod
    def from_proto(cls, msg: ppb.NodeInfo) -> NodeInfo:
        """Build from a wire ``NodeInfo``."""
        return cls(msg.name, msg.address, msg.version, msg.started_at.ToMicroseconds() / 1e6,
                   msg.last_seen.ToMicroseconds() / 1e6)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``GetServerInfo`` advertises: enough to validate requests locally.

    Attributes:
        version: The server's sepp version, e.g. ``"0.1.0"``.
        features: Feature flags, e.g. ``{"enqueue_atomic", "idempotency", "scheduling"}``.
        persist_mode: ``"sync"``, ``"group"``, ``"async"`` (``"unspecified"`` if unknown).
        strict: In strict mode an undeclared queue is ``UnknownQueue``.
        limits: Server-wide limits. Only the advertised fields are the server's;
            ``max_message_bytes`` and the worker-side fields keep their defaults.
        queue_defaults: Settings a queue created on first enqueue gets.
        queues: Every queue the server knows, by name (sorted).
        uptime: Seconds since the server started.
        node: The server's node name.
        storage: The storage backend, ``"sqlite"`` or ``"postgres"`` (``""`` from an older server).
        nodes: Every node sharing the server's store, by name (with SQLite the
            server itself).
    """

    version: str
    features: frozenset[str]
    persist_mode: str
    strict: bool
    limits: ServerLimits
    queue_defaults: QueueSettings
    queues: Mapping[str, QueueInfo] = dataclasses.field(hash=False)
    uptime: float = 0.0
    node: str = ""
    storage: str = ""
    nodes: tuple[NodeInfo, ...] = ()

    def queue_limits(self, queue: str) -> QueueLimits | None:
        """The limits a job for ``queue`` is validated against.

        A listed queue's own limits; an unlisted one gets ``queue_defaults.limits``,
        or ``None`` in strict mode (meaning ``UnknownQueue``).
        """
        info = self.queues.get(queue)
        if info is not None:
            return info.settings.limits
        return None if self.strict else self.queue_defaults.limits

    def has_feature(self, name: str) -> bool:
        """Whether the server advertises feature flag ``name``."""
        return name in self.features

    @classmethod
    def from_proto(cls, msg: ppb.ServerInfo) -> ServerInfo:
        """Build from a wire ``ServerInfo``.

        Raises ``pydantic.ValidationError`` when an advertised limit is out of range.
        """
        queues = {q.name: QueueInfo.from_proto(q) for q in sorted(msg.queues, key=lambda q: q.name)}
        return cls(
            version=msg.version,
            features=frozenset(msg.features),
            persist_mode=_PERSIST_MODES.get(int(msg.persist_mode), "unspecified"),
            strict=bool(msg.strict),
            limits=server_limits_from_proto(msg.limits) if msg.HasField("limits") else ServerLimits(),
            queue_defaults=(queue_settings_from_proto(msg.queue_defaults)
                            if msg.HasField("queue_defaults") else QueueSettings()),
            queues=MappingProxyType(queues),
            uptime=_duration(msg.uptime),
            node=msg.node,
            storage=msg.storage,
            nodes=tuple(NodeInfo.from_proto(n) for n in msg.nodes),
        )


__all__ = ["NodeInfo", "QueueInfo", "ServerInfo", "queue_limits_from_proto", "queue_settings_from_proto",
           "server_limits_from_proto"]
