"""The producer clients: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).

Both have the same methods (``enqueue``, ``enqueue_batch``, ``enqueue_atomic``,
``get_server_info``, ``refresh_server_info``, ``validate``, ``close``) and share their
transport-free logic in :mod:`sepp.client._core`.

The names are loaded on first access (as ``sepp``'s own), so importing a submodule such as
``sepp.client.tls`` — the ``Worker`` does — does not load the clients, their validation and
pydantic models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sepp import _lazy

if TYPE_CHECKING:
    from sepp.client.aio import AsyncClient
    from sepp.client.options import ClientOptions, RetryPolicy
    from sepp.client.sync import Client

#: Public name → the module that defines it.
_EXPORTS = {"AsyncClient": "sepp.client.aio", "Client": "sepp.client.sync", "ClientOptions": "sepp.client.options",
            "RetryPolicy": "sepp.client.options"}

__all__ = ["AsyncClient", "Client", "ClientOptions", "RetryPolicy"]


#: The submodules ``import sepp.client`` bound as attributes when it imported the clients
#: eagerly (``sepp.client.sync.Client`` after ``import sepp.client``): imported on first access.
_SUBMODULES = frozenset({"aio", "auth", "options", "sync", "tls"})


def __getattr__(name: str) -> Any:
    """A public name (``_EXPORTS``) or one of ``_SUBMODULES``, imported on first access;
    AttributeError for anything else."""
    return _lazy.load(globals(), name, _EXPORTS, _SUBMODULES)


def __dir__() -> list[str]:
    return _lazy.names(globals())
