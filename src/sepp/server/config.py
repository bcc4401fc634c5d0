"""Server configuration (SPEC §7): TOML file < ``SEPP_*`` environment < CLI flags.

Read once at the CLI edge (``load_config``) into a frozen ``ServerConfig`` that is
passed explicitly to everything else. Nested fields use ``__`` in environment
variables, e.g. ``SEPP_LIMITS__MAX_ENQUEUE_BATCH=512``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from sepp.limits import DAY, HOUR, MAX_SIZE, QueueSettings, ServerLimits, fmt_number, long_encoding_label
from sepp.validation import Validator

PersistMode = Literal["sync", "group", "async"]
#: The accepted ``log_level`` values.
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(ValueError):
    """The configuration is invalid (bad file, bad value, or contradictory limits)."""


class ServerConfig(BaseSettings):
    """Everything ``sepp serve`` needs. Durations are seconds; sizes bytes."""

    model_config = SettingsConfigDict(env_prefix="SEPP_", env_nested_delimiter="__", frozen=True,
                                      extra="forbid", allow_inf_nan=False)

    #: Folder of the embedded SQLite database (``sepp.db``).
    data_dir: Path = Path("sepp-data")
    #: gRPC listen address, HOST:PORT (port 0 = pick a free one).
    grpc_listen: str = "127.0.0.1:7700"
    #: HTTP listen address for the admin UI, /metrics and /healthz; empty disables HTTP.
    http_listen: str = "127.0.0.1:7701"
    #: SPEC §5: sync | group (default) | async.
    persist_mode: PersistMode = "group"
    #: Strict mode: an undeclared queue is UnknownQueue instead of being created.
    strict: bool = False
    #: Server-wide limits (SPEC §2).
    limits: ServerLimits = ServerLimits()
    #: Settings given to queues created on first enqueue.
    queue_defaults: QueueSettings = QueueSettings()
    #: Declared queues: name → settings.
    queues: dict[str, QueueSettings] = Field(default_factory=dict)
    #: Load shedding: most jobs waiting for the committer before OVERLOADED.
    max_commit_backlog: int = Field(default=50_000, ge=1, le=MAX_SIZE)
    #: RetryInfo delay sent with OVERLOADED, seconds.
    overload_retry_after: float = Field(default=0.05, gt=0, le=HOUR)
    #: Longest sleep of the sweeper between passes, seconds.
    sweep_interval: float = Field(default=1.0, gt=0, le=HOUR)
    #: Background fsync period in async mode, seconds.
    async_fsync_interval: float = Field(default=0.05, gt=0, le=HOUR)
    #: Group commit: under concurrent load, wait this long to gather writes into one commit, seconds.
    group_commit_wait: float = Field(default=0.004, ge=0, le=0.1)
    #: SQLite page cache of the writer, MiB.
    cache_mib: int = Field(default=64, ge=1, le=1024 * 1024)
    #: Grace period for in-flight RPCs on SIGTERM, seconds.
    shutdown_grace: float = Field(default=10.0, ge=0, le=DAY)
    #: When set, the admin API and UI need this token.
    admin_token: str | None = None
    #: Run the event loop on uvloop when available.
    uvloop: bool = True
    #: Node name reported by GetServerInfo (default: hostname).
    node_name: str = ""
    #: Log level: debug, info, warning, error.
    log_level: str = "info"
    #: Where the SQLite writer runs: "process" (a child process of its own, so it never waits
    #: for the server's interpreter lock), "thread" (in this process), or "auto": process in
    #: group and async mode, thread in sync mode (docs/decisions.md).
    sqlite_writer: Literal["auto", "process", "thread"] = "auto"

    @property
    def writer_placement(self) -> str:
        """``sqlite_writer`` with ``auto`` resolved: ``thread`` for sync mode, else ``process``."""
        if self.sqlite_writer != "auto":
            return self.sqlite_writer
        return "thread" if self.persist_mode == "sync" else "process"
    #: Fault injection for tests: sleep this long before every commit, seconds. Keep 0.
    debug_commit_delay: float = Field(default=0.0, ge=0, le=60.0)

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

    @field_validator("log_level")
    @classmethod
    def _check_log_level(cls, value: str) -> str:
        """One of debug, info, warning, error (any case)."""
        if value.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value.lower()

    @model_validator(mode="after")
    def _check(self) -> ServerConfig:
        for name in self.queues:
            probe = Validator(self.limits, lambda _q: None)
            from sepp.api.v1 import common_pb2 as pb

            rej = probe.validate(pb.EnqueueRequest(queue=name, job_type="x"), 0)
            if rej is not None and rej.field == "queue" and rej.code != 4:
                raise ValueError(f"queue name {name!r} is invalid: {rej.message}")
        for name, settings in [("queue_defaults", self.queue_defaults), *self.queues.items()]:
            if settings.limits.max_payload_bytes > self.limits.max_message_bytes:
                raise ValueError(f"{name}: max_payload_bytes ({settings.limits.max_payload_bytes}) exceeds "
                                 f"max_message_bytes ({self.limits.max_message_bytes})")
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
        # Constructed directly: keyword arguments > SEPP_* environment > defaults (no .env,
        # no secrets folder). load_config adds the TOML file below the environment.
        return init_settings, env_settings


def _given(value: Any) -> str:
    """`` (got 1e13)`` for the number (or short text, e.g. from ``SEPP_*``) a config error
    refused; nothing for other inputs (a table, a long text)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f" (got {fmt_number(value)})"
    if isinstance(value, str) and len(value) <= 40:
        return f" (got {value!r})"
    return ""


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
    set_flags = {k: v for k, v in flags.items() if v is not None}

    class _WithFile(ServerConfig):
        @classmethod
        def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                       init_settings: PydanticBaseSettingsSource,
                                       env_settings: PydanticBaseSettingsSource,
                                       dotenv_settings: PydanticBaseSettingsSource,
                                       file_secret_settings: PydanticBaseSettingsSource,
                                       ) -> tuple[PydanticBaseSettingsSource, ...]:
            from pydantic_settings import InitSettingsSource

            return init_settings, env_settings, InitSettingsSource(settings_cls, file_data)

    try:
        loaded = _WithFile(**set_flags)
    except SettingsError as exc:  # a SEPP_* variable for a table that is not JSON, e.g. SEPP_LIMITS={bad
        raise ConfigError(f"{exc} (a table given as a SEPP_* variable must be a JSON object)") from None
    except ValidationError as exc:
        # One "key: problem" line per error; pydantic's own text names the internal
        # _WithFile class and links to its docs, which means nothing to a sepp user.
        problems = [f"{'.'.join(str(p) for p in err['loc']) or 'config'}: "
                    f"{err['msg'].removeprefix('Value error, ')}{_given(err.get('input'))}" for err in exc.errors()]
        raise ConfigError("; ".join(problems)) from exc
    return ServerConfig.model_construct(**{name: getattr(loaded, name) for name in ServerConfig.model_fields})
