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
