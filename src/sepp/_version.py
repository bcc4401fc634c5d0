"""sepp's single version string (server info, user agent, package metadata)."""

from __future__ import annotations

__version__ = "0.1.0"
