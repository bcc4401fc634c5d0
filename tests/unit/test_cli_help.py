"""Every command's ``--help`` reads cleanly (issue 13 "Rough edges": `sepp serve --help` showed no
defaults and stray spaces, and rich markup ate ``[[auth.tokens]]``): no empty brackets left by
markup, no space before a full stop, and ``sepp serve`` shows its defaults. Every option and
argument has a help text (the newuser trial found ``sepp queues declare/update --max-payload-bytes``
and the three ``--max-custom-…`` flags with none)."""

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


def _leaves(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    ctx = type(group).context_class(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if hasattr(command, "list_commands"):
            yield from _leaves(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_every_option_and_argument_has_a_help_text() -> None:
    _register()
    leaves = list(_leaves(typer.main.get_command(app)))
    assert any(path == ("queues", "declare") for path, _ in leaves)
    missing = [(" ".join(path), param.opts) for path, command in leaves for param in command.params
               if not (getattr(param, "help", None) or "").strip()]
    assert missing == []
