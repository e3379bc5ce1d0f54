"""The one place that touches private JAX / NumPyro APIs, each with the reason and the versions checked
(jax 0.10.2, numpyro 0.22.0). Everything else in the project uses public APIs only."""
from __future__ import annotations

from numpyro.contrib.einstein import SteinVI

__all__ = ["backends_initialised", "set_host_device_count", "SteinVIWithDivergence", "subsample_indices"]


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


if not callable(getattr(SteinVI, "_kernel_grad", None)):  # pragma: no cover - guards a numpyro upgrade
    raise ImportError("numpyro's SteinVI no longer has the private _kernel_grad that "
                      "ppl_sparsegp.compat.SteinVIWithDivergence overrides: update it for this numpyro version")


class SteinVIWithDivergence(SteinVI):
    r""":class:`numpyro.contrib.einstein.SteinVI` with a hook for the kernel divergence of its repulsive term.

    SteinVI computes :math:`\sum_b\partial K_{ab}(\mathbf x, \mathbf y)/\partial x_b` of a particle
    kernel in the private method ``SteinVI._kernel_grad(kernel, x, y)`` (for a matrix-valued kernel one
    gradient per matrix entry) and offers no public way to replace it. This class overrides that one
    method and routes it through :meth:`kernel_divergence`: a subclass returns the divergence (a flat
    array of the particle's size) or ``None`` for SteinVI's own computation. Everything else (the Stein
    loss, initialisation, temperatures, the optimiser) is SteinVI's. Checked with numpyro 0.22.0, where
    ``_kernel_grad`` is called once per particle pair by ``SteinVI._svgd_loss_and_grads``; importing
    this module fails if the method disappears (the override would otherwise be skipped silently).
    """

    def kernel_divergence(self, kernel, x, y):
        """The divergence of ``kernel(x, y)`` with respect to x, or ``None`` for SteinVI's generic one."""
        return None

    def _kernel_grad(self, kernel, x, y):
        out = self.kernel_divergence(kernel, x, y)
        return super()._kernel_grad(kernel, x, y) if out is None else out


def subsample_indices(size: int, subsample_size: int, rng_key):
    """The indices ``numpyro.plate(..., subsample_size=...)`` draws for one step (the benchmarks time
    this alone, as the part of an SVI step no model changes). NumPyro draws them in the private
    ``numpyro.primitives._subsample_fn``; calling it keeps the timing identical to the plate's."""
    from numpyro.primitives import _subsample_fn

    return _subsample_fn(size, subsample_size, rng_key)
