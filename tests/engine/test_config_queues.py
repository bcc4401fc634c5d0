"""``[queues.NAME]`` in the config file applies only the keys it names (new-user trial
finding 1): over a stored queue's settings, which keep every other value — set earlier by
``sepp queues update`` through any node — and over the defaults for a new queue. The named
keys win again at every start; a start that changes a stored queue logs one line naming
each changed key, old → new.

Nodes are in-process engines on real stores, started as ``App.start`` loads queues
(``QueueRegistry.load``, then the changed rows written); on SQLite one folder, so one node
at a time (a restart), on PostgreSQL one schema (several nodes at once)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from support.backends import store_settings

from engine.engine_kit import Harness
from sepp.domain.clock import FakeClock
from sepp.limits import QueueSettings
from sepp.server.admin.engine import AdminEngine
from sepp.server.config import ConfigError, ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueRegistry
from sepp.server.sweeper.runner import Sweeper
from sepp.storage.base import Store
from sepp.storage.factory import open_store


class Nodes:
    """Nodes on one database of ``backend`` and the fake clock they share."""

    def __init__(self, backend: str, folder: Path) -> None:
        self.settings = store_settings(backend)  # one PostgreSQL schema for every node
        self.folder = folder
        self.clock = FakeClock()
        self.stores: list[Store] = []

    async def start(self, queues: dict[str, dict[str, Any]] | None = None, **config: Any) -> Harness:
        """A node whose config file holds ``queues`` as its ``[queues.NAME]`` tables."""
        cfg = ServerConfig(data_dir=self.folder, queues={n: QueueSettings.model_validate(s)
                                                         for n, s in (queues or {}).items()},
                           **self.settings, **config)
        store = open_store(cfg, self.clock)
        await store.open()
        self.stores.append(store)
        registry = QueueRegistry(cfg.queue_defaults, cfg.strict, cfg.limits.max_encoding_bytes, cfg.limits.max_queues)
        try:
            for q in registry.load(await store.load_queues(), dict(cfg.queues)):  # as App.start does
                await store.upsert_queue(q.record(), self.clock.now())
                q.persisted = True
        except BaseException:
            await self.stop(store)
            raise
        parts = ServerParts.build(cfg, store, registry, Notifier(), clock=self.clock)
        return Harness(JobEngine(parts), Sweeper(parts, 60.0), self.clock, store)

    async def stop(self, node: Harness | Store) -> None:
        store = node.store if isinstance(node, Harness) else node
        await store.close()
        self.stores.remove(store)

    async def restart(self, node: Harness, queues: dict[str, dict[str, Any]] | None = None) -> Harness:
        await self.stop(node)
        return await self.start(queues)

    async def stored(self, name: str) -> QueueSettings:
        """The queue's settings as its row in the database holds them."""
        (rec,) = [r for r in await self.stores[0].load_queues() if r.name == name]
        return QueueSettings.model_validate_json(rec.settings_json)


def admin(node: Harness) -> AdminEngine:
    return AdminEngine(node.parts, node.store.admin)


async def refresh(node: Harness) -> None:
    """A cluster refresh of the node's queues (``Cluster``: on a NOTIFY, and every 5 s)."""
    registry = node.parts.queues
    assert registry.refresh(await node.store.load_queues(), registry.generation) is not None


def config_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "sepp.queues" and getattr(r, "source", "") == "config"]


