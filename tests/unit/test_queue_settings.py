"""Queue settings bounds (SPEC §1 "Queue"; docs/configuration.md): a queue's default lease
runs from 1 ms to 1 day, like a Reserve's own lease and an ExtendLease, at the limit and
one past it on each side."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sepp.limits import QueueSettings
from sepp.worker.config import WorkerConfig


@pytest.mark.parametrize("seconds, accepted", [(0.001, True), (0.000999, False), (86_400, True), (86_401, False),
                                               (0, False)])
def test_queue_lease_duration_bounds(seconds: float, accepted: bool) -> None:
    if accepted:
        assert QueueSettings(lease_duration=seconds).lease_duration == seconds
    else:
        with pytest.raises(ValidationError):
            QueueSettings(lease_duration=seconds)


@pytest.mark.parametrize("seconds, accepted", [(0.001, True), (0.000999, False), (86_400, True), (86_401, False)])
def test_worker_lease_duration_bounds(seconds: float, accepted: bool) -> None:
    if accepted:
        assert WorkerConfig(target="127.0.0.1:1", queues=("q",), lease_duration=seconds).lease_duration == seconds
    else:
        with pytest.raises(ValueError, match=r"lease_duration must be between 0\.001 and 86400"):
            WorkerConfig(target="127.0.0.1:1", queues=("q",), lease_duration=seconds)
