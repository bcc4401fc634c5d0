"""attack4: StopReserving(stopped=true) notes a stop also for an id the node never saw
reserve (a worker behind a load balancer): an entry with no Reserve, listed nowhere. Such
entries filled the registry's MAX_WORKERS slots (an hour each), so a worker that then
reserved was not tracked at all — missing from the Workers page with nothing listed in its
place. A Reserve now takes the slot of the oldest stop-only entry."""

from __future__ import annotations

import pytest

import sepp.server.workers as registry_module
from sepp.domain.clock import FakeClock
from sepp.server.workers import WorkerRegistry


def test_stop_only_entries_do_not_keep_a_reserving_worker_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "MAX_WORKERS", 3)
    clock = FakeClock()
    reg = WorkerRegistry(clock)
    reg.reserved("real", "", ["q"], 1, "")
    for i in range(5):
        clock.advance(1)
        reg.stopped(f"ghost{i}")
    assert len(reg) == 3
    clock.advance(1)
    reg.reserved("late", "", ["q"], 1, "")
    ids = {r.worker_id for r in reg.snapshot("n")}
    assert {"real", "late"} <= ids and len(reg) == 3
    assert "ghost0" not in ids  # the oldest stop-only entry made room
    # reserving workers are never evicted for another
    reg.reserved("late2", "", ["q"], 1, "")
    reg.reserved("late3", "", ["q"], 1, "")
    ids = {r.worker_id for r in reg.snapshot("n")}
    assert ids == {"real", "late", "late2"}
