"""``sepp.client`` loads its names lazily (``__getattr__``): what ``import sepp.client``
gave before must still be there — the submodules it used to import (``sepp.client.sync``,
``.aio``, ``.options``, ``.auth``, ``.tls``) as attributes, and the public names in
``dir()`` (as ``sepp``'s own ``__dir__``). Each check runs in a fresh interpreter: in this
one the submodules may already be imported, which binds them."""

from __future__ import annotations

import subprocess
import sys

import pytest


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
