"""The README's section "Results, waiting and events" works as written, on each backend: its
three Python blocks are read out of README.md and run against a real server — the worker
block's ``Worker`` runs its ``build`` handler, the producer block gets the handler's dict back
through ``client.result`` and ``as_completed``, the watch block sees the jobs' live events —
and ``sepp jobs result ID --wait 30s --json`` prints the same result. Only the server's
address is changed (the README's ``127.0.0.1:7700`` is the port of ``make serve``).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from support.waiting import wait_for
from support.worker import running
from typer.testing import CliRunner

import sepp.cli.jobs_cmd  # noqa: F401  (registers `sepp jobs` on the app)
from sepp import Client, EnqueueRequest, Payload
from sepp.cli.main import app
from sepp.testing import ServerProcess

pytestmark = pytest.mark.timeout(120)

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "### Results, waiting and events"
#: The address the README's snippets use.
README_TARGET = "127.0.0.1:7700"


def _blocks() -> list[str]:
    """The ```` ```python ```` blocks of the README's section, in order."""
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n### ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.DOTALL)


class _Enough(Exception):
    """Raised by the watch block's ``print`` once it saw what the test waits for."""


def test_the_readme_section_has_a_worker_a_producer_and_a_watch() -> None:
    worker, producer, watch = _blocks()
    assert "@worker.handler" in worker and "set_progress" in worker and "return {" in worker
    assert "client.result(" in producer and "as_completed(" in producer
    assert "client.watch(" in watch
    assert README_TARGET in worker and README_TARGET in producer and README_TARGET in watch


async def test_the_readme_section_runs_end_to_end(server: ServerProcess) -> None:
    worker_src, producer_src, watch_src = (b.replace(README_TARGET, server.grpc_target) for b in _blocks())

    # The watch block, in a thread: its ``print`` keeps each event and ends the watch once
    # every job of the queue it expects has completed.
    seen: list[tuple[Any, ...]] = []
    #: Jobs of the queue to see completed: the probes, the producer's first job, its three others.
    want_completed = [0]

    def watch_print(*args: Any) -> None:
        seen.append(args)
        if len({a[1] for a in seen if a[0] == "completed"}) >= want_completed[0] > 0:
            raise _Enough

    watch_error: list[BaseException] = []

    def watch() -> None:
        try:
            exec(compile(watch_src, "README.md (watch)", "exec"), {"print": watch_print})
        except _Enough:
            pass
        except BaseException as exc:  # handed to the test
            watch_error.append(exc)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    # Events are live: enqueue probe jobs until the watch reports one, so it is armed (no
    # worker yet, so the probes stay READY; later they complete like any other job).
    with Client(server.grpc_target) as client:
        probes = []

        def armed() -> bool:
            assert watch_error == [], watch_error
            probes.append(client.enqueue(EnqueueRequest("reports", "build", payload=Payload.json({"rows": 0}))))
            try:
                wait_for(lambda: any(a[0] == "enqueued" for a in seen), timeout=0.5)
            except AssertionError:
                return False
            return True

        wait_for(armed, timeout=20, interval=0.05, what="the README's watch to see a job enqueued")
    want_completed[0] = len(probes) + 4

    # The worker block: its ``worker`` runs on this loop.
    worker_ns: dict[str, Any] = {"__name__": "reports"}
    exec(compile(worker_src, "README.md (worker)", "exec"), worker_ns)
    printed: list[tuple[Any, ...]] = []
    async with running(worker_ns["worker"]):
        # The producer block: blocking calls, so in a thread.
        await asyncio.to_thread(exec, compile(producer_src, "README.md (producer)", "exec"),
                                {"print": lambda *args: printed.append(args)})
        await asyncio.to_thread(watcher.join, 30)

    assert printed[0] == ({"rows": 1000, "status": "done"},)
    outcomes = printed[1:]
    assert sorted(o[2]["rows"] for o in outcomes) == [100, 200, 300]
    assert all(o[1] == "COMPLETED" and o[2] == {"rows": o[2]["rows"], "status": "done"} for o in outcomes)
    assert len({o[0] for o in outcomes}) == 3

    assert not watcher.is_alive() and watch_error == []
    kinds = {a[0] for a in seen}
    assert {"enqueued", "reserved", "completed"} <= kinds, kinds
    for args in seen:
        assert len(args) == 4 and args[2] in {"READY", "RESERVED", "COMPLETED"}, args
        if args[0] == "progress":
            assert set(args[3]) == {"done", "total"}, args

    # The shell form of the same wait.
    job_id = outcomes[0][0]
    shown = await asyncio.to_thread(CliRunner().invoke, app, ["jobs", "result", job_id, "--wait", "30s", "--json",
                                                                "--server", server.grpc_target])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["state"] == "COMPLETED" and doc["result"]["value"] == outcomes[0][2]
    assert doc["result"]["encoding"] == "application/json"
