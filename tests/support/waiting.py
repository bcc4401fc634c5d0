"""The one poll-with-deadline of the tests (no sleeps-and-hope: the probe says when)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, TypeVar

T = TypeVar("T")


def wait_for(probe: Callable[[], T | Literal[False] | None], timeout: float = 10.0, interval: float = 0.01,
             what: str = "") -> T:
    """Call ``probe`` every ``interval`` seconds until it returns something truthy and
    return that; ``AssertionError`` naming ``what`` (else the probe) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or probe}")
        time.sleep(interval)



def with_lead(trial: Callable[[float], T | None], lead: float, tries: int = 4, what: str = "") -> T:
    """Run ``trial(lead)``, doubling ``lead`` while the trial says it could not decide.

    For a test that needs some time in hand (a job scheduled ahead, still in the future
    when the test looks): ``trial`` does the test with that lead and returns what it found
    once it has checked what it is about, None when the machine was too slow for the lead
    to hold (nothing was checked; each try must use queues of its own). A quiet machine
    decides at the first lead; a loaded one pays with a longer lead, never with a false
    failure. ``AssertionError`` naming ``what`` when no lead up to ``lead * 2**(tries-1)`` held."""
    for k in range(tries):
        found = trial(lead * 2**k)
        if found is not None:
            return found
    raise AssertionError(f"the machine outran every lead up to {lead * 2 ** (tries - 1)} s: {what or trial}")


def past(instant: float, margin: float = 0.02, what: str = "") -> None:
    """Wait until the wall clock (``time.time()``, seconds since the Unix epoch, the clock
    the server stamps leases and times with on this machine) is ``margin`` seconds past
    ``instant``: for a deadline the server named (a lease's expiry), instead of a guessed
    sleep. ``AssertionError`` naming ``what`` if the clock does not get there within
    10 s more than the wait should take."""
    timeout = max(0.0, instant + margin - time.time()) + 10.0
    wait_for(lambda: time.time() > instant + margin, timeout=timeout, interval=0.005, what=what or f"{instant}")
