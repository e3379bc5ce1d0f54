r"""Sparse-GP approximations as NumPyro model/guide pairs, generic over the feature family.

* :class:`SparseGP`: one model for three engines. Hyperparameters (sites from the templates), the
  inducing variables u (centred) or v (whitened, u = R v), and the likelihood entering as
  :math:`\sum_n \mathbb E_{p(f_n\mid\mathbf u)}[\log p(y_n\mid f_n)]` inside a (sub-sampled) data plate.
  Under NUTS this is the MCMC formulation of Hensman et al. (2015) [1]; with :meth:`SparseGP.guide`
  (Gaussian q(u) full or diagonal, point estimates of the hyperparameters) and
  ``TraceMeanField_ELBO`` it is the sparse variational GP [2] with an analytic KL and an unbiased
  one-sample estimate of :math:`\mathbb E_{q(\mathbf u)}\mathbb E_{p(f\mid\mathbf u)}\log p(y\mid f)
  = \mathbb E_{q(f)}\log p(y\mid f)`; :meth:`SparseGP.elbo` evaluates that ELBO exactly.
* :class:`CollapsedGP`: Gaussian likelihood, u integrated out analytically (Titsias bound [3]);
  hyperparameters by SVI (point estimates, :meth:`CollapsedGP.guide`) or NUTS.

Site names: ``kernel_<field>`` (``kernel_<d>_<field>`` for additive/product kernels),
``likelihood_<field>``, ``feature_<field>``, ``mean``, ``<name>_v`` / ``<name>_u``, and ``y``.

References:
    1. Hensman, Matthews, Filippone, Ghahramani (2015), MCMC for variationally sparse Gaussian processes.
    2. Hensman, Matthews, Ghahramani (2015), Scalable variational Gaussian process classification.
    3. Titsias (2009), Variational learning of inducing variables in sparse Gaussian processes.
"""
from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.distributions import Distribution, constraints

from ._module import Param, check_finite, free_sites, instantiate
from .collapsed import (SufficientStatistics, _check_regression, collapsed_elbo_from_stats,
                        constant_kernel_diagonal, optimal_whitened_q, sufficient_statistics)
from .conditionals import conditional
from .features.base import InducingFeature, Kuf, Kuu
from .gaussian import StructuredNormal, gaussian_kl
from .kernels import Kernel, check_inputs
from .likelihoods import Gaussian, Likelihood
from .linalg import Dense, Diagonal, Identity
from .prior import inducing_prior

__all__ = ["GPModel", "SparseGP", "CollapsedGP", "full_covariance", "diagonal_covariance"]


# --- variational families for q(u) (or q(v)) --------------------------------------------------------
def full_covariance(name, dim, Kmm, whiten):
    """q = N(m, LLᵀ) with a free lower-triangular L (initialised at the prior)."""
    loc = numpyro.param(f"{name}_loc", lambda rng_key: jnp.zeros(dim, Kmm.dtype))

    def init(rng_key):
        if whiten:
            return jnp.eye(dim, dtype=Kmm.dtype)
        return jnp.linalg.cholesky(Kmm.to_dense())

    L = numpyro.param(f"{name}_scale_tril", init, constraint=constraints.scaled_unit_lower_cholesky)
    return loc, Dense.from_cholesky(L)


def diagonal_covariance(name, dim, Kmm, whiten):
    """q = N(m, diag(s²)) (mean field)."""
    loc = numpyro.param(f"{name}_loc", lambda rng_key: jnp.zeros(dim, Kmm.dtype))

    def init(rng_key):
        return jnp.ones(dim, Kmm.dtype) if whiten else jnp.sqrt(Kmm.diagonal())

    scale = numpyro.param(f"{name}_scale", init, constraint=constraints.positive)
    return loc, Diagonal(scale**2)


_FAMILIES = {"full": full_covariance, "diag": diagonal_covariance}


