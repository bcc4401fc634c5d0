"""The in-memory worker registry and the cluster view of the Workers page, on a fake
clock: what a Reserve records, what other calls move on, the one-minute done counts, bounds,
forgetting, and merging one worker's rows from several nodes."""

from __future__ import annotations

import pytest

from sepp.domain.clock import FakeClock
from sepp.domain.records import WorkerRecord
from sepp.limits import QueueSettings
from sepp.server import workers as registry_module
from sepp.server.admin.workers import merge_workers, quiet_after
from sepp.server.queues import QueueRegistry
from sepp.server.workers import WorkerRegistry

S = 1_000_000


def test_a_reserve_records_the_worker_and_later_calls_count_its_jobs() -> None:
    clock = FakeClock()
    reg = WorkerRegistry(clock)
    t0 = clock.now()
    reg.reserved("w1", "host-a", ["mail", "sms"], 8, "sepp-python/0.1.0")
    reg.called("w1", completed=5, failed=1)
    clock.advance(30)
    reg.called("w1", completed=2)
    reg.called("unknown", completed=9)   # never reserved: not tracked
    reg.reserved("", "h", ["q"], 1, "v")  # no id: not tracked
    (rec,) = reg.snapshot("n1")
    assert rec == WorkerRecord("w1", "n1", "host-a", ("mail", "sms"), 8, "sepp-python/0.1.0", t0, t0, t0 + 30 * S,
                               7, 1)
    clock.advance(31)                     # the first counts are now over a minute old
    (rec,) = reg.snapshot("n1")
    assert (rec.completed_minute, rec.failed_minute) == (2, 0)
    reg.reserved("w1", "", ["mail"], 0, "")  # an older client: what it did not say is kept
    (rec,) = reg.snapshot("n1")
    assert (rec.host, rec.queues, rec.concurrency, rec.client_version) == ("host-a", ("mail",), 8, "sepp-python/0.1.0")


def test_idle_workers_are_forgotten_after_an_hour_and_the_registry_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    reg = WorkerRegistry(clock)
    reg.reserved("old", "", ["q"], 1, "")
    clock.advance(registry_module.FORGET_AFTER - 1)
    reg.reserved("new", "", ["q"], 1, "")
    assert [r.worker_id for r in reg.snapshot("n")] == ["old", "new"]
    clock.advance(2)
    assert [r.worker_id for r in reg.snapshot("n")] == ["new"]
    monkeypatch.setattr(registry_module, "MAX_WORKERS", 3)
    for i in range(5):
        reg.reserved(f"w{i}", "", ["q"], 1, "")
    assert len(reg) == 3 and "w3" not in {r.worker_id for r in reg.snapshot("n")}
    monkeypatch.setattr(registry_module, "MAX_WORKERS", 10)
    reg.reserved("x" * 1024, "h" * 1000, ["q" * 1000] * 100, 1, "v" * 1000)  # caller input is cut …
    big = next(r for r in reg.snapshot("n") if r.worker_id.startswith("x"))
    assert (len(big.worker_id), len(big.host), len(big.queues), len(big.queues[0]), len(big.client_version)) == \
        (1024, 200, 16, 200, 200)  # … but never the id: cut ids would merge workers
    reg.reserved("y" * 1025, "h", ["q"], 1, "v")  # an id past MAX_ID is not tracked at all
    assert not any(r.worker_id.startswith("y") for r in reg.snapshot("n"))


def test_one_worker_on_two_nodes_is_one_entry_and_quiet_is_two_lease_periods() -> None:
    queues = QueueRegistry(QueueSettings(lease_duration=30), strict=False)
    now = 1_000 * S
    rows = [WorkerRecord("w", "n1", "h", ("q",), 4, "v", now - 100 * S, now - 10 * S, now - 10 * S, 3, 0),
            WorkerRecord("w", "n2", "h", ("q",), 4, "v", now - 50 * S, now - 5 * S, now - 2 * S, 4, 1),
            WorkerRecord("gone", "n1", "h", ("q",), 1, "v", now - 100 * S, now - 61 * S, now - 61 * S, 0, 0)]
    assert quiet_after(["q"], queues) == 60
    live, quiet = merge_workers(rows, {"w": 6}, queues, now)
    assert (live.worker_id, live.nodes, live.in_flight, live.completed_last_minute, live.failed_last_minute) == \
        ("w", ("n1", "n2"), 6, 7, 1)
    assert (live.first_seen, live.last_reserve, live.last_seen, live.quiet) == (now - 100 * S, now - 5 * S,
                                                                                 now - 2 * S, False)
    assert (quiet.worker_id, quiet.quiet, quiet.in_flight, quiet.idle) == ("gone", True, 0, 61.0)


