"""The CLI with tokens, as a user runs it: ``sepp token new`` output pasted into a
config authenticates ``--token`` / ``SEPP_TOKEN`` (``SEPP_ADMIN_TOKEN`` for the admin
commands); a refused token is exit 2 with one line; ``sepp serve`` refuses a non-loopback
listener without tokens unless ``--insecure``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.servers import FAST, backend_config

from sepp.testing import ServerProcess

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.sqlite_only(reason=(
        "backend-neutral: token commands and the CLI's auth flags, checked before any store call")),
]


def sepp(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``sepp`` with ``args`` and no inherited ``SEPP_*`` variable."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    full_env.update({"COLUMNS": "200", **(env or {})})
    return subprocess.run([sys.executable, "-m", "sepp", *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout, input="", cwd=cwd)


def made_tokens() -> tuple[dict[str, str], str]:
    """Two tokens made by ``sepp token new`` (one with --json, one as text): name → secret,
    and the TOML a user pastes (both entries, as printed)."""
    as_json = sepp("token", "new", "cli-producer", "--role", "produce", "--json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["roles"] == ["produce"] and len(doc["sha256"]) == 64 and len(doc["secret"]) >= 43
    text = sepp("token", "new", "cli-ops", "--role", "work", "-r", "admin", "--role", "work")
    assert text.returncode == 0, text.stderr
    secret = re.search(r"shown once[^\n]*\n(\S+)\n", text.stdout)
    assert secret, text.stdout
    pasted = text.stdout[text.stdout.index("[[auth.tokens]]"):]
    assert tomllib.loads(pasted)["auth"]["tokens"][0]["roles"] == ["work", "admin"]  # duplicates dropped
    return {"cli-producer": doc["secret"], "cli-ops": secret[1]}, doc["toml"] + "\n" + pasted


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    secrets, pasted = made_tokens()
    config = {**FAST, **backend_config(backend), **tomllib.loads(pasted)}  # the pasted TOML, as the server reads it
    with ServerProcess(tmp_path_factory.mktemp("cli-auth"), config) as proc:
        yield proc, secrets


def test_pasted_tokens_authenticate_the_commands_by_flag_and_env(made: tuple[ServerProcess, dict[str, str]]) -> None:
    server, secrets = made
    target = server.grpc_target
    enq = sepp("enqueue", "cli-auth", "t", "--server", target, "--token", secrets["cli-producer"], "--json")
    assert enq.returncode == 0, enq.stderr
    info = sepp("info", "--server", target, "--json", env={"SEPP_TOKEN": secrets["cli-producer"]})
    assert info.returncode == 0 and json.loads(info.stdout)["version"]
    listed = sepp("queues", "list", "--server", target, "--json", "--token", secrets["cli-ops"])
    assert listed.returncode == 0 and [q["name"] for q in json.loads(listed.stdout)] == ["cli-auth"]
    legacy_env = sepp("queues", "list", "--server", target, "--json", env={"SEPP_ADMIN_TOKEN": secrets["cli-ops"]})
    assert legacy_env.returncode == 0, legacy_env.stderr


def test_refused_tokens_are_exit_2_with_one_line_naming_the_role(made: tuple[ServerProcess, dict[str, str]]) -> None:
    server, secrets = made
    target = server.grpc_target
    missing = sepp("enqueue", "cli-auth", "t", "--server", target)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "role 'produce'" in missing.stderr and "SEPP_TOKEN" in missing.stderr
    denied = sepp("info", "--server", target, "--json", "--token", secrets["cli-ops"])
    assert denied.returncode == 2
    doc = json.loads(denied.stderr)
    assert (doc["kind"], doc["status"], doc["reason"]) == ("PermissionDenied", "PERMISSION_DENIED",
                                                           "PERMISSION_DENIED")
    admin = sepp("queues", "list", "--server", target, env={"SEPP_TOKEN": secrets["cli-producer"]})
    assert admin.returncode == 2 and "needs role 'admin'" in admin.stderr and "SEPP_ADMIN_TOKEN" in admin.stderr
    assert secrets["cli-producer"] not in admin.stderr


def test_sepp_worker_with_a_refused_token_exits_2(made: tuple[ServerProcess, dict[str, str]], tmp_path: Path) -> None:
    server, secrets = made
    (tmp_path / "auth_handlers.py").write_text(textwrap.dedent('''
        from sepp import Worker

        worker = Worker(queues=["cli-auth-work"], poll_wait=0.2)

        @worker.handler("t")
        async def ok(job):
            return None
    '''), "utf-8")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    refused = sepp("worker", "auth_handlers:worker", "--server", server.grpc_target, "--token",
                   secrets["cli-producer"], env=env, cwd=tmp_path, timeout=30)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "error: " in refused.stderr and "role 'work'" in refused.stderr and "Traceback" not in refused.stderr


# ---------------------------------------------------------------------- serve on a non-loopback address


def serve(tmp_path: Path, *flags: str, config: dict[str, Any] | None = None) -> subprocess.Popen[str]:
    """``sepp serve`` in ``tmp_path`` on free ports, with ``flags`` and a TOML ``config``."""
    from sepp.testing.process import to_toml

    path = tmp_path / "serve.toml"
    path.write_text(to_toml({"data_dir": str(tmp_path / "data"), **(config or {})}), "utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    return subprocess.Popen([sys.executable, "-m", "sepp", "serve", "--config", str(path), *flags], text=True,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("how", ["flag", "config"])
def test_serve_with_insecure_starts_and_warns(tmp_path: Path, how: str) -> None:
    config = {"grpc_listen": "0.0.0.0:0", "http_listen": "127.0.0.1:0", **({"insecure": True} if how == "config"
                                                                           else {})}
    proc = serve(tmp_path, *(["--insecure"] if how == "flag" else []), config=config)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        ready = proc.stdout.readline()
        assert ready.startswith("sepp ready grpc=0.0.0.0:"), ready
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    warnings = [line for line in err.splitlines() if "WARNING sepp.auth" in line and "insecure" in line]
    assert len(warnings) == 1 and "grpc_listen 0.0.0.0:0" in warnings[0]


def test_serve_with_tokens_listens_anywhere_without_a_warning(tmp_path: Path) -> None:
    from support.auth import auth_config

    proc = serve(tmp_path, "--grpc-listen", "0.0.0.0:0", "--http-listen", "127.0.0.1:0", config=auth_config())
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("sepp ready grpc=0.0.0.0:")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "insecure" not in err
