"""User-facing text cites nothing a user cannot look up: no "SPEC §2", "issue 13 item 3" or
"the seed page" in the docs, the README, the examples, the .proto comments (they end up in
every generated client), the docstrings of src/sepp (``help()`` shows them) or any ``--help``
page. A rule is stated plainly, or points at a docs/ page and section.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import typer
from typer.testing import CliRunner

from sepp.cli.main import _register, app

ROOT = Path(__file__).resolve().parents[2]

#: "SPEC", "§3", "issue 11", "issues 14 and 15", "issue-14", "the seed page", "(seed …".
INTERNAL = re.compile(r"\bSPEC\b|§|\b[Ii]ssues?[ -]\d|\bseed page\b|\b[Tt]he seed\b|\(seed\b|\bseed [\"“]")


def _hits(where: str, text: str) -> Iterator[str]:
    for number, line in enumerate(text.splitlines(), 1):
        found = INTERNAL.search(line)
        if found:
            yield f"{where}:{number}: {found.group(0)!r} in {line.strip()[:120]}"


def _text_files() -> Iterator[Path]:
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").glob("*.md"))
    yield from sorted((ROOT / "proto").rglob("*.proto"))
    for path in sorted((ROOT / "examples").rglob("*")):
        if path.is_file() and "node_modules" not in path.parts and path.suffix in {".md", ".py", ".js", ".json"}:
            yield path


def _docstrings(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "lineno", 1), doc


def test_docs_readme_examples_and_protos_cite_no_internal_reference() -> None:
    files = list(_text_files())
    assert len(files) > 15 and ROOT / "docs" / "other-languages.md" in files
    problems = [p for path in files for p in _hits(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))]
    assert not problems, "\n".join(problems)


def test_no_docstring_of_src_sepp_cites_an_internal_reference() -> None:
    sources = [p for p in sorted((ROOT / "src" / "sepp").rglob("*.py")) if "api" not in p.parts]
    assert len(sources) > 100
    problems = [p for path in sources for line, doc in _docstrings(path)
                for p in _hits(f"{path.relative_to(ROOT)}:{line} (docstring)", doc)]
    assert not problems, "\n".join(problems)


def test_no_help_page_cites_an_internal_reference() -> None:
    _register()
    root = typer.main.get_command(app)
    runner = CliRunner()

    def paths(group: object, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
        ctx = type(group).context_class(group)  # type: ignore[attr-defined]
        for name in group.list_commands(ctx):  # type: ignore[attr-defined]
            command = group.get_command(ctx, name)  # type: ignore[attr-defined]
            yield (*prefix, name)
            if hasattr(command, "list_commands"):
                yield from paths(command, (*prefix, name))

    problems: list[str] = []
    for path in [(), *paths(root)]:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
        assert result.exit_code == 0, (path, result.output)
        problems += _hits(f"sepp {' '.join(path)} --help", result.output)
    assert not problems, "\n".join(problems)


def test_the_pattern_catches_what_it_is_for() -> None:
    for text in ("see SPEC §2", "(issue 13 item 3)", "Issue 11: metrics", "the pre-issue-9 key", "the seed page",
                 '(seed "Build an enqueue request")'):
        assert INTERNAL.search(text), text
    for text in ("PeriodicSpec", "UNSPECIFIED", "seeded rows", "a random seed", "this issue of the magazine"):
        assert not INTERNAL.search(text), text
