"""Server configuration: TOML file < ``SEPP_*`` environment < CLI flags.

Read once at the CLI edge (``load_config``) into a frozen ``ServerConfig`` that is
passed explicitly to everything else. Nested fields use ``__`` in environment
variables, e.g. ``SEPP_LIMITS__MAX_ENQUEUE_BATCH=512``.

The storage backend is chosen by ``storage`` (``"sqlite"``, the default, or ``"postgres"``)
and its own settings live in its table (``[sqlite]``:
``sepp.storage.config.SQLiteSettings``; ``[postgres]``:
``sepp.storage.config.PostgresSettings``). The PostgreSQL database is the top-level
``postgres_dsn`` (``SEPP_POSTGRES_DSN``, ``--postgres-dsn``), required with
``storage = "postgres"``. The old flat names of the SQLite settings (``sqlite_writer``,
``cache_mib``, ``async_fsync_interval``) are still accepted from every source and moved
into ``[sqlite]``; each use is reported in ``ServerConfig.deprecations`` (``sepp serve``
prints one warning line for each), and a key given under both names is a ``ConfigError``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from sepp.limits import (
    DAY,
    HOUR,
    MAX_SIZE,
    MESSAGE_BOUNDED,
    QueueSettings,
    ServerLimits,
    fit_result_limit,
    fmt_number,
    long_encoding_label,
)
from sepp.server.auth import AuthSettings
from sepp.server.periodic.spec import PeriodicSettings
from sepp.storage.config import LEGACY_SQLITE_KEYS, ConfigError, PostgresSettings, SQLiteSettings
from sepp.validation import Validator

PersistMode = Literal["sync", "group", "async"]
#: The accepted ``log_level`` values.
LOG_LEVELS = ("debug", "info", "warning", "error")

__all__ = ["LOG_LEVELS", "ConfigError", "PersistMode", "ServerConfig", "load_config"]


def _migrate_legacy(data: Any) -> tuple[Any, list[str]]:
    """Move the old flat SQLite keys of ``data`` (the merged input of every source) into its
    ``sqlite`` table: (the new data, one warning line per key moved).

    Raises ``ValueError`` when a key is given under both names."""
    if not isinstance(data, dict) or not any(key in data for key in LEGACY_SQLITE_KEYS):
        return data, []
    data = dict(data)
    table = data.get("sqlite", {})
    if not isinstance(table, dict):  # a SEPP_SQLITE that is not a JSON object: pydantic says so
        return data, []
    table = dict(table)
    notes: list[str] = []
    for old, new in LEGACY_SQLITE_KEYS.items():
        if old not in data:
            continue
        if new in table:
            raise ValueError(f"{old} and sqlite.{new} are both given; {old} is the old name of sqlite.{new} "
                             f"(SEPP_SQLITE__{new.upper()}): keep only sqlite.{new}")
        table[new] = data.pop(old)
        notes.append(f"config key {old} is deprecated: it is now sqlite.{new} (TOML [sqlite] {new}, "
                     f"env SEPP_SQLITE__{new.upper()}); the old name still works")
    data["sqlite"] = table
    return data, notes


class _LegacyEnv(PydanticBaseSettingsSource):
    """The old ``SEPP_SQLITE_WRITER`` / ``SEPP_CACHE_MIB`` / ``SEPP_ASYNC_FSYNC_INTERVAL``
    variables (any case, like every ``SEPP_*``), under their old flat names: ``ServerConfig``
    moves them into ``sqlite`` like the same keys from a file."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        """Unused: ``__call__`` reads the variables directly."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        wanted = {f"sepp_{old}": old for old in LEGACY_SQLITE_KEYS}
        return {wanted[name.lower()]: value for name, value in os.environ.items() if name.lower() in wanted}


