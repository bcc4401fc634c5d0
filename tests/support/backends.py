"""The storage backends every backend-independent test runs against (issue 9 item 4;
issue 10 item 3 adds PostgreSQL here).

``BACKENDS`` names them; ``store_settings(backend)`` gives the config keys that select and
tune one (``storage`` and its table), to spread into a ``ServerConfig`` or the conformance
suite's small store config. The conformance suite (tests/storage/conftest.py) and the
engine-level tests (tests/engine/conftest.py) are parametrized over ``BACKENDS``: adding a
backend means one entry here and one branch in ``store_settings``.

* ``sqlite``: the embedded default, the writer in a thread (fast to start).
* ``sqlite-process``: the writer in its own process (what ``sepp serve`` runs in group
  mode): every operation and result crosses a process boundary, so one that does not pickle
  fails. ~0.5 s a store instead of 0.01 s, so it joins only with ``CONFORMANCE_ALL=1`` (not
  a ``SEPP_`` name: tests/conftest.py clears those).
"""

from __future__ import annotations

import os
from typing import Any

from sepp.storage.config import SQLiteSettings

#: Every backend the backend-independent tests run against.
BACKENDS = ["sqlite"] + (["sqlite-process"] if os.environ.get("CONFORMANCE_ALL") == "1" else [])


def store_settings(backend: str) -> dict[str, Any]:
    """The config keys selecting ``backend`` (``storage`` plus its settings table).
    Raises ``AssertionError`` for a name not in ``BACKENDS``' vocabulary."""
    if backend in ("sqlite", "sqlite-process"):
        return {"storage": "sqlite",
                "sqlite": SQLiteSettings(writer="process" if backend == "sqlite-process" else "thread")}
    raise AssertionError(f"unknown backend {backend!r}")
