r"""The collapsed Gaussian bound (Titsias 2009) and the exact GP marginal likelihood.

With :math:`W = R^\top K_{uu}^{-1}K_{uf}` (so :math:`Q_{ff} = W^\top W`) and
:math:`B = I + WW^\top/\sigma^2`,

.. math::

    \mathcal L = \log\mathcal N(\mathbf y\mid 0, Q_{ff}+\sigma^2 I)
                 - \tfrac{1}{2\sigma^2}\operatorname{tr}(K_{ff}-Q_{ff})
    = -\tfrac N2\log 2\pi\sigma^2 - \tfrac12\log|B| - \tfrac{\mathbf y^\top\mathbf y}{2\sigma^2}
      + \tfrac{\|L_B^{-1}W\mathbf y\|^2}{2\sigma^4} - \tfrac{\sum_n k_{nn}}{2\sigma^2}
      + \tfrac{\operatorname{tr}(WW^\top)}{2\sigma^2}.

Everything depends on the data only through the sufficient statistics
:math:`A = K_{uf}K_{fu}`, :math:`\mathbf c = K_{uf}\mathbf y`, :math:`\mathbf y^\top\mathbf y`, N and
:math:`\sum_n k(\mathbf x_n,\mathbf x_n)` [2, §5.2]; when Kuf does not depend on the hyperparameters
(VFF with all inputs inside the box) they are computed once and each step costs O(M³).

Numerics. :math:`WW^\top` is never formed as :math:`R^\top K_{uu}^{-1} A K_{uu}^{-1} R`: that squares
the condition number of Kuu, and with inducing points on a dense grid or long lengthscales it loses
positive definiteness (NaN) or exceeds the exact value. It is formed as :math:`GG^\top` from a square
root :math:`F` of A (:math:`A = FF^\top`), :math:`G = R^\top K_{uu}^{-1} F`: on data F is
:math:`K_{uf}` itself (so G = W, the textbook form), for precomputed statistics F comes from A's
eigendecomposition once (:meth:`SufficientStatistics.with_root`; accurate when Kuf is well conditioned,
as VFF's basis is: measured to 2e-13 against the data path; for inducing points keep the data path,
whose root is Kuf). Then B ⪰ I by construction, and the trace term
:math:`\sum_n k_{nn} - \|G\|_F^2 \ge 0` is clipped at zero, its exact sign. In float32 the Cholesky
factor of B comes from a QR factorisation of :math:`[G^\top/\sigma; I]` instead of from B itself.

References:
    1. Titsias (2009), Variational learning of inducing variables in sparse Gaussian processes.
    2. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, eqs. 29–30.
"""
from __future__ import annotations

import copy
import math
from typing import Annotated, Any, Optional

import jax
import jax.numpy as jnp
import numpyro
from jax.scipy.linalg import cho_solve, solve_triangular
from jax.typing import ArrayLike
from numpyro.distributions import Distribution

from ..covariances import Kuf, Kuu, SufficientStatistics
from ..kernels import check_inputs, constant_kernel_diagonal
from ..likelihoods import Gaussian
from ..linalg import Dense
from ..linalg.woodbury import capacitance_cholesky, whiten_blocks as _whiten, woodbury_log_density
from ..parameters import Param, check_concrete_module, check_finite, check_positive, free_leaves
from ..validation import (
    AFeature,
    AKernel,
    ALikelihood,
    AName,
    InstanceOf,
    NonNegative,
    OrNone,
    Positive,
    Samples,
    validated,
)
from .base import GPModel, check_targets
from .common import (
    AKey,
    AnOperator,
    AStatistics,
    DataInputs,
    LatentMean,
    MaybeDraws,
    MaybeInputs,
    MaybeParams,
    MaybeStatistics,
    MaybeTargets,
    Targets,
    require,
    site_names,
)

_LIKELIHOOD = ALikelihood.__metadata__[0]

