"""The one place that touches private JAX / NumPyro APIs, each with the reason and the versions checked
(jax 0.10.2, numpyro 0.22.0). Everything else in the project uses public APIs only."""
from __future__ import annotations

__all__ = ["backends_initialised", "set_host_device_count"]


def backends_initialised() -> bool:
    """Whether JAX has started its backends (after which the host device count is fixed).
    JAX has no public query for this; ``jax._src.xla_bridge.backends_are_initialized`` answers it."""
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def set_host_device_count(n: int) -> bool:
    """``numpyro.set_host_device_count(n)`` when JAX has not started yet (so parallel chains get one
    host device each); returns whether it was applied."""
    import numpyro

    if backends_initialised():
        return False
    numpyro.set_host_device_count(max(1, int(n)))
    return True
