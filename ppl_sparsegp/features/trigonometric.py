r"""Trigonometric features: variational orthogonal features (VOF, :math:`K_{uu} = I`) for any stationary
kernel in 1-D, an orthonormal basis of :math:`L^2[-a, a]` [1, §3.1.2], with the Monte Carlo estimators of
[1, §3.3, App. E.1].

For an orthonormal set :math:`\{\psi_m\}` in :math:`L^2(\mathbb R)` the features
:math:`u_m = \int g_m(x) f(x)\,dx` with :math:`g_m \propto \mathcal F^{-1}[\psi_m/\sqrt{s}]` are
uncorrelated with unit variance [1, Prop. 1], so :math:`K_{uu}` is the :class:`~ppl_sparsegp.linalg.Identity`
operator and the KL against :math:`p(\mathbf u) = \mathcal N(0, I)` costs O(M) (diagonal S) or O(M²)
(Cholesky S) through :func:`~ppl_sparsegp.gaussian.gaussian_kl`. In the library's spectral convention
(:mod:`ppl_sparsegp.kernels`: :math:`k(r) = (2\pi)^{-1}\int s(\omega)e^{i\omega r}d\omega`) and for real
:math:`\psi_m` that are even or odd,

.. math::

    K_{uf}[m](x) = (2\pi)^{-1/2}\int \sqrt{s(\omega)}\,\psi_m(\omega)\,\mathrm{trig}_m(\omega x)\,d\omega,
    \qquad \mathrm{trig}_m = \cos \text{ (}\psi_m\text{ even)},\ \sin \text{ (}\psi_m\text{ odd)},

(the real form of eq. 8 of [1]; notes §1.2 [2], the paper's :math:`(2\pi)^{-1/4}` with its unitary
:math:`s_\text{paper} = s/\sqrt{2\pi}`), and :math:`\sum_m K_{uf}[m](x)K_{uf}[m](x')` converges to
:math:`k(x, x')` when :math:`\{\psi_m\}` spans :math:`L^2(\mathbb R)`, to the band-limited kernel
:math:`(2\pi)^{-1}\int_{-a}^{a}s(\omega)\cos(\omega(x-x'))d\omega` when it spans :math:`L^2[-a,a]`.
Both families carry a fixed ``centre`` c (inputs enter as x − c; by stationarity the features stay
orthonormal).

* :class:`TrigonometricFeatures` (any stationary kernel, 1-D): an orthonormal basis of
  :math:`L^2[-a, a]` (the printed TrigVOF basis is not orthogonal [2, §1.5]); :math:`K_{uf}` by
  Gauss–Legendre quadrature (``estimator="exact"``) or, inside an SVI step, by the unbiased Monte Carlo
  estimators of [1, §3.3, App. E.1] (``"stratified"``, ``"paired"``) through this family's
  :func:`~ppl_sparsegp.conditionals.conditional` override.

**Monte Carlo mode.** With a Gaussian likelihood the expected log-likelihood
:math:`-\tfrac{1}{2\sigma^2}\,(y^2 - 2y\mu + \mu^2 + \sigma_f^2) + \text{const}` is linear in
:math:`\mu`, :math:`\mu^2` and :math:`\sigma_f^2`; the estimators return two independent unbiased
:math:`\hat\mu_1, \hat\mu_2` and an unbiased :math:`\hat\sigma_f^2`, and :func:`conditional` reports
``mean`` :math:`= (\hat\mu_1+\hat\mu_2)/2` and ``var`` :math:`= \hat\sigma_f^2 + \hat\mu_1\hat\mu_2 -
\text{mean}^2`, so that :math:`(y - \text{mean})^2 + \text{var} = y^2 - 2y\,\text{mean} + \hat\mu_1\hat\mu_2
+ \hat\sigma_f^2` is unbiased (``var`` itself may be negative). The estimators run only when
:func:`conditional` is given a ``key``: ``SparseGP.model`` passes ``numpyro.prng_key()`` (SVI's
per-step key) when it observes y under a ``seed`` handler, as every NumPyro ELBO runs it.
Everywhere else (``SparseGP.elbo``, ``SparseGP.predict``, ``Predictive`` with y=None, NUTS's potential
energy, which has no seed) the deterministic quadrature is used, so predictions and the exact ELBO are
deterministic with variance ≥ 0. :func:`monte_carlo_conditional` evaluates the estimators with an
explicit key. The MC mode is meant for ``SparseGP`` with a :class:`~ppl_sparsegp.likelihoods.Gaussian`
likelihood: for a non-linear expected log-likelihood unbiased moments do not give an unbiased ELBO [1,
§3.3] (and a negative ``var`` breaks Gauss–Hermite), so use ``estimator="exact"`` there.

References:
    1. Burt, Rasmussen, van der Wilk (2020), Variational orthogonal features, arXiv:2006.13170.
    2. ``shared/notes/vof.md``: the formulas rebuilt from the LaTeX, with the printed errors corrected.
"""
from __future__ import annotations

