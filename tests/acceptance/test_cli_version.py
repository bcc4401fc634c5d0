"""``sepp --version``, ``sepp -V`` and ``sepp version``: the installed version with no
server running."""

from __future__ import annotations

import json
import subprocess
import sys

from sepp._version import __version__


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sepp", *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})


def test_version_flag_and_command_need_no_server() -> None:
    for flag in ("--version", "-V"):
        done = run(flag)
        assert (done.returncode, done.stdout.strip()) == (0, f"sepp {__version__}"), done.stderr
    done = run("version")
    assert done.returncode == 0 and done.stdout.startswith(f"sepp {__version__} (Python ")
    doc = json.loads(run("version", "--json").stdout)
    assert doc["version"] == __version__ and doc["python"].count(".") == 2
