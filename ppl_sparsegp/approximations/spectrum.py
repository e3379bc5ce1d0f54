r"""Sparse-spectrum GPs with fixed, learned or Stein-particle frequencies (SSGP, SRF, M-SRFR).

**The model** [1, 2]. With random Fourier features :math:`\Phi(X)\in\mathbb R^{2R\times N}` (unit
amplitude, see :mod:`ppl_sparsegp.features.random_fourier`), signal variance :math:`s` and noise
:math:`\sigma^2`, the sparse-spectrum GP is the Gaussian linear model

.. math::

    \mathbf y\mid\Omega \sim \mathcal N\big(c\mathbf 1,\ s\,\Phi^\top\Phi + \sigma^2 I_N\big).

With :math:`A = s\Phi\Phi^\top + \sigma^2 I_{2R}` (2R × 2R; the paper calls it R × R) the log density is
[3, §1.2, the corrected eq. (9) of [2]]

.. math::

    \log p(\mathbf y\mid\Omega) = -\frac{1}{2\sigma^2}\big[\mathbf y^\top\mathbf y
    - s\,\mathbf y^\top\Phi^\top A^{-1}\Phi\mathbf y\big] - \tfrac12\log|A| + R\log\sigma^2
    - \tfrac N2\log(2\pi\sigma^2),

(the paper's :math:`-R\log(R\sigma^2)` and its code's :math:`+m\log(m\sigma^2)` are wrong; both are
constant in Ω but matter when σ² is learned). It is evaluated by :class:`SparseSpectrumNormal`, the
Gaussian with covariance :math:`D + W^\top W` (:math:`D = \sigma^2 I`,
:math:`W = R_u^\top K_{uu}^{-1}K_{uf} = \sqrt s\,\Phi`), through the Woodbury identity and the
determinant lemma with *one* Cholesky factor of the 2R × 2R matrix :math:`I + WD^{-1}W^\top`
(:math:`= A/\sigma^2`), in :math:`O(NR^2 + R^3)`. This is the inner loop of SSGP and M-SRFR training
(one value and gradient per particle per step), so it shares the factor between the quadratic form and
the log-determinant instead of going through the generic
:class:`~ppl_sparsegp.linalg.DiagPlusLowRank` (whose ``solve`` and ``logdet`` factor separately).

**Frequencies** Ω (R × D, unit-lengthscale frequencies; the lengthscales act on the inputs) are
given to :class:`SparseSpectrumGP` as an array (fixed: random-feature regression, "SSGP-RBF"), a
:class:`~ppl_sparsegp.Param` (maximum likelihood under SVI: "SSGP" [1]), or a prior distribution (the
latent site ``feature_frequencies``; default :class:`~ppl_sparsegp.features.random_fourier.SpectralDensity`,
the kernel's own spectral density): MAP under SVI with :meth:`SparseSpectrumGP.guide`, a particle
posterior under SteinVI.

**Stein particles** run through :class:`numpyro.contrib.einstein.SteinVI` with a point-mass particle
guide, which turns Stein mixture inference into SVGD [4]:

.. math::

    \boldsymbol\theta_m \leftarrow \boldsymbol\theta_m + \frac{\epsilon}{M}\sum_{j=1}^M\Big[K(\boldsymbol
    \theta_j, \boldsymbol\theta_m)\,\nabla\log p(\boldsymbol\theta_j\mid\mathcal D)
    + \alpha\,\nabla_{\boldsymbol\theta_j}\!\cdot K(\boldsymbol\theta_j, \boldsymbol\theta_m)\Big]
    \qquad\text{[2, eq. (26)]}.

* Stein random features (SRF, [2, §5.1]): each particle is one frequency, the target the kernel's
  log spectral density (:func:`stein_frequencies`); K is the scalar RBF kernel of
  :class:`FrequencyRBFKernel`. This is plain SVGD over point particles with a known target, run by
  :func:`svgd` (below: why not SteinVI).
* M-SRFR [2, §4.2–4.4]: each particle is a whole matrix :math:`\Omega_m` (one SSGP), the target
  :math:`\log p(\mathbf y\mid\Omega_m) + \log p(\Omega_m)`; K is the matrix-valued kernel
  :math:`K(\Omega, \Omega')_{(k,a),(l,b)} = \kappa(\boldsymbol\omega_k, \boldsymbol\omega'_l)\,\delta_{ab}`
  [2, eqs. (28), (66), (67)], which makes the update exactly plain SVGD on the pooled MR frequencies
  [3, §1.6]. Lengthscales (and any other hyperparameter) are shared by all particles: SteinVI's
  non-mixture parameters, optimised on the same objective. α is SteinVI's ``repulsion_temperature``.

In both, :math:`\kappa(\mathbf a, \mathbf b) = \exp(-\sum_k (a_k - b_k)^2 / (2h_k))` with the
per-dimension bandwidth :math:`h_k` = ``bandwidth_scale`` × the median over all pairs (self-pairs
included) of the pooled frequencies of :math:`(a_k - b_k)^2` [3, §1.3], the driving term can be
annealed cyclically, :math:`\gamma(t) = (\operatorname{mod}(t, T/c)/(T/c))^{s}` (SteinVI's
``loss_temperature`` set per step), and the step is Adam with decoupled weight decay
(:class:`AdamW`, the authors' optimiser).

Why a subclass of SteinVI (:class:`FrequencySteinVI`): SteinVI supports matrix-valued kernels, but its
generic divergence :math:`\sum_b\partial K_{ab}/\partial x_b` takes one gradient per matrix entry,
:math:`O((RD)^3)` per particle pair: infeasible for R·D ≈ 1000. The subclass only overrides that hook
for the structured kernel (closed form, :math:`O(R^2D)`); initialisation, the Stein loss, the
non-mixture parameters, temperatures and the optimiser are SteinVI's own. With the stock class the same
kernel gives the same update (tested), only slowly.

Why :func:`svgd` for a known target: plain SVGD over point particles is SteinVI with a point-mass guide
and a scalar kernel (:func:`fit_stein` runs it so), but SteinVI computes the attractive force by a
*sequential* scan over the P particles inside a loop over the P particles, each term a call of the
scalar kernel: P scan iterations of O(P) work per step (R = 1000 frequencies, 2000 steps: about an hour
on a CPU). :func:`svgd` takes the same step (tested to rounding against SteinVI's) as two dense
products with the closed-form Gram matrix and divergence of :class:`FrequencyBlockMatrix`, one
function, so there is one implementation of each formula.

**Prediction** (Algorithm 2 of [2]): per particle the SSGP posterior (eqs. 7–8; through the library's
optimal q(u) and :func:`~ppl_sparsegp.conditionals.conditional`), mixed with equal weights:
:math:`\mu_* = \bar\mu`, :math:`\sigma^2_* = \overline{\sigma^2_m} + \overline{(\mu_m-\mu_*)^2}`.
:func:`mixture_metrics` reports the NLPD per test point (mixture density, averaged) and the paper's
joint mixture :math:`-\log\frac1M\sum_m\prod_i\mathcal N(y_i\mid\mu_{mi}, \sigma^2_{mi})`.

References:
    1. Lázaro-Gredilla, Quiñonero-Candela, Rasmussen, Figueiras-Vidal (2010), Sparse spectrum Gaussian
       process regression, JMLR 11.
    2. Warren, Oliveira, Ramos (2024), Stein random feature regression, UAI.
    3. Implementer's notes ``shared/notes/srf.md`` (corrected constants, bandwidth, annealing, code-only
       details).
    4. Liu, Wang (2016), Stein variational gradient descent; Rønning et al. (2024), ELBOing Stein
       (numpyro.contrib.einstein).
    5. Loshchilov, Hutter (2019), Decoupled weight decay regularization (AdamW).
"""
from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import lax
from numpyro import handlers
from numpyro.contrib.einstein import SteinVI
from numpyro.contrib.einstein.stein_kernels import SteinKernel
from numpyro.distributions import Distribution, constraints
from numpyro.optim import _NumPyroOptim