__all__ = ["CollapsedGP", "collapsed_elbo", "collapsed_elbo_from_stats", "optimal_whitened_q",
           "exact_log_marginal_likelihood", "capacitance_cholesky", "woodbury_log_density"]


def _whitened_stats(Kmm, stats: SufficientStatistics, noise_variance):
    """(L_B, ‖G‖²_F, W y) with G = Rᵀ Kuu⁻¹ F for a root F of A (module docstring), L_B the Cholesky
    factor of B = I + GGᵀ/σ² and W y = Rᵀ Kuu⁻¹ c. Nothing squares Kuu's condition number."""
    G = _whiten(Kmm, stats.with_root().root)  # (M', r)
    Wy = _whiten(Kmm, stats.c) if stats.y is None else G @ stats.y
    return capacitance_cholesky(G, noise_variance), jnp.sum(G * G), Wy


@validated
def collapsed_elbo_from_stats(Kmm: AnOperator, stats: AStatistics, sum_kff: NonNegative,
                              noise_variance: Positive) -> jax.Array:
    """The collapsed bound from sufficient statistics in O(M³), no N (module docstring; [1], [2, §5.2]).

    :param Kmm: Kuu as a :class:`~ppl_sparsegp.linalg.LinearOperator` (M, M).
    :param stats: the :class:`~ppl_sparsegp.covariances.SufficientStatistics` of the data.
    :param sum_kff: :math:`\\sum_n k(\\mathbf x_n, \\mathbf x_n)`, a scalar.
    :param noise_variance: :math:`\\sigma^2 > 0`.
    :returns: the bound :math:`\\mathcal L \\le \\log p(\\mathbf y)`, a scalar.
    """
    return _elbo_from_stats(Kmm, stats, sum_kff, noise_variance)


# The bound is some forty operations. Called outside a trace (a user's eager call, a size rule, a plot of
# the bound against M) each would compile on its own at its shapes (3 s at N = 30, against 0.3 s as one
# program, measured); as one jitted program it is compiled once per operator structure and shapes, and
# inside a model's trace it is inlined as before. The same for the optimal q below.
@jax.jit
def _elbo_from_stats(Kmm, stats, sum_kff, noise_variance):
    LB, trace_qff, Wy = _whitened_stats(Kmm, stats, noise_variance)
    return (woodbury_log_density(LB, Wy, stats.n, stats.yy, noise_variance)
            - 0.5 * jnp.maximum(sum_kff - trace_qff, 0.0) / noise_variance)  # tr(Kff − Qff) ≥ 0


@validated
def optimal_whitened_q(Kmm: AnOperator, stats: AStatistics, noise_variance: Positive) -> tuple[jax.Array, Dense]:
    r"""The optimal q(v) for u = R v: :math:`S_v = (I + WW^\top/\sigma^2)^{-1}`,
    :math:`\mathbf m_v = S_v W\mathbf y/\sigma^2` (eq. 29 of [2] with its missing Kuu⁻¹ restored).

    :param Kmm: Kuu as a LinearOperator (M, M).
    :param stats: the :class:`~ppl_sparsegp.covariances.SufficientStatistics` of the data.
    :param noise_variance: :math:`\sigma^2 > 0`.
    :returns: ``(m_v, S_v)`` with S_v a :class:`~ppl_sparsegp.linalg.Dense` operator.
    """
    m, S = _optimal_whitened_q(Kmm, stats, noise_variance)
    return m, Dense(S)


@jax.jit
def _optimal_whitened_q(Kmm, stats, noise_variance):
    LB, _, Wy = _whitened_stats(Kmm, stats, noise_variance)
    m = cho_solve((LB, True), Wy) / noise_variance
    Linv = solve_triangular(LB, jnp.eye(LB.shape[0], dtype=LB.dtype), lower=True)
    return m, Linv.T @ Linv