def resolve_q_family(q_cov):
    """The q(u) covariance family for ``q_cov``: ``"full"``, ``"diag"`` or a callable
    ``(name, dim, Kmm, whiten) -> (loc, operator)``, returned as is."""
    if isinstance(q_cov, str):
        if q_cov not in _FAMILIES:
            raise ValueError(f"q_cov must be one of {sorted(_FAMILIES)} or a callable, got {q_cov!r}")
        return _FAMILIES[q_cov]
    return q_cov


def _site_names(gp, fn, kind: str) -> list:
    """Names of the ``kind`` ("param" or "sample") sites that ``fn`` (the guide, or the model's
    components) creates, found by tracing it abstractly (``jax.eval_shape``: no FLOPs, and no concrete
    values needed, so it also works under ``jit``); cached on the model."""
    cache = gp.__dict__.setdefault("_site_names", {})
    key = (getattr(fn, "__name__", repr(fn)), kind)
    if key not in cache:
        names = []

        def run():
            with handlers.block():
                tr = handlers.trace(handlers.seed(fn, rng_seed=0)).get_trace()
            names.extend(name for name, site in tr.items()
                         if site["type"] == kind and not site.get("is_observed", False))
            return 0

        jax.eval_shape(run)
        cache[key] = tuple(names)
    return list(cache[key])


def _require(method: str, argument: str, given: dict, required, hint: str):
    """Raise ``ValueError`` naming the entries of ``required`` that ``given`` lacks (a name ``<site>_map``
    may also be given as ``<site>``), and the keys of ``given`` that match none of them (typos, or values
    for another model). Nothing is substituted silently: a missing param would fall back to its initial
    value, a missing sample site to a prior draw."""
    keys = set(given)
    missing = [n for n in required if n not in keys and not (n.endswith("_map") and n[:-4] in keys)]
    if not missing:
        return
    known = set(required) | {n[:-4] for n in required if n.endswith("_map")}
    unexpected = sorted(k for k in keys if k not in known)
    msg = f"{method}: {argument} is missing {', '.join(repr(n) for n in missing)}"
    if unexpected:
        msg += f"; it has unexpected {', '.join(repr(k) for k in unexpected)}"
    raise ValueError(f"{msg} ({hint})")


def _require_params(gp, method: str, params: dict):
    """Every param the model's guide creates must be in ``params`` (SVI on another guide, a misspelt key
    or a partial dict would otherwise silently use initial values)."""
    if not isinstance(params, Mapping):
        raise TypeError(f"{method}: params must be a dict (svi_result.params), got {type(params).__name__}")
    _require(method, "params", params, _site_names(gp, gp.guide, "param"),
             "pass svi_result.params from SVI on this model's guide")


def _require_samples(gp, method: str, samples: dict, *latent):
    """Every sampled hyperparameter (and the ``latent`` sites) must have draws in ``samples``; a missing
    site would otherwise be drawn from its prior with a fixed seed."""
    if not isinstance(samples, Mapping):
        raise TypeError(f"{method}: samples must be a dict (mcmc.get_samples()), got {type(samples).__name__}")
    _require(method, "samples", samples, _site_names(gp, gp.components, "sample") + list(latent),
             "pass mcmc.get_samples() from MCMC on this model")


