"""The PostgreSQL keys of the configuration and the commands that use them.

Rules: ``storage = "postgres"`` (``SEPP_STORAGE``, ``--storage``) selects the PostgreSQL
backend on ``postgres_dsn`` (``SEPP_POSTGRES_DSN``, ``--postgres-dsn``), which is then
required — a missing one is one line naming the key, the flag and the variable. The
``[postgres]`` table (``SEPP_POSTGRES__…``) holds ``schema`` (a plain lower-case SQL name of
at most 63 characters), ``pool_size`` (1..1000) and ``writers`` (1..256). Sources merge as
every key does: file < ``SEPP_*`` < flags. ``sepp migrate`` creates or migrates the schema
and says from which version to which; a database that cannot be used — unreachable,
missing, newer schema — is one line on stderr and a non-zero exit, at ``sepp migrate`` as
at ``sepp serve``, never a traceback.

The tests marked "driver" below import ``sepp.storage.postgres`` (its ``__init__`` imports
``store.py``) or start a PostgreSQL server: they need the driver itself. Every schema they
create comes from ``support.backends.fresh_schema`` and is dropped at the end of the session.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.backends import BACKENDS, PG_TEST_DSN, StoreSettings, fresh_schema, store_settings

from sepp.server.config import ConfigError, ServerConfig, load_config
from sepp.storage.config import SCHEMA_NAME_PATTERN, STORAGES, PostgresSettings
from sepp.storage.factory import open_store

#: A DSN nothing listens on, and one naming a database that does not exist.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/test"
NO_DATABASE = re.sub(r"/[^/]*$", "/no_such_db_xyz", PG_TEST_DSN)
#: The tests that reach the test database (the others stop before connecting, or at a closed port).
NEEDS_POSTGRES = pytest.mark.postgres_only(reason="reaches the PostgreSQL test database")


def _load(tmp_path: Path, text: str, **flags: object) -> ServerConfig:
    path = tmp_path / "sepp.toml"
    path.write_text(text, "utf-8")
    return load_config(path, **flags)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    env.update(extra, PYTHONUNBUFFERED="1")
    return env


def _sepp(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sepp", *args], capture_output=True, text=True,
                          env=env or _env(), timeout=timeout)


def _one_line_error(done: subprocess.CompletedProcess[str], prefix: str) -> str:
    """The stderr of a failed command, checked to be one line starting with ``prefix``."""
    err = done.stderr.strip()
    assert done.returncode != 0, (done.returncode, done.stdout, err)
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr
    assert len(err.splitlines()) == 1 and err.startswith(prefix), err
    return err


# --- keys, environment, flags ----------------------------------------------------------------


def test_storage_postgres_and_its_table_from_file_env_and_flags(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert STORAGES == ("sqlite", "postgres")
    defaults = load_config(None)
    assert (defaults.storage, defaults.postgres_dsn, defaults.postgres) == ("sqlite", "", PostgresSettings())
    assert PostgresSettings() == PostgresSettings(schema="sepp", pool_size=10, writers=4)

    text = ('storage = "postgres"\npostgres_dsn = "postgresql://file@db:5432/a"\n'
            '[postgres]\nschema = "jobs"\npool_size = 20\nwriters = 8\n')
    cfg = _load(tmp_path, text)
    assert (cfg.storage, cfg.postgres_dsn) == ("postgres", "postgresql://file@db:5432/a")
    assert cfg.postgres == PostgresSettings(schema="jobs", pool_size=20, writers=8)

    monkeypatch.setenv("SEPP_POSTGRES_DSN", "postgresql://env@db:5432/b")
    monkeypatch.setenv("SEPP_POSTGRES__POOL_SIZE", "30")
    cfg = _load(tmp_path, text)
    assert cfg.postgres_dsn == "postgresql://env@db:5432/b", "env over file"
    assert cfg.postgres == PostgresSettings(schema="jobs", pool_size=30, writers=8), "env merges into the table"

    cfg = _load(tmp_path, text, postgres_dsn="postgresql://flag@db:5432/c", node_name="n7")
    assert (cfg.postgres_dsn, cfg.node_name) == ("postgresql://flag@db:5432/c", "n7"), "flags over env"

    monkeypatch.setenv("SEPP_STORAGE", "postgres")
    cfg = load_config(None)
    assert (cfg.storage, cfg.postgres_dsn, cfg.postgres.pool_size) == ("postgres", "postgresql://env@db:5432/b", 30)
    assert load_config(None, storage="sqlite").storage == "sqlite", "--storage over SEPP_STORAGE"
    monkeypatch.setenv("SEPP_POSTGRES", '{"schema": "other", "writers": 2}')
    monkeypatch.delenv("SEPP_POSTGRES__POOL_SIZE")
    assert load_config(None).postgres == PostgresSettings(schema="other", writers=2), "the table as JSON"


@pytest.mark.parametrize("dsn", [None, "", "   "])
def test_postgres_without_a_dsn_is_one_line_naming_the_key_flag_and_env(tmp_path: Path, dsn: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, storage="postgres", postgres_dsn=dsn)
    text = str(info.value)
    assert text.startswith("postgres_dsn: must be set when storage is 'postgres'"), text
    assert "--postgres-dsn" in text and "SEPP_POSTGRES_DSN" in text and "\n" not in text
    with pytest.raises(ConfigError, match=r"^postgres_dsn: must be set"):
        _load(tmp_path, 'storage = "postgres"\n[postgres]\nschema = "x"\n')
    assert load_config(None, postgres_dsn=dsn).storage == "sqlite", "no DSN needed with SQLite"


@pytest.mark.parametrize(("table", "error"), [
    ('schema = "Bad"', r"^postgres\.schema: must be a plain lower-case SQL name.* \(got 'Bad'\)$"),
    ('schema = "1abc"', r"^postgres\.schema: must be a plain lower-case SQL name"),
    ('schema = "a-b"', r"^postgres\.schema: must be a plain lower-case SQL name"),
    ('schema = "a;drop"', r"^postgres\.schema: must be a plain lower-case SQL name"),
    ('schema = ""', r"^postgres\.schema: must be a plain lower-case SQL name"),
    (f'schema = "{"s" * 64}"', r"^postgres\.schema: must be a plain lower-case SQL name"),
    ("pool_size = 0", r"^postgres\.pool_size: Input should be greater than or equal to 1 \(got 0\)$"),
    ("pool_size = 1001", r"^postgres\.pool_size: Input should be less than or equal to 1000 \(got 1001\)$"),
    ("writers = 0", r"^postgres\.writers: Input should be greater than or equal to 1 \(got 0\)$"),
    ("writers = 257", r"^postgres\.writers: Input should be less than or equal to 256 \(got 257\)$"),
    ("pool = 3", r"^postgres\.pool: Extra inputs are not permitted"),
], ids=["upper", "digit-first", "dash", "semicolon", "empty", "64-chars", "pool0", "pool1001", "writers0",
        "writers257", "unknown-key"])
def test_the_postgres_table_is_validated(tmp_path: Path, table: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        _load(tmp_path, f"[postgres]\n{table}\n")


def test_the_postgres_table_bounds_are_inclusive(tmp_path: Path) -> None:
    for pool_size, writers in [(1, 1), (1000, 256)]:
        cfg = _load(tmp_path, f"[postgres]\npool_size = {pool_size}\nwriters = {writers}\n")
        assert (cfg.postgres.pool_size, cfg.postgres.writers) == (pool_size, writers)
    for name in ["s" * 63, "_x", "sepp_2", "t123_4_ab12cd34"]:
        assert _load(tmp_path, f'[postgres]\nschema = "{name}"\n').postgres.schema == name
    assert re.fullmatch(SCHEMA_NAME_PATTERN.strip("^$"), "sepp")


def test_reading_the_config_imports_no_driver() -> None:
    code = ("import sys; import sepp.server.config, sepp.storage.factory, sepp.storage.config; "
            "sepp.server.config.load_config(None, storage='postgres', postgres_dsn='postgresql://x@y/z'); "
            "bad = [m for m in sys.modules if m == 'asyncpg' or m.startswith('sepp.storage.postgres')]; "
            "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode == 0, done.stderr




def test_open_store_refuses_postgres_without_a_dsn() -> None:
    with pytest.raises(ConfigError, match=r"^postgres_dsn: must be set when storage is 'postgres'"):
        open_store(StoreSettings(storage="postgres"))


def test_the_test_backends_include_postgres_with_a_fresh_schema_each() -> None:
    assert "postgres" in BACKENDS
    one, two = store_settings("postgres"), store_settings("postgres")
    assert one["storage"] == "postgres" and one["postgres_dsn"] == PG_TEST_DSN
    assert one["postgres"].schema != two["postgres"].schema
    cfg = ServerConfig(data_dir=Path("unused"), **one)
    assert (cfg.storage, cfg.postgres.schema) == ("postgres", one["postgres"].schema)


# --- driver: the schema rule is the driver's, open_store builds it -----------------------------


def test_the_schema_rule_is_the_drivers() -> None:  # driver
    from sepp.storage.postgres import schema

    assert schema.SCHEMA_NAME.pattern == SCHEMA_NAME_PATTERN


def test_open_store_builds_the_postgres_store_without_connecting() -> None:  # driver
    from sepp.storage.postgres import PostgresStore

    store = open_store(StoreSettings(storage="postgres", postgres_dsn=UNREACHABLE,
                                     postgres=PostgresSettings(schema=fresh_schema()), node_name="n1"))
    assert isinstance(store, PostgresStore)


# --- sepp migrate --------------------------------------------------------------------------


@NEEDS_POSTGRES
def test_sepp_migrate_creates_then_finds_the_schema_current(tmp_path: Path) -> None:  # driver
    name = fresh_schema()
    first = _sepp("migrate", "--postgres-dsn", PG_TEST_DSN, "--schema", name)
    assert first.returncode == 0, first.stderr
    match = re.fullmatch(rf"schema {name}: version 0 -> (\d+)", first.stdout.strip())
    assert match and int(match[1]) >= 1, first.stdout
    latest = match[1]
    # Again, the DSN from SEPP_POSTGRES_DSN and the schema from SEPP_POSTGRES__SCHEMA.
    again = _sepp("migrate", env=_env(SEPP_POSTGRES_DSN=PG_TEST_DSN, SEPP_POSTGRES__SCHEMA=name))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"schema {name}: already at version {latest}"
    # And from the server's config file.
    path = tmp_path / "sepp.toml"
    path.write_text(f'storage = "postgres"\npostgres_dsn = "{PG_TEST_DSN}"\n[postgres]\nschema = "{name}"\n', "utf-8")
    third = _sepp("migrate", "--config", str(path))
    assert third.returncode == 0, third.stderr
    assert third.stdout.strip() == f"schema {name}: already at version {latest}"
    assert third.stderr == ""


@pytest.mark.parametrize(("dsn", "words"), [
    (UNREACHABLE, ["cannot be reached", "127.0.0.1:1"]),
    pytest.param(NO_DATABASE, ["no_such_db_xyz"], marks=NEEDS_POSTGRES),
], ids=["unreachable", "missing-database"])
def test_sepp_migrate_on_a_database_it_cannot_use_is_one_line(dsn: str, words: list[str]) -> None:  # driver
    done = _sepp("migrate", "--postgres-dsn", dsn, "--schema", fresh_schema())
    assert done.returncode == 1
    err = _one_line_error(done, "sepp: cannot migrate:")
    for word in words:
        assert word in err, (word, err)


def test_sepp_migrate_and_serve_word_an_unreachable_database_alike(tmp_path: Path) -> None:  # driver
    """Same formatter, same words: ``migrate`` runs on asyncio's loop and ``serve`` on uvloop,
    whose refused connections read differently ("Connect call failed ('127.0.0.1', 1)" vs
    "Connection refused"); both say the system's words for the errno."""
    migrated = _sepp("migrate", "--postgres-dsn", UNREACHABLE, "--schema", fresh_schema())
    served = _sepp("serve", "--storage", "postgres", "--postgres-dsn", UNREACHABLE, "--grpc-listen", "127.0.0.1:0",
                   "--http-listen", "", "--data-dir", str(tmp_path / "d"),
                   env=_env(SEPP_POSTGRES__SCHEMA=fresh_schema()))
    said_migrate = _one_line_error(migrated, "sepp: cannot migrate: ").removeprefix("sepp: cannot migrate: ")
    said_serve = _one_line_error(served, "sepp: cannot start: ").removeprefix("sepp: cannot start: ")
    assert said_migrate == said_serve == f"PostgreSQL at {UNREACHABLE} cannot be reached: Connection refused"


