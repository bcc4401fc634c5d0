"""The README's section "Dependencies between jobs" works as written, on each backend: its
Python block is read out of README.md and run against a real server with the ``reports`` worker
of the section "Results, waiting and events" (also read out of README.md). The dependent job is
DEFERRED while its dependency waits (no worker yet), then runs after it, and the block prints
the result its comment says. Only the server's address is changed.
"""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from support.waiting import wait_for
from support.worker import running

from sepp.client.admin import AdminClient
from sepp.domain.states import State
from sepp.testing import ServerProcess

pytestmark = pytest.mark.timeout(120)

README = Path(__file__).resolve().parents[2] / "README.md"
#: The address the README's snippets use.
README_TARGET = "127.0.0.1:7700"


def _blocks(section: str) -> list[str]:
    """The ```` ```python ```` blocks of the README's ``section``, in order."""
    text = README.read_text(encoding="utf-8")
    start = text.index(section)
    end = text.index("\n### ", start + len(section))
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.DOTALL)


def test_the_readme_section_has_one_block_with_a_dependency() -> None:
    (block,) = _blocks("### Dependencies between jobs")
    assert ".with_depends_on([first.job_id])" in block and "client.result(then.job_id" in block
    assert README_TARGET in block


async def test_the_readme_dependency_block_runs_end_to_end(server: ServerProcess) -> None:
    (block,) = (b.replace(README_TARGET, server.grpc_target) for b in _blocks("### Dependencies between jobs"))
    worker_src = _blocks("### Results, waiting and events")[0].replace(README_TARGET, server.grpc_target)

    # The block, in a thread (it blocks in client.result); its names land in ``ns``.
    printed: list[tuple[Any, ...]] = []
    ns: dict[str, Any] = {"print": lambda *args: printed.append(args)}
    errors: list[BaseException] = []

    def run_block() -> None:
        try:
            exec(compile(block, "README.md (dependencies)", "exec"), ns)
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    runner = threading.Thread(target=run_block, daemon=True)
    runner.start()
    await asyncio.to_thread(wait_for, lambda: "then" in ns or errors, timeout=20, what="the block's two enqueues")
    assert errors == []
    with AdminClient(server.grpc_target) as admin:  # no worker yet: the first waits, the second is deferred
        assert int(admin.get_job(ns["first"].job_id).state) == State.READY
        assert int(admin.get_job(ns["then"].job_id).state) == State.DEFERRED

    worker_ns: dict[str, Any] = {"__name__": "reports"}
    exec(compile(worker_src, "README.md (worker)", "exec"), worker_ns)
    async with running(worker_ns["worker"]):
        await asyncio.to_thread(runner.join, 60)
    assert not runner.is_alive() and errors == []
    assert printed == [({"rows": 200, "status": "done"},)]
    with AdminClient(server.grpc_target) as admin:
        first, then = admin.get_job(ns["first"].job_id), admin.get_job(ns["then"].job_id)
    assert int(first.state) == int(then.state) == State.COMPLETED
    assert first.finished_at.ToNanoseconds() <= then.finished_at.ToNanoseconds()