class GPModel:
    """Shared machinery: templates → sites, validation, point guides, components from posterior values.

    :param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (fields may be Params).
    :param kernel: a kernel template (fields numbers, Distributions or Params).
    :param likelihood: a likelihood template (default Gaussian with a LogNormal(−2, 1) noise variance).
    :param mean: constant mean: a number or a Distribution (site ``mean``).
    :param name: name of the latent function (prefix of the inducing site).
    """

    def __init__(self, feature, kernel, likelihood=None, mean=0.0, *, name: str = "f"):
        if not isinstance(feature, InducingFeature):
            raise TypeError(f"feature must be an InducingFeature, got {type(feature).__name__}")
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel must be a Kernel, got {type(kernel).__name__}")
        if likelihood is None:
            likelihood = Gaussian(variance=dist.LogNormal(-2.0, 1.0))
        if not isinstance(likelihood, Likelihood):
            raise TypeError(f"likelihood must be a Likelihood, got {type(likelihood).__name__}")
        if not isinstance(mean, (Distribution, Param)):
            check_finite(mean, "mean")
        self.feature, self.kernel, self.likelihood, self.mean, self.name = feature, kernel, likelihood, mean, name
        # fail early on a kernel the feature family does not support, or a prior with the wrong support
        Kuu.dispatch(feature, kernel)
        feature.check_kernel(kernel)
        self.hyperparameter_sites()

    # --- sites --------------------------------------------------------------------------------------
    def hyperparameter_sites(self) -> dict:
        """``{site: prior}`` for every sampled hyperparameter."""
        out = {}
        out.update(free_sites(self.kernel, "kernel_"))
        out.update(free_sites(self.likelihood, "likelihood_"))
        out.update(free_sites(self.feature, "feature_"))
        if isinstance(self.mean, Distribution):
            out["mean"] = self.mean
        return out

    def components(self, *, point: bool = False):
        """Instantiate (kernel, likelihood, feature, mean) inside a model (or, point=True, a guide)."""
        kernel = instantiate(self.kernel, "kernel_", point=point)
        likelihood = instantiate(self.likelihood, "likelihood_", point=point)
        feature = instantiate(self.feature, "feature_", point=point)
        if isinstance(self.mean, Distribution):
            if point:
                from ._module import _initial_value
                loc = numpyro.param("mean_map", lambda k: _initial_value(self.mean), constraint=self.mean.support)
                mean = numpyro.sample("mean", dist.Delta(loc, event_dim=len(self.mean.event_shape)))
            else:
                mean = numpyro.sample("mean", self.mean)
        else:
            mean = self.mean
        return kernel, likelihood, feature, mean

    def components_from(self, values: dict):
        """Concrete (kernel, likelihood, feature, mean) for one set of site/param values."""
        with handlers.block(), handlers.seed(rng_seed=0), handlers.substitute(data=values):
            return self.components()

    def _check_data(self, X, y, likelihood):
        X = check_inputs(X, "X")
        X = self.feature.check_inputs(X) if not isinstance(self.feature, type) else X
        if y is not None:
            y = jnp.asarray(y)
            if y.ndim != 1:
                raise ValueError(f"y must be a vector of shape (N,), got shape {y.shape}")
            if y.shape[0] != X.shape[0]:
                raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
            y = likelihood.validate(y, "y")
        return X, y

    def point_guide(self, *args, **kwargs):
        """Guide with a point mass (Delta at a constrained param ``<site>_map``) on every hyperparameter."""
        return self.components(point=True)

    @staticmethod
    def point_values(params: dict) -> dict:
        """Site values of a point guide's optimised params (``<site>_map`` → ``<site>``), plus the params."""
        out = dict(params)
        out.update({k[:-4]: v for k, v in params.items() if k.endswith("_map")})
        return out


