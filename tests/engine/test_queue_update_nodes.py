"""``sepp queues update`` (UpdateQueue), DeclareQueue over an existing queue and Pause/Resume
merge over the queue's STORED row inside the write (``Store.change_queue``), not over the
answering node's cached copy: a node that has not taken another node's change yet (its
NOTIFY not handled, or lost: up to the 5 s reload) no longer writes its stale values of the
other keys back. The merged settings are validated as a whole against the stored row, with
the error a plain update gives, and the node's cache takes the row written.

Nodes are in-process engines on one PostgreSQL schema (``Nodes`` of test_config_queues);
none is subscribed to the others' notifications, so a node's cache is stale until the test
refreshes it — and these tests never do before the node's own change."""

from __future__ import annotations

import pytest

from engine.test_config_queues import Nodes, admin
from sepp.limits import QueueSettings
from sepp.server.errors import InvalidRequest, NotFound
from sepp.storage.base import Store

pytestmark = pytest.mark.postgres_only(reason="several nodes on one database: SQLite's folder holds one process")


async def _row(store: Store, name: str = "emails") -> tuple[QueueSettings, bool]:
    (rec,) = [r for r in await store.load_queues() if r.name == name]
    return QueueSettings.model_validate_json(rec.settings_json), rec.paused


async def test_an_update_through_a_node_that_missed_another_change_keeps_that_change(nodes: Nodes) -> None:
    n1 = await nodes.start({"emails": {}}, node_name="n1")
    n2 = await nodes.start({"emails": {}}, node_name="n2")
    await admin(n1).update_queue("emails", {"completed_retention": 3600.0}, ["completed_retention"])
    stale = n2.parts.queues.get("emails")
    assert stale is not None and stale.settings.completed_retention != 3600  # n2 has not taken it
    q = await admin(n2).update_queue("emails", {"max_in_flight": 5}, ["max_in_flight"])
    settings, _ = await _row(n1.store)
    assert (settings.completed_retention, settings.max_in_flight) == (3600, 5)
    assert (q.settings.completed_retention, q.settings.max_in_flight) == (3600, 5)  # n2's cache: the row written
    assert q.policy.completed_retention == 3600 * 1_000_000  # and the values derived from it


async def test_the_merge_is_validated_against_the_stored_row(nodes: Nodes) -> None:
    n1 = await nodes.start({"emails": {}}, node_name="n1")
    n2 = await nodes.start({"emails": {}}, node_name="n2")
    await admin(n1).update_queue("emails", {"concurrency_key": "tenant_id", "max_in_flight_per_key": 2},
                                 ["concurrency_key", "max_in_flight_per_key"])
    # Over n2's stale copy (no per-key limit) dropping the key is valid; over the stored row it is not.
    with pytest.raises(InvalidRequest) as err:
        await admin(n2).update_queue("emails", {"concurrency_key": ""}, ["concurrency_key"])
    assert err.value.field == "max_in_flight_per_key"
    assert str(err.value).startswith("max_in_flight_per_key: max_in_flight_per_key needs concurrency_key (")
    settings, _ = await _row(n1.store)
    assert (settings.concurrency_key, settings.max_in_flight_per_key) == ("tenant_id", 2)  # nothing written
    # The other way round: a per-key limit alone, refused over n2's copy (no key), fits the stored key.
    q = await admin(n2).update_queue("emails", {"max_in_flight_per_key": 3}, ["max_in_flight_per_key"])
    assert (q.settings.concurrency_key, q.settings.max_in_flight_per_key) == ("tenant_id", 3)
    assert q.flow is not None and q.flow.max_per_key == 3


async def test_pause_and_declare_through_a_stale_node_keep_the_stored_settings(nodes: Nodes) -> None:
    n1 = await nodes.start({"emails": {}}, node_name="n1")
    n2 = await nodes.start({"emails": {}}, node_name="n2")
    await admin(n1).update_queue("emails", {"default_priority": 9}, ["default_priority"])
    await admin(n2).set_paused("emails", True)
    assert await _row(n1.store) == (QueueSettings(default_priority=9), True)
    # n1 has not seen the pause: its update must keep it.
    await admin(n1).update_queue("emails", {"default_max_attempts": 4}, ["default_max_attempts"])
    q, created = await admin(n2).declare_queue("emails", {"lease_duration": 60.0}, ["lease_duration"])
    settings, paused = await _row(n1.store)
    assert not created and paused
    assert (settings.default_priority, settings.default_max_attempts, settings.lease_duration) == (9, 4, 60)
    assert q.paused and q.settings == settings


async def test_an_update_of_a_queue_deleted_on_another_node_is_not_found_and_recreates_nothing(
        nodes: Nodes) -> None:
    n1 = await nodes.start({"scratch": {}}, node_name="n1")
    n2 = await nodes.start({"scratch": {}}, node_name="n2")
    await admin(n1).delete_queue("scratch")
    with pytest.raises(NotFound, match="deleted on another node"):
        await admin(n2).update_queue("scratch", {"max_in_flight": 5}, ["max_in_flight"])
    assert await n1.store.load_queues() == []


# ---------- DeclareQueue through a node that never saw the queue
# DeclareQueue through a node whose cache does not hold the queue (another node created it, or
# deleted it, since this node loaded its queues). The create path wrote the node's defaults +
# patch over the whole stored row (upsert), undoing the other node's keys and its pause; and a
# declare of a queue deleted elsewhere answered QUEUE_NOT_FOUND instead of creating it.

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
