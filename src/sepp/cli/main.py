"""Entry point of the ``sepp`` command: one typer app, one module per command group.

Flags and ``SEPP_*`` environment variables are read here, at the edge, and turned
into explicit config objects; nothing below the CLI reads the environment.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="sepp",
    help="sepp — a durable job-queue server. Human output by default, --json for scripts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root() -> None:
    """sepp — a durable job-queue server."""


def _register() -> None:
    # Each module adds its commands to ``app``; imported lazily so `sepp --help` stays fast.
    from sepp.cli import serve  # noqa: F401

    for name in ("producer", "worker_cmd", "admin", "bench", "token_cmd"):
        try:
            __import__(f"sepp.cli.{name}")
        except ModuleNotFoundError as exc:  # a command group not built yet
            if exc.name != f"sepp.cli.{name}":
                raise


def main() -> None:
    """Run the ``sepp`` CLI (console script entry point)."""
    _register()
    app()


if __name__ == "__main__":
    main()