import functools
import math
from typing import Annotated, Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ..conditionals import conditional
from ..covariances import Kuf, Kuu
from ..kernels import Kernel, Stationary
from ..linalg import Identity, LinearOperator
from ..parameters import is_concrete
from ..validation import (
    AFeature,
    AKernel,
    ArrayOf,
    Count,
    Inputs,
    InstanceOf,
    MaybeCount,
    NonNegative,
    OneOf,
    OrNone,
    Positive,
    Quantile,
    RngKey,
    Template,
    Tolerance,
    validated,
)
from .base import InducingFeature, template_lengthscale
from .orthogonal import (
    INV_SQRT_2PI,
    check_num_features,
    fewest_resolving,
    initial_value,
    one_column,
    rule_inputs,
    scalar_field,
)

__all__ = ["TrigonometricFeatures", "mc_moments", "monte_carlo_conditional", "quadrature_nodes", "ESTIMATORS",
           "BASES"]

ESTIMATORS = ("exact", "stratified", "paired")
BASES = ("fourier", "dirichlet")


# --- trigonometric features ----------------------------------------------------------------------------
@validated
def quadrature_nodes(band: Positive, reach: NonNegative, num_features: Count):
    r"""Gauss–Legendre nodes the exact TrigVOF Kuf needs: :math:`\lceil\Phi/2\rceil + 16` with
    :math:`\Phi = a\,\max|x - c| + \pi M/2` (see :class:`TrigonometricFeatures`).

    :param band: the largest band a expected (a learnt band may grow: give a bound).
    :param reach: :math:`\max|x - c|` over the inputs (training and prediction).
    """
    return int(math.ceil((band * reach + math.pi * num_features / 2) / 2)) + 16


