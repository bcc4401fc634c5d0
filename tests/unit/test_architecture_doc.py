"""docs/architecture.md's module map matches the tree: every module of ``src/sepp`` (but the
generated ``sepp.api``) is listed in it, and every ``.py`` path the document names exists.

The map is a code block under "## Module map". A line that starts in the first column with a
folder (``src/sepp/storage/sqlite/``) opens that folder; a line indented by two spaces names
files of the open folder before its description, comma-separated (``ops.py, sweeps.py``). A
package's ``__init__.py`` counts as listed when its folder is opened. Elsewhere in the document
a ``.py`` path is taken from the repository root or from ``src/sepp`` (``server/parts.py``),
inside the map also from the open folder.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "sepp"
DOC = ROOT / "docs" / "architecture.md"

#: A folder opened in the first column of the map (the rest of the line describes it).
_FOLDER = re.compile(r"^([\w./-]+/)")
#: The files an entry line names: two spaces, then ``name.py[, name.py …]``, then two spaces
#: or the end of the line.
_ENTRY = re.compile(r"^  ([\w./-]+\.py(?:, [\w./-]+\.py)*)(?: {2,}|$)")
#: A ``.py`` path anywhere in the text (``*`` patterns such as ``test_conformance_*.py`` are not one).
_PY_PATH = re.compile(r"(?<![\w./*-])([\w][\w./-]*\.py)\b")


def _map_lines(text: str) -> list[str]:
    """The lines of the first code block after the "## Module map" heading."""
    after = text.split("\n## Module map\n", 1)[1]
    block = after.split("```\n", 2)[1]
    return block.splitlines()


def _listed(lines: list[str]) -> tuple[set[Path], list[str]]:
    """The files the map lists (opened folders' ``__init__.py`` included) and the folders
    and entries that name nothing that exists, as text."""
    listed: set[Path] = set()
    missing: list[str] = []
    folder: Path | None = None
    for line in lines:
        opened = _FOLDER.match(line)
        if opened:
            folder = ROOT / opened.group(1)
            listed.add(folder / "__init__.py")
            if not folder.is_dir():
                missing.append(f"{opened.group(1)} (map folder)")
            continue
        entry = _ENTRY.match(line)
        if entry and folder is not None:
            for name in entry.group(1).split(", "):
                path = folder / name
                listed.add(path)
                if not path.is_file():
                    missing.append(f"{path.relative_to(ROOT)} (map entry: {line.strip()[:60]})")
    return listed, missing


def _source_modules() -> set[Path]:
    """Every ``.py`` file of ``src/sepp`` outside the generated ``sepp.api``."""
    return {p for p in SRC.rglob("*.py") if (SRC / "api") not in p.parents}


def test_every_module_of_src_sepp_is_in_the_module_map() -> None:
    listed, _ = _listed(_map_lines(DOC.read_text(encoding="utf-8")))
    unlisted = sorted(str(p.relative_to(ROOT)) for p in _source_modules() - listed)
    assert not unlisted, f"modules missing from docs/architecture.md's module map: {unlisted}"


def test_every_folder_and_module_the_map_lists_exists() -> None:
    _, missing = _listed(_map_lines(DOC.read_text(encoding="utf-8")))
    assert not missing, f"docs/architecture.md's module map lists what does not exist: {missing}"


def test_every_py_path_the_document_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    map_lines = _map_lines(text)
    in_map = set(map_lines)
    folder: Path | None = None
    stale: list[str] = []
    for line in text.splitlines():
        opened = _FOLDER.match(line) if line in in_map else None
        if opened:
            folder = ROOT / opened.group(1)
        bases = [ROOT, SRC] + ([folder] if line in in_map and folder is not None else [])
        for path in _PY_PATH.findall(line):
            if not any((base / path).is_file() for base in bases):
                stale.append(f"{path} (in: {line.strip()[:70]})")
    assert not stale, f"docs/architecture.md names .py paths that do not exist: {stale}"


def test_the_map_reader_finds_entries_folders_and_paths() -> None:
    lines = ["src/sepp/storage/sqlite/       the embedded backend",
             "  ops.py, sweeps.py            the write operations; queries.sql",
             "                               continued, naming nothing.py as a file of its own",
             "  store.py                     SQLiteStore"]
    listed, missing = _listed(lines)
    sqlite = SRC / "storage" / "sqlite"
    assert listed == {sqlite / "__init__.py", sqlite / "ops.py", sqlite / "sweeps.py", sqlite / "store.py"}
    assert missing == []
    assert _PY_PATH.findall("see test_conformance_*.py and tests/unit/test_x.py, or `server/parts.py`") == [
        "tests/unit/test_x.py", "server/parts.py"]
