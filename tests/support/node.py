"""Node.js for the tests that run examples/node: the ``node`` binary with the example's npm
packages installed (``npm ci`` from the committed package-lock.json when missing), under a
file lock so two test processes (xdist workers) never run ``npm ci`` into the same folder at
once. Without node or npm a test is skipped on a developer machine and FAILS in CI
(``CI=true``): CI must run it."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

#: The Node.js examples (worker.js, enqueue_task.js) and their package.json.
NODE_DIR = Path(__file__).resolve().parents[2] / "examples" / "node"


def node_with_packages(why: str) -> str:
    """The node binary, examples/node's packages installed; ``why`` names the test's need in
    the skip or failure message."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not (node and npm):
        missing = "node" if not node else "npm"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} is not installed: CI must run {why}")
        pytest.skip(f"{missing} is not installed (in CI, CI=true, this fails instead)")
    with (NODE_DIR / ".npm-ci.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir():
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True,
                                  text=True, timeout=600, check=False)
            assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
    return node
