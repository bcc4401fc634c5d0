"""The Worker's rate-limited log of a call that keeps failing (``sepp.worker._failures``)."""

from __future__ import annotations

import logging

import pytest

from sepp.worker._failures import FailureLog


class Clock:
    """Monotonic seconds, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_first_failure_at_once_then_one_warning_per_interval_and_one_line_when_it_works(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = logging.getLogger("test.failures")
    failures = FailureLog(log, "reserve", every=30.0, clock=clock)
    with caplog.at_level(logging.INFO, logger="test.failures"):
        logged = []
        for _ in range(20):  # 20 tries over 29.9 s: only the first is logged
            logged.append(failures.failed("server unavailable", 1.0))
            clock.now += 29.9 / 19
        assert logged == [True] + [False] * 19
        clock.now = 100.0 + 30.0  # exactly the interval after the first: logged again
        assert failures.failed("server unavailable", 1.0)
        failures.worked()
        failures.worked()  # a second success says nothing more
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("WARNING", "reserve failed (server unavailable); retrying in 1.00s"),
        ("WARNING", "reserve still failing (server unavailable): 21 tries in a row; retrying every 1.00s at most"),
        ("INFO", "reserve works again after 21 failed tries"),
    ]


def test_a_new_run_of_failures_is_logged_at_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    failures = FailureLog(logging.getLogger("test.failures2"), "reserve", clock=clock)
    with caplog.at_level(logging.INFO, logger="test.failures2"):
        assert failures.failed("down", 0.05)
        failures.worked()
        clock.now += 1.0  # well inside the interval, but a new run
        assert failures.failed("down again", 0.05)
    assert [r.getMessage() for r in caplog.records][-1] == "reserve failed (down again); retrying in 0.05s"
