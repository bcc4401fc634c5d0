"""The README's section "Tasks: define a job once, enqueue it like a call" works as written: its
definition block is the one of examples/tasks.py, the app's worker runs the tasks, the
producer block (read out of README.md) prints the results it promises, and its ``sepp enqueue``
line enqueues a job the same worker runs. Only the server's address is changed (the README's
tasks connect to ``$SEPP_SERVER``, else ``127.0.0.1:7700``, the port of ``make serve``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support.worker import running

from sepp import Client
from sepp.testing import ServerProcess

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.sqlite_only(reason="the README's tasks do not depend on the storage backend"),
]

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### Tasks: define a job once, enqueue it like a call"


def _blocks(kind: str) -> list[str]:
    """The ```` ```kind ```` blocks of the README's section, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n### ", start + len(SECTION))
    return re.findall(rf"```{kind}\n(.*?)```", text[start:end], re.S)


def test_the_definition_shown_is_the_examples() -> None:
    definition = _blocks("python")[0]
    example = (ROOT / "examples" / "tasks.py").read_text(encoding="utf-8")
    task = definition[definition.index("@app.task") :].strip()
    assert task.replace("\n", "") in re.sub(r'\n    """.*?"""', "", example).replace("\n", "")


async def test_the_readme_tasks_run_as_written(shared_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    # The example's ``sepp.App()`` reads $SEPP_SERVER when it is made, as the README says: a
    # fresh import of it under that variable points it at this test's server.
    monkeypatch.setenv("SEPP_SERVER", shared_server.grpc_target)
    monkeypatch.delitem(sys.modules, "examples.tasks", raising=False)
    from examples import tasks

    assert tasks.app.target == shared_server.grpc_target
    producer = _blocks("python")[1]
    (command,) = [line for block in _blocks("sh") for line in block.splitlines() if "sepp enqueue" in line]
    argv = shlex.split(command)[1:]
    async with running(tasks.app.worker(poll_wait=0.5)):
        out = io.StringIO()

        def run_block() -> None:
            with contextlib.redirect_stdout(out):
                exec(compile(producer, "README.md", "exec"), {})  # the README's own code

        await asyncio.to_thread(run_block)
        sent = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "sepp", *argv, "--json", "--server", shared_server.grpc_target],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert sent.returncode == 0, sent.stderr
        job_id = json.loads(sent.stdout)["job_id"]
        with Client(shared_server.grpc_target) as client:
            assert await asyncio.to_thread(client.result, job_id, timeout=30) == 5
    tasks.app.close()
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"[0-9a-f-]{36} 5", lines[0]), lines
    assert lines[1:] == ["hello ann? (attempt 1)", "{'order': 7, 'items': 2}"]
