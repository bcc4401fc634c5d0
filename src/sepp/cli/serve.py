"""``sepp serve``: start the server on the embedded SQLite default (SPEC §7)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from sepp.cli.main import app


@app.command()
def serve(
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="TOML config file.")] = None,  # noqa: UP007
    data_dir: Annotated[Optional[Path], typer.Option(help="Data folder [default: ./sepp-data].")] = None,  # noqa: UP007
    grpc_listen: Annotated[Optional[str], typer.Option(help="gRPC HOST:PORT [default: 127.0.0.1:7700].")] = None,  # noqa: UP007
    http_listen: Annotated[Optional[str], typer.Option(help="HTTP HOST:PORT [default: 127.0.0.1:7701]; '' = off.")] = None,  # noqa: UP007
    persist_mode: Annotated[Optional[str], typer.Option(help="sync | group | async [default: group].")] = None,  # noqa: UP007
    strict: Annotated[Optional[bool], typer.Option("--strict/--no-strict", help="Reject undeclared queues.")] = None,  # noqa: UP007
    log_level: Annotated[Optional[str], typer.Option(help="debug | info | warning | error.")] = None,  # noqa: UP007
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

    def announce(server: SeppServer) -> None:
        host = cfg.grpc_listen.rpartition(":")[0]
        http = f" http={cfg.http_listen.rpartition(':')[0]}:{server.http_port}" if cfg.http_listen else ""
        print(f"sepp ready grpc={host}:{server.grpc_port}{http} data={cfg.data_dir} "
              f"persist={cfg.persist_mode} strict={str(cfg.strict).lower()}", flush=True)

    if cfg.uvloop:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
    try:
        asyncio.run(run(cfg, announce))
    except (OSError, RuntimeError) as exc:
        typer.echo(f"sepp: cannot start: {exc}", err=True)
        raise typer.Exit(1) from None
