"""The Rust client's own tests (clients/rust: unit tests, the h2 gRPC layer, the producer
page's snippets, the shared validation table, the worker) run by ``cargo test`` against real
``sepp serve`` processes, in the same pytest run as everything else.

Five servers on SQLite (the client does not depend on the storage backend): a default one
(``SEPP_RS_TARGET``), a strict one that declares no queue (``SEPP_RS_STRICT_TARGET``: the
page's snippets there show per-job rejections and an atomic batch refused with nothing
stored), one configured as the shared validation table asks (``SEPP_RS_TABLE_TARGET``,
tests/data/validation_cases.json), and two over TLS with a throw-away CA made here
(``support.tls``, its files in ``SEPP_RS_TLS_DIR``): one serving TLS
(``SEPP_RS_TLS_TARGET``) and one requiring a client certificate (``SEPP_RS_MTLS_TARGET``),
both ``https://localhost:PORT`` (the certificate names ``localhost``). cargo builds offline
from Debian's packaged crates (clients/rust/.cargo/config.toml) into ``clients/rust/target``,
kept between runs.

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
from support.tls import make_pki

from sepp.testing import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
CRATE = ROOT / "clients" / "rust"
TABLE = ROOT / "tests" / "data" / "validation_cases.json"
#: The seed page, when this checkout sits beside it (the snippets must be copied verbatim).
SEED_PAGE = ROOT.parent / "shared" / "seeds" / "producers.md"
#: The repository's copy of the page's Rust snippets, so the check runs without the page.
SNIPPETS = ROOT / "tests" / "data" / "producer_page_rust_snippets.txt"
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
    """The servers' gRPC targets (and the TLS files' folder), by the environment variable
    the Rust tests read."""
    table = json.loads(TABLE.read_text("utf-8"))["server"]
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    tls: dict[str, object] = {"tls_cert": str(pki.server_cert), "tls_key": str(pki.server_key)}
    configs: dict[str, dict[str, object]] = {
        "SEPP_RS_TARGET": {}, "SEPP_RS_STRICT_TARGET": {"strict": True}, "SEPP_RS_TABLE_TARGET": table,
        "SEPP_RS_TLS_TARGET": tls, "SEPP_RS_MTLS_TARGET": {**tls, "tls_client_ca": str(pki.ca)},
    }
    started: dict[str, ServerProcess] = {}
    try:
        for name, config in configs.items():
            started[name] = _start(tmp_path_factory.mktemp(name.lower()), config)
        targets = {name: f"http://{proc.grpc_target}" for name, proc in started.items() if proc.tls == "off"}
        for name in ("SEPP_RS_TLS_TARGET", "SEPP_RS_MTLS_TARGET"):
            port = started[name].grpc_target.rsplit(":", 1)[1]
            targets[name] = f"https://localhost:{port}"
        yield {**targets, "SEPP_RS_TLS_DIR": str(pki.ca.parent)}
    finally:
        for proc in started.values():
            try:
                proc.terminate(timeout=15)
            finally:
                proc.kill()


def test_the_rust_clients_tests_pass_against_live_servers(servers: dict[str, str]) -> None:
    cargo = _cargo()
    if cargo is None:
        _need("cargo is not installed")
    if not all(Path(f"/usr/share/cargo/registry/{crate}").exists() for crate in ("h2-0.3.13", "tokio-rustls-0.23.4")):
        _need("Debian's Rust crates (librust-h2-dev, librust-tokio-rustls-dev, …) are not installed")
    env = {**os.environ, **servers, "CARGO_TARGET_DIR": str(CRATE / "target"), "CARGO_TERM_COLOR": "never",
           "SEPP_RS_FRESH": "1"}
    proc = subprocess.run([cargo, "test", "--offline", "--", "--test-threads", "4"], cwd=CRATE, env=env,
                          capture_output=True, text=True, timeout=CARGO_TIMEOUT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"cargo test failed:\n{output[-20000:]}"
    passed = sum(int(n) for n in re.findall(r"test result: ok\. (\d+) passed", output))
    assert passed >= 40, f"only {passed} Rust tests ran:\n{output[-5000:]}"
    # TLS is a default feature: its tests ran (a build without it would skip tests/tls.rs).
    assert "test mutual_tls_with_the_client_certificate_enqueues_and_a_worker_acks ... ok" in output, output[-5000:]


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


def _copied_blocks(copy: str) -> list[list[str]]:
    """The snippets of the repository's copy (SNIPPETS: a "#" header, then each snippet after
    a line "=== <section>"), in the shape of ``_rust_blocks``: blank lines dropped, each line
    stripped of its indentation."""
    blocks: list[list[str]] = []
    for line in copy.splitlines():
        if line.startswith("=== "):
            blocks.append([])
        elif blocks and line.strip():
            blocks[-1].append(line.strip())
    return blocks


def test_the_snippet_tests_hold_the_seed_pages_rust_snippets_verbatim() -> None:
    """Runs from a fresh clone (never skips): the repository's copy of the page's eight Rust
    snippets each appear in seed_snippets.rs; where the seed page sits beside the checkout,
    the copy must also still be the page's snippets, in order."""
    copied = _copied_blocks(SNIPPETS.read_text("utf-8"))
    assert len(copied) == 8, copied
    assert all(copied), f"an empty snippet in {SNIPPETS}"
    tests = (CRATE / "tests" / "seed_snippets.rs").read_text("utf-8")
    flat = "\n".join(line.strip() for line in tests.splitlines() if line.strip())
    for block in copied:
        snippet = "\n".join(block)
        assert snippet in flat, f"this snippet of the seed page is not in seed_snippets.rs:\n{snippet}"
    if SEED_PAGE.exists():
        assert _rust_blocks(SEED_PAGE.read_text("utf-8")) == copied, (
            f"the seed page's Rust snippets changed: copy them again into {SNIPPETS}"
        )


def test_the_page_reader_and_the_copy_reader_agree() -> None:
    """Without the page: the copy laid out as the page is (prose between snippets) reads back
    as the same snippets through the page's reader, and a changed line is told apart."""
    copy = SNIPPETS.read_text("utf-8")
    as_page = "\n".join(f"The section {line[4:]}.\n\nSome prose about it." if line.startswith("=== ") else line
                        for line in copy.splitlines() if not line.startswith("#"))
    assert _rust_blocks(as_page) == _copied_blocks(copy)
    changed = as_page.replace("Priority::P7", "Priority::P6")
    assert changed != as_page
    assert _rust_blocks(changed) != _copied_blocks(copy)
