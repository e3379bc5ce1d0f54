r"""Stein particle inference on NumPyro's SteinVI: the frequency particle kernel, the frequency SteinVI,
plain SVGD, Stein random features (SRF) and M-SRFR. No timing and no plotting (callers time; the
ArviZ conversion and the plots are :func:`~ppl_sparsegp.diagnostics.stein_inference_data`,
:func:`~ppl_sparsegp.diagnostics.stein_diagnostics` and
:func:`~ppl_sparsegp.diagnostics.plot_spectral_density`).

**Stein particles** run through :class:`numpyro.contrib.einstein.SteinVI` with a point-mass particle
guide, which turns Stein mixture inference into SVGD [3]:

.. math::

    \boldsymbol\theta_m \leftarrow \boldsymbol\theta_m + \frac{\epsilon}{M}\sum_{j=1}^M\Big[K(\boldsymbol
    \theta_j, \boldsymbol\theta_m)\,\nabla\log p(\boldsymbol\theta_j\mid\mathcal D)
    + \alpha\,\nabla_{\boldsymbol\theta_j}\!\cdot K(\boldsymbol\theta_j, \boldsymbol\theta_m)\Big]
    \qquad\text{[1, eq. (26)]}.

* Stein random features (SRF, [1, §5.1]): each particle is one frequency, the target the kernel's
  log spectral density (:func:`stein_frequencies`); K is the scalar RBF kernel of
  :class:`FrequencyRBFKernel`. This is plain SVGD over point particles with a known target, run by
  :func:`svgd` (below: why not SteinVI).
* M-SRFR [1, §4.2–4.4] (:func:`fit_msrfr`): each particle is a whole matrix :math:`\Omega_m` (one
  :class:`~ppl_sparsegp.approximations.spectrum.SparseSpectrumGP`), the target
  :math:`\log p(\mathbf y\mid\Omega_m) + \log p(\Omega_m)`; K is the matrix-valued kernel
  :math:`K(\Omega, \Omega')_{(k,a),(l,b)} = \kappa(\boldsymbol\omega_k, \boldsymbol\omega'_l)\,\delta_{ab}`
  [1, eqs. (28), (66), (67)], which makes the update exactly plain SVGD on the pooled MR frequencies
  [2, §1.6]. Lengthscales (and any other hyperparameter) are shared by all particles: SteinVI's
  non-mixture parameters, optimised on the same objective. α is SteinVI's ``repulsion_temperature``.

In both, :math:`\kappa(\mathbf a, \mathbf b) = \exp(-\sum_k (a_k - b_k)^2 / (2h_k))` with the
per-dimension bandwidth :math:`h_k` = ``bandwidth_scale`` × the median over all pairs (self-pairs
included) of the pooled frequencies of :math:`(a_k - b_k)^2` [2, §1.3], the driving term can be
annealed cyclically, :math:`\gamma(t) = (\operatorname{mod}(t, T/c)/(T/c))^{s}` (SteinVI's
``loss_temperature`` set per step), and the step is Adam with decoupled weight decay
(:class:`~ppl_sparsegp.optim.AdamW`, the authors' optimiser, in :mod:`ppl_sparsegp.optim`).

Why a subclass of SteinVI (:class:`FrequencySteinVI`): SteinVI supports matrix-valued kernels, but its
generic divergence :math:`\sum_b\partial K_{ab}/\partial x_b` takes one gradient per matrix entry,
:math:`O((RD)^3)` per particle pair: infeasible for R·D ≈ 1000. The subclass only replaces that
computation for the structured kernel (closed form, :math:`O(R^2D)`), through the hook of
:class:`~ppl_sparsegp.numpyro_internals.SteinVIWithDivergence` (SteinVI has no public one; the compatibility module
holds the private override); initialisation, the Stein loss, the non-mixture parameters, temperatures
and the optimiser are SteinVI's own. With the stock class the same kernel gives the same update
(tested), only slowly.

Why :func:`svgd` for a known target: plain SVGD over point particles is SteinVI with a point-mass guide
and a scalar kernel (:func:`fit_stein` runs it so), but SteinVI computes the attractive force by a
*sequential* scan over the P particles inside a loop over the P particles, each term a call of the
scalar kernel: P scan iterations of O(P) work per step (R = 1000 frequencies, 2000 steps: about an hour
on a CPU). :func:`svgd` takes the same step (tested to rounding against SteinVI's) as two dense
products with the closed-form Gram matrix and divergence of ``FrequencyBlockMatrix``, one
function, so there is one implementation of each formula.

References:
    1. Warren, Oliveira, Ramos (2024), Stein random feature regression, UAI.
    2. Implementer's notes ``shared/notes/srf.md`` (bandwidth, annealing, code-only details), kept
       beside the repository (not shipped with it).
    3. Liu, Wang (2016), Stein variational gradient descent; Rønning et al. (2024), ELBOing Stein
       (numpyro.contrib.einstein).
    4. Loshchilov, Hutter (2019), Decoupled weight decay regularization (AdamW).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from numpyro.contrib.einstein.stein_kernels import SteinKernel

from .approximations.spectrum import SparseSpectrumGP
from .features.random_fourier import SpectralDensity, sample_frequencies
from .kernels import check_inputs
from .numpyro_internals import SteinVIWithDivergence
from .optim import AdamW, cyclical_annealing
from .validation import (
    ArrayOf,
    Count,
    InstanceOf,
    Integer,
    IsCallable,
    Key,
    NonNegative,
    OneOf,
    OrNone,
    Positive,
    validated,
)

# FrequencyBlockMatrix is not listed: the particle kernel builds it, under tracing, inside every step (it is
# no user's entry point; the tests import it by name)
__all__ = ["FrequencyRBFKernel", "FrequencySteinVI", "pairwise_median_sq", "AdamW",
           "cyclical_annealing", "SteinResult", "fit_stein", "fit_msrfr", "svgd", "stein_frequencies"]

#: the options the Stein runs share, declared once (checked at the public entry, never inside the steps)
_OPTIM = Annotated[Any, OrNone(InstanceOf("numpyro.optim._NumPyroOptim",
                                          what="a NumPyro optimiser (e.g. numpyro.optim.Adam(0.01))"))]
_KEY = Annotated[Any, Key(allow_int=False)]
_MAYBE_POSITIVE = Annotated[Any, OrNone(Positive.__metadata__[0])]
_STATIONARY = InstanceOf("ppl_sparsegp.kernels.stationary.Stationary", type,
                         what="a stationary kernel (e.g. SquaredExponential(1.0, 1.0)) or its class")


# --------------------------------------------------------------------------------------------------
# the particle kernel
# --------------------------------------------------------------------------------------------------
def _kth_abs_difference(a, ks, num_iterations=64):
    """The ks-th smallest (0-based) of |a_i − a_j| over all ordered pairs, by bisection on counts."""
    a = jnp.sort(a)

    def count(t):  # #{(i, j): |a_i − a_j| <= t}
        return jnp.sum(jnp.searchsorted(a, a + t, side="right") - jnp.searchsorted(a, a - t, side="left"))

    def one(k):
        def body(_, lohi):
            lo, hi = lohi
            mid = 0.5 * (lo + hi)
            ok = count(mid) >= k + 1
            return jnp.where(ok, lo, mid), jnp.where(ok, mid, hi)

        lo, hi = lax.fori_loop(0, num_iterations, body, (jnp.zeros((), a.dtype), a[-1] - a[0]))
        return hi

    return jax.vmap(one)(ks)


@validated
def pairwise_median_sq(points: Annotated[Any, ArrayOf(rank=2)]) -> jax.Array:
    r"""Per-dimension median of :math:`(a_k - b_k)^2` over all ordered pairs of rows (self-pairs
    included), equal to ``jnp.median((P[:, None] - P[None]) ** 2, axis=(0, 1))`` but in
    :math:`O(n\log n)` memory and time per bisection step instead of sorting n² values.

    The two middle order statistics of the :math:`n^2` absolute differences are found by 64 bisection
    steps on pair counts; the median is the mean of their squares (as ``jnp.median`` for an even count).
    It is the bandwidth heuristic of :class:`FrequencyRBFKernel` [2, §1.3].

    :param points: P, an array (n, D) of n points (e.g. the pooled frequencies).
    :returns: an array (D,), the median for each dimension.
    """
    return _pairwise_median_sq(jnp.asarray(points))


def _pairwise_median_sq(points):
    """:func:`pairwise_median_sq` without the argument check (called inside every SVGD/SteinVI step)."""
    n = points.shape[0]
    ks = jnp.array([(n * n - 1) // 2, n * n // 2])
    t = jax.vmap(lambda col: _kth_abs_difference(col, ks))(points.T)  # (D, 2) order statistics of |d|
    return 0.5 * jnp.sum(t ** 2, axis=1)


class FrequencyBlockMatrix:
    r"""The matrix-valued particle kernel :math:`K(\mathbf x, \mathbf y)` between two flattened
    frequency matrices X, Y (R × D): :math:`K_{(k,a),(l,b)} = \kappa(\mathbf y_k, \mathbf x_l)\delta_{ab}`
    [1, eq. (66)], held as the R × R matrix :math:`[\kappa(\mathbf y_k, \mathbf x_l)]`.

    ``K @ v`` (v the flattened R × D score of x) is row k: :math:`\sum_l\kappa(\mathbf y_k, \mathbf x_l)
    \mathbf v_l`; :meth:`divergence` is :math:`\sum_b\partial K_{(k,a),b}/\partial x_b =
    \sum_l\partial\kappa(\mathbf y_k,\mathbf x_l)/\partial x_{la}` [1, eq. (67)]. Indexing densifies
    (the stock SteinVI path; tests only). With ``bandwidth`` h (the RBF base of
    :class:`FrequencyRBFKernel`) the block and the divergence are computed in closed form, by matrix
    products, instead of by R² calls of ``base`` and of its gradient.

    :param base: the scalar kernel :math:`\kappa(\mathbf a, \mathbf b)` of two frequencies (D,); only
        called when ``bandwidth`` is None (may be None otherwise).
    :param x: the particle x, a flattened frequency matrix (R·D,) (reshaped to (R, D)).
    :param y: the particle y, likewise (R·D,).
    :param input_dim: D, the dimension of one frequency (x and y are reshaped to (-1, D)).
    :param bandwidth: h (D,), the per-dimension bandwidth of the RBF base
        :math:`\exp(-\sum_k(a_k-b_k)^2/(2h_k))`, for the closed form; None: call ``base``.
    """

    def __init__(self, base, x, y, input_dim, bandwidth=None):
        self.base, self.D, self.h = base, input_dim, bandwidth
        self.X, self.Y = x.reshape(-1, input_dim), y.reshape(-1, input_dim)

    @property
    def block(self):
        if self.h is not None:  # the RBF base in closed form: one (R, R) Gram matrix product
            Ys, Xs = self.Y / jnp.sqrt(self.h), self.X / jnp.sqrt(self.h)
            sq = jnp.sum(Ys ** 2, 1)[:, None] + jnp.sum(Xs ** 2, 1)[None, :] - 2.0 * Ys @ Xs.T
            return jnp.exp(-0.5 * jnp.maximum(sq, 0.0))
        return jax.vmap(lambda yk: jax.vmap(lambda xl: self.base(yk, xl))(self.X))(self.Y)  # (R, R)

    def __matmul__(self, v):
        return (self.block @ v.reshape(-1, self.D)).reshape(-1)  # Eq. (66) [1]

    def divergence(self):
        """The divergence :math:`\\sum_b\\partial K_{(k,a),b}/\\partial x_b`, flattened (R·D,) [1, eq. (67)]."""
        if self.h is not None:  # ∂κ(y_k, x_l)/∂x_l = κ_kl (y_k − x_l)/h
            K = self.block
            return ((jnp.sum(K, 1)[:, None] * self.Y - K @ self.X) / self.h).reshape(-1)  # Eq. (67) [1]
        grad_x = jax.grad(self.base, argnums=1)
        row = lambda yk: jnp.sum(jax.vmap(lambda xl: grad_x(yk, xl))(self.X), 0)  # noqa: E731
        return jax.vmap(row)(self.Y).reshape(-1)  # Eq. (67) [1]

    def to_dense(self):
        return jnp.kron(self.block, jnp.eye(self.D, dtype=self.X.dtype))

    def __getitem__(self, index):
        return self.to_dense()[index]


class FrequencyRBFKernel(SteinKernel):
    r"""The SVGD kernel of [1] on frequency particles: :math:`\kappa(\mathbf a,\mathbf b) =
    \exp(-\sum_k (a_k-b_k)^2/(2h_k))`, :math:`h_k` = ``bandwidth_scale`` × median over all pairs of the
    pooled frequencies of :math:`(a_k-b_k)^2` [2, §1.3] (no 1/log n factor).

    A particle is R frequencies of dimension ``input_dim`` flattened (R·D values). For R = 1 the kernel
    is scalar (``mode="norm"``: plain SVGD, e.g. SRF for a known kernel); for R > 1 it is the
    matrix-valued ``FrequencyBlockMatrix`` (``mode="matrix"``, M-SRFR).

    :param input_dim: D, the dimension of one frequency.
    :param bandwidth_scale: the factor ``ls`` (default 1).
    """

    @validated
    def __init__(self, input_dim: Count, bandwidth_scale: Positive = 1.0):
        if isinstance(input_dim, bool) or not isinstance(input_dim, (int, np.integer)) or input_dim < 1:
            raise ValueError(f"input_dim must be a positive int, got {input_dim!r}")
        if not bandwidth_scale > 0:
            raise ValueError(f"bandwidth_scale must be positive, got {bandwidth_scale!r}")
        self.input_dim, self.bandwidth_scale = int(input_dim), float(bandwidth_scale)
        self.rows = None

    def init(self, rng_key: jax.Array, particles_shape: tuple[int, ...]) -> None:
        """SteinKernel's protocol: read R = particles_shape[-1] / D, the frequencies per particle.

        :raises ValueError: when a particle's size is not a multiple of ``input_dim``."""
        size = particles_shape[-1]
        if size % self.input_dim:
            raise ValueError(f"a particle has {size} values, not a multiple of input_dim={self.input_dim}; "
                             "the Stein particles must be the frequencies only (mark other guide params "
                             "as non-mixture)")
        self.rows = size // self.input_dim

    @property
    def mode(self):
        return "norm" if self.rows in (None, 1) else "matrix"

    def _bandwidth(self, particles):
        """h (D,) from all particles (P, R·D), pooled to (P·R, D)."""
        pooled = particles.reshape(-1, self.input_dim)
        h = self.bandwidth_scale * _pairwise_median_sq(pooled)
        return lax.stop_gradient(jnp.maximum(h, jnp.finfo(pooled.dtype).tiny))

    def compute(self, rng_key: jax.Array, particles: jax.Array, particle_info: Mapping[str, tuple[int, int]],
                loss_fn: Callable[..., Any]) -> Callable[[jax.Array, jax.Array], Any]:
        """SteinKernel's protocol: the kernel of this step for the particles (P, R·D): the scalar RBF base
        (R = 1) or ``(x, y) -> FrequencyBlockMatrix`` (R > 1), with the bandwidth from the pooled
        frequencies (``particle_info`` and ``loss_fn`` are SteinVI's, unused)."""
        h = self._bandwidth(particles)

        def base(a, b):
            return jnp.exp(-0.5 * jnp.sum((a - b) ** 2 / h))

        if self.mode == "norm":
            return base
        return lambda x, y: FrequencyBlockMatrix(base, x, y, self.input_dim, h)


