"""Every command's ``--help`` reads cleanly (once `sepp serve --help` showed no
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


def test_command_modules_names_every_command_and_its_module() -> None:
    """``sepp <command>`` imports only ``COMMAND_MODULES[command]``: the map must name every
    top-level command and group with the module that defines it, or that command would be
    missing from its own invocation."""
    from sepp.cli.main import COMMAND_MODULES

    _register()
    found: dict[str, str] = {}
    for command in app.registered_commands:
        name = command.name or command.callback.__name__  # type: ignore[union-attr]
        if name != "version":  # defined in main itself
            found[name] = command.callback.__module__  # type: ignore[union-attr]
    for group in app.registered_groups:
        sub = group.typer_instance
        assert sub is not None
        found[str(sub.info.name)] = sub.registered_commands[0].callback.__module__  # type: ignore[union-attr]
    assert {name: f"sepp.cli.{module}" for name, module in COMMAND_MODULES.items()} == found


def test_sepp_worker_does_not_import_the_server() -> None:
    """``sepp worker`` starts without the server's configuration and the other commands
    (a worker process's start is on the clock of every deploy and benchmark)."""
    import json
    import subprocess
    import sys

    code = ("import json, sys\nsys.argv = ['sepp', 'worker', '--help']\nfrom sepp.cli import main\n"
            "try:\n    main.main()\nexcept SystemExit:\n    pass\nprint(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    mods = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "sepp.cli.worker_cmd" in mods
    assert not mods & {"sepp.cli.serve", "sepp.server.config", "sepp.cli.queues_cmd", "sepp.cli.jobs_cmd",
                        "pydantic_settings"}
