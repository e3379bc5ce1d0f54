r"""Sparse-spectrum GPs with fixed, learned or latent frequencies (SSGP, SRF, M-SRFR): the model.

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
posterior under SteinVI with :meth:`SparseSpectrumGP.particle_guide` (the Stein inference itself, SRF
and M-SRFR, is :mod:`ppl_sparsegp.stein`).

**Prediction** (Algorithm 2 of [2]): per particle (or posterior draw) the SSGP posterior (eqs. 7–8),
which is the optimal q(u) of the collapsed bound: the library's
:func:`~ppl_sparsegp.approximations.collapsed.optimal_whitened_q` of the statistics
:meth:`SufficientStatistics.from_kuf <ppl_sparsegp.covariances.SufficientStatistics.from_kuf>`, through
:func:`~ppl_sparsegp.conditionals.conditional`; mixed with equal weights:
:math:`\mu_* = \bar\mu`, :math:`\sigma^2_* = \overline{\sigma^2_m} + \overline{(\mu_m-\mu_*)^2}`.
:func:`~ppl_sparsegp.diagnostics.mixture_metrics` reports the NLPD per test point (mixture density, averaged)
and the paper's joint mixture :math:`-\log\frac1M\sum_m\prod_i\mathcal N(y_i\mid\mu_{mi}, \sigma^2_{mi})`.

References:
    1. Lázaro-Gredilla, Quiñonero-Candela, Rasmussen, Figueiras-Vidal (2010), Sparse spectrum Gaussian
       process regression, JMLR 11.
    2. Warren, Oliveira, Ramos (2024), Stein random feature regression, UAI.
    3. Implementer's notes ``shared/notes/srf.md`` (corrected constants, bandwidth, annealing, code-only
       details).
"""
from __future__ import annotations

import copy
import math
from typing import Annotated, Any, Optional

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax import lax
from jax.typing import ArrayLike
from numpyro import handlers
from numpyro.distributions import Distribution, constraints

from ..covariances import Kuf, Kuu, SufficientStatistics
from ..features.random_fourier import RandomFourierFeatures, SpectralDensity, sample_frequencies
from ..kernels import check_inputs
from ..likelihoods import Gaussian
from ..linalg import Dense  # the hints name it (get_type_hints resolves them)
from ..parameters import initial_value, instantiate
from ..validation import (
    AFeature,
    AKernel,
    ALikelihood,
    AName,
    MaybeCount,
    NonNegative,
    OneOf,
    OrNone,
    Positive,
    RngKey,
    Samples,
    Template,
    validated,
)
from .base import GPModel
from .collapsed import optimal_whitened_q
from .common import (
    AKey,
    DataInputs,
    FittedParams,
    LatentMean,
    MaybeDraws,
    MaybeInputs,
    MaybeParams,
    MaybeTargets,
    Targets,
    require,
    site_names,
)

