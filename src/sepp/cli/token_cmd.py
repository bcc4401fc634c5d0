"""``sepp token new NAME --role produce [--role work …]``: make a token.

Prints a fresh random secret once (32 random bytes, URL-safe base64: ``secrets.token_urlsafe``)
and the ``[[auth.tokens]]`` TOML entry to paste into the server's config, which holds only the
secret's SHA-256. ``--json`` prints ``{"name", "secret", "sha256", "roles", "toml"}`` instead.
A bad name or role is one line on stderr and exit 2. Nothing is stored anywhere: the secret
cannot be shown again, only replaced by a new token.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sepp.cli.main import app
from sepp.cli.shell import EXIT_USAGE, JsonOpt, fail, out_console, print_json
from sepp.server.auth import ROLES, check_name, check_roles, digest, new_secret, toml_entry

token_app = typer.Typer(name="token", help="Make tokens for \\[\\[auth.tokens]] (docs/operations.md).",
                        no_args_is_help=True)
app.add_typer(token_app)


@token_app.command("new")
def token_new(
    name: Annotated[str, typer.Argument(help="The token's name (letters, digits, . _ -; shown in logs and errors).")],
    role: Annotated[list[str] | None, typer.Option(
        "--role", "-r", help=f"A role of the token, repeatable: {', '.join(ROLES)}.", show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a new random secret (once) and the \\[\\[auth.tokens]] entry to paste into the config."""
    try:
        check_name(name)
    except ValueError as exc:
        fail(f"token name {name[:80]!r}: {exc}", as_json, EXIT_USAGE, {"error": str(exc), "field": "name"})
    try:
        roles = check_roles(role or [])
    except ValueError as exc:
        problem = str(exc) if role else f"--role {exc}"
        fail(problem, as_json, EXIT_USAGE, {"error": problem, "field": "role"})
    secret = new_secret()
    sha = digest(secret)
    entry = toml_entry(name, sha, roles)
    if as_json:
        print_json({"name": name, "secret": secret, "sha256": sha, "roles": list(roles), "toml": entry})
        return
    out = out_console()
    out.print(f"secret (shown once; give it to the client as --token, SEPP_TOKEN or token=):\n{secret}\n",
              markup=False)
    out.print("add to the server's config (TOML):\n", markup=False)
    out.print(entry, markup=False, end="")