class FrequencySteinVI(SteinVIWithDivergence):
    """:class:`numpyro.contrib.einstein.SteinVI` with the closed-form divergence of
    ``FrequencyBlockMatrix`` (module docstring: why); every other kernel goes to SteinVI.

    Used by :func:`fit_stein` with a :class:`FrequencyRBFKernel`, :class:`AdamW`, and a point-mass guide.

    The constructor is SteinVI's (passed on unchanged by the typed one of
    :class:`~ppl_sparsegp.numpyro_internals.SteinVIWithDivergence`) and adds no parameter: its parameters (model, guide,
    optim, kernel_fn, num_stein_particles, num_elbo_particles, loss_temperature, repulsion_temperature,
    non_mixture_guide_params_fn, static_kwargs) are listed on
    :class:`~ppl_sparsegp.numpyro_internals.SteinVIWithDivergence` and :class:`numpyro.contrib.einstein.SteinVI`.
    """

    def kernel_divergence(self, kernel: Callable[[jax.Array, jax.Array], Any], x: jax.Array,
                          y: jax.Array) -> Optional[jax.Array]:
        """The closed-form divergence (K,) of a ``FrequencyBlockMatrix`` kernel at particles x, y (K,)
        (flattened frequencies), else None (SteinVI's own)."""
        K = kernel(x, y)
        return K.divergence() if isinstance(K, FrequencyBlockMatrix) else None


