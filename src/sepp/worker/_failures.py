"""How the Worker logs a call that keeps failing (a server that is down or restarting).

The reserve loop retries a failed ``Reserve``, and the settler a failed ``Settle``, every
0.05–2 s (``runtime.RESERVE_RETRY_MAX``, ``_settler.RETRY_PAUSE_MAX``), and since the
worker's channel reconnects within about a second, an outage of a minute would log a
WARNING per try. ``FailureLog`` keeps the first failure of a run visible at once, then says
at most once per ``every`` seconds that the call is still failing (with the count), and
says once at INFO when the call works again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

#: Seconds between two WARNINGs about the same run of failures.
REPEAT_EVERY = 30.0


class FailureLog:
    """Rate-limited logging of a run of failures of one call (``what``, e.g. ``"reserve"``).

    ``clock`` gives monotonic seconds (``time.monotonic``; tests pass a fake)."""

    __slots__ = ("_clock", "_every", "_last", "_log", "failures", "what")

    def __init__(self, log: logging.Logger, what: str, every: float = REPEAT_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log, self.what, self._every, self._clock = log, what, every, clock
        self.failures = 0
        self._last = 0.0

    def failed(self, error: object, retry_in: float) -> bool:
        """Count one failure; log it at WARNING when it is the first of the run or ``every``
        seconds have passed since the last one logged. True when it logged."""
        self.failures += 1
        now = self._clock()
        if self.failures > 1 and now - self._last < self._every:
            return False
        self._last = now
        if self.failures == 1:
            self._log.warning("%s failed (%s); retrying in %.2fs", self.what, error, retry_in)
        else:
            self._log.warning("%s still failing (%s): %d tries in a row; retrying every %.2fs at most",
                              self.what, error, self.failures, retry_in)
        return True

    def worked(self) -> None:
        """The call worked: end the run (one INFO line when it had failed)."""
        if self.failures:
            self._log.info("%s works again after %d failed tries", self.what, self.failures)
            self.failures = 0
