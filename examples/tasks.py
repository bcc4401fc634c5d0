"""Tasks (docs/tasks.md): functions made job types, enqueued like calls.

From the repository root, with the server running (``make serve``):

    .venv/bin/sepp worker examples.tasks:app          # runs every task below
    .venv/bin/python -c 'from examples.tasks import add; print(add.enqueue(2, 3).result(timeout=30))'

The app connects to ``$SEPP_SERVER``, else ``127.0.0.1:7700``.
"""

from __future__ import annotations

from pydantic import BaseModel

import sepp

app = sepp.App(concurrency=4)


class Order(BaseModel):
    id: int
    items: list[str]


@app.task(queue="tasks-demo", max_attempts=3)
def add(x: int, y: int) -> int:
    """A plain function: runs in the worker's thread pool; its return value is the job's result."""
    return x + y


@app.task(queue="tasks-demo")
async def greet(name: str, punctuation: str = "!") -> str:
    """An async function: runs on the worker's event loop."""
    return f"hello {name}{punctuation} (attempt {sepp.current_job().attempt})"


@app.task(queue="tasks-demo", priority=7)
def pack(order: Order) -> dict[str, int]:
    """A pydantic argument: sent as JSON, validated into an Order in the worker."""
    return {"order": order.id, "items": len(order.items)}
