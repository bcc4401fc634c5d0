"""The client side of tokens: ``token=`` of ``Client``, ``AsyncClient``, ``Worker``
and ``AdminClient``, and the ``SEPP_TOKEN`` environment variable they read when it is not given.

A token travels as the gRPC metadata ``authorization: Bearer <secret>`` on every call. The
secret is kept out of ``repr`` and of ``ClientOptions`` (so printing the options never shows it).
"""

from __future__ import annotations

import os

#: The environment variable a client reads when ``token`` is not given.
TOKEN_ENV = "SEPP_TOKEN"


def resolve_token(token: str | None) -> str | None:
    """The token a client sends: ``token`` when given (``""`` = explicitly none), else
    ``$SEPP_TOKEN`` (unset or empty = none).

    Raises ``ValueError`` for a token that cannot travel in gRPC metadata (it must be
    printable ASCII without spaces: what ``sepp token new`` makes always is)."""
    value = os.environ.get(TOKEN_ENV, "") if token is None else token
    value = value.strip()
    if not value:
        return None
    if not value.isascii() or not value.isprintable() or " " in value:
        source = f"${TOKEN_ENV}" if token is None else "token="
        raise ValueError(f"{source} must be printable ASCII without spaces (as made by sepp token new)")
    return value


def token_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata of ``resolve_token(token)``: one ``authorization`` entry, or none."""
    secret = resolve_token(token)
    return (("authorization", f"Bearer {secret}"),) if secret else ()


__all__ = ["TOKEN_ENV", "resolve_token", "token_metadata"]
