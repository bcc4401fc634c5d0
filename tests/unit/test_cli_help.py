"""Every command's ``--help`` reads cleanly (issue 13 "Rough edges": `sepp serve --help` showed no
defaults and stray spaces, and rich markup ate ``[[auth.tokens]]``): no empty brackets left by
markup, no space before a full stop, and ``sepp serve`` shows its defaults."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from sepp.cli.main import _register, app


def _paths(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    ctx = type(group).context_class(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield (*prefix, name)
        if hasattr(command, "list_commands"):  # a group (typer's own click types)
            yield from _paths(command, (*prefix, name))


def test_every_help_page_reads_cleanly() -> None:
    _register()
    root = typer.main.get_command(app)
    runner = CliRunner()
    paths = list(_paths(root))
    assert ("serve",) in paths and ("workers", "list") in paths and ("token", "new") in paths
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
        assert result.exit_code == 0, (path, result.output)
        text = result.output
        assert "[]" not in text, (path, "markup ate a [[…]]")
        assert not re.search(r"\w \.(\s|$)", text), (path, "a space before a full stop")


def test_serve_help_shows_the_defaults() -> None:
    _register()
    text = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"}).output
    for default in ("sqlite", "sepp-data", "127.0.0.1:7700", "127.0.0.1:7701", "group", "info"):
        assert default in text, default