from ..parameters import initial_value, instantiate
from .collapsed import CollapsedGP
from ..covariances import Kuf, Kuu
from ..features.random_fourier import RandomFourierFeatures, SpectralDensity, sample_frequencies
from ..kernels import check_inputs

__all__ = [
    "ssgp_log_marginal_likelihood", "SparseSpectrumNormal", "SparseSpectrumGP", "FrequencyRBFKernel", "FrequencyBlockMatrix",
    "FrequencySteinVI", "AdamW", "cyclical_annealing", "pairwise_median_sq", "SteinResult", "fit_stein",
    "fit_msrfr", "svgd", "stein_frequencies", "mixture_metrics", "stein_inference_data", "stein_diagnostics",
    "plot_spectral_density",
]

_LOG_2PI = math.log(2.0 * math.pi)


# --------------------------------------------------------------------------------------------------
# the sparse-spectrum marginal likelihood
# --------------------------------------------------------------------------------------------------
class SparseSpectrumNormal(Distribution):
    r""":math:`\mathcal N(\boldsymbol\mu, D + W^\top W)` with D diagonal (N,) and W of shape (K, N), K ≪ N.

    With :math:`\tilde W = WD^{-1/2}`, :math:`C = I_K + \tilde W\tilde W^\top = LL^\top`,
    :math:`\tilde{\mathbf r} = D^{-1/2}(\mathbf y - \boldsymbol\mu)` and
    :math:`\mathbf b = L^{-1}\tilde W\tilde{\mathbf r}` (Woodbury, determinant lemma):

    .. math::

        \log p(\mathbf y) = -\tfrac12\big[\tilde{\mathbf r}^\top\tilde{\mathbf r} - \mathbf b^\top\mathbf b
        + \textstyle\sum_n\log d_n + 2\sum_k\log L_{kk} + N\log 2\pi\big],

    which for :math:`D = \sigma^2 I`, :math:`W = \Phi` is the corrected eq. (9) of [2] (:math:`C =
    A/\sigma^2`). One :math:`O(NK^2)` product and one :math:`O(K^3)` Cholesky per evaluation.

    :param loc: mean (N,). :param diag: D (N,), positive. :param W: (K, N).
    """

    arg_constraints = {"loc": constraints.real_vector}
    support = constraints.real_vector
    reparametrized_params = ["loc"]

    def __init__(self, loc, diag, W, *, validate_args=None):
        self.loc, self.diag, self.W = jnp.asarray(loc), jnp.asarray(diag), jnp.asarray(W)
        N = self.W.shape[-1]
        if self.loc.shape != (N,) or self.diag.shape != (N,):
            raise ValueError(f"loc and diag must have shape ({N},) to match W {self.W.shape}, got "
                             f"{self.loc.shape} and {self.diag.shape}")
        super().__init__(batch_shape=(), event_shape=(N,), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        k1, k2 = jax.random.split(key)
        K, N = self.W.shape
        z = jax.random.normal(k1, tuple(sample_shape) + (K,), dtype=self.W.dtype)
        e = jax.random.normal(k2, tuple(sample_shape) + (N,), dtype=self.W.dtype)
        return self.loc + z @ self.W + jnp.sqrt(self.diag) * e

    def log_prob(self, value):
        K, N = self.W.shape
        isd = lax.rsqrt(self.diag)
        Wt = self.W * isd  # W D^{-1/2}
        C = jnp.eye(K, dtype=Wt.dtype) + Wt @ Wt.T  # I + W D⁻¹ Wᵀ  (= A/σ², A of eq. (9) [2])
        L = jnp.linalg.cholesky(C)
        r = ((value - self.loc) * isd).reshape(-1, N).T  # (N, B)
        b = jax.scipy.linalg.solve_triangular(L, Wt @ r, lower=True)  # (K, B)
        maha = jnp.sum(r * r, 0) - jnp.sum(b * b, 0)  # Woodbury
        logdet = jnp.sum(jnp.log(self.diag)) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(L)))  # determinant lemma
        maha = maha.reshape(jnp.shape(value)[:-1])
        return -0.5 * (maha + logdet + N * _LOG_2PI)  # Eq. (9) [2], corrected [3, §1.2]

    @property
    def mean(self):
        return self.loc

    @property
    def variance(self):
        return self.diag + jnp.sum(self.W ** 2, 0)

    def tree_flatten(self):
        return (self.loc, self.diag, self.W), None

    @classmethod
    def tree_unflatten(cls, aux_data, params):
        return cls(*params)


