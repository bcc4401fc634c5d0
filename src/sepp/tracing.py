"""The gate of sepp's optional OpenTelemetry tracing.

``opentelemetry-api`` is an optional extra (``pip install sepp[otel]``). This module never
imports it: :func:`tracer` answers ``None`` — record nothing, change nothing — unless a
tracer provider was given explicitly, or the application itself imported
``opentelemetry.trace`` and set a global tracer provider. Only then is
:mod:`sepp._otel` (which imports the API) loaded. Without OpenTelemetry installed, or
installed but never set up, an enqueue or a job run costs one dictionary lookup more and
``opentelemetry`` is never imported by sepp (tests/integration/test_tracing.py checks both).

What is recorded when tracing is on (spans, names, attributes, parent or link) is described
in :mod:`sepp._otel` and docs/operations.md "Tracing".
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sepp._otel import SeppTracer

#: Tracers already made, by ``id`` of their provider (the provider is kept alive with it).
_TRACERS: dict[int, tuple[Any, SeppTracer]] = {}


def tracer(provider: Any | None = None) -> SeppTracer | None:
    """The :class:`sepp._otel.SeppTracer` sepp records with, or ``None`` for no tracing.

    ``provider`` is a ``TracerProvider`` given to a ``Client``/``AsyncClient``/``Worker``
    (``tracer_provider=``); ``None`` means the global one, used only when the application
    imported ``opentelemetry.trace`` and set a provider (the API's default proxy, or a
    ``NoOpTracerProvider``, count as none). Cheap enough to call once per enqueue call and
    once per job; never raises.
    """
    if provider is None:
        api = sys.modules.get("opentelemetry.trace")
        if api is None:
            return None
        try:
            provider = api.get_tracer_provider()
        except Exception:
            return None
        if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
            return None
    found = _TRACERS.get(id(provider))
    if found is not None and found[0] is provider:
        return found[1]
    from sepp import _otel

    made = _otel.make_tracer(provider)
    if len(_TRACERS) >= 64:  # providers made and dropped again and again (tests)
        _TRACERS.clear()
    _TRACERS[id(provider)] = (provider, made)
    return made


__all__ = ["tracer"]
