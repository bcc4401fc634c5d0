"""The producer clients: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).

Both have the same methods (``enqueue``, ``enqueue_batch``, ``enqueue_atomic``,
``get_server_info``, ``refresh_server_info``, ``validate``, ``close``) and share their
transport-free logic in :mod:`sepp.client._core`.
"""

from __future__ import annotations

from sepp.client.aio import AsyncClient
from sepp.client.options import ClientOptions, RetryPolicy
from sepp.client.sync import Client

__all__ = ["AsyncClient", "Client", "ClientOptions", "RetryPolicy"]
