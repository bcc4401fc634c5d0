"""attack4: DeclareQueue through a node whose cache does not hold the queue (another node
created it, or deleted it, since this node loaded its queues). The create path wrote the
node's defaults + patch over the whole stored row (upsert), undoing the other node's keys
and its pause; and a declare of a queue deleted elsewhere answered QUEUE_NOT_FOUND instead
of creating it."""

from __future__ import annotations

import pytest

from engine.test_config_queues import Nodes, admin
from engine.test_queue_update_nodes import _row

pytestmark = pytest.mark.postgres_only(reason="several nodes on one database")


async def test_a_declare_through_a_node_that_never_saw_the_queue_keeps_its_stored_keys(nodes: Nodes) -> None:
    n1 = await nodes.start(node_name="n1")
    n2 = await nodes.start(node_name="n2")
    await admin(n1).declare_queue("emails", {"default_priority": 9}, ["default_priority"])
    await admin(n1).set_paused("emails", True)
    assert n2.parts.queues.get("emails") is None  # n2 has not taken it
    q, created = await admin(n2).declare_queue("emails", {"lease_duration": 60.0}, ["lease_duration"])
    settings, paused = await _row(n1.store)
    assert (settings.default_priority, settings.lease_duration, paused) == (9, 60, True)
    assert not created
    assert q.settings == settings and q.paused


async def test_a_plain_declare_through_a_node_that_never_saw_the_queue_keeps_it(nodes: Nodes) -> None:
    n1 = await nodes.start(node_name="n1")
    n2 = await nodes.start(node_name="n2")
    await admin(n1).declare_queue("emails", {"default_priority": 9}, ["default_priority"])
    await admin(n2).declare_queue("emails")
    settings, _ = await _row(n1.store)
    assert settings.default_priority == 9


async def test_a_declare_of_a_queue_deleted_on_another_node_creates_it(nodes: Nodes) -> None:
    n1 = await nodes.start({"scratch": {}}, node_name="n1")
    n2 = await nodes.start({"scratch": {}}, node_name="n2")
    await admin(n1).delete_queue("scratch")
    q, _ = await admin(n2).declare_queue("scratch", {"max_in_flight": 5}, ["max_in_flight"])
    settings, _ = await _row(n1.store, "scratch")
    assert settings.max_in_flight == 5 and q.settings.max_in_flight == 5
