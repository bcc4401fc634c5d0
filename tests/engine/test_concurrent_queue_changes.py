"""Many concurrent queue changes of different keys (UpdateQueue, Pause/Resume,
DeclareQueue) through one node (both backends) and through two nodes (PostgreSQL): every
key's last value is kept, the caches end equal to the row, errors are the catalogued ones."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

from engine.test_config_queues import Nodes, admin
from engine.test_queue_update_nodes import _row
from sepp.server.errors import InvalidRequest

KEYS = [("default_priority", 9), ("default_max_attempts", 4), ("lease_duration", 61.0), ("retry_base", 2.0),
        ("retry_cap", 100.0), ("completed_retention", 3600.0), ("max_in_flight", 7), ("consumer_timeout", 5.0),
        ("rate_limit", "50/s"), ("limits.max_custom_entries", 3)]


def _patch(path: str, value: object) -> dict[str, object]:
    head, _, rest = path.partition(".")
    return {head: {rest: value}} if rest else {head: value}


async def test_concurrent_changes_of_different_keys_through_one_node(nodes: Nodes) -> None:
    n1 = await nodes.start({"emails": {}}, node_name="n1")
    adm = admin(n1)
    calls: list[Awaitable[object]] = [adm.update_queue("emails", _patch(p, v), [p]) for p, v in KEYS]
    calls += [adm.set_paused("emails", True), adm.declare_queue("emails", {"dedup_window": 60.0}, ["dedup_window"])]
    calls += [adm.update_queue("emails", {"max_in_flight_per_key": 2}, ["max_in_flight_per_key"])]  # no key: refused
    out = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(out[-1], InvalidRequest), out[-1]
    assert not any(isinstance(o, BaseException) for o in out[:-1]), out
    settings, paused = await _row(n1.store)
    d = settings.model_dump()
    for p, v in KEYS:
        head, _, rest = p.partition(".")
        assert (d[head][rest] if rest else d[head]) == v, p
    assert settings.dedup_window == 60 and paused
    q = n1.parts.queues.get("emails")
    assert q is not None and q.settings == settings and q.paused


@pytest.mark.postgres_only(reason="two nodes")
async def test_concurrent_changes_of_different_keys_through_two_nodes(nodes: Nodes) -> None:
    n1 = await nodes.start({"emails": {}}, node_name="n1")
    n2 = await nodes.start({"emails": {}}, node_name="n2")
    calls: list[Awaitable[object]] = [admin(n1 if i % 2 else n2).update_queue("emails", _patch(p, v), [p])
                                      for i, (p, v) in enumerate(KEYS)]
    calls += [admin(n1).set_paused("emails", True), admin(n2).update_queue("emails", {"concurrency_key": "t"},
                                                                             ["concurrency_key"])]
    out = await asyncio.gather(*calls, return_exceptions=True)
    assert not any(isinstance(o, BaseException) for o in out), out
    # then a per-key limit through the node that may not have seen the key: fits the stored row
    await admin(n1).update_queue("emails", {"max_in_flight_per_key": 2}, ["max_in_flight_per_key"])
    settings, paused = await _row(n1.store)
    d = settings.model_dump()
    for p, v in KEYS:
        head, _, rest = p.partition(".")
        assert (d[head][rest] if rest else d[head]) == v, p
    assert (settings.concurrency_key, settings.max_in_flight_per_key, paused) == ("t", 2, True)


@pytest.mark.postgres_only(reason="two nodes")
async def test_updates_racing_a_delete_on_another_node_never_recreate_it(nodes: Nodes) -> None:
    from sepp.server.errors import NotFound
    n1 = await nodes.start(node_name="n1")
    n2 = await nodes.start(node_name="n2")
    for i in range(15):
        name = f"r{i}"
        await admin(n1).declare_queue(name)
        await admin(n2).declare_queue(name)  # n2 has it cached (and stored)
        out = await asyncio.gather(admin(n1).delete_queue(name),
                                   admin(n2).update_queue(name, {"max_in_flight": 3}, ["max_in_flight"]),
                                   admin(n2).set_paused(name, True), return_exceptions=True)
        assert not isinstance(out[0], BaseException), out
        for o in out[1:]:
            assert not isinstance(o, BaseException) or isinstance(o, NotFound), out
        assert name not in {r.name for r in await n1.store.load_queues()}, (i, out)


async def test_updates_racing_a_delete_on_one_node(nodes: Nodes) -> None:
    from sepp.server.errors import NotFound
    n1 = await nodes.start(node_name="n1")
    adm = admin(n1)
    for i in range(10):
        name = f"r{i}"
        await adm.declare_queue(name)
        out = await asyncio.gather(adm.update_queue(name, {"max_in_flight": 3}, ["max_in_flight"]),
                                   adm.delete_queue(name), adm.set_paused(name, True), return_exceptions=True)
        assert not isinstance(out[1], BaseException), out
        for o in (out[0], out[2]):
            assert not isinstance(o, BaseException) or isinstance(o, NotFound), out
        assert name not in {r.name for r in await n1.store.load_queues()}, (i, out)
        assert n1.parts.queues.get(name) is None, (i, out)
