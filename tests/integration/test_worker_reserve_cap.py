"""A Worker asking for more jobs a ``Reserve`` than the server takes.

The server refuses a ``Reserve`` whose ``max_jobs`` is above its ``max_reserve_batch``
(``INVALID_ARGUMENT``, field ``max_jobs``, with the limit). A worker whose ``max_reserve`` is
higher (a server configured with a smaller cap than the worker's default 256, or a worker
tuned past the server's) used to send the same refused call again and again with backoff,
draining only when it happened to ask for few: it now asks for no more than the limit the
refusal names, at once and for the rest of its run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from support.servers import module_server
from support.worker import count_states, fast_queue, make_worker, running, until, wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess
from sepp.worker import Job

pytestmark = pytest.mark.timeout(60)

CAP = 50


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, limits={"max_reserve_batch": CAP},
                             queue_defaults=fast_queue(lease_duration=30.0))


@pytest.mark.parametrize("settings", [{"concurrency": 100}, {"concurrency": 4, "max_reserve": 1000}],
                         ids=["default-max-reserve", "max-reserve-past-the-cap"])
async def test_a_worker_asks_for_no_more_than_the_server_takes(capped: ServerProcess, fresh_queue: str,
                                                               settings: dict[str, int],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    n = 600
    with wire_for(capped, fresh_queue) as w:
        for _ in range(n // 200):
            w.enqueue_many([pb.EnqueueRequest(queue=fresh_queue, job_type="t") for _ in range(200)])
    worker, reports = make_worker(capped, fresh_queue, **settings)

    async def noop(job: Job) -> None:
        pass

    worker.register("t", noop)
    with caplog.at_level(logging.INFO, logger="sepp.worker"):
        async with running(worker):
            await until(lambda: len(reports) == n, within=15, what="every job done")
    assert count_states(capped, fresh_queue) == {"COMPLETED": n}
    refused = [r for r in caplog.records if "reserve failed" in r.getMessage()]
    assert len(refused) <= 1, [r.getMessage() for r in refused]  # the first refusal sets the cap
    assert any(f"at most {CAP} jobs" in r.getMessage() for r in caplog.records)