# --------------------------------------------------------------------------------------------------
# running SteinVI
# --------------------------------------------------------------------------------------------------
class SteinResult(NamedTuple):
    """``particles``: ``{site: (P, ...)}``; ``shared``: parameters common to all particles (constrained);
    ``params``: SteinVI's constrained params; ``losses``: Stein force norm per step; ``stein``/``state``:
    the SteinVI object and its final state. No wall-clock time: callers time the call (block on
    ``params`` first: JAX dispatches asynchronously)."""

    particles: dict
    shared: dict
    params: dict
    losses: Any
    stein: Any
    state: Any

    def values(self) -> dict[str, jax.Array]:
        """Per-particle site/param values with the shared ones broadcast (for ``predict_particles``)."""
        P = next(iter(self.particles.values())).shape[0]
        out = {k: jnp.broadcast_to(v, (P,) + jnp.shape(v)) for k, v in self.shared.items()}
        out.update(self.particles)
        return out


def _site_name(param):
    for suffix in ("_map", "_auto_loc"):
        if param.endswith(suffix):
            return param[: -len(suffix)]
    return param


@validated
def fit_stein(model: Callable[..., Any], guide: Callable[..., Any], rng_key: _KEY, *args, num_particles: Count,
              num_steps: Count, input_dim: Count,
              particle_param: Annotated[str, InstanceOf(str, what="a param name (a string)")], lr: Positive = 0.1,
              lr_shared: _MAYBE_POSITIVE = None, repulsion: NonNegative = 1.0, annealing_power: NonNegative = 0.0,
              num_cycles: Count = 5, weight_decay: NonNegative = 0.0, bandwidth_scale: Positive = 1.0,
              num_elbo_particles: Count = 1, optim: _OPTIM = None, **kwargs) -> SteinResult:
    r"""SVGD through SteinVI: point-mass particles at the guide param ``particle_param`` (every other
    param, a model-level ``numpyro.param``, is shared by the particles), :class:`FrequencyRBFKernel`,
    :class:`AdamW`, loss temperature :math:`\gamma(t)/P` and repulsion temperature α (module docstring),
    run by :class:`FrequencySteinVI` for ``num_steps`` steps in one compiled ``lax.scan``.

    :param model: a NumPyro model (callable).
    :param guide: its guide; it must emit ``particle_param`` as the loc of a Delta site (e.g.
        :meth:`SparseSpectrumGP.particle_guide`) and initialise it from its rng key.
    :param rng_key: a JAX PRNG key; it is split and the first half initialises SteinVI (the guide draws
        each particle's starting value from it).
    :param args: positional arguments of the model and the guide.
    :param kwargs: keyword arguments of the model and the guide (passed to every SteinVI step).
    :param num_particles: P, the number of particles (a positive int).
    :param num_steps: T, the number of SteinVI steps (a positive int); also the length of the annealing
        schedule.
    :param input_dim: D, the dimension of one frequency: a particle (``particle_param``, flattened) holds
        R·D values, R frequencies (R = 1: the scalar kernel, plain SVGD; R > 1: ``FrequencyBlockMatrix``).
    :param particle_param: the name of the guide's one param, whose values are the particles (e.g.
        ``"feature_frequencies_map"``).
    :param lr: the :class:`AdamW` step size of the particles.
    :param lr_shared: its step size of the shared params (default ``lr``).
    :param repulsion: α, SteinVI's ``repulsion_temperature``.
    :param annealing_power: s, the power of the cyclical annealing of the loss temperature γ(t)
        (:func:`cyclical_annealing`; default 0: γ = 1).
    :param num_cycles: c, the annealing's number of cycles over the run.
    :param weight_decay: λ of :class:`AdamW`.
    :param bandwidth_scale: multiplies the median-heuristic bandwidth of :class:`FrequencyRBFKernel`.
    :param num_elbo_particles: draws for the shared parameters' gradient (each picks a random particle).
    :param optim: a NumPyro optimiser replacing the default :class:`AdamW` (``lr``, ``lr_shared``,
        ``weight_decay`` are then unused).
    :returns: a :class:`SteinResult`: ``particles`` ``{site: (P, ...)}`` (the site's name is
        ``particle_param`` without its ``_map`` / ``_auto_loc`` suffix), the shared params, SteinVI's
        params, the Stein force norm per step, the SteinVI object and its final state.
    :raises ValueError: for a ``num_particles`` or ``num_steps`` that is not a positive int, a non-positive
        ``input_dim`` or ``bandwidth_scale``, a particle whose size is not a multiple of ``input_dim``, or a
        guide with a param other than ``particle_param``.
    """
    for name, v in (("num_particles", num_particles), ("num_steps", num_steps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    lr_shared = lr if lr_shared is None else lr_shared
    if optim is None:
        optim = AdamW(lambda name: lr if name == particle_param else lr_shared, weight_decay)
    stein = FrequencySteinVI(
        model, guide, optim,
        FrequencyRBFKernel(input_dim, bandwidth_scale), num_stein_particles=num_particles,
        num_elbo_particles=num_elbo_particles, loss_temperature=1.0 / num_particles,
        repulsion_temperature=repulsion, non_mixture_guide_params_fn=lambda name: name != particle_param)
    k_init, _ = jax.random.split(rng_key)
    state = jax.jit(stein.init)(k_init, *args, **kwargs)  # one program: eager tracing is slow
    if stein.guide_sites != {particle_param}:
        raise ValueError(f"the particle guide must have exactly one param, {particle_param!r} (shared "
                         f"parameters belong in the model); it has {sorted(stein.guide_sites)}")
    dtype = jnp.result_type(float)
    state = state._replace(loss_temperature=jnp.asarray(1.0 / num_particles, dtype),
                           repulsion_temperature=jnp.asarray(repulsion, dtype))

    @jax.jit
    def run(state, args, kwargs):
        def step(state, t):
            gamma = cyclical_annealing(t, num_steps, num_cycles, annealing_power)
            state = state._replace(loss_temperature=(gamma / num_particles).astype(dtype))
            return stein.update(state, *args, **kwargs)

        return lax.scan(step, state, jnp.arange(num_steps))

    state, losses = run(state, args, kwargs)
    params = stein.get_params(state)
    particles = {_site_name(particle_param): params[particle_param]}
    shared = {_site_name(k): v for k, v in params.items() if k != particle_param}
    return SteinResult(particles, shared, params, losses, stein, state)


@validated
def fit_msrfr(gp: Annotated[Any, InstanceOf(SparseSpectrumGP, what="a SparseSpectrumGP (frequencies with a prior)")],
              X: Annotated[Any, ArrayOf(rank=(1, 2))], y: Annotated[Any, ArrayOf(rank=1)], rng_key: _KEY, *,
              num_particles: Count, num_steps: Count = 1000, lr: Positive = 0.1, lr_shared: _MAYBE_POSITIVE = None,
              repulsion: NonNegative = 1.0, annealing_power: NonNegative = 0.0, num_cycles: Count = 5,
              weight_decay: NonNegative = 1e-4, likelihood_scale: Positive = 1.0, bandwidth_scale: Positive = 1.0,
              num_elbo_particles: Count = 1) -> SteinResult:
    r"""M-SRFR [1, §4.2–4.4]: M particles :math:`\Omega_m`, target :math:`\log p(\mathbf y\mid\Omega_m)
    + \log p(\Omega_m)`, hyperparameters shared, through SteinVI (:func:`fit_stein`).

    :param gp: a :class:`SparseSpectrumGP` with latent frequencies (a prior on Ω).
    :param X: training inputs (N, D); ``y``: targets (N,).
    :param rng_key: a JAX PRNG key.
    :param num_particles: M, the particles (frequency matrices Ω_m of shape (R, D)).
    :param num_steps: optimisation steps.
    :param annealing_power: the power of the cyclical annealing of the loss temperature γ(t) (0: γ = 1;
        :func:`cyclical_annealing`); ``num_cycles``: its cycles over the run.
    :param weight_decay: λ of :class:`AdamW`.
    :param bandwidth_scale: multiplies the median-heuristic bandwidth of :class:`FrequencyRBFKernel`.
    :param repulsion: α, the repulsion temperature (α = 1 with ``likelihood_scale=1`` is the Bayesian
        posterior).
    :param likelihood_scale: tempering of the likelihood; the authors' code uses 1/M [2, §1.6].
    :param lr: Adam step size of the particles (``lr_shared``: of the shared hyperparameters).
    :param num_elbo_particles: random particles per step for the shared parameters' gradient (default 1:
        an unbiased one-particle estimate of the mean over particles; each extra one costs an SSGP gradient).
    :returns: a :class:`SteinResult` (particles ``{site: (M, ...)}``, shared parameters, force norms).
    :raises ValueError: when the frequencies have no prior, or the hyperparameters are not shareable
        (priors on them: give numbers or Params).
    """
    if not isinstance(gp, SparseSpectrumGP) or not gp.latent_frequencies:
        raise ValueError("fit_msrfr needs a SparseSpectrumGP whose frequencies have a prior (a Distribution)")
    sampled = sorted(set(gp.hyperparameter_sites()) - {"feature_frequencies"})
    if sampled:
        raise ValueError(f"fit_msrfr shares hyperparameters between particles: give them as numbers or "
                         f"Params, not priors (sampled sites: {sampled})")
    X = gp.feature.check_inputs(check_inputs(X, "X"))
    y = jnp.asarray(y)
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"fit_msrfr: X has {X.shape[0]} rows but y has {y.shape[0]}; pass the targets of X")
    return fit_stein(gp.model, gp.particle_guide, rng_key, X, y, num_particles=num_particles, num_steps=num_steps,
                     input_dim=gp.feature.input_dim, particle_param="feature_frequencies_map", lr=lr,
                     lr_shared=lr_shared, repulsion=repulsion, annealing_power=annealing_power,
                     num_cycles=num_cycles, weight_decay=weight_decay, bandwidth_scale=bandwidth_scale,
                     num_elbo_particles=num_elbo_particles,
                     likelihood_scale=likelihood_scale)


@validated
def svgd(log_density: Annotated[Any, IsCallable()], particles: Annotated[Any, ArrayOf(rank=2)], *, num_steps: Count,
         lr: Positive = 0.1, repulsion: NonNegative = 1.0, annealing_power: NonNegative = 0.0, num_cycles: Count = 5,
         weight_decay: NonNegative = 0.0, bandwidth_scale: Positive = 1.0,
         optim: _OPTIM = None) -> tuple[jax.Array, jax.Array]:
    r"""Plain SVGD for a target known up to a constant: the step SteinVI takes with a point-mass guide,
    :class:`FrequencyRBFKernel`, loss temperature :math:`\gamma(t)/P` and repulsion α (module
    docstring: why a separate function), vectorised:

    .. math::

        \phi(\mathbf x_i) = \frac1P\sum_j\big[\gamma(t)\,\kappa(\mathbf x_i, \mathbf x_j)\nabla\log p(\mathbf x_j)
        + \alpha\,\nabla_{\mathbf x_j}\kappa(\mathbf x_i, \mathbf x_j)\big],

    and the optimiser (default :class:`AdamW`) ascends φ.

    :param log_density: ``x (D,) -> log p(x)`` (unnormalised).
    :param particles: starting points (P, D).
    :param num_steps: optimisation steps; ``lr``: the step size; ``repulsion``: α.
    :param annealing_power: the power of the cyclical annealing of the loss temperature γ(t) (0: γ = 1;
        :func:`cyclical_annealing`); ``num_cycles``: its cycles over the run.
    :param weight_decay: λ of :class:`AdamW`.
    :param bandwidth_scale: multiplies the median-heuristic bandwidth of :class:`FrequencyRBFKernel`.
    :param optim: a NumPyro optimiser replacing the default :class:`AdamW`.
    :returns: ``(particles (P, D), force norm per step (num_steps,))``.
    """
    if isinstance(num_steps, bool) or not isinstance(num_steps, (int, np.integer)) or num_steps < 1:
        raise ValueError(f"num_steps must be a positive int, got {num_steps!r}")
    particles = jnp.asarray(particles, dtype=jnp.result_type(float))
    if particles.ndim != 2 or particles.shape[0] < 2:
        raise ValueError(f"particles must be (P, D) with P >= 2, got shape {particles.shape}")
    P, D = particles.shape
    kernel = FrequencyRBFKernel(D, bandwidth_scale)
    score = jax.vmap(jax.grad(log_density))
    optim = AdamW(lr, weight_decay) if optim is None else optim

    def force(x, gamma):
        K = FrequencyBlockMatrix(None, x, x, D, kernel._bandwidth(x))
        return (gamma * (K @ score(x)) + repulsion * K.divergence()).reshape(P, D) / P

    @jax.jit
    def run(x0):
        def step(state, t):
            phi = force(optim.get_params(state)["x"], cyclical_annealing(t, num_steps, num_cycles, annealing_power))
            return optim.update({"x": -phi}, state), jnp.linalg.norm(phi)

        state, norms = lax.scan(step, optim.init({"x": x0}), jnp.arange(num_steps))
        return optim.get_params(state)["x"], norms

    x, norms = run(particles)
    if not bool(jnp.all(jnp.isfinite(x))):
        raise FloatingPointError("SVGD diverged (non-finite particles); lower lr")
    return x, norms


@validated
def stein_frequencies(kernel: Annotated[Any, _STATIONARY], rng_key: _KEY, num_frequencies: Annotated[int, Integer(2)],
                      input_dim: Count, *, num_steps: Count = 2000, lr: Positive = 0.3,
                      annealing_power: NonNegative = 0.5, num_cycles: Count = 5,
                      bandwidth_scale: _MAYBE_POSITIVE = None, weight_decay: NonNegative = 1e-4,
                      init: Annotated[str, OneOf("mc", "qmc", "orf")] = "mc") -> jnp.ndarray:
    r"""Stein random features for a known kernel [1, §5.1]: R particles, each one frequency, moved by
    SVGD (:func:`svgd`) towards the kernel's normalised spectral density (only :math:`\nabla\log p` is
    used).

    Defaults follow the authors' notebook [2, §1.4] (MC initialisation, Adam 0.3 with weight decay
    1e-4, annealing c = 5, s = 0.5) except the number of steps (15 000 there) and the bandwidth: the
    default ``bandwidth_scale=None`` means D (h_k = D × the per-dimension median, about the median
    squared distance). With the notes' scale 1 the particle kernel between typical frequencies is
    :math:`e^{-O(D)}`, the repulsion vanishes for D ≳ 8 and the particles collapse towards the mode
    (R = 200, D = 8: particle variance 0.31 instead of 1, Gram error 0.53, worse than Monte Carlo;
    D = 16: 2.4); with scale D they reach the authors' published errors
    (``inference/benchmarks/srf_kernel_approx.py``, columns ``svgd`` and ``svgd_d``).

    :param kernel: a stationary kernel (``SquaredExponential`` or ``Matern*``, instance or class); only its
        family matters (the target is the unit-lengthscale spectral density,
        :class:`~ppl_sparsegp.features.random_fourier.SpectralDensity`).
    :param rng_key: a JAX PRNG key for the starting frequencies.
    :param num_frequencies: R, the number of particles (frequencies), an int >= 2.
    :param input_dim: D, the input dimension.
    :param num_steps: SVGD steps (default 2000).
    :param lr: the :class:`AdamW` step size (default 0.3).
    :param annealing_power: s of the cyclical annealing γ(t) (:func:`cyclical_annealing`; default 0.5).
    :param num_cycles: c, the annealing's number of cycles over the run (default 5).
    :param bandwidth_scale: multiplies the median-heuristic bandwidth of :class:`FrequencyRBFKernel`
        (default None: D, above).
    :param weight_decay: λ of :class:`AdamW` (default 1e-4).
    :param init: how the starting frequencies are drawn from the spectral density (see
        :func:`~ppl_sparsegp.features.random_fourier.sample_frequencies`): ``"mc"`` (default), ``"qmc"``
        (scrambled Halton) or ``"orf"`` (orthogonal random features).
    :returns: Ω (R, D), unit-lengthscale frequencies (divide by the lengthscale for a kernel's).
    :raises ValueError: for a ``num_frequencies`` that is not an int >= 2, a non-positive ``input_dim``, an
        unknown ``init``, or a kernel that is not stationary.
    :raises FloatingPointError: when SVGD diverges (non-finite particles; lower ``lr``).
    """
    if isinstance(num_frequencies, bool) or not isinstance(num_frequencies, (int, np.integer)) or num_frequencies < 2:
        raise ValueError(f"num_frequencies must be an int >= 2 (SVGD needs particles to repel), "
                         f"got {num_frequencies!r}")
    prior = SpectralDensity(kernel, 1, input_dim)
    W0 = sample_frequencies(prior.kernel, rng_key, num_frequencies, input_dim, init)
    W, _ = svgd(lambda w: prior.log_prob(w[None]), W0, num_steps=num_steps, lr=lr,
                annealing_power=annealing_power, num_cycles=num_cycles, weight_decay=weight_decay,
                bandwidth_scale=float(input_dim) if bandwidth_scale is None else bandwidth_scale)
    return W


