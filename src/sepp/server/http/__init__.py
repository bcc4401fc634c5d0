"""The HTTP side of ``sepp serve``: /healthz, /metrics and the admin web UI."""
