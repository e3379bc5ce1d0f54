r"""Variational orthogonal features (VOF): inter-domain features with :math:`K_{uu} = I` [1].

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

* :class:`HermiteFeatures` (SE kernel, 1-D): closed-form :math:`K_{uf}` [1, §3.1.1], parameterised by the
  input-density scale :math:`\sigma_p` of the equivalent eigenfunction features [1, App. B], so that the
  Hermite width :math:`r = (\ell^2\sigma_p^2 + \ell^4/4)^{1/4}` satisfies :math:`2r^2 > \ell^2` by
  construction.
* :class:`TrigonometricFeatures` (any stationary kernel, 1-D): an orthonormal basis of
  :math:`L^2[-a, a]` (the printed TrigVOF basis is not orthogonal [2, §1.5]); :math:`K_{uf}` by
  Gauss–Legendre quadrature (``estimator="exact"``) or, inside an SVI step, by the unbiased Monte Carlo
  estimators of [1, §3.3, App. E.1] (``"stratified"``, ``"paired"``) through this family's
  :func:`~ppl_sparsegp.conditionals.conditional` override.
* :class:`AdditiveOrthogonal`: one 1-D family per input column with a
  :class:`~ppl_sparsegp.kernels.Additive` kernel; :math:`K_{uu} = I`, :math:`K_{uf}` stacked.

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

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions import Distribution

from ..parameters import Param, check_finite, check_positive, is_concrete
from ..conditionals import conditional  # noqa: F401  (registers the default conditional)
from ..kernels import Additive, SquaredExponential, Stationary, check_inputs
from ..linalg import Identity
from ..covariances import Kuf, Kuu
from .base import InducingFeature
from .combinations import AdditiveFeatures

__all__ = ["HermiteFeatures", "TrigonometricFeatures", "AdditiveOrthogonal", "hermite_width", "hermite_unresolved",
           "mc_moments", "monte_carlo_conditional", "quadrature_nodes", "ESTIMATORS", "BASES"]

ESTIMATORS = ("exact", "stratified", "paired")
BASES = ("fourier", "dirichlet")
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


# --- validation helpers ------------------------------------------------------------------------------
def _check_num_features(num_features):
    if isinstance(num_features, bool) or not isinstance(num_features, (int, np.integer)) or num_features < 1:
        raise ValueError(f"num_features must be a positive int, got {num_features!r}")
    return int(num_features)


def _scalar_field(value, name, positive=False):
    """A scalar parameter field: a number (validated), a Distribution or a Param (positive support)."""
    if isinstance(value, Param):
        value.resolved(positive, name)  # a positive field refuses a constraint that leaves the positive reals
        if jnp.shape(value.init) != ():
            raise ValueError(f"{name} must be a scalar, got shape {jnp.shape(value.init)}")
        return value
    if isinstance(value, Distribution) or not is_concrete(value):
        return value
    value = jnp.asarray(value, dtype=jnp.result_type(float))
    if value.ndim != 0:
        raise ValueError(f"{name} must be a scalar, got shape {value.shape}")
    check_finite(value, name)
    if positive:
        check_positive(value, name)
    return value


def _initial(value):
    """The concrete value of a field for validation (a Param's init; None for a prior or a tracer)."""
    if isinstance(value, Param):
        return float(value.init)
    return float(value) if is_concrete(value) else None


def _lengthscale(kernel):
    return jnp.reshape(jnp.asarray(kernel.lengthscale), ())


def _one_column(feature, X, name):
    X = check_inputs(X, name)
    if X.shape[1] != 1:
        raise ValueError(f"{name} must have one input column for {type(feature).__name__}, got "
                         f"{X.shape[1]}; use AdditiveOrthogonal for D > 1")
    return X


# --- Hermite features ----------------------------------------------------------------------------------
def hermite_width(lengthscale, input_scale):
    r"""The Hermite width :math:`r = (\ell^2\sigma_p^2 + \ell^4/4)^{1/4}` (notes §1.4 [2]); always
    :math:`2r^2 > \ell^2`."""
    l2 = jnp.asarray(lengthscale) ** 2
    return (l2 * jnp.asarray(input_scale) ** 2 + 0.25 * l2**2) ** 0.25


def _rule_inputs(cls, x, lengthscale, tolerance, quantile):
    """The checked 1-D inputs and ℓ_min of a ``from_data`` size rule."""
    from .fourier import lengthscale_range

    x = np.asarray(x, dtype=float).reshape(-1)
    if x.size < 2 or not np.all(np.isfinite(x)) or np.ptp(x) == 0:
        raise ValueError("x must hold at least two distinct finite inputs")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    lo, _ = lengthscale_range(lengthscale, None, quantile)
    if np.ndim(lo):
        raise ValueError(f"{cls.__name__} are 1-D: give one lengthscale (or a scalar prior)")
    return x, float(lo)


def _fewest_resolving(build, kernel, x, M, tolerance, max_features, refusal):
    """The fewest features of a ``from_data`` size rule: the residual 1 − Σ_{m<M'} K_uf[m](x)²/v (kernel
    of variance 1) at 257 quantiles of x (the extremes included) only decreases with M', and the first M'
    functions of ``build(M)`` do not depend on M, so one evaluation at an upper bound (doubled from M up
    to ``max_features``) gives every M'. ``refusal(worst)`` is the error message when ``max_features``
    functions still leave ``worst`` unresolved."""
    points = np.quantile(x, np.linspace(0.0, 1.0, 257))[:, None]
    while True:
        worst = np.max(1.0 - np.cumsum(np.asarray(Kuf(build(M), kernel, points)) ** 2, axis=0), axis=1)
        if worst[-1] <= tolerance:
            return int(np.argmax(worst <= tolerance)) + 1  # worst[j]: after j + 1 functions
        if M >= max_features:
            raise ValueError(refusal(worst[-1]))
        M = min(2 * M, max_features)


def hermite_unresolved(lengthscale: float, input_scale: float, num_features: int) -> float:
    r"""The fraction of the SE prior variance, averaged over inputs :math:`\mathcal N(c, \sigma_p^2)`,
    that M Hermite features leave unresolved: :math:`B^M` (:meth:`HermiteFeatures.from_data`)."""
    a, b = 0.25 / input_scale**2, 0.5 / lengthscale**2
    return (b / (a + b + math.sqrt(a * a + 2 * a * b))) ** num_features


class HermiteFeatures(InducingFeature):
    r"""Hermite-function VOF for the squared-exponential kernel in 1-D [1, §3.1.1, App. B].

    :math:`\psi_m(\omega) \propto H_m(r\omega)e^{-r^2\omega^2/2}` (orthonormal in :math:`L^2(\mathbb R)`),
    :math:`K_{uu} = I` and, with :math:`Q = r^2 + \ell^2/2`, :math:`P = r^2 - \ell^2/2 = \ell^2\sigma_p^2/Q`
    (so :math:`\sqrt{PQ} = \ell\sigma_p`),

    .. math::

        K_{uf}[m](x) = \pm\, 2^{1/4}\,\sqrt{\frac{v\ell r}{2^m m!}}\;Q^{-1/2}\,(P/Q)^{m/2}\,
        e^{-x^2/(2Q)}\,H_m\!\Big(\frac{r x}{\sqrt{PQ}}\Big),

    (eq. (18) of [1] simplified, notes §1.4 [2]; the sign is :math:`(-1)^{\lfloor m/2\rfloor}`, that of the
    real form of eq. (8)). It is evaluated by the three-term recurrence of the normalised Hermite
    polynomials with :math:`(P/Q)^{m/2}` inside and a running log-scale for :math:`e^{-x^2/(2Q)}` and the
    polynomial growth, so nothing overflows or underflows early, in float32 too
    (:math:`|K_{uf}[m](x)| \le \sqrt v`). Cost O(NM) per evaluation. These are the eigenfunction
    features of the SE kernel under the input density :math:`\mathcal N(c, \sigma_p^2)` [1, App. B].

    :param num_features: M.
    :param input_scale: :math:`\sigma_p > 0`: a number, a :class:`~ppl_sparsegp.Param` (positive
        constraint; optimised by SVI, site ``feature_input_scale``) or a prior. The width
        :math:`r` follows from it and the kernel lengthscale (:func:`hermite_width`).
    :param centre: c, the centre of the features (inputs enter as x − c); default 0.
    """

    _params = ("input_scale", "centre")
    _static = ("M",)
    _positive = ("input_scale",)

    def __init__(self, num_features: int, input_scale=1.0, centre=0.0):
        M = _check_num_features(num_features)
        self._set(M=M, input_scale=_scalar_field(input_scale, "input_scale", positive=True),
                  centre=_scalar_field(centre, "centre"))

    @classmethod
    def from_data(cls, x, lengthscale, *, tolerance: float = 0.01, quantile: float = 0.05,
                  max_features: int = 4096):
        r"""Hermite features sized for the data: centre c = mean(x), input scale σ_p = sd(x), and the
        fewest M that leave at most ``tolerance`` of the prior variance unresolved at every input, at
        ℓ_min (a shorter ℓ needs more features, so M comes from ℓ_min).

        For inputs distributed as N(c, σ_p²) these are the eigenfunction features of the SE kernel under
        that density, with eigenvalues :math:`\lambda_m \propto B^m`, :math:`B = b/(a + b + \sqrt{a^2 +
        2ab})`, :math:`a = 1/(4\sigma_p^2)`, :math:`b = 1/(2\ell^2)` ([2, §4.3.1]), so M features leave
        :math:`B^M` of the variance averaged over the density (:func:`hermite_unresolved`). An average is
        not enough: the unresolved variance grows with |x − c|, and with that M a sample's outer points
        keep up to all of it (measured on 400 normal inputs at ℓ = 0.05 σ_p: the mean at the data 1.4×
        the tolerance, the worst point 100×). So M is chosen at the data: the residual
        :math:`1 - \sum_{m<M} K_{uf}[m](x)^2/v` at 257 quantiles of x (the extremes included) is below the
        tolerance for every M above the one returned (it only decreases with M), evaluated once at an
        upper bound found by doubling from the density's M. Heavy-tailed inputs need many features (the
        features resolve a band of width ~ :math:`\sqrt{2M}` scales around c): past ``max_features`` the
        rule refuses and names the alternatives.

        :param x: the 1-D inputs (at least two distinct values).
        :param lengthscale: ℓ_min > 0, or the lengthscale's prior (ℓ_min is its ``quantile`` quantile,
            :func:`~ppl_sparsegp.features.fourier.lengthscale_range`).
        :param tolerance: the unresolved fraction of the prior variance, in (0, 1).
        :param max_features: the largest M the rule may return.

        References: 2. Rasmussen & Williams (2006), Gaussian processes for machine learning, §4.3.1.
        """
        x, lo = _rule_inputs(cls, x, lengthscale, tolerance, quantile)
        centre, scale, kernel = float(np.mean(x)), float(np.std(x)), SquaredExponential(1.0, lo)
        M = max(2, math.ceil(math.log(tolerance) / math.log(hermite_unresolved(lo, scale, 1))))
        M = _fewest_resolving(
            lambda M: cls(M, scale, centre), kernel, x, M, tolerance, max_features,
            lambda worst: f"HermiteFeatures.from_data: {max_features} features leave {worst:.3g} of the prior "
                          f"variance unresolved at the outermost inputs (tolerance {tolerance:g}; inputs from "
                          f"{x.min():.4g} to {x.max():.4g} around {centre:.4g} ± {scale:.4g}): Hermite features "
                          f"resolve a band around the centre, and these inputs have heavy tails. Use "
                          f"FourierFeatures.from_data (a box over the data), or raise max_features or tolerance")
        return cls(M, input_scale=scale, centre=centre)

    @property
    def num_features(self):
        return self.M

    def check_kernel(self, kernel):
        ls = getattr(kernel, "lengthscale", None)
        if ls is not None and not isinstance(ls, (Distribution, Param)) and np.size(ls) != 1:
            raise ValueError(f"HermiteFeatures are 1-D: the kernel's lengthscale must be a scalar, got shape "
                             f"{np.shape(ls)}; for D > 1 use AdditiveOrthogonal with one 1-D kernel per input")

    def width(self, kernel):
        """The Hermite width r for this kernel's lengthscale."""
        return hermite_width(_lengthscale(kernel), self.input_scale)

    def check_inputs(self, X, name="X"):
        return _one_column(self, X, name)


@functools.lru_cache(maxsize=None)
def _hermite_recurrence(M):
    """Coefficients of h_{m+1} = sqrt(2/(m+1)) z h_m - sqrt(m/(m+1)) h_{m-1}, h_m = H_m/sqrt(2^m m!)."""
    m = np.arange(max(M - 1, 0), dtype=float)
    sign = np.where((np.arange(M) // 2) % 2 == 0, 1.0, -1.0)
    return np.sqrt(2.0 / (m + 1)), np.sqrt(m / (m + 1)), sign


@Kuu.register(HermiteFeatures, SquaredExponential)
def _kuu_hermite(feature, kernel):
    return Identity(feature.M, dtype=jnp.result_type(kernel.variance, float))


@Kuf.register(HermiteFeatures, SquaredExponential)
def _kuf_hermite(feature, kernel, X):
    feature.check_kernel(kernel)
    return _hermite_kuf(feature, kernel, feature.check_inputs(X)[:, 0])


@jax.jit  # one program per M and N: eagerly (the size rule, predictions) each operation would compile alone
def _hermite_kuf(feature, kernel, x):
    x = x - feature.centre
    v, ell, sp = kernel.variance, _lengthscale(kernel), jnp.asarray(feature.input_scale)
    l2 = ell**2
    r2 = jnp.sqrt(l2 * sp**2 + 0.25 * l2**2)  # r² (notes §1.4 [2])
    Q = r2 + 0.5 * l2
    P = l2 * sp**2 / Q  # = r² − ℓ²/2 without cancellation
    rho = jnp.sqrt(P / Q)
    z = jnp.sqrt(r2) * x / (ell * sp)  # r x / sqrt(PQ)
    # log g_0, Eq. (18) [1] at m = 0; g_m = (P/Q)^{m/2} h_m(z) g_0 with h_m = H_m / sqrt(2^m m!)
    log_g0 = 0.25 * math.log(2.0) + 0.5 * jnp.log(v * ell * jnp.sqrt(r2) / Q) - 0.5 * x**2 / Q
    a, b, sign = (jnp.asarray(c, x.dtype) for c in _hermite_recurrence(feature.M))

    def step(carry, coef):
        # the pair (g_{m-1}, g_m) is kept as (prev, cur)·e^{log_scale} with max(|prev|, |cur|) = 1, so
        # neither the Gaussian factor (underflow) nor the polynomial (overflow) leaves the range in float32
        prev, cur, log_scale = carry
        new = rho * coef[0] * z * cur - rho**2 * coef[1] * prev
        s = jnp.maximum(jnp.abs(new), jnp.abs(cur))
        s = jnp.where(s > 0, s, 1.0)
        log_scale = log_scale + jnp.log(s)
        cur, new = cur / s, new / s
        return (cur, new, log_scale), new * jnp.exp(log_scale)

    init = (jnp.zeros_like(x), jnp.ones_like(x), log_g0)
    _, rest = jax.lax.scan(step, init, jnp.stack([a, b], axis=1))
    return sign[:, None] * jnp.concatenate([jnp.exp(log_g0)[None], rest], axis=0)


# --- trigonometric features ----------------------------------------------------------------------------
def quadrature_nodes(band, reach, num_features):
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

    def __init__(self, num_features: int, band=1.0, *, basis: str = "fourier", estimator: str = "exact",
                 num_samples: int = 50, num_quadrature: int = 512, centre=0.0):
        M = _check_num_features(num_features)
        if basis not in BASES:
            raise ValueError(f"basis must be one of {BASES}, got {basis!r}")
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
        for name, n in (("num_samples", num_samples), ("num_quadrature", num_quadrature)):
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
                raise ValueError(f"{name} must be a positive int, got {n!r}")
        self._set(M=M, basis=basis, estimator=estimator, num_samples=int(num_samples),
                  num_quadrature=int(num_quadrature), band=_scalar_field(band, "band", positive=True),
                  centre=_scalar_field(centre, "centre"))

    @classmethod
    def from_data(cls, x, lengthscale, *, kernel=SquaredExponential, tolerance: float = 0.01,
                  quantile: float = 0.05, basis: str = "fourier", max_features: int = 2048, **options):
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

        :param x: the 1-D inputs (at least two distinct values).
        :param lengthscale: ℓ_min > 0, or its prior (ℓ_min is the ``quantile`` quantile).
        :param kernel: the stationary kernel class (default :class:`~ppl_sparsegp.SquaredExponential`).
        :param tolerance: the unresolved fraction of the prior variance, in (0, 1).
        :param basis: ``"fourier"`` or ``"dirichlet"``.
        :param max_features: the largest M the rule may return.
        :param options: other constructor arguments (``estimator``, ``num_samples``).
        """
        if not (isinstance(kernel, type) and issubclass(kernel, Stationary)):
            raise ValueError(f"kernel must be a stationary kernel class (e.g. psg.Matern32), got {kernel!r}")
        x, lo = _rule_inputs(cls, x, lengthscale, tolerance, quantile)
        k = kernel(1.0, lo)

        def inside(top):  # ω on [0, top] and (1/π)∫_0^ω s (σ² = 1, the library's convention), trapezoid
            w = np.linspace(0.0, top, 20001)
            sw = np.asarray(k.spectral_density(w[:, None]))
            return w, np.concatenate([[0.0], np.cumsum(0.5 * (sw[1:] + sw[:-1]) * np.diff(w))]) / math.pi

        top = 4.0 / lo
        while 1.0 - inside(top)[1][-1] > 0.25 * tolerance:  # well past the band: the grid brackets it
            top *= 2.0
        w, mass = inside(top)
        a_hi = float(w[np.argmax(1.0 - mass <= 0.5 * tolerance)])
        band, centre = a_hi, 0.5 * (float(x.min()) + float(x.max()))
        reach = float(np.max(np.abs(x - centre)))
        M = min(max_features, max(3, math.ceil(2.0 * band * reach / math.pi) + 3))

        def build(M, **options):
            return cls(M, band, basis=basis, num_quadrature=quadrature_nodes(band, reach, M), centre=centre,
                       **options)

        M = _fewest_resolving(
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

    def check_inputs(self, X, name="X"):
        X = _one_column(self, X, name)
        a, c = _initial(self.band), _initial(self.centre)
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

    def basis_functions(self, omega):
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
    amp = weight * _INV_SQRT_2PI * jnp.sqrt(kernel.spectral_density(omega[:, None]))  # Eq. (8) [1]
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
def _grid(key, T, a, dtype):
    """A systematic ("stratified") uniform grid on [−a, a]: one shared uniform offset [1, App. E.1]."""
    u = jax.random.uniform(key, (), dtype)
    return -a + 2.0 * a * (jnp.arange(T, dtype=dtype) + u) / T


def _mc_sets(feature, kernel, x, key):
    """Two independent MC factor sets (P1, F1), (P2, F2); the second grid permuted for "paired"."""
    T = feature.num_samples
    a = jnp.asarray(feature.band, x.dtype)
    k1, k2, kp = jax.random.split(key, 3)
    w1, w2 = _grid(k1, T, a, x.dtype), _grid(k2, T, a, x.dtype)
    if feature.estimator == "paired":
        w2 = jax.random.permutation(kp, w2)
    weight = 2.0 * a / T
    return _factors(feature, kernel, w1, weight, x), _factors(feature, kernel, w2, weight, x)


def mc_moments(feature, kernel, X, q_mu, q_cov, key):
    r"""Unbiased MC estimates ``(mu1, mu2, var)`` for one :class:`TrigonometricFeatures` [1, §3.3].

    ``mu1``, ``mu2``: independent estimates of :math:`\mu_n = K_{uf}[:,n]^\top\mathbf m`;
    ``var``: of :math:`k_{nn} + K_{uf}[:,n]^\top (S - I) K_{uf}[:,n]` (``q_cov`` = S) or, with
    ``q_cov=None`` (u = ``q_mu`` given), of the residual :math:`k_{nn} - \|K_{uf}[:,n]\|^2`.
    The frequencies are swapped with the sum over m: :math:`h(\omega) = \psi(\omega)^\top\mathbf m` once
    per batch, then O(T) per point (see :class:`TrigonometricFeatures` for the costs).
    """
    x = feature.check_inputs(X)[:, 0] - feature.centre
    (P1, F1), (P2, F2) = _mc_sets(feature, kernel, x, key)
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


def _mc_kuf_pair(feature, kernel, X, key):
    """Two independent unbiased estimates of Kuf (M, N) (explicit; O(NMT))."""
    x = feature.check_inputs(X)[:, 0] - feature.centre
    (P1, F1), (P2, F2) = _mc_sets(feature, kernel, x, key)
    return jnp.einsum("mpj,pjn->mn", P1, F1), jnp.einsum("mpj,pjn->mn", P2, F2)


def _uses_mc(feature):
    return feature.monte_carlo


def _combine(mu1, mu2, var):
    """(mean, var) whose Gaussian expected log-likelihood is unbiased (module docstring)."""
    mean = 0.5 * (mu1 + mu2)
    return mean, var + mu1 * mu2 - mean**2


@conditional.register(TrigonometricFeatures)
def _conditional_trig(feature, kernel, X, q_mu, q_cov=None, *, whiten=False, Kmm=None, key=None):
    if key is None or not _uses_mc(feature):  # deterministic quadrature (Kuu = I: whitened and unwhitened coincide)
        return conditional.default(feature, kernel, X, q_mu, q_cov, whiten=whiten, Kmm=Kmm)
    return monte_carlo_conditional(feature, kernel, X, q_mu, q_cov, key)


# --- additive construction -----------------------------------------------------------------------------
class AdditiveOrthogonal(AdditiveFeatures):
    r"""One 1-D orthogonal family per input column, for an :class:`~ppl_sparsegp.kernels.Additive` kernel.

    With :math:`f = \sum_d f_d(x_d)`, independent :math:`f_d \sim GP(0, k_d)` and features of
    :math:`f_d` in block d, :math:`\mathrm{cov}(u^{(d)}, f(\mathbf x)) = K_{uf}^{(d)}(x_d)` and blocks are
    uncorrelated: :math:`K_{uu} = I_{\sum M_d}`, :math:`K_{uf}` the stacked blocks (inherited from
    :class:`~ppl_sparsegp.features.AdditiveFeatures`). M grows linearly in D, not exponentially as a tensor
    product would. Sites: ``feature_<d>_<field>``. In MC mode the per-column estimates are summed: with
    ``q_cov=None`` (SVI's sampled u) each column's :func:`mc_moments` are added (no cross terms); with a
    given S the explicit estimates :math:`\hat K_{uf}` of two independent sets are stacked
    (O(NMT + NM²)); Hermite and exact columns enter with their exact Kuf.

    :param features: a sequence of :class:`HermiteFeatures` / :class:`TrigonometricFeatures`, one per column.
    """

    def __init__(self, features):
        features = tuple(features)
        if not features or not all(isinstance(f, (HermiteFeatures, TrigonometricFeatures)) for f in features):
            raise ValueError("features must be a non-empty sequence of HermiteFeatures / TrigonometricFeatures")
        super().__init__(features)

    @property
    def monte_carlo(self) -> bool:
        return any(f.monte_carlo for f in self.features)

    def _blocks(self, kernel, X):
        """[(feature_d, kernel_d, X[:, d:d+1])]."""
        self._check_kernel(kernel, Additive)
        X = self.check_inputs(X)
        return [(f, k, X[:, d:d + 1]) for d, (f, k) in enumerate(zip(self.features, kernel.kernels))]


@Kuu.register(AdditiveOrthogonal, Additive)
def _kuu_additive(feature, kernel):
    feature._check_kernel(kernel, Additive)
    for f, k in zip(feature.features, kernel.kernels):
        Kuu.dispatch(f, k)  # each block must be supported (and is the identity)
    return Identity(feature.num_features, dtype=jnp.result_type(kernel.kernels[0].variance, float))


@conditional.register(AdditiveOrthogonal)
def _conditional_additive(feature, kernel, X, q_mu, q_cov=None, *, whiten=False, Kmm=None, key=None):
    if key is None or not _uses_mc(feature):
        return conditional.default(feature, kernel, X, q_mu, q_cov, whiten=whiten, Kmm=Kmm)
    return monte_carlo_conditional(feature, kernel, X, q_mu, q_cov, key)


def monte_carlo_conditional(feature, kernel, X, q_mu, q_cov, key):
    r"""The Monte Carlo ``(mean, var)`` of :func:`conditional` in MC mode, for an explicit key.

    ``mean`` :math:`= (\hat\mu_1+\hat\mu_2)/2`, ``var`` :math:`= \hat\sigma^2 + \hat\mu_1\hat\mu_2 -
    \text{mean}^2` (module docstring): :math:`\text{mean}` and :math:`\text{mean}^2 + \text{var}` are
    unbiased for :math:`\mu` and :math:`\mu^2 + \sigma^2`; ``var`` may be negative. ``q_cov=None``: u =
    ``q_mu`` given (the residual variance); otherwise q(u) = N(q_mu, q_cov), the paper's form.

    :param feature: a :class:`TrigonometricFeatures` (estimator "stratified"/"paired") or an
        :class:`AdditiveOrthogonal` (its MC columns use their estimator, the others their exact Kuf).
    """
    if isinstance(feature, TrigonometricFeatures):
        if feature.estimator == "exact":
            raise ValueError("monte_carlo_conditional needs estimator='stratified' or 'paired'")
        return _combine(*mc_moments(feature, kernel, X, q_mu, q_cov, key))
    if not isinstance(feature, AdditiveOrthogonal):
        raise TypeError(f"monte_carlo_conditional: unsupported feature {type(feature).__name__}")
    parts = feature._blocks(kernel, X)
    keys = jax.random.split(key, len(parts))
    offsets = np.cumsum([0] + [f.num_features for f, _, _ in parts])
    if q_cov is None:
        mu1 = mu2 = var = 0.0
        for (f, k, Xd), kd, lo, hi in zip(parts, keys, offsets[:-1], offsets[1:]):
            if _uses_mc(f):
                a, b, c = mc_moments(f, k, Xd, q_mu[lo:hi], None, kd)
            else:
                K = Kuf(f, k, Xd)
                a = b = K.T @ q_mu[lo:hi]
                c = k.diag(Xd) - jnp.sum(K**2, axis=0)
            mu1, mu2, var = mu1 + a, mu2 + b, var + c
        return _combine(mu1, mu2, var)
    K1, K2 = [], []
    for (f, k, Xd), kd in zip(parts, keys):
        a, b = _mc_kuf_pair(f, k, Xd, kd) if _uses_mc(f) else (Kuf(f, k, Xd),) * 2
        K1.append(a)
        K2.append(b)
    K1, K2 = jnp.concatenate(K1), jnp.concatenate(K2)
    var = kernel.diag(X) + jnp.sum(K1 * (q_cov.matmul(K2) - K2), axis=0)
    return _combine(K1.T @ q_mu, K2.T @ q_mu, var)
