"""Every ``sepp …`` command line in README.md, examples/README.md and docs/*.md names a command
the CLI has, and every ``--flag`` on it is one of that command's options: the docs once listed a
``sepp dead …`` and a ``sepp jobs find-key`` that never existed, and a user who types them gets
"No such command". Checked in process against the typer app, so it is cheap and cannot drift.

What counts as a command line: a code span or a line of a shell code block (```` ```sh ````,
```` ```console ````, a bare fence) where ``sepp`` starts the command — at the start, after
``$ ``, ``&&``, ``|``, ``;`` or ``(``, behind a path such as ``.venv/bin/`` and ``VAR=value``
assignments. ``declare|update`` checks both. Comments (`` # …``) are not read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from sepp.cli.main import _register, app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "examples" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Words after ``sepp`` that are not commands: ``sepp ready …`` is the line the server prints
#: once it serves (docs quote it).
PRINTED = {"ready"}
#: Flags every command takes, and the placeholder the docs use for "any of its flags".
ANY_COMMAND_FLAGS = {"--help", "--flag"}

_START = r"(?:^|(?<=[;&|(])\s*|\$\s+)(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?"
_COMMAND = re.compile(_START + r"sepp((?:[ \t]+[a-z][a-z0-9-]*(?:\|[a-z][a-z0-9-]*)*)*)([^;&|#]*)")
_SHELL_FENCES = {"", "sh", "console", "bash", "shell"}


def _tree(group: Any) -> dict[str, Any]:
    """The app's commands: a group maps to a dict of its own, a command to its click object."""
    ctx = type(group).context_class(group)
    out: dict[str, Any] = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        out[name] = _tree(command) if hasattr(command, "list_commands") else command
    return out


def _code(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every code span and every line of a shell code block."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = re.match(r"^\s*```(\w*)", line)
        if opened:
            fence = None if fence is not None else opened.group(1)
            continue
        if fence is not None:
            if fence in _SHELL_FENCES and not line.lstrip().startswith("#"):
                yield number, line.split(" #")[0].strip()
            continue
        for span in re.findall(r"`([^`]+)`", line):
            yield number, span.strip()


def _options(command: Any) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def _problems(where: str, line: str, tree: dict[str, Any]) -> Iterator[str]:
    for match in _COMMAND.finditer(line):
        words = match.group(1).split()
        if not words or words[0] in PRINTED:
            continue
        flags = re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", match.group(2))
        for name in words[0].split("|"):
            if name not in tree:
                yield f"{where}: no command `sepp {name}`: {line}"
                continue
            node = tree[name]
            leaves = []
            if isinstance(node, dict):
                if len(words) < 2:
                    continue  # `sepp queues …`: the group as a whole
                for sub in words[1].split("|"):
                    if sub in node:
                        leaves.append(node[sub])
                    else:
                        yield f"{where}: no command `sepp {name} {sub}`: {line}"
            else:
                leaves.append(node)
            for flag in flags:
                if flag not in ANY_COMMAND_FLAGS and leaves and not any(flag in _options(c) for c in leaves):
                    yield f"{where}: `sepp {' '.join(words[:2])}` has no option {flag}: {line}"


def _command_lines() -> Iterator[tuple[str, str]]:
    for path in DOCS:
        for number, line in _code(path.read_text(encoding="utf-8")):
            if _COMMAND.search(line):
                yield f"{path.relative_to(ROOT)}:{number}", line


def test_every_documented_command_exists() -> None:
    _register()
    tree = _tree(typer.main.get_command(app))
    lines = list(_command_lines())
    # The extraction itself works: the docs hold well over a hundred command lines.
    assert len(lines) > 100, len(lines)
    problems = [p for where, line in lines for p in _problems(where, line, tree)]
    assert not problems, "\n".join(problems)


def test_the_check_catches_a_made_up_command_and_flag() -> None:
    _register()
    tree = _tree(typer.main.get_command(app))
    assert list(_problems("x", "sepp dead list", tree))
    assert list(_problems("x", ".venv/bin/sepp jobs find-key", tree))
    assert list(_problems("x", "sepp queues declare|frobnicate NAME", tree))
    assert list(_problems("x", "sepp jobs list --no-such-flag", tree))
    assert not list(_problems("x", "sepp jobs list --state dead_lettered", tree))
    assert not list(_problems("x", "SEPP_SERVER=h:1 .venv/bin/sepp queues purge|delete NAME --yes", tree))
