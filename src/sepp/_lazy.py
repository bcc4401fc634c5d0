"""Package names loaded on first access (PEP 562): the one body of the ``__getattr__`` and
``__dir__`` of ``sepp`` and ``sepp.client``, so that importing either package — or any of
its submodules, as the server and the ``Worker`` do — loads none of the modules behind its
public names until one is used. Imports nothing but ``importlib``: keep it so
(``tests/unit/test_imports.py``)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Set
from typing import Any


def load(namespace: dict[str, Any], name: str, exports: Mapping[str, str], submodules: Set[str] = frozenset()
         ) -> Any:
    """The package attribute ``name``, for the package's ``__getattr__`` (``namespace`` is
    the package's ``globals()``): a public name of ``exports`` (name → the module that
    defines it) is imported and kept in ``namespace``, so later accesses do not come back
    here; one of ``submodules`` is imported (which binds it in the package); anything else
    raises ``AttributeError``."""
    package = namespace["__name__"]
    module = exports.get(name)
    if module is None:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value


def names(namespace: dict[str, Any]) -> list[str]:
    """The package's ``__dir__``: what ``namespace`` (its ``globals()``) holds, and its
    ``__all__`` (the public names not loaded yet), sorted."""
    return sorted({*namespace, *namespace["__all__"]})
