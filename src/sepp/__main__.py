"""``python -m sepp`` runs the CLI."""

from __future__ import annotations

from sepp.cli.main import main

main()
