"""``sepp serve``: start the server — on the embedded SQLite default or on a
PostgreSQL database shared by any number of nodes (``--storage postgres --postgres-dsn``)
— and ``sepp migrate``: create or migrate the PostgreSQL schema ahead of a deploy.

The ready line ``sepp serve`` prints once it serves is parsed by scripts and tests:
``sepp ready grpc=HOST:PORT [http=HOST:PORT] data=FOLDER persist=… writer=… strict=…`` for
SQLite, ``sepp ready grpc=HOST:PORT [http=HOST:PORT] storage=postgres schema=… node=…
persist=… writer=connections:N strict=…`` for PostgreSQL (no data folder: none is used or
locked; ``writer`` says where writes run, as for SQLite: N write connections). Both end with
``tls=off|on|mtls`` (plaintext, TLS, TLS with client certificates).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Annotated

import typer

from sepp._version import __version__
from sepp.cli.flags import one_line
from sepp.cli.main import app
from sepp.logs import configure as configure_logging
from sepp.logs import text_format
from sepp.server.config import ServerConfig


def log_format(node: str) -> str:
    """The ``logging`` format of ``sepp serve``'s text lines: every line names the node
    (logs name the node), e.g. ``2026-01-01 12:00:00,123 INFO sepp.server [node-a]:
    stopping …``. A ``%`` in the name is escaped (the format is %-style). ``sepp.logs``
    has it and the JSON lines."""
    return text_format(node)


def _default(key: str) -> str:
    """The built-in default of a ``ServerConfig`` key, as help text shows it."""
    value = ServerConfig.model_fields[key].default
    return str(value).lower() if isinstance(value, bool) else str(value)


def open_to_all(cfg: ServerConfig) -> list[str]:
    """The non-loopback listeners (``KEY HOST:PORT``) of a config without ``[[auth.tokens]]``
    (``sepp serve`` refuses them unless ``--insecure``); empty when tokens are
    configured or every listener is loopback. ``admin_token`` alone does not count: it leaves
    the producer and worker services open."""
    from sepp.server.auth import exposed_listeners

    if cfg.auth.tokens:
        return []
    return exposed_listeners({"grpc_listen": cfg.grpc_listen, "http_listen": cfg.http_listen})


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML config file.")] = None,
    storage: Annotated[str | None, typer.Option(help="Storage backend: sqlite | postgres.",
                                                show_default=_default("storage"))] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Data folder (sqlite storage).",
                                                  show_default=_default("data_dir"))] = None,
    postgres_dsn: Annotated[str | None, typer.Option(
        help="PostgreSQL database for --storage postgres: postgresql://USER@HOST:PORT/DB "
             "(env SEPP_POSTGRES_DSN).", show_default=False)] = None,
    node_name: Annotated[str | None, typer.Option(
        help="This node's name in GetServerInfo, logs, attempt history and the UI.",
        show_default="the host name")] = None,
    grpc_listen: Annotated[str | None, typer.Option(help="gRPC HOST:PORT.",
                                                    show_default=_default("grpc_listen"))] = None,
    http_listen: Annotated[str | None, typer.Option(help="HTTP HOST:PORT; '' = off.",
                                                    show_default=_default("http_listen"))] = None,
    persist_mode: Annotated[str | None, typer.Option(help="sync | group | async.",
                                                     show_default=_default("persist_mode"))] = None,
    strict: Annotated[bool | None, typer.Option("--strict/--no-strict", help="Reject undeclared queues.",
                                                show_default=_default("strict"))] = None,
    log_level: Annotated[str | None, typer.Option(help="debug | info | warning | error.",
                                                  show_default=_default("log_level"))] = None,
    tls_cert: Annotated[str | None, typer.Option(
        help="PEM certificate: serve gRPC and HTTP over TLS only (with --tls-key).", show_default=False)] = None,
    tls_key: Annotated[str | None, typer.Option(help="PEM private key of --tls-cert.", show_default=False)] = None,
    tls_client_ca: Annotated[str | None, typer.Option(
        help="PEM CA bundle: require client certificates signed by it (mutual TLS).", show_default=False)] = None,
    insecure: Annotated[bool | None, typer.Option(
        "--insecure", help="Allow a non-loopback grpc_listen/http_listen with no \\[\\[auth.tokens]] "
                           "(anyone who reaches the port can use every API).", show_default=False)] = None,
    log_format: Annotated[str | None, typer.Option(help="text | json: one JSON object per line on stderr.",
                                                   show_default=_default("log_format"))] = None,
) -> None:
    """Start sepp. Every flag is also a TOML key and a SEPP_* variable (flag > env > file)."""
    from sepp.server.config import ConfigError, load_config

    try:
        cfg = load_config(config, storage=storage, data_dir=data_dir, postgres_dsn=postgres_dsn,
                          node_name=node_name, grpc_listen=grpc_listen, http_listen=http_listen,
                          persist_mode=persist_mode, strict=strict, log_level=log_level, log_format=log_format,
                          tls_cert=tls_cert, tls_key=tls_key, tls_client_ca=tls_client_ca, insecure=insecure)
    except ConfigError as exc:
        typer.echo(f"sepp: invalid configuration: {one_line(exc)}", err=True)
        raise typer.Exit(2) from None
    notes = list(cfg.deprecations)  # an old key name, still accepted
    if cfg.storage == "sqlite" and cfg.postgres_dsn.strip():  # a DSN alone does not pick PostgreSQL
        notes.append(f"postgres_dsn is set but storage is sqlite: the DSN is not used, jobs go to {cfg.data_dir}; "
                     f"add --storage postgres (env SEPP_STORAGE=postgres) to run on PostgreSQL")
    if cfg.log_format != "json":  # one plain line each; as JSON log lines once logging is set up
        for note in notes:
            typer.echo(f"sepp: warning: {note}", err=True)
    exposed = open_to_all(cfg)
    if exposed and not cfg.insecure:
        typer.echo(f"sepp: refusing to listen on {', '.join(exposed)} with no [[auth.tokens]] configured: anyone "
                   f"who can reach it could use every API. Add tokens (sepp token new NAME --role ...; "
                   f"docs/operations.md), listen on 127.0.0.1, or pass --insecure", err=True)
        raise typer.Exit(2)
    if cfg.storage == "sqlite" and cfg.writer_placement == "process":
        from sepp.storage.sqlite.writer_process import prespawn

        prespawn()  # its start-up runs beside the imports below (it waits for the store to open)
    node = cfg.node_name or socket.gethostname()  # SeppServer.node's rule
    from sepp.server.eventlog import config_secrets, config_summary, summary_text

    configure_logging(cfg.log_level, cfg.log_format, node, secrets=config_secrets(cfg))
    if cfg.log_format == "json":  # every stderr line of a JSON-logging server is a JSON object
        for note in notes:
            logging.getLogger("sepp.server").warning(note, extra={"event": "config_warning"})
    if exposed:
        logging.getLogger("sepp.auth").warning(
            "insecure: listening on %s with no [[auth.tokens]]: every API is open to anyone who can reach it",
            ", ".join(exposed), extra={"event": "insecure"})
    from sepp.server.app import SeppServer, run
    from sepp.storage.errors import StoreError, StoreFailed

    def announce(server: SeppServer) -> None:
        host = cfg.grpc_listen.rpartition(":")[0]
        http = f" http={cfg.http_listen.rpartition(':')[0]}:{server.http_port}" if cfg.http_listen else ""
        strict_text = str(cfg.strict).lower()
        # The start line, once serving (a failed start stays one line on stderr: "sepp: cannot start: …").
        where = f"schema {cfg.postgres.schema}" if cfg.storage == "postgres" else f"data {cfg.data_dir}"
        tls = f" tls={server.tls.mode if server.tls is not None else 'off'}"
        # It carries the config summary, secrets masked (the start event).
        summary = config_summary(cfg, server.node)
        logging.getLogger("sepp.server").info(
            "serving: sepp %s, node %s, storage %s (%s), grpc %s:%d%s; config: %s", __version__, server.node,
            cfg.storage, where, host, server.grpc_port, http.replace(" http=", ", http "), summary_text(summary),
            extra={"event": "start", "version": __version__, "grpc_port": server.grpc_port,
                   "http_port": server.http_port if cfg.http_listen else None, "config": summary})
        if cfg.storage == "postgres":  # no data folder: the database is shared by every node
            print(f"sepp ready grpc={host}:{server.grpc_port}{http} storage=postgres schema={cfg.postgres.schema} "
                  f"node={server.node} persist={cfg.persist_mode} writer=connections:{cfg.postgres.writers} "
                  f"strict={strict_text}{tls}", flush=True)
            return
        print(f"sepp ready grpc={host}:{server.grpc_port}{http} data={cfg.data_dir} "
              f"persist={cfg.persist_mode} writer={cfg.writer_placement} strict={strict_text}{tls}", flush=True)

    if cfg.uvloop:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
    try:
        asyncio.run(run(cfg, announce))
    except ConfigError as exc:  # open_store: a storage backend this build does not know
        _last_word(cfg.log_format, f"sepp: invalid configuration: {one_line(exc)}")
        raise typer.Exit(2) from None
    except StoreFailed as exc:
        _last_word(cfg.log_format, f"sepp: stopped: {one_line(exc)}")
        raise typer.Exit(1) from None
    except (OSError, RuntimeError, StoreError) as exc:
        _last_word(cfg.log_format, f"sepp: cannot start: {one_line(exc)}")
        raise typer.Exit(1) from None


def _last_word(log_format: str, line: str) -> None:
    """The one line a failed start or stop ends with on stderr: as it is in text mode, as a
    JSON log line (logger ``sepp``, level error) in json mode, so every line parses."""
    if log_format == "json":
        logging.getLogger("sepp").error(line, extra={"event": "exit"})
    else:
        typer.echo(line, err=True)




@app.command()
def migrate(
    postgres_dsn: Annotated[str | None, typer.Option(
        help="PostgreSQL database: postgresql://USER@HOST:PORT/DB (else env SEPP_POSTGRES_DSN, else "
             "postgres_dsn in --config).", show_default=False)] = None,
    schema: Annotated[str | None, typer.Option(
        help="Schema to create or migrate (else \\[postgres] schema in --config, or SEPP_POSTGRES__SCHEMA).",
        show_default="sepp")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML config file of sepp serve.")] = None,
    app_role: Annotated[str | None, typer.Option(
        help="Also let this PostgreSQL role enqueue in its own transactions through the schema's SQL "
             "functions, and nothing else (created NOLOGIN if missing; docs/enqueue-in-transaction.md).",
        show_default=False)] = None,
) -> None:
    """Create or migrate the PostgreSQL schema ahead of a deploy (every node also does it at start).

    Also writes the configuration's strict mode, limits and queue defaults for the SQL
    enqueue functions, and with --app-role grants that role EXECUTE on them.

    Runs under the same advisory lock as a starting node (docs/deploying.md).
    Prints "schema NAME: version A -> B" or "schema NAME: already at version B" (exit 0). A
    database that cannot be used (unreachable, login refused, missing, schema newer than this
    sepp) is one line on stderr and exit 1; a bad setting is exit 2.
    """
    from pydantic import ValidationError

    from sepp.server.config import ConfigError, load_config
    from sepp.storage.config import PostgresSettings
    from sepp.storage.errors import StoreError

    try:
        cfg = load_config(config, postgres_dsn=postgres_dsn)
        settings = cfg.postgres if schema is None else PostgresSettings(schema=schema)
    except ConfigError as exc:
        typer.echo(f"sepp: invalid configuration: {one_line(exc)}", err=True)
        raise typer.Exit(2) from None
    except ValidationError as exc:  # --schema
        problem = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        typer.echo(f"sepp: invalid configuration: --schema {schema!r}: {one_line(problem)}", err=True)
        raise typer.Exit(2) from None
    if not cfg.postgres_dsn.strip():
        typer.echo("sepp: invalid configuration: postgres_dsn is not set (--postgres-dsn, env SEPP_POSTGRES_DSN, "
                   "or postgres_dsn in --config)", err=True)
        raise typer.Exit(2)
    from sepp.storage.postgres.admission import AdmissionSettings
    from sepp.storage.postgres.schema import migrate_dsn

    admission = AdmissionSettings(cfg.strict, cfg.limits, cfg.queue_defaults)
    try:
        before, after = asyncio.run(migrate_dsn(cfg.postgres_dsn, settings.schema, admission, app_role))
    except StoreError as exc:
        typer.echo(f"sepp: cannot migrate: {one_line(exc)}", err=True)
        raise typer.Exit(1) from None
    if before == after:
        typer.echo(f"schema {settings.schema}: already at version {after}")
    else:
        typer.echo(f"schema {settings.schema}: version {before} -> {after}")
    if app_role is not None:
        typer.echo(f"role {app_role}: may call {settings.schema}.enqueue, {settings.schema}.enqueue_batch and "
                   f"{settings.schema}.admission_limits, nothing else")