class SparseGP(GPModel):
    r"""Sparse GP with explicit inducing variables: NUTS/HMC on (u or v, θ), or SVGP under SVI.

    :param whiten: parameterise by v ~ N(0, I), u = R v (default), or by u ~ N(0, Kuu).
    :param q_cov: q(u) covariance family for :meth:`guide`: ``"full"``, ``"diag"`` or a callable
        ``(name, dim, Kmm, whiten) -> (loc, operator)`` (e.g. block-diagonal for harmonic features).
    :param residual: how the residual variance :math:`v_n = k_{nn} - [Q_{ff}]_{nn}` of p(f | u) enters
        the likelihood. ``"expected"`` (default): :math:`\sum_n\mathbb E_{p(f_n|\mathbf u)}\log
        p(y_n|f_n)` [1] (under SVI the SVGP ELBO; under NUTS the optimal variational q(u, θ) of [1],
        which by Jensen's inequality penalises v and so pulls the hyperparameters towards longer
        lengthscales and smaller variances). ``"marginal"``: :math:`\sum_n\log\mathbb E_{p(f_n|\mathbf
        u)}p(y_n|f_n)` (the residual integrated out, independently per point: no Jensen gap; on the pines
        LGCP 1.9–3.3× closer to the exact GP's posterior than "expected" at M = 30 and 20, but its
        heavy lower lengthscale tail mixed 5–10× more slowly). ``"none"``: the projected process,
        f = E[f | u] (as Hilbert-space GPs do; predictions then carry no residual variance either): on
        the pines LGCP within 0.25 exact-posterior sd at M = 38 where "expected" is 0.68 sd away.
    """

    RESIDUALS = ("expected", "marginal", "none")

    def __init__(self, feature, kernel, likelihood=None, mean=0.0, *, whiten: bool = True,
                 q_cov="full", residual: str = "expected", name: str = "f"):
        super().__init__(feature, kernel, likelihood, mean, name=name)
        if residual not in self.RESIDUALS:
            raise ValueError(f"residual must be one of {self.RESIDUALS}, got {residual!r}")
        self.whiten, self.q_family, self.residual = whiten, resolve_q_family(q_cov), residual

    @property
    def site(self):
        return f"{self.name}_v" if self.whiten else f"{self.name}_u"

    def model(self, X, y=None, *, batch_size: int | None = None):
        """The joint model. With ``y=None`` it draws f and y (posterior/prior predictive)."""
        kernel, likelihood, feature, c = self.components()
        X, y = self._check_data(X, y, likelihood)
        u, Kmm = inducing_prior(self.name, feature, kernel, whiten=self.whiten)
        N = X.shape[0]
        if batch_size is not None and not 0 < batch_size <= N:
            raise ValueError(f"batch_size must be in 1..{N}, got {batch_size}")
        with numpyro.plate("data", N, subsample_size=batch_size) as idx:
            Xb = X if batch_size is None else X[idx]
            mean, var = conditional(feature, kernel, Xb, u, whiten=self.whiten, Kmm=Kmm)
            mean = mean + c
            lik = likelihood if batch_size is None else likelihood.subsample(idx)
            if y is None:
                f = numpyro.sample(self.name, dist.Normal(mean, jnp.sqrt(self._model_variance(var) + 1e-12)))
                numpyro.sample("y", lik.dist(f))
            else:
                yb = y if batch_size is None else y[idx]
                numpyro.factor("y", self._log_likelihood(lik, yb, mean, var))

    def _model_variance(self, var):
        """The variance of f given u in this model: p(f | u)'s, or 0 for the projected process."""
        return jnp.zeros_like(var) if self.residual == "none" else var

    def _log_likelihood(self, lik, y, mean, var):
        """Per-point likelihood term for p(f | u) = N(mean, var) (see ``residual``)."""
        if self.residual == "expected":
            return lik.variational_expectation(y, mean, var)
        if self.residual == "marginal":
            return lik.predict_log_density(y, mean, var)
        return lik.log_prob(y, mean)

    def guide(self, X=None, y=None, *, batch_size: int | None = None):
        """Gaussian q over the inducing site and point estimates of the hyperparameters."""
        kernel, likelihood, feature, c = self.components(point=True)
        Kmm = Kuu(feature, kernel)
        dim = Kmm.sqrt_cols if self.whiten else Kmm.size
        loc, cov = self.q_family(self.site, dim, Kmm, self.whiten)
        numpyro.sample(self.site, StructuredNormal(loc, cov))

    # --- exact evaluation and prediction -----------------------------------------------------------
    def _q(self, values, Kmm):
        """q(u)'s (loc, covariance operator) from optimised params."""
        with handlers.block(), handlers.substitute(data=values):
            dim = Kmm.sqrt_cols if self.whiten else Kmm.size
            return self.q_family(self.site, dim, Kmm, self.whiten)

    def elbo(self, params: dict, X, y):
        """The exact ELBO Σₙ E_q(fₙ)[log p(yₙ|fₙ)] − KL(q(u)‖p(u)) at the given SVI params (all of the
        guide's params: a missing one raises ``ValueError``)."""
        if self.residual != "expected":
            raise NotImplementedError(f"elbo() is the SVGP bound of residual='expected'; this model has "
                                      f"residual={self.residual!r}")
        _require_params(self, "elbo", params)
        values = self.point_values(params)
        kernel, likelihood, feature, c = self.components_from(values)
        X, y = self._check_data(X, y, likelihood)
        Kmm = Kuu(feature, kernel)
        loc, S = self._q(values, Kmm)
        mean, var = conditional(feature, kernel, X, loc, S, whiten=self.whiten, Kmm=Kmm)
        prior = Identity(S.size, dtype=Kmm.dtype) if self.whiten else Kmm
        ve = jnp.sum(likelihood.variational_expectation(y, mean + c, var))
        return ve - gaussian_kl(loc, S, prior)

    def predict(self, X_new, *, params: dict | None = None, samples: dict | None = None):
        """Predictive marginals at X_new.

        :param params: SVI params (``svi_result.params``): q(u) is used analytically.
        :param samples: posterior draws (``mcmc.get_samples()``): per-draw p(f|u) marginals, mixed.
        :returns: dict with ``f_mean``, ``f_var``, ``y_mean``, ``y_var`` (latent and observation).
        :raises ValueError: when ``params`` lacks a param of :meth:`guide` or ``samples`` a sampled site.
        """
        if (params is None) == (samples is None):
            raise ValueError("give exactly one of params= (SVI) or samples= (MCMC)")
        X_new = check_inputs(X_new, "X_new")
        if params is not None:
            _require_params(self, "predict", params)
            values = self.point_values(params)
            kernel, likelihood, feature, c = self.components_from(values)
            Kmm = Kuu(feature, kernel)
            loc, S = self._q(values, Kmm)
            m, v = conditional(feature, kernel, X_new, loc, S, whiten=self.whiten, Kmm=Kmm)
            m = m + c
            ym, yv = likelihood.predict_mean_and_var(m, v)
            return {"f_mean": m, "f_var": v, "y_mean": ym, "y_var": yv}

        def one(values):
            kernel, likelihood, feature, c = self.components_from(values)
            m, v = conditional(feature, kernel, X_new, values[self.site], whiten=self.whiten)
            v = self._model_variance(v)
            ym, yv = likelihood.predict_mean_and_var(m + c, v)
            return m + c, v, ym, yv

        _require_samples(self, "predict", samples, self.site)
        ms, vs, yms, yvs = jax.lax.map(one, samples)
        return {"f_mean": ms.mean(0), "f_var": vs.mean(0) + ms.var(0),  # law of total variance
                "y_mean": yms.mean(0), "y_var": yvs.mean(0) + yms.var(0),
                "f_mean_draws": ms, "f_var_draws": vs}


