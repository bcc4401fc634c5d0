"""``sepp serve``: start the server on the embedded SQLite default (SPEC §7)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from sepp.cli.main import app


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML config file.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Data folder [default: ./sepp-data].")] = None,
    grpc_listen: Annotated[str | None, typer.Option(help="gRPC HOST:PORT [default: 127.0.0.1:7700].")] = None,
    http_listen: Annotated[str | None, typer.Option(help="HTTP HOST:PORT [default: 127.0.0.1:7701]; '' = off.")] = None,
    persist_mode: Annotated[str | None, typer.Option(help="sync | group | async [default: group].")] = None,
    strict: Annotated[bool | None, typer.Option("--strict/--no-strict", help="Reject undeclared queues.")] = None,
    log_level: Annotated[str | None, typer.Option(help="debug | info | warning | error.")] = None,
) -> None:
    """Start sepp. Every flag is also a TOML key and a SEPP_* variable (flag > env > file)."""
    from sepp.server.config import ConfigError, load_config

    try:
        cfg = load_config(config, data_dir=data_dir, grpc_listen=grpc_listen, http_listen=http_listen,
                          persist_mode=persist_mode, strict=strict, log_level=log_level)
    except ConfigError as exc:
        typer.echo(f"sepp: invalid configuration: {exc}", err=True)
        raise typer.Exit(2) from None
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
    except StoreFailed as exc:
        typer.echo(f"sepp: stopped: {exc}", err=True)
        raise typer.Exit(1) from None
    except (OSError, RuntimeError, StoreError) as exc:
        typer.echo(f"sepp: cannot start: {exc}", err=True)
        raise typer.Exit(1) from None
