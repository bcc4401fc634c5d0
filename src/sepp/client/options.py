"""Client configuration: frozen dataclasses, passed explicitly (STYLE "avoid" 4)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sepp.domain.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    import grpc

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How transient failures are retried, and only when retrying is safe.

    A call is retried when the server said ``OVERLOADED`` (nothing was stored), when it
    provably never reached a server (``Unavailable.not_sent``: no connection could be made,
    or a stopping server cancelled it before any handler took it; with
    ``ClientOptions.wait_for_ready`` such a call waits for the connection instead, without
    using up attempts), or on any other ``UNAVAILABLE`` or ``DEADLINE_EXCEEDED`` when every
    job of the call carries an idempotency key (``GetServerInfo`` is always safe).
    Rejections, oversized messages and other server errors are never retried.

    Attributes:
        max_attempts: Total tries including the first; 1 disables retrying.
        initial_backoff: Delay before the first retry, seconds.
        max_backoff: Ceiling of the exponential delay, seconds.
        multiplier: Growth factor per retry.
        jitter: Random spread as a fraction: the delay is scaled by a factor in
            ``[1 − jitter, 1 + jitter]``. A server ``retry_after`` is a floor, never
            shortened (see :meth:`delay`).

    Raises:
        ValueError: a negative or inconsistent setting.
    """

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be ≥ 1")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise ValueError("need 0 ≤ initial_backoff ≤ max_backoff")
        if self.multiplier < 1:
            raise ValueError("multiplier must be ≥ 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    @classmethod
    def disabled(cls) -> RetryPolicy:
        """A policy that never retries."""
        return cls(max_attempts=1)

    def delay(self, retry: int, retry_after: float | None = None,
              rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``retry`` (1 = the first retry).

        The exponential delay ``min(max_backoff, initial_backoff × multiplier^(retry−1))``
        scaled by ``[1 − jitter, 1 + jitter]``. A server ``retry_after`` (RetryInfo) is a
        floor: the wait is never shorter than it (it is only lengthened by jitter), and
        it still grows exponentially while the server stays overloaded.
        ``rand`` returns a float in [0, 1).
        """
        r = rand()
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))
        delay = max(0.0, base * (1.0 - self.jitter + 2.0 * self.jitter * r))
        if retry_after is not None:
            delay = max(delay, max(0.0, retry_after) * (1.0 + self.jitter * r))
        return delay


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """Settings of a :class:`~sepp.Client` or :class:`~sepp.AsyncClient`.

    Raises ``ValueError`` for a ``timeout`` ≤ 0, a ``max_message_bytes`` below 1024 or a
    negative ``interrupt_grace``.

    Attributes:
        timeout: Deadline of each attempt of a call, seconds; ``None`` = no deadline.
        validate_locally: Check requests against the limits ``GetServerInfo``
            advertises before sending, raising ``RejectedError`` without a round
            trip. The server always validates too.
        server_info_ttl: Seconds the cached ``ServerInfo`` is trusted before it is
            fetched again; ``None`` = until :meth:`refresh_server_info`. A local
            ``UnknownQueue`` always re-fetches once (at most once a second), so a
            queue declared after the client started is found.
        retry: Retry policy for transient failures (see :class:`RetryPolicy`).
        max_message_bytes: Largest message sent or received, bytes. Match the
            server's ``max_message_bytes`` (16 MiB by default); a bigger request fails
            as ``MessageTooLarge`` without being sent.
        metadata: Extra gRPC metadata sent with every call (e.g. an auth token).
        credentials: TLS channel credentials; ``None`` = plaintext.
        channel_options: Extra raw gRPC channel arguments (they override the client's own,
            see ``sepp.client._core.channel_options``).
        wait_for_ready: A call that finds no connection (server unreachable, restarting,
            or stopping and refusing new calls) waits for one within its ``timeout`` and is
            then sent, key or not — it provably never reached a server — so a server
            restart inside the deadline is invisible. The client owns
            this wait (gRPC's own ``wait_for_ready`` is off): a deadline spent waiting
            raises ``Unavailable`` with ``not_sent`` true, never an ambiguous
            ``DeadlineExceeded``. ``False``: such a call fails with ``Unavailable``
            (``not_sent``) and is retried per ``retry``.
        interrupt_grace: Seconds an interrupted ``enqueue_many`` (Ctrl-C: ``KeyboardInterrupt``)
            waits for the verdicts of the batches already sent before it raises
            ``EnqueueInterrupted``, so that what the server stored meanwhile is reported as
            answered rather than "may or may not be stored"; ``0`` = do not wait. A second
            Ctrl-C ends the wait at once. ``AsyncClient`` does not wait: a cancelled task
            stops at once (docs/decisions.md "Interrupted enqueue_many").
        wait_for_server_start: What a call does when this process never reached a server at
            the client's address and nothing there can be connected to (connection refused,
            no such host, an HTTP/1.x answer from sepp's HTTP port, a failed TLS handshake).
            ``False`` (the default): it fails at once with ``Unavailable`` (``not_sent``)
            naming the address and the cause, e.g. ``connection refused: is sepp running on
            127.0.0.1:7799?`` — a wrong port or a stopped server is reported in
            milliseconds, not after ``timeout``. ``True``: it waits for the server within its
            ``timeout``, as a call to an address reached before does (a producer started
            together with its server). ``sepp.client.target`` has the rule.
        clock: Where the client reads the time (``sepp.domain.clock``): attempt deadlines,
            the ``ServerInfo`` cache's age, "now" for local ``ScheduledTooFar`` checks and
            ``interrupt_grace``. The system clock by default; tests pass a ``FakeClock``.
            Sleeps and gRPC's own deadlines still take real time.
    """

    timeout: float | None = 10.0
    validate_locally: bool = True
    server_info_ttl: float | None = 300.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_message_bytes: int = 16 * MiB
    metadata: tuple[tuple[str, str], ...] = ()
    credentials: grpc.ChannelCredentials | None = None
    channel_options: tuple[tuple[str, Any], ...] = ()
    wait_for_ready: bool = True
    interrupt_grace: float = 5.0
    wait_for_server_start: bool = False
    clock: Clock = SYSTEM_CLOCK

    def __post_init__(self) -> None:
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("timeout must be > 0 seconds (or None)")
        if not self.interrupt_grace >= 0:  # NaN too
            raise ValueError("interrupt_grace must be ≥ 0 seconds")
        if self.max_message_bytes < 1024:
            raise ValueError("max_message_bytes must be ≥ 1024")