class ServerConfig(BaseSettings):
    """Everything ``sepp serve`` needs. Durations are seconds; sizes bytes."""

    model_config = SettingsConfigDict(env_prefix="SEPP_", env_nested_delimiter="__", frozen=True,
                                      extra="forbid", allow_inf_nan=False)
    #: The TOML file's tables, read below the environment; ``None`` (no file source) unless
    #: ``load_config`` sets it on a subclass of its own.
    _file_data: ClassVar[dict[str, Any] | None] = None

    #: The storage backend: "sqlite" (the embedded default, one node) or "postgres" (any
    #: number of nodes on one PostgreSQL database).
    storage: Literal["sqlite", "postgres"] = "sqlite"
    #: Folder of the embedded SQLite database (``sepp.db``); unused with "postgres".
    data_dir: Path = Path("sepp-data")
    #: The PostgreSQL database with ``storage = "postgres"``: ``postgresql://USER@HOST:PORT/DB``
    #: (a password in it is never printed). Required then; ignored with "sqlite".
    postgres_dsn: str = Field(default="", validate_default=True)
    #: gRPC listen address, HOST:PORT (port 0 = pick a free one).
    grpc_listen: str = "127.0.0.1:7700"
    #: HTTP listen address for the admin UI, /metrics and /healthz; empty disables HTTP.
    http_listen: str = "127.0.0.1:7701"
    #: sync | group (default) | async.
    persist_mode: PersistMode = "group"
    #: Strict mode: an undeclared queue is UnknownQueue instead of being created.
    strict: bool = False
    #: Server-wide limits.
    limits: ServerLimits = ServerLimits()
    #: Settings given to queues created on first enqueue.
    queue_defaults: QueueSettings = QueueSettings()
    #: Declared queues: name → settings.
    queues: dict[str, QueueSettings] = Field(default_factory=dict)
    #: Periodic schedules (``[[periodic]]`` tables; docs/periodic.md): written into
    #: the store at start, so every node sharing it runs them.
    periodic: tuple[PeriodicSettings, ...] = ()
    #: Load shedding: most jobs waiting for the committer before OVERLOADED.
    max_commit_backlog: int = Field(default=50_000, ge=1, le=MAX_SIZE)
    #: RetryInfo delay sent with OVERLOADED, seconds.
    overload_retry_after: float = Field(default=0.05, gt=0, le=HOUR)
    #: Longest sleep of the sweeper between passes, seconds.
    sweep_interval: float = Field(default=1.0, gt=0, le=HOUR)
    #: How often /metrics re-reads the queue gauges from storage in the background, seconds;
    #: 0 reads them at every scrape (docs/operations.md "## Metrics").
    metrics_gauge_interval: float = Field(default=15.0, ge=0, le=HOUR)
    #: Most jobs one page of a job search examines (the UI search box, ``sepp jobs list
    #: --where``, ListJobs with a search filter) before it stops and offers to go on from
    #: there (docs/operations.md "Search").
    search_scan_rows: int = Field(default=10_000, ge=1, le=1_000_000)
    #: Live job events (``WatchJobs``): most events one watcher's buffer holds before the
    #: watcher is cut off as too slow (RESOURCE_EXHAUSTED, docs/decisions.md "Live job events").
    watch_buffer: int = Field(default=10_000, ge=1, le=1_000_000)
    #: Group commit: under concurrent load, wait this long to gather writes into one commit, seconds.
    group_commit_wait: float = Field(default=0.004, ge=0, le=0.1)
    #: Grace period for in-flight RPCs on SIGTERM, seconds.
    shutdown_grace: float = Field(default=10.0, ge=0, le=DAY)
    #: Tokens and their roles (``[[auth.tokens]]``); auth is on when one is configured.
    auth: AuthSettings = AuthSettings()
    #: Legacy: a token with role ``admin`` (named ``admin_token``); alone it locks only the
    #: admin API and the UI, as in earlier versions.
    admin_token: str | None = None
    #: Allow listening on a non-loopback address with no ``[[auth.tokens]]`` (``--insecure``).
    insecure: bool = False
    #: Run the event loop on uvloop when available.
    uvloop: bool = True
    #: Node name reported by GetServerInfo (default: hostname).
    node_name: str = ""
    #: Log level: debug, info, warning, error.
    log_level: str = "info"
    #: Log lines on stderr: "text" (the default) or "json", one object per line (``sepp.logs``).
    log_format: Literal["text", "json"] = "text"
    #: Fault injection for tests: sleep this long before every commit, seconds. Keep 0.
    debug_commit_delay: float = Field(default=0.0, ge=0, le=60.0)
    #: The SQLite backend's own settings: writer placement, page cache, async fsync period.
    sqlite: SQLiteSettings = SQLiteSettings()
    #: The PostgreSQL backend's own settings: schema, read and write connections per node.
    postgres: PostgresSettings = PostgresSettings()

    # -- TLS and readiness (docs/operations.md). The files are checked at start
    # (sepp.server.tls.load_server_tls): a bad one is a one-line start error naming its key.
    #: PEM certificate (chain) the gRPC and HTTP listeners present; with ``tls_key`` both
    #: serve TLS only. Empty = plaintext.
    tls_cert: str = ""
    #: PEM private key of ``tls_cert`` (unencrypted).
    tls_key: str = Field(default="", validate_default=True)
    #: PEM CA bundle: with it every client must present a certificate signed by one of these
    #: CAs (mutual TLS, on gRPC and HTTP). Needs ``tls_cert``.
    tls_client_ca: str = Field(default="", validate_default=True)
    #: Seconds between two readiness probes of the storage (gRPC health, ``/readyz``).
    readiness_interval: float = Field(default=1.0, gt=0, le=HOUR)

    _deprecations: tuple[str, ...] = PrivateAttr(default=())

    @property
    def writer_placement(self) -> str:
        """``sqlite.writer`` with ``auto`` resolved: ``thread`` for sync mode, else ``process``."""
        return self.sqlite.placement(self.persist_mode)

    @property
    def sqlite_writer(self) -> str:
        """Deprecated read-back alias of ``sqlite.writer`` (the older flat key)."""
        return self.sqlite.writer

    @property
    def cache_mib(self) -> int:
        """Deprecated read-back alias of ``sqlite.cache_mib`` (MiB; the older flat key)."""
        return self.sqlite.cache_mib

    @property
    def async_fsync_interval(self) -> float:
        """Deprecated read-back alias of ``sqlite.async_fsync_interval`` (seconds; the
        older flat key)."""
        return self.sqlite.async_fsync_interval

    @property
    def deprecations(self) -> tuple[str, ...]:
        """One warning line per old key this config was given (e.g. ``cache_mib`` for
        ``sqlite.cache_mib``); empty when it uses only current names."""
        return self._deprecations

    @model_validator(mode="wrap")
    @classmethod
    def _move_legacy_keys(cls, data: Any, handler: Callable[[Any], ServerConfig]) -> ServerConfig:
        """The old flat SQLite keys → ``sqlite`` (``_migrate_legacy``), noted in ``deprecations``."""
        data, notes = _migrate_legacy(data)
        config = handler(data)
        if notes:
            config._deprecations = tuple(notes)
        return config

    @field_validator("grpc_listen", "http_listen")
    @classmethod
    def _check_listen(cls, value: str, info: ValidationInfo) -> str:
        """HOST:PORT with a port 0..65535 (0 = any free one); ``http_listen`` may be empty (off).
        gRPC would take port 99999 as 34463 and uvicorn would fail with a traceback."""
        if value == "" and info.field_name == "http_listen":
            return value
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isascii() or not port.isdigit() or int(port) > 65535:
            raise ValueError("must be HOST:PORT with a port from 0 to 65535")
        return value

    @field_validator("postgres_dsn")
    @classmethod
    def _check_postgres_dsn(cls, value: str, info: ValidationInfo) -> str:
        """Required (non-blank) when ``storage`` is "postgres": the message names
        the key, the flag and the variable. Runs on the default too (``validate_default``)."""
        if info.data.get("storage") == "postgres" and not value.strip():
            raise ValueError("must be set when storage is 'postgres' (--postgres-dsn, env SEPP_POSTGRES_DSN), "
                             "e.g. postgresql://USER@HOST:5432/DB")
        return value

    @field_validator("node_name")
    @classmethod
    def _check_node_name(cls, value: str) -> str:
        """No control characters (U+0000–U+001F, U+007F–U+009F): the name is written in every
        log line, in PostgreSQL's ``application_name`` (where a NUL broke the connection with
        "invalid startup packet layout") and in text columns that cannot hold U+0000."""
        if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in value):
            raise ValueError("must not contain control characters")
        return value

    @field_validator("log_level")
    @classmethod
    def _check_log_level(cls, value: str) -> str:
        """One of debug, info, warning, error (any case)."""
        if value.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value.lower()

    @field_validator("tls_key", "tls_client_ca")
    @classmethod
    def _check_tls(cls, value: str, info: ValidationInfo) -> str:
        """``tls_cert`` and ``tls_key`` both or neither; ``tls_client_ca`` only with them
        . Runs on the defaults too (``validate_default``)."""
        cert = str(info.data.get("tls_cert", "")).strip()
        if info.field_name == "tls_key" and bool(cert) != bool(value.strip()):
            if cert:
                raise ValueError("must be set when tls_cert is: TLS needs both (--tls-cert and --tls-key)")
            raise ValueError("is set but tls_cert is not: TLS needs both (--tls-cert and --tls-key)")
        if info.field_name == "tls_client_ca" and value.strip() and not cert:
            raise ValueError("needs tls_cert and tls_key (mutual TLS is TLS that also checks client certificates)")
        return value

    @field_validator("periodic")
    @classmethod
    def _check_periodic(cls, value: tuple[PeriodicSettings, ...]) -> tuple[PeriodicSettings, ...]:
        """Schedule names are unique (the name is the schedule's identity)."""
        seen: dict[str, int] = {}
        for i, spec in enumerate(value):
            if spec.name in seen:
                raise ValueError(f"periodic[{i}] repeats the name {spec.name!r} of periodic[{seen[spec.name]}]; "
                                 "each schedule needs a name of its own")
            seen[spec.name] = i
        return value

    @field_validator("queue_defaults")
    @classmethod
    def _defaults_result_fits(cls, value: QueueSettings, info: ValidationInfo) -> QueueSettings:
        """An unnamed (default) ``max_result_bytes`` above ``max_message_bytes`` is lowered to it
        (``fit_result_limit``); a named one is checked in ``_check``."""
        limits = info.data.get("limits")
        return value if limits is None else fit_result_limit(value, limits.max_message_bytes)

    @field_validator("queues")
    @classmethod
    def _queues_result_fits(cls, value: dict[str, QueueSettings], info: ValidationInfo) -> dict[str, QueueSettings]:
        """``_defaults_result_fits`` for each declared queue."""
        limits = info.data.get("limits")
        if limits is None:
            return value
        return {name: fit_result_limit(settings, limits.max_message_bytes) for name, settings in value.items()}

    @model_validator(mode="after")
    def _check(self) -> ServerConfig:
        for name in self.queues:
            rej = Validator(self.limits, lambda _q: None).probe_queue_name(name)
            if rej is not None and rej.field == "queue" and rej.code != 4:
                raise ValueError(f"queue name {name!r} is invalid: {rej.message}")
        for name, settings in [("queue_defaults", self.queue_defaults), *self.queues.items()]:
            for limit in MESSAGE_BOUNDED:
                value = getattr(settings.limits, limit)
                if value > self.limits.max_message_bytes:
                    raise ValueError(f"{name}: {limit} ({value}) exceeds max_message_bytes "
                                     f"({self.limits.max_message_bytes})")
            long_label = long_encoding_label(settings.limits, self.limits.max_encoding_bytes)
            if long_label is not None:
                raise ValueError(f"{name}.limits.allowed_encodings[{long_label[0]}] is {long_label[1]} bytes long; "
                                 f"a label is at most limits.max_encoding_bytes ({self.limits.max_encoding_bytes})")
        return self

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                   init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword arguments > SEPP_* environment (the old flat SQLite names below the current
        # ones) > the TOML file's tables (``_file_data``: set by load_config, on a subclass of
        # its own) > defaults (no .env, no secrets folder).
        sources: tuple[PydanticBaseSettingsSource, ...] = (init_settings, env_settings, _LegacyEnv(settings_cls))
        if cls._file_data is None:
            return sources
        return (*sources, InitSettingsSource(settings_cls, cls._file_data))


def _given(value: Any) -> str:
    """`` (got 1e13)`` for the number (or short text, e.g. from ``SEPP_*``) a config error
    refused; nothing for other inputs (a table, a long text)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f" (got {fmt_number(value)})"
    if isinstance(value, str) and len(value) <= 40:
        return f" (got {value!r})"
    return ""


#: Parts of a key whose value is a secret: a config error never quotes it.
_SECRET_PARTS = ("token", "secret", "password", "dsn", "sha256", "auth")


def _secret(loc: tuple[Any, ...]) -> bool:
    """Whether the key at ``loc`` holds (or may hold) a secret."""
    return any(part in str(p).lower() for p in loc for part in _SECRET_PARTS)


def _legacy_given(file_data: dict[str, Any]) -> dict[str, str]:
    """New ``[sqlite]`` key → the old flat name it was given under (file or ``SEPP_*``), so a
    refused value is named as the user wrote it."""
    given = set(file_data) | set(_LegacyEnv(ServerConfig)())
    return {new: old for old, new in LEGACY_SQLITE_KEYS.items() if old in given}


def _key_name(loc: tuple[Any, ...], moved: dict[str, str]) -> str:
    """The dotted key of a pydantic error location; an old flat key moved into ``[sqlite]``
    reads as ``cache_mib (now sqlite.cache_mib)``."""
    if len(loc) == 2 and loc[0] == "sqlite" and loc[1] in moved:
        return f"{moved[loc[1]]} (now sqlite.{loc[1]})"
    if len(loc) >= 2 and loc[0] == "periodic" and isinstance(loc[1], int):  # [[periodic]] tables, by position
        return f"periodic[{loc[1]}]" + "".join(f".{p}" for p in loc[2:])
    return ".".join(str(p) for p in loc) or "config"


def _problem(err: Any) -> str:
    """pydantic's message for one error, in a sepp user's words: a table given as something
    else says so instead of naming the internal model class."""
    if err["type"] == "extra_forbidden" and err["loc"][:1] == ("periodic",):
        return f"unknown field; a [[periodic]] table takes {', '.join(PeriodicSettings.model_fields)}"
    if err["type"] in ("model_type", "dict_type", "model_attributes_type"):
        name = ".".join(str(p) for p in err["loc"])
        return f"must be a table ([{name}] in TOML, a JSON object in SEPP_{name.upper().replace('.', '__')})"
    return str(err["msg"]).removeprefix("Value error, ")


def load_config(config_file: Path | None = None, **flags: Any) -> ServerConfig:
    """Build the config: defaults, then the TOML file, then ``SEPP_*``, then ``flags`` (None = unset).

    Raises ``ConfigError`` with a readable message for a missing/invalid file or value.
    """
    from pydantic import ValidationError

    file_data: dict[str, Any] = {}
    if config_file is not None:
        try:
            file_data = tomllib.loads(Path(config_file).read_text("utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {config_file}: {exc}") from exc
        except UnicodeDecodeError as exc:  # TOML is UTF-8 (a binary file, UTF-16, Latin-1)
            raise ConfigError(f"cannot read config file {config_file}: not UTF-8 text "
                              f"(byte {exc.start}: {exc.reason})") from None
    set_flags = {k: v for k, v in flags.items() if v is not None}

    class _WithFile(ServerConfig):
        _file_data = file_data

    try:
        loaded = _WithFile(**set_flags)
    except SettingsError as exc:  # a SEPP_* variable for a table that is not JSON, e.g. SEPP_LIMITS={bad
        raise ConfigError(f"{exc} (a table given as a SEPP_* variable must be a JSON object)") from None
    except ValidationError as exc:
        # One "key: problem" line per error; pydantic's own text names the internal
        # _WithFile class and links to its docs, which means nothing to a sepp user.
        moved = _legacy_given(file_data)
        problems = [f"{_key_name(err['loc'], moved)}: {_problem(err)}"
                    f"{'' if _secret(err['loc']) else _given(err.get('input'))}"
                    for err in exc.errors()]
        raise ConfigError("; ".join(problems)) from exc
    config = ServerConfig.model_construct(**{name: getattr(loaded, name) for name in ServerConfig.model_fields})
    config._deprecations = loaded.deprecations
    return config
