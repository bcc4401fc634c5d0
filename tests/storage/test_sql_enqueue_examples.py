"""The in-transaction enqueue examples (examples/enqueue_in_transaction_*.py: psycopg,
SQLAlchemy, Django) run as a user runs them, against a real PostgreSQL: each saves order 1
with its job and loses order 2 with its job to the rollback."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import psycopg
import pytest
from support.backends import PG_TEST_DSN, fresh_schema

from sepp.storage.postgres.schema import migrate

pytestmark = pytest.mark.postgres_only(reason="the SQL enqueue functions are PostgreSQL's")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def _migrate(name: str) -> None:
    conn = await asyncpg.connect(PG_TEST_DSN)
    try:
        await migrate(conn, name)
    finally:
        await conn.close()


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh sepp schema, dropped afterwards with the example's table."""
    name = fresh_schema()
    asyncio.run(_migrate(name))
    try:
        yield name
    finally:
        with psycopg.connect(PG_TEST_DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
            conn.execute(f"DROP TABLE IF EXISTS public.{name}_orders")


@pytest.mark.parametrize("framework", ["psycopg", "sqlalchemy", "django"])
def test_the_example_commits_the_order_with_its_job_and_rolls_back_both(framework: str, schema: str) -> None:
    table = f"{schema}_orders"
    out = subprocess.run([sys.executable, str(EXAMPLES / f"enqueue_in_transaction_{framework}.py"),
                          "--dsn", PG_TEST_DSN, "--schema", schema, "--table", table],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "order 1 saved, job" in out.stdout and "neither the order nor its job was stored" in out.stdout
    with psycopg.connect(PG_TEST_DSN) as conn:
        assert [r[0] for r in conn.execute(f"SELECT id FROM public.{table}").fetchall()] == [1]
        jobs = conn.execute(f"SELECT job_type, payload FROM {schema}.jobs").fetchall()
        assert [(r[0], bytes(r[1])) for r in jobs] == [("order-confirmation", b'{"order":1}')]
