"""What importing a piece of sepp loads, and what it still gives (docs/decisions.md "A worker
imports no pydantic").

A worker process should start as soon as it can: on a 2-core machine its imports compete with
the other workers' and the server's work, and pydantic plus the producer's models were about a
third of ``import sepp.worker``. Each check runs in a fresh interpreter, so it sees exactly
what the import pulls in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def loaded_after(statement: str) -> set[str]:
    """The module names a fresh interpreter holds after running ``statement``."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return set(json.loads(out.stdout))


def test_the_worker_runtime_loads_no_pydantic_nor_producer_models() -> None:
    mods = loaded_after("import sepp.worker; from sepp.worker import Worker, Job")
    assert "sepp.worker.runtime" in mods
    heavy = {m for m in mods if m == "pydantic" or m.startswith("pydantic.")
             or m in ("sepp.limits", "sepp.request", "sepp.validation", "sepp.client._core")}
    assert heavy == set()


def test_client_names_still_load_from_the_package() -> None:
    mods = loaded_after("from sepp.client import AsyncClient, Client, ClientOptions, RetryPolicy\n"
                        "import sepp.client as c; assert c.Client is Client\n"
                        "from sepp.client._core import error_from_rpc, reconnect_options, USER_AGENT\n"
                        "from sepp.limits import MAX_SETTLE_BATCH, QueueLimits\n"
                        "from sepp import Client as C2; assert C2 is Client")
    assert {"sepp.client.sync", "sepp.client.aio", "pydantic"} <= mods


def test_an_unknown_client_name_is_an_attribute_error() -> None:
    import sepp.client

    try:
        sepp.client.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("sepp.client.NoSuchThing did not raise")


# ---------- what import sepp.client gave before
# ``sepp.client`` loads its names lazily (``__getattr__``): what ``import sepp.client`` gave
# before must still be there — the submodules it used to import (``sepp.client.sync``, ``.aio``,
# ``.options``, ``.auth``, ``.tls``) as attributes, and the public names in ``dir()`` (as
# ``sepp``'s own ``__dir__``). Each check runs in a fresh interpreter: in this one the submodules
# may already be imported, which binds them.

def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("name", ["sync", "aio", "options", "auth", "tls"])
def test_a_submodule_is_an_attribute_after_import_sepp_client(name: str) -> None:
    out = _run(f"import sepp.client, importlib\n"
               f"assert sepp.client.{name} is importlib.import_module('sepp.client.{name}')")
    assert out.returncode == 0, out.stderr


def test_dir_lists_the_public_names() -> None:
    out = _run("import sepp.client\n"
               "assert {'AsyncClient', 'Client', 'ClientOptions', 'RetryPolicy'} <= set(dir(sepp.client)), "
               "dir(sepp.client)")
    assert out.returncode == 0, out.stderr


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    out = _run("import sepp.client\n"
               "try:\n    sepp.client.nosuch\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit(1)")
    assert out.returncode == 0, out.stderr


def test_sepp_worker_loading_a_plain_worker_loads_no_tasks_and_no_pydantic(tmp_path: Path) -> None:
    (tmp_path / "plain_jobs.py").write_text("from sepp.worker import Worker\nworker = Worker(queues=['q'])\n")
    mods = loaded_after(f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
                        "from sepp.cli.worker_cmd import load_worker; load_worker('plain_jobs:worker')")
    assert "plain_jobs" in mods
    assert {m for m in mods if m == "pydantic" or m.startswith(("pydantic.", "sepp.tasks"))} == set()
