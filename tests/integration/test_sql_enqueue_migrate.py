"""``sepp migrate`` for the SQL enqueue functions: it writes its configuration's strict mode,
limits and queue defaults into the schema's admission row, and ``--app-role`` gives a role
EXECUTE on the three entry points and nothing else (docs/enqueue-in-transaction.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from support.backends import PG_TEST_DSN, fresh_schema

pytestmark = pytest.mark.postgres_only(reason="the SQL enqueue functions are PostgreSQL's")


def _sepp(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    return subprocess.run([sys.executable, "-m", "sepp", *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def test_migrate_writes_the_admission_row_and_grants_the_app_role(tmp_path: Path) -> None:
    schema = fresh_schema()
    role = f"{schema}_app"
    config = tmp_path / "sepp.toml"
    config.write_text(f'storage = "postgres"\npostgres_dsn = "{PG_TEST_DSN}"\nstrict = true\n'
                      f'[postgres]\nschema = "{schema}"\n[limits]\nmax_queue_name_bytes = 20\n'
                      '[queue_defaults]\ndefault_priority = 3\n', "utf-8")
    try:
        done = _sepp("migrate", "--config", str(config), "--app-role", role)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == (f"role {role}: may call {schema}.enqueue, {schema}.enqueue_batch "
                                                f"and {schema}.admission_limits, nothing else")
        with psycopg.connect(PG_TEST_DSN) as conn:
            strict, limits, defaults = conn.execute(
                f"SELECT strict, limits, queue_defaults FROM {schema}.admission").fetchone()  # type: ignore[misc]
            assert strict is True and limits["max_queue_name_bytes"] == 20
            assert json.loads(defaults)["default_priority"] == 3
            # The functions it may run as their owner are the three; the others it may run
            # (the older helpers every role has, PostgreSQL's default) run as itself, so they
            # reach no table it cannot.
            granted = conn.execute("SELECT p.proname, p.prosecdef FROM pg_proc p WHERE p.pronamespace = "
                                   "%s::regnamespace AND has_function_privilege(%s, p.oid, 'EXECUTE') ORDER BY 1",
                                   (schema, role)).fetchall()
            assert sorted(name for name, definer in granted if definer) == ["admission_limits", "enqueue",
                                                                            "enqueue_batch"]
            assert not any(name.startswith("_") for name, _ in granted)
            tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s AND "
                                  "has_table_privilege(%s, format('%%I.%%I', schemaname, tablename), "
                                  "'SELECT,INSERT,UPDATE,DELETE')", (schema, role)).fetchone()
            assert tables == (0,)
    finally:
        with psycopg.connect(PG_TEST_DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"DROP ROLE IF EXISTS {role}")
