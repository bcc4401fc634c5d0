"""Readiness (docs/operations.md "Health and readiness"): does the storage answer?

``Readiness`` probes the store (``Store.ping``, bounded by ``PROBE_TIMEOUT``) every
``interval`` seconds in a background task, keeps the last verdict, and reports each change
through ``on_change(ready)`` — the server flips the gRPC health service between SERVING and
NOT_SERVING with it. ``/readyz`` calls ``check()``: a fresh probe, shared with any probe
already in flight (so a burst of requests costs one probe), which updates the verdict too.
While the server stops, ``stopping()`` makes every verdict "not ready" for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sepp.storage.base import Store
from sepp.storage.errors import StoreError

log = logging.getLogger("sepp.server")

#: Longest a probe may take before the store counts as not answering, seconds
#: ("storage answers a trivial query within 1 s").
PROBE_TIMEOUT = 1.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """One readiness verdict: ``ready``, and ``reason`` ("" when ready; else one line:
    ``stopping``, ``storage did not answer within 1 s``, or the store's error)."""

    ready: bool
    reason: str = ""


def _consume(task: asyncio.Future[None]) -> None:
    """Retrieve the outcome of an abandoned ping (no "exception never retrieved" noise)."""
    if not task.cancelled():
        task.exception()


class Readiness:
    """The readiness probe loop of one server (see the module docstring).

    ``interval``: seconds between background probes (``readiness_interval``). ``timeout``:
    bound of one probe, seconds. ``on_change(ready)`` is awaited on the event loop after the
    verdict flips (not for the first verdict when it is "ready": the server starts SERVING).
    """

    def __init__(self, store: Store, interval: float, on_change: Callable[[bool], Awaitable[None]], *,
                 timeout: float = PROBE_TIMEOUT) -> None:
        self._store = store
        self._interval = interval
        self._timeout = timeout
        self._on_change = on_change
        self._verdict = Verdict(True)
        self._probe: asyncio.Task[Verdict] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def verdict(self) -> Verdict:
        """The last verdict (ready until the first probe says otherwise)."""
        return self._verdict

    async def start(self) -> None:
        """Start the background probes (the first one at once)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="sepp-readiness")

    async def stopping(self) -> None:
        """The server begins to stop: not ready from now on, probes end. Idempotent."""
        self._stopping = True
        self._verdict = Verdict(False, "stopping")
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def check(self) -> Verdict:
        """A fresh verdict: one probe bounded by ``timeout`` (joining the one in flight, if
        any); the verdict is kept and a change reported through ``on_change``. Never raises."""
        if self._stopping:
            return self._verdict
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._run_probe(), name="sepp-readiness-probe")
        verdict = await asyncio.shield(self._probe)
        if self._stopping:
            return self._verdict
        if verdict.ready != self._verdict.ready:
            if verdict.ready:
                log.info("ready: the storage answers again")
            else:
                log.warning("not ready: %s", verdict.reason)
            self._verdict = verdict
            await self._on_change(verdict.ready)
        else:
            self._verdict = verdict
        return verdict

    async def _run_probe(self) -> Verdict:
        # Not asyncio.wait_for: it waits for the cancelled ping to end, and a ping stuck on a
        # database that does not answer ends its cancellation only when the database answers
        # (asyncpg cancels the query over the same silent network). A ping that overstays is
        # cancelled and left to end by itself; the verdict comes on time.
        ping = asyncio.ensure_future(self._store.ping())
        done, _ = await asyncio.wait({ping}, timeout=self._timeout)
        if not done:
            ping.cancel()
            ping.add_done_callback(_consume)
            return Verdict(False, f"storage did not answer within {self._timeout:g} s")
        try:
            ping.result()
        except StoreError as exc:
            return Verdict(False, f"storage: {exc}")
        return Verdict(True)

    async def _loop(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # never let the probe loop die: the verdict would freeze
                log.exception("readiness probe failed")
            await asyncio.sleep(self._interval)


__all__ = ["PROBE_TIMEOUT", "Readiness", "Verdict"]