class CollapsedGP(GPModel):
    """Gaussian regression with u integrated out: the collapsed (Titsias) bound as the model's factor.

    The model adds ``numpyro.factor("y", collapsed bound)``; with :meth:`point_guide` under SVI this is
    type-II MAP of the hyperparameters, under NUTS a posterior over them. ``y`` is centred by ``mean``.

    :param statistics: optional precomputed :class:`~ppl_sparsegp.collapsed.SufficientStatistics` of all
        training data (for VFF with the data inside the box: ``fourier_statistics``), used by
        :meth:`model`, :meth:`optimal_q` and :meth:`predict` whenever they are not given others; the
        (X, y) passed to those methods are then ignored (a runner may pass a small subsample).
    """

    def __init__(self, feature, kernel, likelihood=None, mean=0.0, *, name: str = "f",
                 statistics: SufficientStatistics | None = None):
        super().__init__(feature, kernel, likelihood, mean, name=name)
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError("CollapsedGP needs a Gaussian likelihood; use SparseGP for "
                             f"{type(self.likelihood).__name__}")
        self.precomputed = statistics
        if statistics is not None:
            self._check_statistics(statistics)
            self.precomputed = statistics.with_root()  # once, not per step

    guide = GPModel.point_guide

    def statistics(self, feature, kernel, X, y):
        """Sufficient statistics of the data (a family may stream them; see VFF)."""
        return sufficient_statistics(Kuf(feature, kernel, X), y, keep_root=True), jnp.sum(kernel.diag(X))

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
        free = [leaf for leaf in jax.tree.leaves(self.feature, is_leaf=lambda v: isinstance(v, (Distribution, Param)))
                if isinstance(leaf, (Distribution, Param))]
        if free:
            raise ValueError("precomputed statistics need a feature without free parameters (Kuf must not "
                             "depend on anything optimised or sampled)")
        M = self.feature.num_features
        if statistics.num_features != M or (statistics.A is not None and jnp.shape(statistics.A) != (M, M)):
            raise ValueError(f"statistics are for {statistics.num_features} features, the feature has {M}")

    def model(self, X=None, y=None, *, statistics: SufficientStatistics | None = None):
        """The collapsed bound as ``numpyro.factor("y", ...)``, from (X, y) or, when Kuf does not depend
        on the hyperparameters (VFF with the data inside the box), from precomputed ``statistics``
        (:func:`~ppl_sparsegp.features.fourier_statistics.fourier_statistics`; X and y are then ignored)
        at O(M³) per evaluation."""
        kernel, likelihood, feature, c = self.components()
        stats, sum_kff = self._centred_statistics(feature, kernel, c, X, y, statistics)
        numpyro.factor("y", collapsed_elbo_from_stats(Kuu(feature, kernel), stats, sum_kff, likelihood.variance))

    def optimal_q(self, values: dict, X=None, y=None, *, statistics: SufficientStatistics | None = None):
        """The optimal whitened q(v) = N(m_v, S_v) at the given hyperparameter values (site values: one
        posterior draw, or ``point_values(svi_result.params)``; a missing site raises ``ValueError``)."""
        _require(f"{type(self).__name__}.optimal_q", "values", values,
                 _site_names(self, self.components, "sample"),
                 "pass gp.point_values(svi_result.params) or one draw of mcmc.get_samples()")
        kernel, likelihood, feature, c = self.components_from(values)
        stats, _ = self._centred_statistics(feature, kernel, c, X, y, statistics)
        return optimal_whitened_q(Kuu(feature, kernel), stats, likelihood.variance)

    def predict(self, X_new, X=None, y=None, *, params: dict | None = None, samples: dict | None = None,
                statistics: SufficientStatistics | None = None):
        """Predictive marginals at X_new from the optimal q(u) (per draw, mixed, for ``samples``); the
        training data enter as (X, y) or as precomputed ``statistics``."""
        if (params is None) == (samples is None):
            raise ValueError("give exactly one of params= (SVI) or samples= (MCMC)")
        X_new = check_inputs(X_new, "X_new")

        def one(values):
            kernel, likelihood, feature, c = self.components_from(values)
            m_v, S_v = self.optimal_q(values, X, y, statistics=statistics)
            m, v = conditional(feature, kernel, X_new, m_v, S_v, whiten=True)
            return m + c, v, v + likelihood.variance

        if params is not None:
            _require_params(self, "predict", params)
            m, v, yv = one(self.point_values(params))
            return {"f_mean": m, "f_var": v, "y_mean": m, "y_var": yv}
        _require_samples(self, "predict", samples)
        ms, vs, yvs = jax.lax.map(one, samples)
        return {"f_mean": ms.mean(0), "f_var": vs.mean(0) + ms.var(0), "y_mean": ms.mean(0),
                "y_var": yvs.mean(0) + ms.var(0), "f_mean_draws": ms, "f_var_draws": vs}