def test_a_nul_in_caller_text_is_kept_as_a_replacement_character() -> None:
    reg = WorkerRegistry(FakeClock())
    reg.reserved("w", "ho\x00st", ["q\x00"], 1, "v\x00")
    (rec,) = reg.snapshot("n")
    assert (rec.host, rec.queues, rec.client_version) == ("ho\ufffdst", ("q\ufffd",), "v\ufffd")


def test_a_clean_stop_is_recorded_until_the_next_reserve_and_an_old_long_poll_does_not_end_it() -> None:
    clock = FakeClock()
    reg = WorkerRegistry(clock)
    began = reg.reserved("w", "h", ["q"], 2, "v")
    clock.advance(5)
    reg.stopped("w")
    stop = clock.now()
    clock.advance(1)
    reg.reserved("w", "h", ["q"], 2, "v", began)  # the end of a long poll that began before the stop
    reg.called("w", completed=1)                  # any other call: counted, still stopped
    (rec,) = reg.snapshot("n")
    assert (rec.stopped_at, rec.last_reserve, rec.completed_minute) == (stop, began, 1)
    clock.advance(1)
    again = reg.reserved("w", "h", ["q"], 2, "v")  # the restarted worker's first Reserve
    (rec,) = reg.snapshot("n")
    assert (rec.stopped_at, rec.last_reserve) == (0, again)
    reg.stopped("never-reserved-here")             # a node that only got the final call keeps it …
    reg.stopped("nul\x00id")                       # … but not an id the store could not hold
    assert {r.worker_id: r.stopped_at for r in reg.snapshot("n")} == {"w": 0, "never-reserved-here": clock.now()}


def test_a_stop_on_one_node_and_a_later_reserve_on_another_merge_by_time() -> None:
    queues = QueueRegistry(QueueSettings(lease_duration=30), strict=False)
    now = 1_000 * S

    def row(node: str, last_reserve: int, stopped_at: int = 0) -> WorkerRecord:
        return WorkerRecord("w", node, "h" if last_reserve else "", ("q",) if last_reserve else (), 4, "v",
                            now - 100 * S, last_reserve, max(last_reserve, stopped_at), 0, 0, stopped_at)

    stop_n1 = row("n1", now - 20 * S, stopped_at=now - 10 * S)
    (view,) = merge_workers([stop_n1, row("n2", now - 30 * S)], {}, queues, now)
    assert (view.state, view.stopped_at, view.quiet, view.nodes) == ("stopped", now - 10 * S, False, ("n1", "n2"))
    (view,) = merge_workers([stop_n1, row("n2", now - 5 * S)], {}, queues, now)
    assert (view.state, view.stopped_at, view.last_reserve) == ("live", 0, now - 5 * S)  # the later Reserve wins
    # The final call reached a node that never saw the worker reserve: the stop still counts …
    (view,) = merge_workers([row("n1", now - 20 * S), row("n2", 0, stopped_at=now - 10 * S)], {}, queues, now)
    assert (view.state, view.host, view.queues) == ("stopped", "h", ("q",))
    # … but a stop alone (no Reserve on any node) lists nobody; stopped ones come last, long stopped is not quiet.
    rows = [row("n1", 0, stopped_at=now), WorkerRecord("old", "n1", "h", ("q",), 1, "v", 0, now - 900 * S,
                                                       now - 900 * S, 0, 0, now - 899 * S),
            WorkerRecord("gone", "n1", "h", ("q",), 1, "v", 0, now - 61 * S, now - 61 * S, 0, 0),
            WorkerRecord("up", "n1", "h", ("q",), 1, "v", 0, now - S, now - S, 0, 0)]
    assert [(v.worker_id, v.state) for v in merge_workers(rows, {}, queues, now)] == \
        [("up", "live"), ("gone", "quiet"), ("old", "stopped")]


# ---------- stop-only entries
# StopReserving(stopped=true) notes a stop also for an id the node never saw reserve (a
# worker behind a load balancer): an entry with no Reserve, listed nowhere. Such entries filled
# the registry's MAX_WORKERS slots (an hour each), so a worker that then reserved was not tracked
# at all — missing from the Workers page with nothing listed in its place. A Reserve now takes the
# slot of the oldest stop-only entry.

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