__all__ = ["ssgp_log_marginal_likelihood", "SparseSpectrumNormal", "SparseSpectrumGP"]

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

    :param loc: mean (N,).
    :param diag: D (N,), positive.
    :param W: (K, N).
    :param validate_args: NumPyro's flag.
    :raises ValueError: when loc or diag is not (N,) for W's N.
    """

    arg_constraints = {"loc": constraints.real_vector}
    support = constraints.real_vector
    reparametrized_params = ["loc"]

    def __init__(self, loc: ArrayLike, diag: ArrayLike, W: ArrayLike, *, validate_args: Optional[bool] = None) -> None:
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

    def log_prob(self, value: ArrayLike) -> jax.Array:
        """log p(value) (...,) of ``value`` (..., N) (the class docstring's Woodbury form)."""
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

    def tree_flatten(self) -> tuple[tuple[jax.Array, jax.Array, jax.Array], None]:
        return (self.loc, self.diag, self.W), None

    @classmethod
    def tree_unflatten(cls, aux_data: None, params: tuple[jax.Array, jax.Array, jax.Array]) -> SparseSpectrumNormal:
        """Rebuild from ``tree_flatten``'s (loc (N,), diag (N,), W (K, N)) (jax.tree_util's protocol)."""
        return cls(*params)


def _marginal(feature, kernel, X, noise_variance, mean=0.0):
    """y's marginal N(c1, σ²I + WᵀW), W = Rᵀ Kuu⁻¹ Kuf (= √s Φ for random Fourier features)."""
    W = Kuu(feature, kernel).whiten(Kuf(feature, kernel, X))  # (2R, N)
    N = X.shape[0]
    diag = jnp.broadcast_to(noise_variance, (N,)).astype(W.dtype)
    return SparseSpectrumNormal(jnp.broadcast_to(mean, (N,)).astype(W.dtype), diag, W)  # Eq. (9) [2]


@validated
def ssgp_log_marginal_likelihood(feature: AFeature, kernel: AKernel, X: DataInputs, y: Targets,
                                 noise_variance: Positive, mean: LatentMean = 0.0) -> jax.Array:
    r""":math:`\log\mathcal N(\mathbf y\mid c\mathbf 1, s\Phi^\top\Phi + \sigma^2 I)` in
    :math:`O(NR^2 + R^3)` (module docstring; corrected eq. (9) of [2])."""
    X = feature.check_inputs(check_inputs(X, "X"))
    y = jnp.asarray(y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
    return _marginal(feature, kernel, X, noise_variance, mean).log_prob(y)


class SparseSpectrumGP(GPModel):
    r"""The sparse-spectrum GP as a NumPyro model: :math:`\mathbf y\sim\mathcal N(c, s\Phi^\top\Phi +
    \sigma^2 I)` with the frequencies fixed, learned, or latent (module docstring).

    Derived from the shared :class:`~ppl_sparsegp.approximations.base.GPModel` (templates → sites,
    validation, point values); the weights are integrated out analytically as in the collapsed bound,
    whose shared functions it calls (the statistics ``SufficientStatistics.from_kuf`` and
    ``optimal_whitened_q`` for prediction), but the bound itself is not its model: for random Fourier
    features the marginal likelihood is exact (:class:`SparseSpectrumNormal`).

    :meth:`predict` has the signature of every approximation (``X_new, *, params, samples``); the
    training data it conditions on are those of :meth:`with_data`.

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
    :param num_frequencies: R, the number of frequencies of the spectral-density prior; used only when
        ``frequencies`` is None.
    :param input_dim: D, the input dimension of that prior; used only when ``frequencies`` is None.
    :param init: how the point/particle guide initialises latent frequencies: ``"qmc"`` (scrambled
        Halton, the authors' choice), ``"mc"`` or ``"orf"``, from the kernel family's spectral density
        (each Stein particle gets its own key). Initialising at the prior mean would make every
        frequency equal, and the likelihood's symmetry would keep them equal.
    :param name: name of the latent function, kept as ``self.name`` as by every
        :class:`~ppl_sparsegp.approximations.base.GPModel` (default ``"f"``); no site carries it, since the
        weights are integrated out and the observed site is ``y``.
    :raises ValueError: when ``frequencies`` is None and ``num_frequencies`` or ``input_dim`` is missing,
        for an unknown ``init``, or for a likelihood that is not Gaussian.
    :raises TypeError: for a kernel or likelihood that is not one (as every
        :class:`~ppl_sparsegp.approximations.base.GPModel`).
    """

    @validated
    def __init__(self, kernel: AKernel, likelihood: Annotated[Any, OrNone(ALikelihood.__metadata__[0])] = None,
                 mean: LatentMean = 0.0, *,
                 frequencies: Annotated[Any, OrNone(Template(rank=2, positive=False))] = None,
                 num_frequencies: MaybeCount = None, input_dim: MaybeCount = None,
                 init: Annotated[str, OneOf("qmc", "mc", "orf")] = "qmc", name: AName = "f"):
        if frequencies is None:
            if num_frequencies is None or input_dim is None:
                raise ValueError("give frequencies, or num_frequencies and input_dim for the kernel's "
                                 "spectral-density prior")
            frequencies = SpectralDensity(kernel, num_frequencies, input_dim)
        if init not in ("qmc", "mc", "orf"):
            raise ValueError(f"init must be 'qmc', 'mc' or 'orf', got {init!r}")
        self.init, self.data = init, None
        super().__init__(RandomFourierFeatures(frequencies), kernel, likelihood, mean, name=name)
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError("SparseSpectrumGP needs a Gaussian likelihood (its weights are integrated out "
                             f"analytically); got {type(self.likelihood).__name__}")

    #: the factor ``y`` is one N-variate Gaussian (the weights couple the observations): no pointwise terms
    pointwise_likelihood = False

    @property
    def latent_frequencies(self) -> bool:
        """True when Ω is a sample site (``feature_frequencies``)."""
        return isinstance(self.feature.frequencies, Distribution)

    @validated
    def init_frequencies(self, rng_key: RngKey) -> jax.Array:
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

    # --- model and guides ---------------------------------------------------------------------------
    @validated
    def model(self, X: DataInputs, y: MaybeTargets = None, *, likelihood_scale: NonNegative = 1.0):
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

    @validated
    def guide(self, X: MaybeInputs = None, y: MaybeTargets = None, **kwargs):
        """Point masses on every site (Ω at a random draw): MAP / maximum likelihood under SVI."""
        return self.components(point=True)

    @validated
    def particle_guide(self, X: MaybeInputs = None, y: MaybeTargets = None, **kwargs):
        """The SteinVI particle guide: a point mass on Ω only (param ``feature_frequencies_map``).

        Hyperparameters must be numbers or Params (model-level params, which SteinVI shares between
        particles); numpyro 0.22's SteinVI cannot hold guide params shared between particles whose
        shapes differ from the particles'."""
        return self._frequency_point_mass()

    @validated
    def log_marginal_likelihood(self, values: FittedParams, X: DataInputs, y: Targets) -> jax.Array:
        """:math:`\\log p(\\mathbf y\\mid\\Omega, \\theta)` at site/param values (e.g. one particle)."""
        kernel, likelihood, feature, c = self.components_from(values)
        return ssgp_log_marginal_likelihood(feature, kernel, X, jnp.asarray(y), likelihood.variance, c)

    # --- prediction ---------------------------------------------------------------------------------
    @validated
    def constructor_argument(self, name: AName) -> Any:
        """:meth:`~ppl_sparsegp.GPModel.constructor_argument`; ``frequencies`` are the feature's (given: then
        ``num_frequencies`` and ``input_dim`` are not used, None)."""
        if name == "frequencies":
            return self.feature.frequencies
        if name in ("num_frequencies", "input_dim"):
            return None
        return super().constructor_argument(name)

    @validated
    def with_data(self, X: MaybeInputs, y: MaybeTargets) -> "SparseSpectrumGP":
        """This model holding its training data (X, y) for :meth:`predict` and :meth:`optimal_q` (a shallow
        copy; the original is unchanged). Cheap, and allowed inside ``jit``."""
        out = copy.copy(self)
        out.data = (X, y)
        return out

    def _training_data(self, method: str):
        if self.data is None:
            raise ValueError(f"{type(self).__name__}.{method} needs the training data: call "
                             f"gp.with_data(X, y).{method}(...)")
        return self.data

    def _checked_data(self, X, y):
        X, y = self._check_data(X, y, self.likelihood)
        if y is None:
            raise ValueError(f"{type(self).__name__} conditions on the training targets: y is None")
        return X, y

    @staticmethod
    def _weight_posterior(components, X, y):
        """The optimal whitened q(v) of the weights (the exact SSGP posterior, eqs. 7–8 of [2]) for one
        set of concrete components: the collapsed bound's shared ``optimal_whitened_q``."""
        kernel, likelihood, feature, c = components
        X = feature.check_inputs(X)
        stats = SufficientStatistics.from_kuf(Kuf(feature, kernel, X), y - c, keep_root=True)
        return optimal_whitened_q(Kuu(feature, kernel), stats, likelihood.variance)

    def optimal_q(self, values: dict, X: Optional[ArrayLike] = None,
                  y: Optional[ArrayLike] = None) -> tuple[jax.Array, Dense]:
        """The whitened weight posterior q(v) = N(m_v, S_v) at the given site values (one particle or
        posterior draw, or ``point_values(svi_result.params)``; a missing site raises ``ValueError``), for
        the given (X (N, D), y (N,)), else the data the model holds (:meth:`with_data`). Returns
        ``(m_v, S_v)``: the mean (M,) and the covariance, a :class:`~ppl_sparsegp.linalg.Dense` (M, M)."""
        if X is None and y is None:
            X, y = self._training_data("optimal_q")
        require(f"{type(self).__name__}.optimal_q", "values", values,
                site_names(self, self.components, "sample"),
                "pass gp.point_values(svi_result.params) or one particle of SteinResult.values()")
        X, y = self._checked_data(X, y)
        return self._weight_posterior(self.components_from(values), X, y)

    @validated
    def predict(self, X_new: DataInputs, *, params: MaybeParams = None, samples: MaybeDraws = None) -> dict[str,
                jax.Array]:
        """Predictive marginals at X_new, conditioned on the data the model holds (:meth:`with_data`).

        ``params`` (SVI: the point guide's params) give ``f_mean``, ``f_var``, ``y_mean``, ``y_var``;
        ``samples`` (``{site: (S, ...)}``: posterior draws or Stein particles) give the equally weighted
        mixture's ``f_mean``, ``f_var``, ``y_mean``, ``y_var`` (law of total variance) and the
        per-component ``f_mean_draws``, ``f_var_draws``, ``y_var_draws``.
        """
        return self._gaussian_predict(
            X_new, params, samples, lambda: self._checked_data(*self._training_data("predict")),
            lambda values, X, y: self._weight_posterior(self.components_from(values), X, y))

    @validated
    def predict_particles(self, X_new: DataInputs, X: DataInputs, y: Targets, particles: Samples) -> dict[str,
                          jax.Array]:
        """The mixture predictive of M particles (Algorithm 2 of [2]): ``gp.with_data(X, y).predict(X_new,
        samples=particles)``.

        :param particles: ``{site or param: (M, ...)}`` values per particle (shared values broadcast, e.g.
            ``SteinResult.values()``).
        :returns: mixture ``f_mean``, ``f_var``, ``y_mean``, ``y_var`` and per-particle ``f_mean_draws``,
            ``f_var_draws``, ``y_var_draws`` (:meth:`predict`).
        """
        return self.with_data(X, y).predict(X_new, samples=particles)

    @validated
    def posterior_predictive(self, samples: Samples, rng_key: AKey, X: DataInputs, y: MaybeTargets = None,
                             **model_kwargs) -> dict:
        """y ~ N(m_s, v_s + σ_s²) per posterior draw s: the per-draw predictive marginals at X conditioned
        on (X, y) (the weights' posterior given the draw), as for the collapsed bound; ``samples``
        ``{site: (chain, draw, ...)}``."""
        lead = next(iter(samples.values())).shape[:2]
        flat = {k: jnp.reshape(v, (-1,) + v.shape[2:]) for k, v in samples.items()}
        out = self.with_data(X, y).predict(X, samples=flat)
        scale = jnp.sqrt(out["y_var_draws"])
        draws = out["f_mean_draws"] + scale * jax.random.normal(rng_key, scale.shape, scale.dtype)
        return {"y": jnp.reshape(draws, lead + draws.shape[1:])}
