"""Tokens for the auth tests: the secrets and roles a locked test server knows,
and the ``auth`` table of its config."""

from __future__ import annotations

from typing import Any

from sepp.server.auth import digest

#: name → (secret, roles) of the tokens a locked test server knows.
TOKENS: dict[str, tuple[str, list[str]]] = {
    "producer": ("s3cret-produce", ["produce"]),
    "worker": ("s3cret-work", ["work"]),
    "admin": ("s3cret-admin", ["admin"]),
    "ops": ("s3cret-ops", ["produce", "work", "admin"]),
}


def auth_config(tokens: dict[str, tuple[str, list[str]]] = TOKENS) -> dict[str, Any]:
    """The ``auth`` table of a server config with ``tokens`` (their SHA-256, never the secret)."""
    return {"auth": {"tokens": [{"name": n, "sha256": digest(s), "roles": r} for n, (s, r) in tokens.items()]}}
