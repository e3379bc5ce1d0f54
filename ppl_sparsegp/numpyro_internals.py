"""The one place that touches private JAX / NumPyro APIs, each with the reason and the versions checked
(jax 0.10.2, numpyro 0.22.0). Everything else in the project uses public APIs only."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Optional

import jax
from numpyro.contrib.einstein import SteinVI
from numpyro.contrib.einstein.stein_kernels import SteinKernel
from numpyro.infer import MCMC
from numpyro.optim import _NumPyroOptim

__all__ = ["NumPyroOptim", "SteinVIWithDivergence", "backends_initialised", "handler_stack", "inside_model_run",
           "mcmc_run_arguments", "set_host_device_count", "subsample_indices"]

#: NumPyro's optimiser base class (private name): what ``SVI`` accepts as an optimiser object; a subclass
#: may override ``eval_and_update`` (``ppl_sparsegp.optim.NaturalGradient`` does).
NumPyroOptim = _NumPyroOptim


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
                      "ppl_sparsegp.numpyro_internals.SteinVIWithDivergence overrides: update it for this numpyro "
                      "version")

#: SteinVI's own default of ``non_mixture_guide_params_fn`` (every guide param is a particle), reused so that
#: the typed constructor below passes on exactly what SteinVI would have had
_EVERY_PARAM_A_PARTICLE = inspect.signature(SteinVI.__init__).parameters["non_mixture_guide_params_fn"].default


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

    The constructor is SteinVI's, passed on unchanged (see :class:`numpyro.contrib.einstein.SteinVI` for the
    full description; this class only declares the types); it adds no parameter. In short:

    :param model: the NumPyro model (a callable with NumPyro primitives).
    :param guide: its guide; the Stein particles are the guide's params (a point-mass guide gives SVGD).
    :param optim: a NumPyro optimiser (from ``numpyro.optim``; SteinVI recommends Adagrad).
    :param kernel_fn: the particle kernel, a ``numpyro.contrib.einstein.SteinKernel``.
    :param num_stein_particles: the number of particles (mixture components); SteinVI's default 10.
    :param num_elbo_particles: Monte Carlo draws for the attractive force's gradient; SteinVI's default 10.
    :param loss_temperature: the factor of the attractive force; SteinVI's default 1.
    :param repulsion_temperature: the factor of the repulsive force; SteinVI's default 1.
    :param non_mixture_guide_params_fn: a predicate on guide param names: the params for which it is true
        are not particles but shared by all of them (one value); SteinVI's default: none.
    :param static_kwargs: keyword arguments of the model and the guide fixed for the whole run.
    """

    def __init__(self, model: Callable[..., Any], guide: Callable[..., Any], optim: _NumPyroOptim,
                 kernel_fn: SteinKernel, num_stein_particles: int = 10, num_elbo_particles: int = 10,
                 loss_temperature: float = 1.0, repulsion_temperature: float = 1.0,
                 non_mixture_guide_params_fn: Callable[[str], bool] = _EVERY_PARAM_A_PARTICLE,
                 **static_kwargs: Any) -> None:
        super().__init__(model, guide, optim, kernel_fn, num_stein_particles=num_stein_particles,
                         num_elbo_particles=num_elbo_particles, loss_temperature=loss_temperature,
                         repulsion_temperature=repulsion_temperature,
                         non_mixture_guide_params_fn=non_mixture_guide_params_fn, **static_kwargs)

    def kernel_divergence(self, kernel: Callable[[jax.Array, jax.Array], Any], x: jax.Array,
                          y: jax.Array) -> Optional[jax.Array]:
        """The divergence of ``kernel(x, y)`` with respect to x, or ``None`` for SteinVI's generic one.

        :param kernel: the particle kernel SteinVI built for this step (``kernel_fn.compute``'s): a function of
            two flattened particles, a scalar or a matrix-valued block.
        :param x: a particle, flattened (K,).
        :param y: another particle, flattened (K,).
        :returns: the divergence (K,), or None.
        """
        return None

    def _kernel_grad(self, kernel, x, y):
        out = self.kernel_divergence(kernel, x, y)
        return super()._kernel_grad(kernel, x, y) if out is None else out


def subsample_indices(size: int, subsample_size: int, rng_key: jax.Array) -> jax.Array:
    """The indices ``numpyro.plate(..., subsample_size=...)`` draws for one step (the benchmarks time
    this alone, as the part of an SVI step no model changes). NumPyro draws them in the private
    ``numpyro.primitives._subsample_fn``; calling it keeps the timing identical to the plate's.

    :param size: N, the plate's size (the indices are drawn from ``0 .. N - 1``).
    :param subsample_size: B, the number of indices drawn (without replacement), at most N.
    :param rng_key: a JAX PRNG key (the plate draws with the key of its ``numpyro.prng_key()``).
    :returns: an int array (B,) of distinct indices, in random order (a partial Fisher–Yates shuffle on
        the CPU, ``jax.random.choice`` without replacement on other backends).
    :raises ValueError: when ``rng_key`` is None (NumPyro's message: subsampling needs a random key).
    """
    from numpyro.primitives import _subsample_fn

    return _subsample_fn(size, subsample_size, rng_key)


def handler_stack() -> list:
    """NumPyro's handler stack, outermost first (the private ``numpyro.primitives._PYRO_STACK``; NumPyro
    has no public accessor): what a primitive reads to find the ``numpyro.plate`` contexts around it.

    :returns: the live list of active handlers (read it, do not change it).
    """
    import numpyro.primitives

    return numpyro.primitives._PYRO_STACK


def inside_model_run() -> bool:
    """Whether a NumPyro model is running now (an inference engine or a handler such as ``seed`` is on
    the stack), so that a primitive may add sample sites. NumPyro keeps its handler stack in the private
    ``numpyro.primitives._PYRO_STACK`` (empty outside a model's run) and has no public query.

    :returns: True inside a model's run, False outside.
    """
    return bool(handler_stack())


def mcmc_run_arguments(mcmc: MCMC) -> tuple[tuple, dict]:
    """The positional and keyword arguments of the model of the last :meth:`numpyro.infer.MCMC.run`, which
    NumPyro keeps in the private attributes ``MCMC._args`` and ``MCMC._kwargs`` (no public accessor).

    :param mcmc: a :class:`numpyro.infer.MCMC` that has run.
    :returns: ``(args, kwargs)``: a tuple and a dict.
    :raises ValueError: for an MCMC that has not run (NumPyro sets the attributes in ``run``).
    """
    if not hasattr(mcmc, "_args"):
        raise ValueError("mcmc has not run: call mcmc.run(...) first")
    return mcmc._args, mcmc._kwargs