def _marginal(feature, kernel, X, noise_variance, mean=0.0):
    """y's marginal N(c1, σ²I + WᵀW), W = Rᵀ Kuu⁻¹ Kuf (= √s Φ for random Fourier features)."""
    W = Kuu(feature, kernel).whiten(Kuf(feature, kernel, X))  # (2R, N)
    N = X.shape[0]
    diag = jnp.broadcast_to(noise_variance, (N,)).astype(W.dtype)
    return SparseSpectrumNormal(jnp.broadcast_to(mean, (N,)).astype(W.dtype), diag, W)  # Eq. (9) [2]


def ssgp_log_marginal_likelihood(feature, kernel, X, y, noise_variance, mean=0.0):
    r""":math:`\log\mathcal N(\mathbf y\mid c\mathbf 1, s\Phi^\top\Phi + \sigma^2 I)` in
    :math:`O(NR^2 + R^3)` (module docstring; corrected eq. (9) of [2])."""
    X = feature.check_inputs(check_inputs(X, "X"))
    y = jnp.asarray(y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
    return _marginal(feature, kernel, X, noise_variance, mean).log_prob(y)


class SparseSpectrumGP(CollapsedGP):
    r"""The sparse-spectrum GP as a NumPyro model: :math:`\mathbf y\sim\mathcal N(c, s\Phi^\top\Phi +
    \sigma^2 I)` with the frequencies fixed, learned, or latent (module docstring).

    :param kernel: a stationary kernel template (``SquaredExponential`` or ``Matern*``); its
        ``variance`` is the signal variance s and its ``lengthscale`` (scalar or per dimension) scales
        the inputs. Fields may be numbers, Distributions (sites ``kernel_<field>``) or Params.
    :param likelihood: a :class:`~ppl_sparsegp.likelihoods.Gaussian` template (default noise prior
        LogNormal(−2, 1)).
    :param mean: constant mean c (number or Distribution).
    :param frequencies: Ω: an (R, D) array (fixed), a Param (maximum likelihood), a Distribution with
        event shape (R, D) (latent site ``feature_frequencies``), or None for the kernel's spectral
        density :class:`~ppl_sparsegp.features.random_fourier.SpectralDensity` (then give
        ``num_frequencies`` and ``input_dim``).
    :param init: how the point/particle guide initialises latent frequencies: ``"qmc"`` (scrambled
        Halton, the authors' choice), ``"mc"`` or ``"orf"``, from the kernel family's spectral density
        (each Stein particle gets its own key). Initialising at the prior mean would make every
        frequency equal, and the likelihood's symmetry would keep them equal.
    """

    def __init__(self, kernel, likelihood=None, mean=0.0, *, frequencies=None, num_frequencies=None,
                 input_dim=None, init: str = "qmc", name: str = "f"):
        if frequencies is None:
            if num_frequencies is None or input_dim is None:
                raise ValueError("give frequencies, or num_frequencies and input_dim for the kernel's "
                                 "spectral-density prior")
            frequencies = SpectralDensity(kernel, num_frequencies, input_dim)
        if init not in ("qmc", "mc", "orf"):
            raise ValueError(f"init must be 'qmc', 'mc' or 'orf', got {init!r}")
        self.init = init
        super().__init__(RandomFourierFeatures(frequencies), kernel, likelihood, mean, name=name)

    @property
    def latent_frequencies(self) -> bool:
        """True when Ω is a sample site (``feature_frequencies``)."""
        return isinstance(self.feature.frequencies, Distribution)

    def init_frequencies(self, rng_key):
        """A starting Ω drawn from the kernel family's spectral density with ``self.init``."""
        R, D = self.feature.num_frequencies, self.feature.input_dim
        return sample_frequencies(type(self.kernel), rng_key, R, D, self.init)

    def _frequency_point_mass(self):
        loc = numpyro.param("feature_frequencies_map", self.init_frequencies)
        return numpyro.sample("feature_frequencies", dist.Delta(loc, event_dim=2))

    def components(self, *, point: bool = False):
        if not (point and self.latent_frequencies):
            return super().components(point=point)
        # guide: a point mass at a random draw (see ``init``); the rest as in GPModel.point_guide
        omega = self._frequency_point_mass()
        kernel = instantiate(self.kernel, "kernel_", point=True)
        likelihood = instantiate(self.likelihood, "likelihood_", point=True)
        if isinstance(self.mean, Distribution):
            m = numpyro.param("mean_map", lambda k: initial_value(self.mean), constraint=self.mean.support)
            mean = numpyro.sample("mean", dist.Delta(m, event_dim=len(self.mean.event_shape)))
        else:
            mean = self.mean
        return kernel, likelihood, RandomFourierFeatures(omega), mean

    def model(self, X, y=None, *, likelihood_scale=1.0):
        """``y ~ N(c, sΦᵀΦ + σ²I)`` (observed when y is given); ``likelihood_scale`` tempers it."""
        kernel, likelihood, feature, c = self.components()
        X = feature.check_inputs(check_inputs(X, "X"))
        if y is not None:
            y = jnp.asarray(y)
            if y.shape != (X.shape[0],):
                raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
            likelihood.validate(y, "y")
        with handlers.scale(scale=likelihood_scale):
            numpyro.sample("y", _marginal(feature, kernel, X, likelihood.variance, c), obs=y)

    def guide(self, X=None, y=None, **kwargs):
        """Point masses on every site (Ω at a random draw): MAP / maximum likelihood under SVI."""
        return self.components(point=True)

    def particle_guide(self, X=None, y=None, **kwargs):
        """The SteinVI particle guide: a point mass on Ω only (param ``feature_frequencies_map``).

        Hyperparameters must be numbers or Params (model-level params, which SteinVI shares between
        particles); numpyro 0.22's SteinVI cannot hold guide params shared between particles whose
        shapes differ from the particles'."""
        return self._frequency_point_mass()

    def log_marginal_likelihood(self, values: dict, X, y):
        """:math:`\\log p(\\mathbf y\\mid\\Omega, \\theta)` at site/param values (e.g. one particle)."""
        kernel, likelihood, feature, c = self.components_from(values)
        return ssgp_log_marginal_likelihood(feature, kernel, X, jnp.asarray(y), likelihood.variance, c)

    def predict_particles(self, X_new, X, y, particles: dict):
        """The mixture predictive of M particles (Algorithm 2 of [2]).

        :param particles: ``{site or param: (M, ...)}`` values per particle (shared values broadcast).
        :returns: dict of :meth:`CollapsedGP.predict` (mixture ``f_mean``, ``f_var``, ``y_var`` and
            per-particle ``f_mean_draws``, ``f_var_draws``) plus ``y_var_draws``.
        """
        out = self.predict(X_new, X, y, samples=particles)
        noise = lax.map(lambda v: jnp.asarray(self.components_from(v)[1].variance), particles)
        out["y_var_draws"] = out["f_var_draws"] + jnp.reshape(noise, (-1, 1))
        return out


def mixture_metrics(y, mean_draws, var_draws, *, y_scale=1.0):
    r"""Test metrics of an equally weighted mixture of M Gaussian predictives.

    :param y: (N,) targets (standardised); ``mean_draws``, ``var_draws``: (M, N) per-component y
        predictives.
    :param y_scale: standard deviation of the target scaler (RMSE in original units).
    :returns: ``rmse`` (of the mixture mean, original units), ``nlpd_point`` (mean over test points of
        :math:`-\log\frac1M\sum_m\mathcal N(y_i\mid\mu_{mi},\sigma^2_{mi})`), ``nlpd_joint`` (the paper's
        :math:`-\log\frac1M\sum_m\prod_i\mathcal N(y_i\mid\mu_{mi},\sigma^2_{mi})`, summed over the test
        set) and ``nlpd_gaussian`` (the summed NLPD of Algorithm 2's moment-matched Gaussian).
    """
    y = jnp.asarray(y)
    mean_draws, var_draws = jnp.atleast_2d(mean_draws), jnp.atleast_2d(var_draws)
    M = mean_draws.shape[0]
    logp = -0.5 * (_LOG_2PI + jnp.log(var_draws) + (y - mean_draws) ** 2 / var_draws)  # (M, N)
    mu = jnp.mean(mean_draws, 0)
    var = jnp.mean(var_draws, 0) + jnp.var(mean_draws, 0)  # law of total variance
    nlpd_gauss = 0.5 * jnp.sum(_LOG_2PI + jnp.log(var) + (y - mu) ** 2 / var)
    return {
        "rmse": float(y_scale * jnp.sqrt(jnp.mean((y - mu) ** 2))),
        "nlpd_point": float(-jnp.mean(jax.scipy.special.logsumexp(logp, axis=0) - math.log(M))),
        "nlpd_joint": float(-(jax.scipy.special.logsumexp(jnp.sum(logp, 1)) - math.log(M))),
        "nlpd_gaussian": float(nlpd_gauss),
    }


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


def pairwise_median_sq(points):
    r"""Per-dimension median of :math:`(a_k - b_k)^2` over all ordered pairs of rows (self-pairs
    included), equal to ``jnp.median((P[:, None] - P[None]) ** 2, axis=(0, 1))`` but in
    :math:`O(n\log n)` memory and time per bisection step instead of sorting n² values."""
    points = jnp.asarray(points)
    n = points.shape[0]
    ks = jnp.array([(n * n - 1) // 2, n * n // 2])
    t = jax.vmap(lambda col: _kth_abs_difference(col, ks))(points.T)  # (D, 2) order statistics of |d|
    return 0.5 * jnp.sum(t ** 2, axis=1)


class FrequencyBlockMatrix:
    r"""The matrix-valued particle kernel :math:`K(\mathbf x, \mathbf y)` between two flattened
    frequency matrices X, Y (R × D): :math:`K_{(k,a),(l,b)} = \kappa(\mathbf y_k, \mathbf x_l)\delta_{ab}`
    [2, eq. (66)], held as the R × R matrix :math:`[\kappa(\mathbf y_k, \mathbf x_l)]`.

    ``K @ v`` (v the flattened R × D score of x) is row k: :math:`\sum_l\kappa(\mathbf y_k, \mathbf x_l)
    \mathbf v_l`; :meth:`divergence` is :math:`\sum_b\partial K_{(k,a),b}/\partial x_b =
    \sum_l\partial\kappa(\mathbf y_k,\mathbf x_l)/\partial x_{la}` [2, eq. (67)]. Indexing densifies
    (the stock SteinVI path; tests only). With ``bandwidth`` h (the RBF base of
    :class:`FrequencyRBFKernel`) the block and the divergence are computed in closed form, by matrix
    products, instead of by R² calls of ``base`` and of its gradient.
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
        return (self.block @ v.reshape(-1, self.D)).reshape(-1)  # Eq. (66) [2]

    def divergence(self):
        if self.h is not None:  # ∂κ(y_k, x_l)/∂x_l = κ_kl (y_k − x_l)/h
            K = self.block
            return ((jnp.sum(K, 1)[:, None] * self.Y - K @ self.X) / self.h).reshape(-1)  # Eq. (67) [2]
        grad_x = jax.grad(self.base, argnums=1)
        row = lambda yk: jnp.sum(jax.vmap(lambda xl: grad_x(yk, xl))(self.X), 0)  # noqa: E731
        return jax.vmap(row)(self.Y).reshape(-1)  # Eq. (67) [2]

    def to_dense(self):
        return jnp.kron(self.block, jnp.eye(self.D, dtype=self.X.dtype))

    def __getitem__(self, index):
        return self.to_dense()[index]


class FrequencyRBFKernel(SteinKernel):
    r"""The SVGD kernel of [2] on frequency particles: :math:`\kappa(\mathbf a,\mathbf b) =
    \exp(-\sum_k (a_k-b_k)^2/(2h_k))`, :math:`h_k` = ``bandwidth_scale`` × median over all pairs of the
    pooled frequencies of :math:`(a_k-b_k)^2` [3, §1.3] (no 1/log n factor).

    A particle is R frequencies of dimension ``input_dim`` flattened (R·D values). For R = 1 the kernel
    is scalar (``mode="norm"``: plain SVGD, e.g. SRF for a known kernel); for R > 1 it is the
    matrix-valued :class:`FrequencyBlockMatrix` (``mode="matrix"``, M-SRFR).

    :param input_dim: D, the dimension of one frequency.
    :param bandwidth_scale: the factor ``ls`` (default 1).
    """

    def __init__(self, input_dim: int, bandwidth_scale: float = 1.0):
        if isinstance(input_dim, bool) or not isinstance(input_dim, (int, np.integer)) or input_dim < 1:
            raise ValueError(f"input_dim must be a positive int, got {input_dim!r}")
        if not bandwidth_scale > 0:
            raise ValueError(f"bandwidth_scale must be positive, got {bandwidth_scale!r}")
        self.input_dim, self.bandwidth_scale = int(input_dim), float(bandwidth_scale)
        self.rows = None

    def init(self, rng_key, particles_shape):
        size = particles_shape[-1]
        if size % self.input_dim:
            raise ValueError(f"a particle has {size} values, not a multiple of input_dim={self.input_dim}; "
                             "the Stein particles must be the frequencies only (mark other guide params "
                             "as non-mixture)")
        self.rows = size // self.input_dim

    @property
    def mode(self):
        return "norm" if self.rows in (None, 1) else "matrix"

    def bandwidth(self, particles):
        """h (D,) from all particles (P, R·D), pooled to (P·R, D)."""
        pooled = particles.reshape(-1, self.input_dim)
        h = self.bandwidth_scale * pairwise_median_sq(pooled)
        return lax.stop_gradient(jnp.maximum(h, jnp.finfo(pooled.dtype).tiny))

    def compute(self, rng_key, particles, particle_info, loss_fn):
        h = self.bandwidth(particles)

        def base(a, b):
            return jnp.exp(-0.5 * jnp.sum((a - b) ** 2 / h))

        if self.mode == "norm":
            return base
        return lambda x, y: FrequencyBlockMatrix(base, x, y, self.input_dim, h)


class FrequencySteinVI(SteinVI):
    """:class:`numpyro.contrib.einstein.SteinVI` with the closed-form divergence of
    :class:`FrequencyBlockMatrix` (module docstring: why); every other kernel goes to SteinVI."""

    def _kernel_grad(self, kernel, x, y):
        K = kernel(x, y)
        if isinstance(K, FrequencyBlockMatrix):
            return K.divergence()
        return super()._kernel_grad(kernel, x, y)


# --------------------------------------------------------------------------------------------------
# optimiser and annealing
# --------------------------------------------------------------------------------------------------
class AdamW(_NumPyroOptim):
    r"""Adam with decoupled weight decay [5] and optional per-parameter step sizes:
    :math:`\theta \leftarrow \theta - \eta_{\text{name}}(\hat m/(\sqrt{\hat v}+\epsilon) + \lambda\theta)`
    (optax's ``chain(scale_by_adam(), add_decayed_weights(λ), scale(-η))``, the authors' optimiser).

    :param step_size: η for every parameter, or a callable ``name -> η``.
    :param weight_decay: λ.
    """

    def __init__(self, step_size, weight_decay: float = 0.0, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-8):
        lr = step_size if callable(step_size) else (lambda name: step_size)

        def optim_fn():
            def init(params):
                zeros = jax.tree.map(jnp.zeros_like, params)
                return params, zeros, zeros

            def update(i, g, state):
                params, m, v = state
                m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
                v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g ** 2, v, g)
                t = i + 1
                new = {}
                for name in params:
                    m_hat = jax.tree.map(lambda x: x / (1 - b1 ** t), m[name])
                    v_hat = jax.tree.map(lambda x: x / (1 - b2 ** t), v[name])
                    new[name] = jax.tree.map(
                        lambda p, a, b: p - lr(name) * (a / (jnp.sqrt(b) + eps) + weight_decay * p),
                        params[name], m_hat, v_hat)
                return new, m, v

            return init, update, lambda state: state[0]

        super().__init__(optim_fn)


def cyclical_annealing(t, num_steps: int, num_cycles: int = 5, power: float = 0.0):
    r""":math:`\gamma(t) = (\operatorname{mod}(t, T/c)/(T/c))^{s}` [3, §1.3]; ``power=0`` gives γ ≡ 1."""
    period = num_steps / num_cycles
    return jnp.power(jnp.mod(jnp.asarray(t, dtype=jnp.result_type(float)), period) / period, power)


# --------------------------------------------------------------------------------------------------
# running SteinVI
# --------------------------------------------------------------------------------------------------
class SteinResult(NamedTuple):
    """``particles``: ``{site: (P, ...)}``; ``shared``: parameters common to all particles (constrained);
    ``params``: SteinVI's constrained params; ``losses``: Stein force norm per step; ``time``: seconds
    (compilation included); ``stein``/``state``: the SteinVI object and its final state."""

    particles: dict
    shared: dict
    params: dict
    losses: Any
    time: float
    stein: Any
    state: Any

    def values(self):
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


def fit_stein(model, guide, rng_key, *args, num_particles: int, num_steps: int, input_dim: int,
              particle_param: str, lr: float = 0.1, lr_shared: float | None = None, repulsion: float = 1.0,
              annealing_power: float = 0.0, num_cycles: int = 5, weight_decay: float = 0.0,
              bandwidth_scale: float = 1.0, num_elbo_particles: int = 1, optim=None, **kwargs) -> SteinResult:
    r"""SVGD through SteinVI: point-mass particles at the guide param ``particle_param`` (every other
    guide param is shared by the particles), :class:`FrequencyRBFKernel`, :class:`AdamW`, loss
    temperature :math:`\gamma(t)/P` and repulsion temperature α (module docstring).

    :param model, guide: NumPyro callables; the guide must emit ``particle_param`` as the loc of a
        Delta site (e.g. :meth:`SparseSpectrumGP.guide`) and initialise it from its rng key.
    :param args, kwargs: model/guide arguments.
    :param num_elbo_particles: draws for the shared parameters' gradient (each picks a random particle).
    :param optim: a NumPyro optimiser replacing the default :class:`AdamW` (``lr``, ``lr_shared``,
        ``weight_decay`` are then unused).
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
    start = time.perf_counter()
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
    jax.block_until_ready(params)
    elapsed = time.perf_counter() - start
    particles = {_site_name(particle_param): params[particle_param]}
    shared = {_site_name(k): v for k, v in params.items() if k != particle_param}
    return SteinResult(particles, shared, params, losses, elapsed, stein, state)


def fit_msrfr(gp: SparseSpectrumGP, X, y, rng_key, *, num_particles: int, num_steps: int = 1000,
              lr: float = 0.1, lr_shared: float | None = None, repulsion: float = 1.0,
              annealing_power: float = 0.0, num_cycles: int = 5, weight_decay: float = 1e-4,
              likelihood_scale: float = 1.0, bandwidth_scale: float = 1.0,
              num_elbo_particles: int = 1) -> SteinResult:
    r"""M-SRFR [2, §4.2–4.4]: M particles :math:`\Omega_m`, target :math:`\log p(\mathbf y\mid\Omega_m)
    + \log p(\Omega_m)`, hyperparameters shared, through SteinVI (:func:`fit_stein`).

    :param gp: a :class:`SparseSpectrumGP` with latent frequencies (a prior on Ω).
    :param repulsion: α, the repulsion temperature (α = 1 with ``likelihood_scale=1`` is the Bayesian
        posterior).
    :param likelihood_scale: tempering of the likelihood; the authors' code uses 1/M [3, §1.6].
    :param lr, lr_shared: Adam step sizes of the particles and of the shared hyperparameters.
    :param num_elbo_particles: random particles per step for the shared parameters' gradient (default 1:
        an unbiased one-particle estimate of the mean over particles; each extra one costs an SSGP gradient).
    """
    if not isinstance(gp, SparseSpectrumGP) or not gp.latent_frequencies:
        raise ValueError("fit_msrfr needs a SparseSpectrumGP whose frequencies have a prior (a Distribution)")
    sampled = sorted(set(gp.hyperparameter_sites()) - {"feature_frequencies"})
    if sampled:
        raise ValueError(f"fit_msrfr shares hyperparameters between particles: give them as numbers or "
                         f"Params, not priors (sampled sites: {sampled})")
    X = gp.feature.check_inputs(check_inputs(X, "X"))
    y = jnp.asarray(y)
    return fit_stein(gp.model, gp.particle_guide, rng_key, X, y, num_particles=num_particles, num_steps=num_steps,
                     input_dim=gp.feature.input_dim, particle_param="feature_frequencies_map", lr=lr,
                     lr_shared=lr_shared, repulsion=repulsion, annealing_power=annealing_power,
                     num_cycles=num_cycles, weight_decay=weight_decay, bandwidth_scale=bandwidth_scale,
                     num_elbo_particles=num_elbo_particles,
                     likelihood_scale=likelihood_scale)


def svgd(log_density, particles, *, num_steps: int, lr: float = 0.1, repulsion: float = 1.0,
         annealing_power: float = 0.0, num_cycles: int = 5, weight_decay: float = 0.0,
         bandwidth_scale: float = 1.0, optim=None):
    r"""Plain SVGD for a target known up to a constant: the step SteinVI takes with a point-mass guide,
    :class:`FrequencyRBFKernel`, loss temperature :math:`\gamma(t)/P` and repulsion α (module
    docstring: why a separate function), vectorised:

    .. math::

        \phi(\mathbf x_i) = \frac1P\sum_j\big[\gamma(t)\,\kappa(\mathbf x_i, \mathbf x_j)\nabla\log p(\mathbf x_j)
        + \alpha\,\nabla_{\mathbf x_j}\kappa(\mathbf x_i, \mathbf x_j)\big],

    and the optimiser (default :class:`AdamW`) ascends φ.

    :param log_density: ``x (D,) -> log p(x)`` (unnormalised).
    :param particles: starting points (P, D).
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
        K = FrequencyBlockMatrix(None, x, x, D, kernel.bandwidth(x))
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


def stein_frequencies(kernel, rng_key, num_frequencies: int, input_dim: int, *, num_steps: int = 2000,
                      lr: float = 0.3, annealing_power: float = 0.5, num_cycles: int = 5,
                      bandwidth_scale: float | None = None, weight_decay: float = 1e-4,
                      init: str = "mc") -> jnp.ndarray:
    r"""Stein random features for a known kernel [2, §5.1]: R particles, each one frequency, moved by
    SVGD (:func:`svgd`) towards the kernel's normalised spectral density (only :math:`\nabla\log p` is
    used).

    Defaults follow the authors' notebook [3, §1.4] (MC initialisation, Adam 0.3 with weight decay
    1e-4, annealing c = 5, s = 0.5) except the number of steps (15 000 there) and the bandwidth: the
    default ``bandwidth_scale=None`` means D (h_k = D × the per-dimension median, about the median
    squared distance). With the notes' scale 1 the particle kernel between typical frequencies is
    :math:`e^{-O(D)}`, the repulsion vanishes for D ≳ 8 and the particles collapse towards the mode
    (R = 200, D = 8: particle variance 0.31 instead of 1, Gram error 0.53, worse than Monte Carlo;
    D = 16: 2.4); with scale D they reach the authors' published errors
    (``inference/benchmarks/srf_kernel_approx.py``, columns ``svgd`` and ``svgd_d``).

    :returns: Ω (R, D), unit-lengthscale frequencies.
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


# --------------------------------------------------------------------------------------------------
# ArviZ and plots
# --------------------------------------------------------------------------------------------------
def stein_inference_data(result: SteinResult, gp: SparseSpectrumGP | None = None, X=None, y=None):
    """ArviZ InferenceData of a Stein particle posterior.

    ``posterior``: particle sites with dims ``(chain=1, draw=1, particle, ...)`` (frequencies:
    ``particle, frequency, input_dim``) and the shared parameters without a particle dim;
    ``sample_stats``: ``stein_force`` (the force norm per step, dim ``step``) and, with gp/X/y,
    ``log_marginal_likelihood`` per particle.
    """
    import arviz as az

    def named_dims(name, value, particle):
        lead = ["particle"] if particle else []
        rest = list(jnp.shape(value))[1 if particle else 0:]
        if name in ("feature_frequencies", "omega") and len(rest) == 2:
            return lead + ["frequency", "input_dim"]
        return lead + [f"{name}_dim_{i}" for i in range(len(rest))]

    posterior, dims = {}, {}
    for name, v in result.particles.items():
        posterior[name] = np.asarray(v)[None, None]
        dims[name] = named_dims(name, v, True)
    for name, v in result.shared.items():
        if name in posterior or name.endswith("_map"):
            continue
        posterior[name] = np.asarray(v)[None, None]
        dims[name] = named_dims(name, v, False)
    stats = {"stein_force": np.asarray(result.losses)[None, None]}
    dims["stein_force"] = ["step"]
    if gp is not None and X is not None and y is not None:
        lml = lax.map(lambda v: gp.log_marginal_likelihood(v, X, y), result.values())
        stats["log_marginal_likelihood"] = np.asarray(lml)[None, None]
        dims["log_marginal_likelihood"] = ["particle"]
    idata = az.from_dict(posterior=posterior, sample_stats=stats, dims=dims)
    idata.posterior.attrs["inference"] = "SteinVI (point-mass particles: SVGD)"
    idata.posterior.attrs["training_time_s"] = float(result.time)
    return idata


def stein_diagnostics(idata, site: str = "feature_frequencies") -> dict:
    """Convergence and diversity of a Stein particle posterior (from :func:`stein_inference_data`).

    :returns: ``num_particles``; ``stein_force_initial`` / ``stein_force_final`` (norm of the update
        direction; it should fall and level off); ``particle_distance_min`` / ``_mean`` (root-mean-square
        difference per entry between two particles: near 0 means particles collapsed onto each other);
        with per-particle log marginal likelihoods, their ``lml_mean`` / ``lml_sd`` and ``lml_weight_ess``
        (effective number of particles if they were weighted by evidence: 1 = one particle dominates).
    """
    W = np.asarray(idata.posterior[site].values[0, 0])
    P = W.shape[0]
    flat = W.reshape(P, -1)
    d = np.sqrt(np.mean((flat[:, None] - flat[None]) ** 2, axis=-1))
    off = d[~np.eye(P, dtype=bool)]
    force = np.asarray(idata.sample_stats["stein_force"].values).reshape(-1)
    out = {"num_particles": int(P), "stein_force_initial": float(force[0]), "stein_force_final": float(force[-1]),
           "particle_distance_min": float(off.min()) if P > 1 else 0.0,
           "particle_distance_mean": float(off.mean()) if P > 1 else 0.0}
    if "log_marginal_likelihood" in idata.sample_stats:
        lml = np.asarray(idata.sample_stats["log_marginal_likelihood"].values).reshape(-1)
        w = np.exp(lml - lml.max())
        w /= w.sum()
        out.update(lml_mean=float(lml.mean()), lml_sd=float(lml.std()), lml_weight_ess=float(1.0 / np.sum(w ** 2)))
    return out


def plot_spectral_density(frequencies, prior: Distribution, path=None, *, max_dims: int = 4, rng_key=None):
    """Histogram of learned frequencies (pooled over particles) against the prior, per input dimension.

    :param frequencies: (..., D) learned unit-lengthscale frequencies (any leading dims, pooled).
    :param prior: the frequency prior (its samples give the reference histogram).
    :param path: write a PNG there (else return the figure).
    """
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    W = np.asarray(frequencies).reshape(-1, np.shape(frequencies)[-1])
    key = jax.random.PRNGKey(0) if rng_key is None else rng_key
    ref = np.asarray(prior.sample(key, (max(1, 20000 // int(np.prod(prior.event_shape[:-1] or (1,)))),)))
    ref = ref.reshape(-1, W.shape[1])
    D = min(W.shape[1], max_dims)
    fig, axes = plt.subplots(1, D, figsize=(3.2 * D, 2.8), squeeze=False)
    for d, ax in enumerate(axes[0]):
        lo, hi = np.quantile(np.concatenate([W[:, d], ref[:, d]]), [0.005, 0.995])
        bins = np.linspace(lo, hi, 40)
        ax.hist(ref[:, d], bins=bins, density=True, histtype="step", color="k", label="prior")
        ax.hist(W[:, d], bins=bins, density=True, alpha=0.6, label="learned")
        ax.set_xlabel(f"$\\omega_{d}$ (unit lengthscale)")
    axes[0][0].legend()
    axes[0][0].set_ylabel("density")
    fig.tight_layout()
    if path is None:
        return fig
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
