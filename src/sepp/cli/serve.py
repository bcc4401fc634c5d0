"""``sepp serve``: start the server on the embedded SQLite default (SPEC §7)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from sepp.cli.flags import one_line
from sepp.cli.main import app
from sepp.server.config import ServerConfig


def _default(key: str) -> str:
    """The built-in default of a ``ServerConfig`` key, as help text shows it."""
    value = ServerConfig.model_fields[key].default
    return str(value).lower() if isinstance(value, bool) else str(value)


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML config file.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Data folder.", show_default=_default("data_dir"))] = None,
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
) -> None:
    """Start sepp. Every flag is also a TOML key and a SEPP_* variable (flag > env > file)."""
    from sepp.server.config import ConfigError, load_config

    try:
        cfg = load_config(config, data_dir=data_dir, grpc_listen=grpc_listen, http_listen=http_listen,
                          persist_mode=persist_mode, strict=strict, log_level=log_level)
    except ConfigError as exc:
        typer.echo(f"sepp: invalid configuration: {one_line(exc)}", err=True)
        raise typer.Exit(2) from None
    for note in cfg.deprecations:  # an old key name, still accepted (issue 9 item 2)
        typer.echo(f"sepp: warning: {note}", err=True)
    logging.basicConfig(level=cfg.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from sepp.server.app import SeppServer, run
    from sepp.storage.errors import StoreError, StoreFailed

    def announce(server: SeppServer) -> None:
        host = cfg.grpc_listen.rpartition(":")[0]
        http = f" http={cfg.http_listen.rpartition(':')[0]}:{server.http_port}" if cfg.http_listen else ""
        print(f"sepp ready grpc={host}:{server.grpc_port}{http} data={cfg.data_dir} "
              f"persist={cfg.persist_mode} writer={cfg.writer_placement} strict={str(cfg.strict).lower()}", flush=True)

    if cfg.uvloop:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
    try:
        asyncio.run(run(cfg, announce))
    except ConfigError as exc:  # open_store: a storage backend this build does not know
        typer.echo(f"sepp: invalid configuration: {one_line(exc)}", err=True)
        raise typer.Exit(2) from None
    except StoreFailed as exc:
        typer.echo(f"sepp: stopped: {one_line(exc)}", err=True)
        raise typer.Exit(1) from None
    except (OSError, RuntimeError, StoreError) as exc:
        typer.echo(f"sepp: cannot start: {one_line(exc)}", err=True)
        raise typer.Exit(1) from None