class TrigonometricFeatures(InducingFeature):
    r"""TrigVOF: an orthonormal basis of :math:`L^2[-a, a]` for any stationary kernel in 1-D [1, §3.1.2].

    Bases (notes §1.5 [2]; the printed one is not orthogonal):

    * ``"fourier"``: :math:`1/\sqrt{2a},\ \cos(\pi k\omega/a)/\sqrt a,\ \sin(\pi k\omega/a)/\sqrt a`,
      k = 1, 2, ..., in that order (odd M gives 1 + (M−1)/2 + (M−1)/2);
    * ``"dirichlet"``: :math:`\sin(\pi m(\omega+a)/(2a))/\sqrt a`, m = 1..M.

    :math:`K_{uu} = I`. :math:`K_{uf}` has no closed form. ``Kuf`` (and the conditional outside an ELBO)
    uses Gauss–Legendre quadrature with ``num_quadrature`` nodes on [0, a] (the integrand of the real form
    is even in ω): O(NMG). Enough nodes resolve the oscillation of the integrand, whose total phase on
    [0, a] is at most :math:`\Phi = a\max|x-c| + \pi M/2`; :meth:`check_inputs` raises if
    ``num_quadrature`` < Φ/2 + 16 (the constructor's band, or a Param's initial one, is used). Measured
    against 8192 nodes (SE, Matérn-1/2, -3/2; both bases; Φ up to 330): Φ/3 + 8 nodes already give
    errors below 1e-10, Φ/4 + 8 about 1e-4.

    Monte Carlo estimators (``estimator="stratified"`` or ``"paired"``, used while an ELBO evaluates the
    model, i.e. in an SVI step; see the module docstring): two independent sets of T frequencies, each a
    systematic grid :math:`\omega_i = -a + 2a(i - 1 + U)/T`, :math:`U\sim\mathcal U(0,1)`, weight
    :math:`2a/T` [1, App. E.1]:

    * ``"stratified"`` (what the authors ran): :math:`\hat\mu_1,\hat\mu_2` from the two grids (2T samples
      for the mean), the variance term from the outer product of the grids (T² pairs). Cost per step
      O(T(M+N)) for the means, O(T²(M+N)) for the variance (+O(TM²) with a dense S given).
    * ``"paired"``: the same means; the variance term from the T pairs
      :math:`(\omega_t, \omega'_{\pi(t)})` with a random permutation π of the second grid (a Latin
      hypercube in [−a, a]²; pairing index by index would be biased, notes §1.6 [2]).
      Cost O(T(M+N)) (+O(TM²) with a dense S). Unbiased, but far noisier (notes §1.6 [2]).

    Both are unbiased for :math:`\mu`, :math:`\mu^2` and :math:`\sigma_f^2` (module docstring). Constant
    factors: cos/sin columns double the sample columns (2T); at moderate T the O(TN) cos/sin evaluations
    dominate, so the two cost about the same (``inference/benchmarks/vof_cost.py``).

    Choosing T: the integrand :math:`\psi_m(\omega)\cos(\omega x)` oscillates in ω at up to
    :math:`\pi M/(2a) + |x - c|`, and a grid of spacing 2a/T aliases unless
    :math:`T \gtrsim M + 2a\max|x-c|/\pi` (its Nyquist rate). Measured (``vof_cost``: M = 31, a = 9,
    inputs N(0, 3²), N = 1000, threshold ≈ 88): sd of the stratified ELBO estimate 5e5 at T = 10, 115 at
    T = 50, 5 at T = 100; the paired one stays above 1e6 for all three.

    :param num_features: M.
    :param band: a > 0, the half-width of the frequency band: a number, a
        :class:`~ppl_sparsegp.Param` (positive constraint; site ``feature_band``) or a prior.
    :param basis: ``"fourier"`` (default) or ``"dirichlet"``.
    :param estimator: ``"exact"`` (quadrature everywhere, default), ``"stratified"`` or ``"paired"``.
    :param num_samples: T, the grid size of each of the two MC sets (default 50, as in [1]).
    :param num_quadrature: Gauss–Legendre nodes for the exact Kuf (default 512).
    :param centre: c (inputs enter as x − c); default 0.
    """

    _params = ("band", "centre")
    _static = ("M", "basis", "estimator", "num_samples", "num_quadrature")
    _positive = ("band",)

    @validated
    def __init__(self, num_features: Count, band: Annotated[Any, Template(rank=0)] = 1.0, *,
                 basis: Annotated[str, OneOf(*BASES)] = "fourier",
                 estimator: Annotated[str, OneOf(*ESTIMATORS)] = "exact", num_samples: Count = 50,
                 num_quadrature: Count = 512, centre: Annotated[Any, Template(rank=0, positive=False)] = 0.0):
        M = check_num_features(num_features)
        if basis not in BASES:
            raise ValueError(f"basis must be one of {BASES}, got {basis!r}")
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
        for name, n in (("num_samples", num_samples), ("num_quadrature", num_quadrature)):
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
                raise ValueError(f"{name} must be a positive int, got {n!r}")
        self._set(M=M, basis=basis, estimator=estimator, num_samples=int(num_samples),
                  num_quadrature=int(num_quadrature), band=scalar_field(band, "band", positive=True),
                  centre=scalar_field(centre, "centre"))

    @classmethod
    @validated
    def from_data(cls, X: Inputs, kernel: AKernel, *, tolerance: Tolerance = 0.01, quantile: Quantile = 0.05,
                  basis: Annotated[str, OneOf(*BASES)] = "fourier", max_features: Count = 2048, **options):
        r"""Trigonometric features sized for the data and a kernel family at ℓ_min: the centre c is the
        middle of the data's range; the band a is the smallest with at most ``tolerance``/2 of the
        prior's spectral mass outside [−a, a] (trapezoid rule on the kernel's spectral density: these
        features converge to the band-limited kernel); M is the fewest basis functions that leave at most
        ``tolerance`` of the prior variance unresolved at every input (the residual
        :math:`1 - \sum_{m<M} K_{uf}[m](x)^2/v` at 257 quantiles of x, the extremes included; it only
        decreases with M, and the basis functions do not depend on M, so one evaluation at an upper
        bound found by doubling from the time–bandwidth count :math:`2a\max|x-c|/\pi` gives every M).
        ``num_quadrature`` is set to what the inputs need (:func:`quadrature_nodes`). M comes from ℓ_min
        (a shorter ℓ needs a wider band and more functions).

        :param X: the 1-D inputs (N,) or (N, 1) (at least two distinct values).
        :param kernel: the stationary kernel or kernel template the features serve (e.g.
            ``SquaredExponential(1.0, 0.2)``, ``Matern52(1.0, ell_prior)``): its class gives the spectral
            density, its lengthscale ℓ_min > 0 (a number, a scalar prior whose ``quantile`` quantile is
            ℓ_min, or a :class:`~ppl_sparsegp.Param` at its initial value); the variance does not enter the
            rule.
        :param tolerance: the unresolved fraction of the prior variance, in (0, 1).
        :param basis: ``"fourier"`` or ``"dirichlet"``.
        :param max_features: the largest M the rule may return.
        :param options: other constructor arguments (``estimator``, ``num_samples``).
        """
        if not isinstance(kernel, Stationary):
            raise ValueError(f"TrigonometricFeatures.from_data: kernel must be a stationary kernel (its class gives "
                             f"the spectral density, its lengthscale ℓ), e.g. Matern32(1.0, 0.3), got {kernel!r}")
        x, lo = rule_inputs(cls, X, template_lengthscale(kernel), tolerance, quantile)
        return cls._sized(x, type(kernel)(1.0, lo), tolerance, basis, 0.5 * (float(x.min()) + float(x.max())),
                          max_features, options)

    def refined(self) -> "TrigonometricFeatures":
        """Twice the band and twice the functions (and quadrature nodes): as :meth:`from_data` sizes them
        for a lengthscale half as long (the band scales as 1/ℓ, M with the band). Refused for a sampled band."""
        if not is_concrete(self.band):
            raise NotImplementedError("TrigonometricFeatures with a sampled band have no refinement rule: give the "
                                      "band as a number (e.g. TrigonometricFeatures.from_data(x, kernel))")
        with jax.ensure_compile_time_eval():  # the fields stay numbers inside a model being traced
            return type(self)(2 * self.M, 2 * float(self.band), basis=self.basis, estimator=self.estimator,
                              num_samples=self.num_samples, num_quadrature=2 * self.num_quadrature,
                              centre=self.centre)

    @validated
    def resized(self, X: Inputs, kernel: AKernel, tolerance: Tolerance, max_features: MaybeCount = None):
        """:meth:`from_data`'s rule at ``kernel``'s lengthscale (band and M), keeping the centre, basis and
        estimator (:meth:`~ppl_sparsegp.features.InducingFeature.resized`; its search stops at
        ``max_features``, at most 2048); None for a kernel that is not stationary or a band or centre that
        is sampled."""
        if (not isinstance(kernel, Stationary) or jnp.size(kernel.lengthscale) != 1
                or not all(is_concrete(v) for v in (self.band, self.centre))):
            return None
        x, _ = rule_inputs(type(self), X, 1.0, tolerance, 0.05)
        k = type(kernel)(1.0, float(jnp.reshape(kernel.lengthscale, ())))
        cap = 2048 if max_features is None else min(2048, int(max_features))
        return type(self)._sized(x, k, tolerance, self.basis, float(self.centre), cap,
                                 {"estimator": self.estimator, "num_samples": self.num_samples})

    @classmethod
    def _sized(cls, x, k, tolerance, basis, centre, max_features, options):
        """from_data's band and M for the unit-variance kernel k at the centre (module docstring)."""
        lo = float(jnp.reshape(k.lengthscale, ()))

        def inside(top):  # ω on [0, top] and (1/π)∫_0^ω s (σ² = 1, the library's convention), trapezoid
            w = np.linspace(0.0, top, 20001)
            sw = np.asarray(k.spectral_density(w[:, None]))
            return w, np.concatenate([[0.0], np.cumsum(0.5 * (sw[1:] + sw[:-1]) * np.diff(w))]) / math.pi

        top = 4.0 / lo
        while 1.0 - inside(top)[1][-1] > 0.25 * tolerance:  # well past the band: the grid brackets it
            top *= 2.0
        w, mass = inside(top)
        band = float(w[np.argmax(1.0 - mass <= 0.5 * tolerance)])
        reach = float(np.max(np.abs(x - centre)))
        M = min(max_features, max(3, math.ceil(2.0 * band * reach / math.pi) + 3))

        def build(M, **options):
            return cls(M, band, basis=basis, num_quadrature=quadrature_nodes(band, reach, M), centre=centre,
                       **options)

        M = fewest_resolving(
            build, k, x, M, tolerance, max_features,
            lambda worst: f"TrigonometricFeatures.from_data: {max_features} features leave {worst:.3g} of the "
                          f"prior variance unresolved (tolerance {tolerance:g}, band {band:.4g}, inputs within "
                          f"{reach:.4g} of {centre:.4g}); raise max_features or tolerance")
        return build(M, **options)

    @property
    def num_features(self):
        return self.M

    @property
    def monte_carlo(self) -> bool:
        return self.estimator != "exact"

    def check_inputs(self, X: ArrayLike, name: str = "X"):
        X = one_column(self, X, name)
        a, c = initial_value(self.band), initial_value(self.centre)
        if a is not None and c is not None and is_concrete(X) and X.shape[0]:
            reach = float(np.max(np.abs(np.asarray(X)[:, 0] - c)))
            needed = quadrature_nodes(a, reach, self.M)
            if self.num_quadrature < needed:
                raise ValueError(
                    f"{name}: inputs up to |x - c| = {reach:.3g} with band {a:.3g} and M = {self.M} need "
                    f"num_quadrature >= {needed}, got {self.num_quadrature}; standardise the inputs or "
                    "raise num_quadrature")
        return X

    @property
    def odd(self):
        """Which :math:`\\psi_m` are odd (those pair with sin(ωx)), as a static boolean mask of shape (M,)."""
        m = np.arange(self.M)
        if self.basis == "fourier":
            return (m > 0) & (m % 2 == 0)
        return (m + 1) % 2 == 0  # sin(πm(ω+a)/(2a)) is ±cos(πmω/(2a)) for odd m, ±sin for even m

    @validated
    def basis_functions(self, omega: Annotated[Any, ArrayOf(rank=1)]):
        """:math:`\\psi_m(\\omega)` for ω in [−a, a], shape (M, len(ω))."""
        a = jnp.asarray(self.band)
        m = np.arange(self.M)
        if self.basis == "fourier":
            k = jnp.asarray((m + 1) // 2, omega.dtype)[:, None]
            arg = math.pi * k * omega[None, :] / a
            trig = jnp.where(jnp.asarray(self.odd)[:, None], jnp.sin(arg), jnp.cos(arg))
            return jnp.where(k == 0, 1.0 / jnp.sqrt(2.0 * a), trig / jnp.sqrt(a))
        k = jnp.asarray(m + 1, omega.dtype)[:, None]
        return jnp.sin(math.pi * k * (omega[None, :] + a) / (2.0 * a)) / jnp.sqrt(a)


def _factors(feature, kernel, omega, weight, x):
    r"""Factors of a quadrature/MC rule :math:`K_{uf} \approx \sum_{p,j} P[m,p,j]\,F[p,j,n]`.

    ``P`` (M, 2, J): :math:`\psi_m(\omega_j)` masked to the even (p = 0, cos) or odd (p = 1, sin) rows;
    ``F`` (2, J, N): :math:`w_j (2\pi)^{-1/2}\sqrt{s(\omega_j)}\,[\cos, \sin](\omega_j x_n)`.
    """
    psi = feature.basis_functions(omega)
    odd = jnp.asarray(feature.odd)[:, None]
    P = jnp.stack([jnp.where(odd, 0.0, psi), jnp.where(odd, psi, 0.0)], axis=1)
    amp = weight * INV_SQRT_2PI * jnp.sqrt(kernel.spectral_density(omega[:, None]))  # Eq. (8) [1]
    wx = omega[:, None] * x[None, :]
    return P, jnp.stack([jnp.cos(wx), jnp.sin(wx)]) * amp[None, :, None]


@functools.lru_cache(maxsize=None)
def _legendre(n):
    """Gauss–Legendre nodes and weights on [−1, 1] by Newton's method on P_n (O(n²); numpy's
    ``leggauss`` solves an n×n eigenproblem, O(n³), which takes minutes at n = 4096)."""
    x = np.cos(np.pi * (np.arange(1, n + 1) - 0.25) / (n + 0.5))  # Tricomi's initial guesses
    for _ in range(10):  # quadratic convergence: 3-4 steps from these guesses
        p0, p1 = np.ones_like(x), x
        for k in range(2, n + 1):  # Bonnet's recurrence
            p0, p1 = p1, ((2 * k - 1) * x * p1 - (k - 1) * p0) / k
        dp = n * (x * p1 - p0) / (x**2 - 1)
        dx = p1 / dp
        x = x - dx
        if np.max(np.abs(dx)) < 1e-15:
            break
    w = 2.0 / ((1 - x**2) * dp**2)
    return x[::-1].copy(), w[::-1].copy()


@Kuu.register(TrigonometricFeatures, Stationary)
def _kuu_trig(feature, kernel):
    return Identity(feature.M, dtype=jnp.result_type(kernel.variance, float))


@Kuf.register(TrigonometricFeatures, Stationary)
def _kuf_trig(feature, kernel, X):
    return _trig_kuf(feature, kernel, feature.check_inputs(X)[:, 0])


@jax.jit  # one program per feature shape and N, as _hermite_kuf
def _trig_kuf(feature, kernel, x):
    x = x - feature.centre
    a = jnp.asarray(feature.band, x.dtype)
    nodes, weights = (jnp.asarray(c, x.dtype) for c in _legendre(feature.num_quadrature))
    omega = 0.5 * a * (nodes + 1.0)  # Gauss–Legendre on [0, a]; the integrand is even: weight 2·(a/2)·w_i
    P, F = _factors(feature, kernel, omega, a * weights, x)
    return jnp.einsum("mpj,pjn->mn", P, F)


# --- Monte Carlo estimators ----------------------------------------------------------------------------
def _grid(rng_key, T, a, dtype):
    """A systematic ("stratified") uniform grid on [−a, a]: one shared uniform offset [1, App. E.1]."""
    u = jax.random.uniform(rng_key, (), dtype)
    return -a + 2.0 * a * (jnp.arange(T, dtype=dtype) + u) / T


def _mc_sets(feature, kernel, x, rng_key):
    """Two independent MC factor sets (P1, F1), (P2, F2); the second grid permuted for "paired"."""
    T = feature.num_samples
    a = jnp.asarray(feature.band, x.dtype)
    k1, k2, kp = jax.random.split(rng_key, 3)
    w1, w2 = _grid(k1, T, a, x.dtype), _grid(k2, T, a, x.dtype)
    if feature.estimator == "paired":
        w2 = jax.random.permutation(kp, w2)
    weight = 2.0 * a / T
    return _factors(feature, kernel, w1, weight, x), _factors(feature, kernel, w2, weight, x)


@validated
def mc_moments(feature: AFeature, kernel: AKernel, X: Inputs, q_mu: Annotated[Any, ArrayOf(rank=1)],
               q_cov: Annotated[Any, OrNone(InstanceOf("ppl_sparsegp.linalg.base.LinearOperator",
                                                       what="a linear operator (e.g. Dense(S))"))],
               rng_key: RngKey):
    r"""Unbiased MC estimates ``(mu1, mu2, var)`` for one :class:`TrigonometricFeatures` [1, §3.3].

    ``mu1``, ``mu2``: independent estimates of :math:`\mu_n = K_{uf}[:,n]^\top\mathbf m`;
    ``var``: of :math:`k_{nn} + K_{uf}[:,n]^\top (S - I) K_{uf}[:,n]` (``q_cov`` = S) or, with
    ``q_cov=None`` (u = ``q_mu`` given), of the residual :math:`k_{nn} - \|K_{uf}[:,n]\|^2`.
    The frequencies are swapped with the sum over m: :math:`h(\omega) = \psi(\omega)^\top\mathbf m` once
    per batch, then O(T) per point (see :class:`TrigonometricFeatures` for the costs).
    """
    x = feature.check_inputs(X)[:, 0] - feature.centre
    (P1, F1), (P2, F2) = _mc_sets(feature, kernel, x, rng_key)
    M, _, J = P1.shape
    mu1 = jnp.einsum("pjn,pj->n", F1, jnp.einsum("mpj,m->pj", P1, q_mu))  # Sec. 3.3 [1]
    mu2 = jnp.einsum("pjn,pj->n", F2, jnp.einsum("mpj,m->pj", P2, q_mu))
    AP2 = -P2 if q_cov is None else q_cov.matmul(P2.reshape(M, -1)).reshape(P2.shape) - P2  # (S − I)ψ
    if feature.estimator == "paired":
        g = jnp.einsum("mpj,mqj->pqj", P1, AP2)  # ψ(ω_t)ᵀ(S − I)ψ(ω'_t), cos/sin blocks
        quad = J * jnp.einsum("pjn,pqj,qjn->n", F1, g, F2)
    else:
        G = jnp.einsum("mpj,mqk->pjqk", P1, AP2).reshape(2 * J, 2 * J)  # outer product: T² pairs
        quad = jnp.sum(F1.reshape(2 * J, -1) * (G @ F2.reshape(2 * J, -1)), axis=0)
    return mu1, mu2, kernel.diag(X) + quad


def mc_kuf_pair(feature, kernel, X, rng_key):
    """Two independent unbiased estimates of Kuf (M, N) (explicit; O(NMT))."""
    x = feature.check_inputs(X)[:, 0] - feature.centre
    (P1, F1), (P2, F2) = _mc_sets(feature, kernel, x, rng_key)
    return jnp.einsum("mpj,pjn->mn", P1, F1), jnp.einsum("mpj,pjn->mn", P2, F2)


def _uses_mc(feature):
    return feature.monte_carlo


def combine_moments(mu1, mu2, var):
    """(mean, var) whose Gaussian expected log-likelihood is unbiased (module docstring)."""
    mean = 0.5 * (mu1 + mu2)
    return mean, var + mu1 * mu2 - mean**2


@conditional.register(TrigonometricFeatures)
def _conditional_trig(feature, kernel, X, q_mu, q_cov=None, *, whiten=False, Kmm=None, rng_key=None):
    if rng_key is None or not _uses_mc(feature):  # deterministic quadrature (Kuu = I: whitened and unwhitened coincide)
        return conditional.default(feature, kernel, X, q_mu, q_cov, whiten=whiten, Kmm=Kmm)
    return monte_carlo_conditional(feature, kernel, X, q_mu, q_cov, rng_key)


def monte_carlo_conditional(feature: InducingFeature, kernel: Kernel, X: ArrayLike, q_mu: jax.Array,
                            q_cov: Optional[LinearOperator], rng_key: jax.Array):
    r"""The Monte Carlo ``(mean, var)`` of :func:`conditional` in MC mode, for an explicit key.

    ``mean`` :math:`= (\hat\mu_1+\hat\mu_2)/2`, ``var`` :math:`= \hat\sigma^2 + \hat\mu_1\hat\mu_2 -
    \text{mean}^2` (module docstring): :math:`\text{mean}` and :math:`\text{mean}^2 + \text{var}` are
    unbiased for :math:`\mu` and :math:`\mu^2 + \sigma^2`; ``var`` may be negative. ``q_cov=None``: u =
    ``q_mu`` given (the residual variance); otherwise q(u) = N(q_mu, q_cov), the paper's form.

    :param feature: a :class:`TrigonometricFeatures` (estimator "stratified"/"paired") or an
        :class:`AdditiveOrthogonal` (its MC columns use their estimator, the others their exact Kuf).
    :param kernel: the kernel (concrete).
    :param X: the inputs, (N, D).
    :param q_mu: u, or the mean of q(u), (M,).
    :param q_cov: the covariance of q(u), an (M, M) operator, or None (u = ``q_mu`` given).
    :param rng_key: a JAX PRNG key.
    :returns: ``(mean, var)``, arrays (N,).
    """
    if isinstance(feature, TrigonometricFeatures):
        if feature.estimator == "exact":
            raise ValueError("monte_carlo_conditional needs estimator='stratified' or 'paired'")
        return combine_moments(*mc_moments(feature, kernel, X, q_mu, q_cov, rng_key))
    method = getattr(feature, "monte_carlo_conditional", None)  # AdditiveOrthogonal sums its columns
    if method is None:
        raise TypeError(f"monte_carlo_conditional: unsupported feature {type(feature).__name__}")
    return method(kernel, X, q_mu, q_cov, rng_key)
