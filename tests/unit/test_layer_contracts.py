"""The layer contracts (``[tool.importlinter]`` in pyproject.toml; docs/architecture.md) hold on
the source tree and fail on a violating import.

``lint-imports`` runs on a temp copy of ``src/sepp`` and ``pyproject.toml``; the copy gets one
forbidden import added, and the check must exit non-zero naming the broken contract.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", str(tree / "pyproject.toml")],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "src" / "sepp", tmp_path / "src" / "sepp",
                    ignore=shutil.ignore_patterns("__pycache__", "static", "templates"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_contracts_hold_on_the_source_tree(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("client/_bad.py", "import sepp.server.engine", "sepp.client and sepp.worker never import sepp.server"),
    ("worker/_bad.py", "from sepp.storage import base", "sepp.client and sepp.worker never import sepp.server"),
    ("tasks/_bad.py", "import sepp.server.engine", "sepp.client and sepp.worker never import sepp.server"),
    ("client/_bad.py", "from sepp.tasks import app", "sepp.tasks sits on the client and the worker"),
    ("worker/_bad.py", "import sepp.tasks.running", "sepp.tasks sits on the client and the worker"),
    ("storage/_bad.py", "import sepp.cli.main", "sepp.storage never imports sepp.server"),
    ("wire_bad.py", "import sepp.server.errors", "nothing imports sepp.server but sepp.cli"),
    ("server/_bad.py", "from sepp.storage.sqlite import store", "sepp.server imports no storage driver"),
    ("domain/_bad.py", "import grpc", "sepp.domain imports no transport"),
    ("domain/_bad.py", "import sqlite3", "sepp.domain imports no transport"),
    ("domain/_bad.py", "from sepp.api.v1 import common_pb2", "sepp.domain imports no transport"),
    ("domain/_bad.py", "from sepp.storage import base", "sepp.domain imports no transport"),
    ("server/http/ui/_bad.py", "from sepp.storage import base", "sepp.server.http and sepp.server.rpc do not import"),
    ("server/rpc/_bad.py", "from sepp.storage.admin import JobQuery",
     "sepp.server.http and sepp.server.rpc do not import"),
    ("server/metrics/_bad.py", "from sepp.api.v1 import common_pb2", "only the wire edge imports"),
    ("server/http/ui/_bad.py", "from sepp.api.v1 import producer_pb2", "only the wire edge imports"),
    ("server/admin/_bad.py", "import sepp.api.v1.admin_pb2", "only the wire edge imports"),
])
def test_a_violating_import_breaks_its_contract(tree: Path, module: str, line: str, contract: str) -> None:
    path = tree / "src" / "sepp" / module
    path.write_text(f'"""A layer violation planted by the test."""\n\nfrom __future__ import annotations\n\n{line}\n')
    result = _lint(tree)
    assert result.returncode != 0, result.stdout
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout
