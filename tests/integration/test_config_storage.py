"""The storage keys of the configuration (docs/configuration.md "[sqlite]").

Rules: ``storage`` picks the backend ("sqlite" or "postgres"; anything else is one line at
start — tests/integration/test_config_postgres.py covers "postgres"); SQLite's
own settings live in ``[sqlite]`` (``SEPP_SQLITE__…`` in the environment); the old flat keys
``sqlite_writer`` / ``cache_mib`` / ``async_fsync_interval`` (file, ``SEPP_*``, keyword) are
moved there with one warning line naming the new key; a key given under both names is a
``ConfigError``. ``open_store`` builds the backend from any object with the ``StoreConfig``
attributes and refuses an unknown ``storage`` the same way.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.backends import StoreSettings

from sepp.server.config import ConfigError, ServerConfig, load_config
from sepp.storage.config import SQLiteSettings
from sepp.storage.factory import open_store
from sepp.testing import ServerProcess


def _warning(old: str, new: str) -> str:
    return (f"config key {old} is deprecated: it is now sqlite.{new} (TOML [sqlite] {new}, "
            f"env SEPP_SQLITE__{new.upper()}); the old name still works")


def _load(tmp_path: Path, text: str) -> ServerConfig:
    path = tmp_path / "sepp.toml"
    path.write_text(text, "utf-8")
    return load_config(path)


def test_the_sqlite_section_sets_the_backend_settings(tmp_path: Path) -> None:
    cfg = _load(tmp_path, '[sqlite]\nwriter = "thread"\ncache_mib = 128\nasync_fsync_interval = 0.2\n')
    assert cfg.storage == "sqlite"
    assert cfg.sqlite == SQLiteSettings(writer="thread", cache_mib=128, async_fsync_interval=0.2)
    assert cfg.writer_placement == "thread" and cfg.deprecations == ()
    defaults = load_config(None)
    assert defaults.sqlite == SQLiteSettings() and defaults.writer_placement == "process"
    assert load_config(None, persist_mode="sync").writer_placement == "thread", "auto: a thread in sync mode"


def test_a_flat_key_is_moved_into_the_section_with_one_warning_naming_the_new_key(tmp_path: Path) -> None:
    cfg = _load(tmp_path, 'sqlite_writer = "thread"\ncache_mib = 32\nasync_fsync_interval = 0.5\n')
    assert cfg.sqlite == SQLiteSettings(writer="thread", cache_mib=32, async_fsync_interval=0.5)
    assert cfg.deprecations == (_warning("sqlite_writer", "writer"), _warning("cache_mib", "cache_mib"),
                                _warning("async_fsync_interval", "async_fsync_interval"))
    assert all("\n" not in line for line in cfg.deprecations)
    # Constructed directly (tests, embedders) the old keyword works the same way.
    direct = ServerConfig(sqlite_writer="thread")  # type: ignore[call-arg]
    assert direct.sqlite.writer == "thread" and direct.deprecations == (_warning("sqlite_writer", "writer"),)
    # A bad value under the old name is refused like one under the new name, named as written.
    with pytest.raises(ConfigError, match=r"^cache_mib \(now sqlite\.cache_mib\): Input should be greater than or "
                                          r"equal to 1 \(got 0\)$"):
        _load(tmp_path, "cache_mib = 0\n")
    with pytest.raises(ConfigError, match=r"^sqlite\.cache_mib: Input should be greater than or equal to 1"):
        _load(tmp_path, "[sqlite]\ncache_mib = 0\n")
    with pytest.raises(ConfigError, match=r"^sqlite_writer \(now sqlite\.writer\): Input should be 'auto', "):
        _load(tmp_path, 'sqlite_writer = "fork"\n')
    # The old names still read back (deprecated aliases of the [sqlite] values).
    assert (cfg.sqlite_writer, cfg.cache_mib, cfg.async_fsync_interval) == ("thread", 32, 0.5)


def test_a_bad_old_env_value_is_named_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEPP_CACHE_MIB", "big")
    with pytest.raises(ConfigError, match=r"^cache_mib \(now sqlite\.cache_mib\): Input should be a valid integer"):
        _load(tmp_path, "")


@pytest.mark.parametrize(("text", "table"), [("sqlite = 3\n", "sqlite"), ("sqlite = []\n", "sqlite"),
                                             ("limits = 5\n", "limits")])
def test_a_table_given_as_a_value_says_it_must_be_a_table(tmp_path: Path, text: str, table: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text)
    assert str(info.value).startswith(f"{table}: must be a table ([{table}] in TOML, a JSON object in "
                                      f"SEPP_{table.upper()})")
    assert "SQLiteSettings" not in str(info.value) and "dictionary" not in str(info.value)


@pytest.mark.parametrize("content", [b"\xff\xfe[sqlite]\n", bytes(range(256))])
def test_a_config_file_that_is_not_utf8_is_a_one_line_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "sepp.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=r"^cannot read config file .*: not UTF-8 text \(byte \d+: "):
        load_config(path)


def test_a_key_given_under_both_names_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, "cache_mib = 32\n[sqlite]\ncache_mib = 64\n")
    assert str(info.value) == ("config: cache_mib and sqlite.cache_mib are both given; cache_mib is the old name "
                               "of sqlite.cache_mib (SEPP_SQLITE__CACHE_MIB): keep only sqlite.cache_mib")
    monkeypatch.setenv("SEPP_SQLITE__WRITER", "thread")  # across sources too: file old name, env new name
    with pytest.raises(ConfigError, match=r"sqlite_writer and sqlite\.writer are both given"):
        _load(tmp_path, 'sqlite_writer = "process"\n')


def test_environment_variables_old_and_new(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEPP_SQLITE__CACHE_MIB", "256")
    cfg = _load(tmp_path, "[sqlite]\nasync_fsync_interval = 0.1\n")
    assert (cfg.sqlite.cache_mib, cfg.sqlite.async_fsync_interval) == (256, 0.1), "env merges with the file's table"
    assert cfg.deprecations == ()
    monkeypatch.delenv("SEPP_SQLITE__CACHE_MIB")
    monkeypatch.setenv("SEPP_CACHE_MIB", "512")
    monkeypatch.setenv("sepp_sqlite_writer", "thread")  # any case, like every SEPP_* variable
    cfg = _load(tmp_path, "")
    assert (cfg.sqlite.cache_mib, cfg.sqlite.writer) == (512, "thread")
    assert set(cfg.deprecations) == {_warning("cache_mib", "cache_mib"), _warning("sqlite_writer", "writer")}
    monkeypatch.setenv("SEPP_SQLITE", '{"cache_mib": 8}')
    with pytest.raises(ConfigError, match=r"cache_mib and sqlite\.cache_mib are both given"):
        _load(tmp_path, "")


def test_an_unknown_storage_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^storage: Input should be 'sqlite' or 'postgres' \(got 'mysql'\)$"):
        _load(tmp_path, 'storage = "mysql"\n')

    with pytest.raises(ConfigError, match=r"^storage: unknown backend 'mysql' \(this build knows 'sqlite', "
                                          r"'postgres'\)$"):
        open_store(StoreSettings(data_dir=tmp_path, storage="mysql"))

    async def opens() -> None:
        store = open_store(StoreSettings(data_dir=tmp_path / "d", sqlite=SQLiteSettings(writer="thread")))
        await store.open()
        try:
            assert await store.load_queues() == []
            assert store.figures().backlog == 0
        finally:
            await store.close()

    asyncio.run(opens())
    assert (tmp_path / "d" / "sepp.db").exists()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    env.update(extra, PYTHONUNBUFFERED="1")
    return env


def test_sepp_serve_warns_once_per_old_key_and_runs_with_it(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "data", {"sqlite_writer": "thread", "shutdown_grace": 2.0}) as proc:
        pass
    warnings = [line for line in proc.output if line.startswith("sepp: warning:")]
    assert warnings == [f"sepp: warning: {_warning('sqlite_writer', 'writer')}"], proc.output
    assert any("sepp ready" in line and " writer=thread " in line for line in proc.output), proc.output
    with ServerProcess(tmp_path / "data", {"sqlite": {"writer": "thread"}, "shutdown_grace": 2.0}) as proc:
        pass
    assert not any("warning" in line for line in proc.output), proc.output
    assert any(" writer=thread " in line for line in proc.output), proc.output


def test_sepp_serve_says_a_postgres_dsn_without_storage_postgres_is_not_used(tmp_path: Path) -> None:
    # A DSN alone (the flag --postgres-dsn without --storage postgres, say) keeps SQLite: one
    # warning says so, and how to run on PostgreSQL.
    dsn = "postgresql://sepp@127.0.0.1:1/nowhere"
    with ServerProcess(tmp_path / "data", {"postgres_dsn": dsn, "shutdown_grace": 2.0}) as proc:
        pass
    warnings = [line for line in proc.output if line.startswith("sepp: warning:")]
    assert len(warnings) == 1 and "postgres_dsn is set but storage is sqlite" in warnings[0], proc.output
    assert "add --storage postgres" in warnings[0], warnings
    assert any("sepp ready" in line and " data=" in line for line in proc.output), proc.output


@pytest.mark.parametrize(("content", "words"), [
    ("cache_mib = 32\n[sqlite]\ncache_mib = 64\n", ["cache_mib and sqlite.cache_mib are both given"]),
    ('storage = "mysql"\n', ["storage:", "'sqlite'", "'postgres'", "'mysql'"]),
    ("[sqlite]\ncache_mib = 0\n", ["sqlite.cache_mib", "greater than or equal to 1", "(got 0)"]),
], ids=["both names", "unknown storage", "bad section value"])
def test_sepp_serve_refuses_a_bad_storage_config_in_one_line(tmp_path: Path, content: str,
                                                             words: list[str]) -> None:
    path = tmp_path / "sepp.toml"
    path.write_text(content, "utf-8")
    done = subprocess.run([sys.executable, "-m", "sepp", "serve", "--config", str(path), "--data-dir",
                           str(tmp_path / "data"), "--grpc-listen", "127.0.0.1:0", "--http-listen", ""],
                          capture_output=True, text=True, env=_env(), timeout=30)
    assert done.returncode == 2
    err = done.stderr.strip()
    assert err.startswith("sepp: invalid configuration:") and len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)
    assert "Traceback" not in err