async def test_a_restart_applies_only_the_keys_the_file_names(
        nodes: Nodes, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sepp.queues")
    file = {"emails": {"default_priority": 3}}
    node = await nodes.start(file)
    q = node.parts.queues.get("emails")
    assert q is not None and q.declared and q.settings == QueueSettings(default_priority=3)  # new: over the defaults
    await admin(node).update_queue("emails", {"completed_retention": 3600.0, "max_in_flight": 2},
                                   ["completed_retention", "max_in_flight"])
    await admin(node).set_paused("emails", True)

    caplog.clear()
    node = await nodes.restart(node, file)
    q = node.parts.queues.get("emails")
    assert q is not None and q.paused
    assert (q.settings.default_priority, q.settings.completed_retention, q.settings.max_in_flight) == (3, 3600.0, 2)
    assert config_lines(caplog) == [], "nothing changed: nothing to say"

    await admin(node).update_queue("emails", {"default_priority": 7}, ["default_priority"])
    caplog.clear()
    node = await nodes.restart(node, file)  # the key the file names wins again
    q = node.parts.queues.get("emails")
    assert q is not None
    assert (q.settings.default_priority, q.settings.completed_retention, q.settings.max_in_flight) == (3, 3600.0, 2)
    stored = await nodes.stored("emails")
    assert (stored.default_priority, stored.completed_retention, stored.max_in_flight) == (3, 3600.0, 2)
    (line,) = config_lines(caplog)
    assert line.levelno == logging.INFO
    assert line.getMessage() == "queue 'emails' changed by the config: default_priority 7 → 3"
    assert line.__dict__["settings"] == ["default_priority"]
    assert line.__dict__["changes"] == {"default_priority": {"old": 7, "new": 3}}


async def test_limits_are_applied_key_by_key_and_every_changed_key_is_logged(
        nodes: Nodes, caplog: pytest.LogCaptureFixture) -> None:
    node = await nodes.start({"media": {"limits": {"max_payload_bytes": 1000}}})
    await admin(node).update_queue("media", {"limits": {"max_custom_entries": 4}, "rate_limit": "5/s",
                                             "dedup_window": 60.0},
                                   ["limits.max_custom_entries", "rate_limit", "dedup_window"])
    caplog.set_level(logging.INFO, logger="sepp.queues")
    caplog.clear()  # only what this start logs (an earlier test may have left the level at INFO)
    node = await nodes.restart(node, {"media": {"limits": {"max_payload_bytes": 2000}, "rate_limit": "10/s",
                                                "dedup_window": 60}})
    q = node.parts.queues.get("media")
    assert q is not None
    assert (q.limits.max_payload_bytes, q.limits.max_custom_entries, q.settings.rate_limit) == (2000, 4, "10/s")
    (line,) = config_lines(caplog)
    assert line.getMessage() == ("queue 'media' changed by the config: "
                                 "limits.max_payload_bytes 1000 → 2000, rate_limit \"5/s\" → \"10/s\"")


async def test_a_queue_made_on_first_enqueue_keeps_its_settings_when_a_file_declares_it(
        nodes: Nodes, caplog: pytest.LogCaptureFixture) -> None:
    node = await nodes.start()
    await node.enqueue("auto")  # made with the server's queue_defaults, stored undeclared
    await admin(node).update_queue("auto", {"retry_base": 5.0}, ["retry_base"])
    caplog.set_level(logging.INFO, logger="sepp.queues")
    caplog.clear()  # only what this start logs (an earlier test may have left the level at INFO)
    node = await nodes.restart(node, {"auto": {}})
    q = node.parts.queues.get("auto")
    assert q is not None and q.declared and q.settings == QueueSettings(retry_base=5.0)
    (line,) = config_lines(caplog)
    assert line.getMessage() == "queue 'auto' declared by the config (it existed; no setting changed)"
    assert (await nodes.stores[0].load_queues())[0].declared


async def test_named_keys_that_do_not_fit_the_stored_ones_refuse_the_start(nodes: Nodes) -> None:
    node = await nodes.start({"tenants": {"concurrency_key": "tenant_id", "max_in_flight_per_key": 2}})
    await nodes.stop(node)
    with pytest.raises(ConfigError, match=r"queues\.tenants: .*max_in_flight_per_key needs concurrency_key"):
        await nodes.start({"tenants": {"concurrency_key": ""}})
    node = await nodes.start({"tenants": {"concurrency_key": "", "max_in_flight_per_key": 0}})
    q = node.parts.queues.get("tenants")
    assert q is not None and (q.settings.concurrency_key, q.settings.max_in_flight_per_key) == ("", 0)


@pytest.mark.postgres_only(reason="several nodes on one database: SQLite's folder holds one process")
async def test_a_node_started_with_fewer_keys_changes_only_those_for_the_whole_cluster(
        nodes: Nodes, caplog: pytest.LogCaptureFixture) -> None:
    n1 = await nodes.start({"emails": {"default_priority": 3}}, node_name="n1")
    n2 = await nodes.start({"emails": {"default_priority": 3}}, node_name="n2")
    await admin(n1).update_queue("emails", {"completed_retention": 3600.0}, ["completed_retention"])
    await refresh(n2)  # as its listener does on n1's NOTIFY (not subscribed here)
    await admin(n2).update_queue("emails", {"max_in_flight": 5}, ["max_in_flight"])
    caplog.set_level(logging.INFO, logger="sepp.queues")
    caplog.clear()  # only what this start logs (an earlier test may have left the level at INFO)
    n3 = await nodes.start({"emails": {"default_priority": 4}}, node_name="n3")  # a file that differs
    for node in (n1, n2):  # the others take the row at their next refresh
        await refresh(node)
    for node in (n1, n2, n3):
        q = node.parts.queues.get("emails")
        assert q is not None
        assert (q.settings.default_priority, q.settings.completed_retention, q.settings.max_in_flight) == (4, 3600, 5)
    (line,) = config_lines(caplog)
    assert line.getMessage() == "queue 'emails' changed by the config: default_priority 3 → 4"