def _check_regression(X, y, noise_variance):
    X = check_inputs(X, "X")
    y = check_targets(X, y)
    check_finite(y, "y")
    check_positive(noise_variance, "noise_variance")
    return X, y


@validated
def collapsed_elbo(feature: AFeature, kernel: AKernel, X: DataInputs, y: Targets,
                   noise_variance: Positive) -> jax.Array:
    """The collapsed (Titsias) bound :math:`\\mathcal L \\le \\log p(\\mathbf y)` for any feature family,
    O(NM²) (the formula is in the module docstring; [1]).

    :param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (M features).
    :param kernel: a concrete kernel (no priors).
    :param X: inputs (N, D); ``y``: targets (N,).
    :param noise_variance: :math:`\\sigma^2 > 0`.
    :returns: a scalar.
    :raises ValueError: for a kernel or feature with priors, bad inputs or targets (zero rows, NaN, N
        mismatch) or a non-positive noise variance.
    """
    check_concrete_module(kernel, "kernel", "collapsed_elbo")
    check_concrete_module(feature, "feature", "collapsed_elbo")
    X, y = _check_regression(X, y, noise_variance)
    X = feature.check_inputs(X)
    Kmm = Kuu(feature, kernel)
    stats = SufficientStatistics.from_kuf(Kuf(feature, kernel, X), y, keep_root=True)
    return collapsed_elbo_from_stats(Kmm, stats, jnp.sum(kernel.diag(X)), noise_variance)


@validated
def exact_log_marginal_likelihood(kernel: AKernel, X: DataInputs, y: Targets, noise_variance: Positive) -> jax.Array:
    r"""The exact GP log marginal likelihood :math:`\log\mathcal N(\mathbf y\mid 0, K_{ff} + \sigma^2 I)`
    by dense Cholesky, O(N³): the reference the bounds are tested against.

    :param kernel: a concrete kernel (no priors).
    :param X: inputs (N, D); ``y``: targets (N,).
    :param noise_variance: :math:`\sigma^2 > 0`.
    :returns: a scalar.
    :raises ValueError: for a kernel with priors, bad inputs or targets, or a non-positive noise variance.
    """
    check_concrete_module(kernel, "kernel", "exact_log_marginal_likelihood")
    X, y = _check_regression(X, y, noise_variance)
    K = Dense(kernel(X) + noise_variance * jnp.eye(X.shape[0], dtype=X.dtype))
    return -0.5 * (jnp.dot(y, K.solve(y)) + K.logdet() + X.shape[0] * math.log(2 * math.pi))