@NEEDS_POSTGRES
def test_sepp_migrate_refuses_a_newer_schema(tmp_path: Path) -> None:  # driver
    name = fresh_schema()
    assert _sepp("migrate", "--postgres-dsn", PG_TEST_DSN, "--schema", name).returncode == 0

    async def bump() -> None:
        import asyncpg

        conn = await asyncpg.connect(PG_TEST_DSN)
        try:
            await conn.execute(f"INSERT INTO {name}.schema_migrations (version, name) VALUES (9999, 'future')")
        finally:
            await conn.close()

    asyncio.run(bump())
    done = _sepp("migrate", "--postgres-dsn", PG_TEST_DSN, "--schema", name)
    assert done.returncode == 1
    assert "newer than this sepp" in _one_line_error(done, "sepp: cannot migrate:")
    served = _sepp("serve", "--storage", "postgres", "--postgres-dsn", PG_TEST_DSN, "--grpc-listen", "127.0.0.1:0",
                   "--http-listen", "", env=_env(SEPP_POSTGRES__SCHEMA=name))
    assert "newer than this sepp" in _one_line_error(served, "sepp: cannot start:")


def test_sepp_migrate_without_a_dsn_or_with_a_bad_schema_is_one_line() -> None:
    done = _sepp("migrate")
    assert done.returncode == 2
    err = _one_line_error(done, "sepp: invalid configuration: postgres_dsn is not set")
    assert "--postgres-dsn" in err and "SEPP_POSTGRES_DSN" in err
    done = _sepp("migrate", "--postgres-dsn", PG_TEST_DSN, "--schema", "Bad-Name")
    assert done.returncode == 2
    assert "must be a plain lower-case SQL name" in _one_line_error(done, "sepp: invalid configuration: --schema")


