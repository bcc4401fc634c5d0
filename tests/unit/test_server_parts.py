"""Services get their parts from ``ServerParts``, not through the engine: no module of
``sepp.server`` reads a part off an engine (``engine.clock``, ``self.engine.store``, …), and
``JobEngine`` itself holds no part but ``parts`` (so there is nothing to reach for)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import sepp
from sepp.domain.clock import FakeClock
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueRegistry

_SERVER = Path(sepp.__file__).parent / "server"
#: The parts (``ServerParts`` fields) and the old event aliases.
_PART = ("clock", "store", "queues", "notifier", "events", "limits", "config", "nodes", "node", "workers",
         "validator", "logs", "on_scheduled", "on_stored", "on_finished")
_REACH = re.compile(r"\bengine\.(" + "|".join(_PART) + r")\b")


def test_no_server_module_reaches_through_an_engine_for_a_part() -> None:
    found = [f"{path.relative_to(_SERVER)}:{n}: {line.strip()}"
             for path in sorted(_SERVER.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if _REACH.search(line.split("#", 1)[0])]
    assert found == []


class _NoPromotions:
    """A store stand-in for wiring checks (the engine subscribes to its promotions and to
    other nodes' finished jobs)."""

    shared = False

    def __init__(self) -> None:
        self.promoted: list[object] = []
        self.finished: list[object] = []

    def on_promoted(self, callback: object) -> None:
        self.promoted.append(callback)

    def on_finished(self, callback: object) -> None:
        self.finished.append(callback)


def test_the_engine_and_its_services_share_one_set_of_parts() -> None:
    config = ServerConfig()
    clock = FakeClock()
    store = _NoPromotions()
    notifier = Notifier()
    parts = ServerParts.build(config, store, QueueRegistry(config.queue_defaults, config.strict),  # type: ignore[arg-type]
                              notifier, clock=clock)
    engine = JobEngine(parts)
    assert engine.parts is parts
    assert not any(hasattr(engine, name) for name in _PART)
    for service in (engine.admission, engine.leasing, engine.settlement, engine.waits):
        assert service.store is parts.store and service.queues is parts.queues
    assert engine.admission.events is engine.settlement.events is parts.events
    assert engine.leasing.clock is engine.settlement.clock is clock
    # A Reserve's promotions wake this node's long polls (and are reported: Leasing._promoted).
    assert store.promoted == [engine.leasing._promoted]
    assert len(store.finished) == 1  # other nodes' finished jobs wake this node's waits
    assert parts.node == socket.gethostname() and parts.limits is config.limits  # no node_name set


def test_the_engine_modules_import_downwards_only() -> None:
    """facade → admission / leasing → settlement → parts: shared state lives in the parts,
    so no engine module imports one above it (no circle through a hub)."""
    import grimp

    graph = grimp.build_graph("sepp")
    order = ["sepp.server.engine", "sepp.server.admission", "sepp.server.leasing", "sepp.server.settlement",
             "sepp.server.parts"]
    upward = [(low, high) for i, high in enumerate(order) for low in order[i + 1:]
              if graph.chain_exists(importer=low, imported=high)]
    assert upward == []
    assert not graph.chain_exists(importer="sepp.server.admission", imported="sepp.server.leasing")
    assert not graph.chain_exists(importer="sepp.server.admission", imported="sepp.server.settlement")