class CollapsedGP(GPModel):
    """Gaussian regression with u integrated out: the collapsed (Titsias) bound as the model's factor.

    The model adds ``numpyro.factor("y", collapsed bound)``; with :meth:`point_guide` under SVI this is
    type-II MAP of the hyperparameters, under NUTS a posterior over them. ``y`` is centred by ``mean``.

    :param feature: the :class:`~ppl_sparsegp.features.InducingFeature` (M features).
    :param kernel: the kernel, a template: numbers fixed, NumPyro distributions priors, ``Param`` point
        estimates (sites ``kernel_<field>``).
    :param likelihood: a :class:`~ppl_sparsegp.likelihoods.Gaussian` (its variance a template too).
    :param mean: a constant mean (a number or a prior, site ``mean``).
    :param name: the prefix of the approximation's sites.
    :param statistics: optional precomputed :class:`~ppl_sparsegp.covariances.SufficientStatistics` of
        all training data (for VFF with the data inside the box: ``sufficient_statistics``, one streaming
        pass), used by :meth:`model`, :meth:`optimal_q` and :meth:`predict` whenever they are not given
        others; the (X, y) passed to :meth:`model` are then ignored (a runner may pass a small subsample).

    :meth:`predict` has the signature of every approximation (``X_new, *, params, samples``); the
    training data it conditions on are the precomputed statistics or those of :meth:`with_data`.

    :raises ValueError: for a likelihood other than Gaussian (use :class:`~ppl_sparsegp.SparseGP`), or a
        feature/kernel pair the feature cannot represent (:meth:`InducingFeature.check_kernel
        <ppl_sparsegp.features.InducingFeature.check_kernel>`).
    """

    @validated
    def __init__(self, feature: AFeature, kernel: AKernel, likelihood: Annotated[Any, OrNone(_LIKELIHOOD)] = None,
                 mean: LatentMean = 0.0, *, name: AName = "f",
                 statistics: Annotated[Any, OrNone(InstanceOf(SufficientStatistics))] = None):
        super().__init__(feature, kernel, likelihood, mean, name=name)
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError("CollapsedGP needs a Gaussian likelihood; use SparseGP for "
                             f"{type(self.likelihood).__name__}")
        self.precomputed, self.data = statistics, None
        if statistics is not None:
            self._check_statistics(statistics)
            self.precomputed = statistics.with_root()  # once, not per step

    guide = GPModel.point_guide
    pointwise_likelihood = False  # the bound is one scalar factor

    @validated
    def posterior_predictive(self, samples: Samples, rng_key: AKey, X: DataInputs, y: MaybeTargets = None,
                             **model_kwargs) -> dict:
        """y ~ N(m_s, v_s + σ_s²) per posterior draw s, from the per-draw predictive marginals at X
        conditioned on (X, y) (or the held statistics)."""
        lead = next(iter(samples.values())).shape[:2]
        flat = {k: jnp.reshape(v, (-1,) + v.shape[2:]) for k, v in samples.items()}
        out = self.with_data(X, y).predict(X, samples=flat)
        noise = jax.lax.map(lambda v: jnp.asarray(self.components_from(v)[1].variance, out["f_mean"].dtype), flat)
        scale = jnp.sqrt(out["f_var_draws"] + jnp.reshape(noise, (-1, 1)))
        draws = out["f_mean_draws"] + scale * jax.random.normal(rng_key, scale.shape, scale.dtype)
        return {"y": jnp.reshape(draws, lead + draws.shape[1:])}

    @validated
    def statistics(self, feature: AFeature, kernel: AKernel, X: DataInputs, y: Targets) -> tuple[SufficientStatistics,
                   jax.Array]:
        """Sufficient statistics of the data (a family may stream them; see VFF)."""
        return SufficientStatistics.from_kuf(Kuf(feature, kernel, X), y, keep_root=True), jnp.sum(kernel.diag(X))

    def _centred_statistics(self, feature, kernel, c, X, y, statistics):
        """(statistics of y − c, Σₙ k(xₙ, xₙ)) from the data, or from precomputed ``statistics``
        (then Σₙ k(xₙ, xₙ) = N k(x, x) for a kernel with a constant diagonal)."""
        statistics = self.precomputed if statistics is None else statistics
        if statistics is None:
            if y is None:
                raise ValueError("CollapsedGP.model needs y (or statistics=); use predict() for predictions")
            X, y = _check_regression(X, y, 1.0)
            X = feature.check_inputs(X)
            return self.statistics(feature, kernel, X, jnp.asarray(y) - c)
        self._check_statistics(statistics)
        if not isinstance(self.mean, (Distribution, Param)) and float(self.mean) == 0.0:
            centred = statistics
        else:
            centred = statistics.centred(c)
        return centred, statistics.n * constant_kernel_diagonal(kernel)

    def _check_statistics(self, statistics):
        if not isinstance(statistics, SufficientStatistics):
            raise TypeError(f"statistics must be SufficientStatistics, got {type(statistics).__name__}")
        if free_leaves(self.feature):
            raise ValueError("precomputed statistics need a feature without free parameters (Kuf must not "
                             "depend on anything optimised or sampled)")
        free = [f for f in getattr(self.feature, "kuf_kernel_fields", ()) if free_leaves(getattr(self.kernel, f, None))]
        if free:
            raise ValueError(f"precomputed statistics need the kernel's {', '.join(free)} fixed: "
                             f"{type(self.feature).__name__}'s Kuf depends on them, and they have a prior or are a "
                             "parameter; give them values, or fit from (X, y) without statistics=")
        M = self.feature.num_features
        if statistics.num_features != M or (statistics.A is not None and jnp.shape(statistics.A) != (M, M)):
            raise ValueError(f"statistics are for {statistics.num_features} features, the feature has {M}")

    @validated
    def model(self, X: MaybeInputs = None, y: MaybeTargets = None, *, statistics: MaybeStatistics = None) -> None:
        """The collapsed bound as ``numpyro.factor("y", ...)``, from (X, y) or, when Kuf does not depend
        on the hyperparameters (VFF with the data inside the box), from precomputed ``statistics``
        (:func:`~ppl_sparsegp.features.fourier_statistics.fourier_statistics`; X and y are then ignored)
        at O(M³) per evaluation."""
        kernel, likelihood, feature, c = self.components()
        stats, sum_kff = self._centred_statistics(feature, kernel, c, X, y, statistics)
        numpyro.factor("y", collapsed_elbo_from_stats(Kuu(feature, kernel), stats, sum_kff, likelihood.variance))

    def optimal_q(self, values: dict, X: Optional[ArrayLike] = None, y: Optional[ArrayLike] = None, *,
                  statistics: SufficientStatistics | None = None) -> tuple[jax.Array, Dense]:
        """The optimal whitened q(v) = N(m_v, S_v) at the given hyperparameter values (site values: one
        posterior draw, or ``point_values(svi_result.params)``; a missing site raises ``ValueError``),
        for the given (X (N, D), y (N,)) or ``statistics``, else the data the model holds (:meth:`with_data`).
        Returns ``(m_v, S_v)``: the mean (M,) and the covariance, a :class:`~ppl_sparsegp.linalg.Dense` (M, M)."""
        if X is None and y is None and statistics is None and self.precomputed is None:
            X, y = self._training_data("optimal_q")
        require(f"{type(self).__name__}.optimal_q", "values", values,
                site_names(self, self.components, "sample"),
                "pass gp.point_values(svi_result.params) or one draw of mcmc.get_samples()")
        kernel, likelihood, feature, c = self.components_from(values)
        stats, _ = self._centred_statistics(feature, kernel, c, X, y, statistics)
        return optimal_whitened_q(Kuu(feature, kernel), stats, likelihood.variance)

    @validated
    def constructor_argument(self, name: AName) -> Any:
        """:meth:`~ppl_sparsegp.GPModel.constructor_argument`; ``statistics`` are the precomputed ones held."""
        return self.precomputed if name == "statistics" else super().constructor_argument(name)

    @validated
    def with_data(self, X: MaybeInputs, y: MaybeTargets) -> "CollapsedGP":
        """This model holding its training data (X, y) for :meth:`predict` and :meth:`optimal_q` (a shallow
        copy; the original is unchanged). Cheap, and allowed inside ``jit``."""
        out = copy.copy(self)
        out.data = (X, y)
        return out

    @validated
    def predict(self, X_new: DataInputs, *, params: MaybeParams = None, samples: MaybeDraws = None) -> dict[str,
                jax.Array]:
        """Predictive marginals at X_new from the optimal q(u) (per draw, mixed, for ``samples``); the
        training data are those the model holds (:meth:`with_data`, or precomputed ``statistics``)."""
        return self._gaussian_predict(X_new, params, samples, lambda: self._training_data("predict"),
                                      self.optimal_q)

    def _training_data(self, method: str):
        """(X, y) held by the model, or (None, None) when it holds precomputed statistics."""
        if self.data is None and self.precomputed is None:
            raise ValueError(f"{type(self).__name__}.{method} needs the training data: call "
                             f"gp.with_data(X, y).{method}(...), or build the model with statistics=")
        return self.data if self.data is not None else (None, None)