# --- sepp serve --storage postgres --------------------------------------------------------------


def test_sepp_serve_postgres_without_a_dsn_is_one_line(tmp_path: Path) -> None:
    done = _sepp("serve", "--storage", "postgres", "--data-dir", str(tmp_path / "d"), "--grpc-listen",
                 "127.0.0.1:0", "--http-listen", "")
    assert done.returncode == 2
    err = _one_line_error(done, "sepp: invalid configuration: postgres_dsn: must be set")
    assert "--postgres-dsn" in err and "SEPP_POSTGRES_DSN" in err
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(("dsn", "words"), [
    (UNREACHABLE, ["cannot be reached", "127.0.0.1:1"]),
    pytest.param(NO_DATABASE, ["no_such_db_xyz"], marks=NEEDS_POSTGRES),
], ids=["unreachable", "missing-database"])
def test_sepp_serve_on_a_database_it_cannot_use_is_one_line(tmp_path: Path, dsn: str,
                                                            words: list[str]) -> None:  # driver
    done = _sepp("serve", "--storage", "postgres", "--postgres-dsn", dsn, "--grpc-listen", "127.0.0.1:0",
                 "--http-listen", "", "--data-dir", str(tmp_path / "d"), env=_env(SEPP_POSTGRES__SCHEMA=fresh_schema()))
    assert done.returncode == 1
    err = _one_line_error(done, "sepp: cannot start:")
    for word in words:
        assert word in err, (word, err)
    assert not (tmp_path / "d").exists(), "no data folder with PostgreSQL"


