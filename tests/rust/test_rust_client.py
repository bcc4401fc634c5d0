"""The Rust client's own tests (clients/rust: unit tests, the h2 gRPC layer, the producer
page's snippets, the shared validation table, the worker) run by ``cargo test`` against real
``sepp serve`` processes, in the same pytest run as everything else.

Three servers on SQLite (the client does not depend on the storage backend): a default one
(``SEPP_RS_TARGET``), a strict one that declares no queue (``SEPP_RS_STRICT_TARGET``: the
page's snippets there show per-job rejections and an atomic batch refused with nothing
stored), and one configured as the shared validation table asks (``SEPP_RS_TABLE_TARGET``,
tests/data/validation_cases.json). cargo builds offline from Debian's packaged crates
(clients/rust/.cargo/config.toml) into ``clients/rust/target``, kept between runs.

Without cargo (or the Debian crates) the test is skipped on a developer machine and FAILS
in CI (``CI=true``): ``bash .ci/run`` installs them (``scripts/ensure-rust.sh``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from sepp.testing import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
CRATE = ROOT / "clients" / "rust"
TABLE = ROOT / "tests" / "data" / "validation_cases.json"
#: The seed page, when this checkout sits beside it (the snippets must be copied verbatim).
SEED_PAGE = ROOT.parent / "shared" / "seeds" / "producers.md"
#: A cold build and test run takes about 2 minutes on a quiet 2-core machine; far more
#: means something hangs.
CARGO_TIMEOUT = 1200

pytestmark = pytest.mark.timeout(CARGO_TIMEOUT + 60)


def _cargo() -> str | None:
    found = shutil.which("cargo")
    if found is None and (Path.home() / ".cargo" / "bin" / "cargo").exists():
        found = str(Path.home() / ".cargo" / "bin" / "cargo")
    return found


def _need(what: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what}: CI must run the Rust client's tests (bash .ci/run installs them: scripts/ensure-rust.sh)")
    pytest.skip(f"{what} (in CI, CI=true, this fails instead)")


def _start(path: Path, config: dict[str, object]) -> ServerProcess:
    proc = ServerProcess(path, {"sweep_interval": 0.05, **config})
    return proc.start()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The three servers' gRPC targets, by the environment variable the Rust tests read."""
    table = json.loads(TABLE.read_text("utf-8"))["server"]
    started: list[ServerProcess] = []
    try:
        for name, config in [("SEPP_RS_TARGET", {}), ("SEPP_RS_STRICT_TARGET", {"strict": True}),
                             ("SEPP_RS_TABLE_TARGET", table)]:
            started.append(_start(tmp_path_factory.mktemp(name.lower()), config))
        yield {name: f"http://{proc.grpc_target}" for name, proc in
               zip(["SEPP_RS_TARGET", "SEPP_RS_STRICT_TARGET", "SEPP_RS_TABLE_TARGET"], started, strict=True)}
    finally:
        for proc in started:
            try:
                proc.terminate(timeout=15)
            finally:
                proc.kill()


def test_the_rust_clients_tests_pass_against_live_servers(servers: dict[str, str]) -> None:
    cargo = _cargo()
    if cargo is None:
        _need("cargo is not installed")
    if not Path("/usr/share/cargo/registry/h2-0.3.13").exists():
        _need("Debian's Rust crates (librust-h2-dev, …) are not installed")
    env = {**os.environ, **servers, "CARGO_TARGET_DIR": str(CRATE / "target"), "CARGO_TERM_COLOR": "never",
           "SEPP_RS_FRESH": "1"}
    proc = subprocess.run([cargo, "test", "--offline", "--", "--test-threads", "4"], cwd=CRATE, env=env,
                          capture_output=True, text=True, timeout=CARGO_TIMEOUT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"cargo test failed:\n{output[-20000:]}"
    passed = sum(int(n) for n in re.findall(r"test result: ok\. (\d+) passed", output))
    assert passed >= 40, f"only {passed} Rust tests ran:\n{output[-5000:]}"


_CODE_START = ("let ", "match ", "use ", "if ", "for ", "Ok(", "Err(", "println!", "eprintln!", "//", ".", "}", ")")


def _is_code(line: str) -> bool:
    return line.startswith(_CODE_START) or line.endswith((";", "{", "}", "(", ")", ",", "?"))


def _rust_blocks(page: str) -> list[list[str]]:
    """The Rust snippets of the seed page (its rendered text): runs of code lines, blank
    lines inside a run dropped, each line stripped of its indentation."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for raw in page.splitlines():
        line = raw.strip()
        if not line:
            continue
        if _is_code(line):
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def test_the_snippet_tests_hold_the_seed_pages_rust_snippets_verbatim() -> None:
    if not SEED_PAGE.exists():
        pytest.skip(f"the seed page is not beside this checkout ({SEED_PAGE})")
    tests = (CRATE / "tests" / "seed_snippets.rs").read_text("utf-8")
    flat = "\n".join(line.strip() for line in tests.splitlines() if line.strip())
    blocks = _rust_blocks(SEED_PAGE.read_text("utf-8"))
    assert len(blocks) == 8, blocks
    for block in blocks:
        snippet = "\n".join(block)
        assert snippet in flat, f"this snippet of the seed page is not in seed_snippets.rs:\n{snippet}"
