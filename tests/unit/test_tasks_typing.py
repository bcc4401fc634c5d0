"""Tasks are typed for mypy (docs/tasks.md "Typing"): ``task.enqueue`` has the function's
parameters (a ``ParamSpec``; a first ``sepp.Job`` parameter is not one of them), ``.result()``
the function's return type (an ``async def``'s awaited one), the same for ``AsyncApp``; an
unannotated function gives an ``Any`` task rather than false errors. mypy runs (in this
process, ``mypy.api``, strict) on an example that misuses tasks: every misuse is reported at
its line, and nothing else."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from mypy import api

pytestmark = pytest.mark.timeout(600)

EXAMPLE = textwrap.dedent("""
    import sepp
    from sepp import Job

    app = sepp.App("127.0.0.1:7700")
    aapp = sepp.AsyncApp()


    @app.task(queue="emails", max_attempts=5, priority=7)
    async def send_welcome(user_id: int, locale: str = "en") -> str:
        return "sent"


    @app.task
    def add(x: int, y: int) -> int:
        return x + y


    @app.task(name="with-job")
    def with_job(job: Job, n: int) -> list[str]:
        return [job.id] * n


    @aapp.task
    async def twice(x: float) -> float:
        return x * 2


    def untyped(x, y):  # type: ignore[no-untyped-def]
        return x


    loose = app.task(untyped)

    ok: str = send_welcome.enqueue(42, locale="de").result(timeout=30)
    total: int = add.enqueue(1, 2).result()
    ids: list[str] = with_job.enqueue(3).result()
    send_welcome.options(delay=5, idempotency_key="k").enqueue(1)
    loose.enqueue(1, 2, 3)
    send_welcome.enqueue("42")  # E: arg-type
    send_welcome.enqueue(1, lang="de")  # E: call-arg
    add.enqueue(1)  # E: call-arg
    with_job.enqueue(job=None, n=3)  # E: call-arg
    wrong: int = send_welcome.enqueue(1).result()  # E: assignment
    add.si(1, "2")  # E: arg-type


    async def main() -> None:
        value: float = await (await twice.enqueue(2.0)).result()
        await twice.enqueue("a")  # E: arg-type
        text: str = await (await twice.enqueue(1.0)).result()  # E: assignment
""")


def test_mypy_reports_every_misuse_of_a_task_and_nothing_else(tmp_path: Path) -> None:
    source = tmp_path / "tasks_misuse.py"
    source.write_text(EXAMPLE)
    expected = {
        (number, line.split("# E: ")[1].strip())
        for number, line in enumerate(EXAMPLE.splitlines(), 1)
        if "# E: " in line
    }
    stdout, stderr, _status = api.run(
        ["--strict", "--no-error-summary", "--show-error-codes", "--cache-dir", str(tmp_path / "cache"), str(source)]
    )
    found = {(int(m[1]), m[2]) for m in re.finditer(r"tasks_misuse\.py:(\d+): error: .*\[([\w-]+)\]", stdout)}
    assert found == expected, stdout + stderr
