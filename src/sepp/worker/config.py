"""``WorkerConfig``: every setting of a :class:`~sepp.worker.Worker`, frozen (STYLE habit 7)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

import grpc

from sepp.client.target import normalize_target
from sepp.client.tls import PathArg, channel_credentials, read_tls_files
from sepp.hard_limits import MAX_SETTLE_BATCH

#: Where ``sepp serve`` listens by default.
DEFAULT_TARGET = "127.0.0.1:7700"

#: Seconds a prefetched job may wait for a free slot before the adaptive prefetch
#: (``prefetch=None``) halves: longer means the worker holds more than it runs.
PREFETCH_MAX_WAIT = 0.05


def default_worker_id() -> str:
    """``host:pid`` — recorded in each attempt's history."""
    return f"{socket.gethostname()}:{os.getpid()}"


def queue_tuple(queues: str | Iterable[str]) -> tuple[str, ...]:
    """Queue names as a tuple, order kept, duplicates dropped; a ``str`` may be ``"a,b"``.

    Raises ``TypeError`` for a name that is not a ``str``.
    """
    items = queues.split(",") if isinstance(queues, str) else list(queues)
    out: list[str] = []
    for name in items:
        if not isinstance(name, str):
            raise TypeError(f"queue names must be str, not {type(name).__name__}")
        name = name.strip()
        if name and name not in out:
            out.append(name)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How a worker reserves and runs jobs. Durations are seconds.

    Attributes:
        target: ``host:port`` of the server's gRPC listener; a ``grpc://`` or ``http://``
            prefix is removed (``grpcs://`` / ``https://`` with TLS files only;
            ``sepp.client.target``).
        queues: Queues to reserve from, tried in this order; at least one.
        concurrency: Most handlers running at once (≥ 1). Also the size of the thread
            pool plain (non-async) handlers run in.
        prefetch: Jobs reserved ahead beyond the running ones: an ``int`` ≥ 0 holds exactly
            that many at most; ``None`` (the default) adapts it: it starts
            at ``concurrency``, doubles (up to ``2 × max_reserve``) while the worker runs dry
            waiting on a full reservation, and halves (down to 0) once a prefetched job waited
            longer than ``PREFETCH_MAX_WAIT`` for a slot — so no-op-sized jobs are reserved in
            large batches and slow ones are not hoarded. Prefetched jobs hold a lease (kept
            alive like running ones) and are released at shutdown.
        lease_duration: Lease asked for at reserve and re-applied by each extension;
            ``None`` = the queue's own ``lease_duration``.
        shutdown_grace: How long a graceful stop waits for running handlers before it
            releases their jobs.
        worker_id: Name recorded in attempt history; empty = ``host:pid``.
        poll_wait: Long-poll of each ``Reserve`` when nothing is ready (≤ 30).
        max_reserve: Most jobs asked for by one ``Reserve`` (the server's cap, ``max_reserve_batch``, is
            256 by default; a worker refused for asking more asks for at most the cap after).
        settle_batch: Most acks/nacks in one ``Settle`` call (1 .. 10,000, the server's cap).
        tls_ca, tls_cert, tls_key: TLS from PEM files (``sepp.client.tls``): the CA
            of the server's certificate, the worker's own certificate and key (mutual TLS).

    Raises ``ValueError`` for an out-of-range value, a ``target`` that is not ``HOST:PORT``,
    and for a TLS file that cannot be read or used (checked here, so a bad path fails at
    construction, not at ``run``).

    A worker whose server cannot be reached keeps trying (it is a service, often started
    beside its server); its log says why, e.g. ``reserve failed (connection refused: is sepp
    running on 127.0.0.1:7799? …)``.
    """

    target: str = DEFAULT_TARGET
    queues: tuple[str, ...] = ()
    concurrency: int = 10
    prefetch: int | None = None
    lease_duration: float | None = None
    shutdown_grace: float = 30.0
    worker_id: str = field(default_factory=default_worker_id)
    poll_wait: float = 5.0
    max_reserve: int = 256
    settle_batch: int = 256
    tls_ca: PathArg | None = None
    tls_cert: PathArg | None = None
    tls_key: PathArg | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "queues", queue_tuple(self.queues))
        if not self.worker_id:
            object.__setattr__(self, "worker_id", default_worker_id())
        if not self.target:
            raise ValueError("target must be host:port")
        tls = self.tls_ca is not None or self.tls_cert is not None or self.tls_key is not None
        object.__setattr__(self, "target", normalize_target(self.target, tls=tls))
        if self.concurrency < 1:
            raise ValueError("concurrency must be ≥ 1")
        if self.prefetch is not None and self.prefetch < 0:
            raise ValueError("prefetch must be ≥ 0 (or None: adaptive)")
        if self.lease_duration is not None and not 0.001 <= self.lease_duration <= 86_400:
            raise ValueError("lease_duration must be between 0.001 and 86400 seconds (or None for the queue's)")
        if not self.shutdown_grace >= 0:
            raise ValueError("shutdown_grace must be ≥ 0 seconds")
        if not 0 <= self.poll_wait <= 30:
            raise ValueError("poll_wait must be between 0 and 30 seconds")
        if self.max_reserve < 1 or self.settle_batch < 1:
            raise ValueError("max_reserve and settle_batch must be ≥ 1")
        if self.settle_batch > MAX_SETTLE_BATCH:
            raise ValueError(f"settle_batch must be at most {MAX_SETTLE_BATCH} (the server refuses a larger Settle)")
        read_tls_files(self.tls_ca, self.tls_cert, self.tls_key)

    def credentials(self) -> grpc.ChannelCredentials | None:
        """The TLS channel credentials of ``tls_ca`` / ``tls_cert`` / ``tls_key`` (None:
        plaintext). Raises ``ValueError`` for a file that became unreadable since."""
        return channel_credentials(self.tls_ca, self.tls_cert, self.tls_key)


__all__ = ["DEFAULT_TARGET", "PREFETCH_MAX_WAIT", "WorkerConfig", "default_worker_id", "queue_tuple"]