@NEEDS_POSTGRES
def test_sepp_serve_postgres_says_so_in_the_ready_line(tmp_path: Path) -> None:  # driver
    name = fresh_schema()
    proc = subprocess.Popen([sys.executable, "-m", "sepp", "serve", "--storage", "postgres", "--postgres-dsn",
                             PG_TEST_DSN, "--node-name", "node-a", "--grpc-listen", "127.0.0.1:0", "--http-listen",
                             "127.0.0.1:0", "--data-dir", str(tmp_path / "d")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_env(SEPP_POSTGRES__SCHEMA=name, SEPP_SHUTDOWN_GRACE="2"))
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("sepp ready"):
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        while not ready.wait(0.05):
            assert proc.poll() is None and time.monotonic() < deadline, lines
    finally:
        proc.terminate()
        proc.wait(30)
    line = next(x for x in lines if x.startswith("sepp ready"))
    assert re.fullmatch(rf"sepp ready grpc=127\.0\.0\.1:\d+ http=127\.0\.0\.1:\d+ storage=postgres schema={name} "
                        r"node=node-a persist=group writer=connections:4 strict=false tls=off", line), line
    assert " data=" not in line and not (tmp_path / "d").exists(), "no data folder with PostgreSQL"
    assert proc.returncode == 0, lines
