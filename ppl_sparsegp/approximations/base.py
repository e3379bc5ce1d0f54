"""The shared machinery of every approximation: templates → sample sites, validation of data, of
fitted params and of posterior draws, point guides, and components from posterior values.

Site names: ``kernel_<field>`` (``kernel_<d>_<field>`` for additive/product kernels),
``likelihood_<field>``, ``feature_<field>``, ``mean``, ``<name>_v`` / ``<name>_u``, and ``y``.
"""
from __future__ import annotations

from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.distributions import Distribution
from numpyro.infer import Predictive

from ..conditionals import conditional
from ..covariances import Kuu
from ..features.base import InducingFeature, current_feature
from ..kernels import Kernel, check_inputs
from ..likelihoods import Gaussian, Likelihood
from ..parameters import Param, check_finite, free_sites, initial_value, instantiate
from ..sharding import is_distributed, local_blocks
from ..validation import AFeature, AKernel, ALikelihood, AName, OrNone, Samples, validated
from .common import AKey, DataInputs, LatentMean, MaybeInputs, MaybeTargets, require_params, require_samples

_LIKELIHOOD = ALikelihood.__metadata__[0]

__all__ = ["GPModel"]


def check_targets(X, y):
    """y as a real vector with one value per row of X, and at least one row; ``ValueError`` otherwise."""
    if jnp.iscomplexobj(y):
        raise ValueError("y is complex: give real targets (e.g. y.real)")
    y = jnp.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be a vector of shape (N,), got shape {y.shape}")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
    if X.shape[0] == 0:
        raise ValueError("X has no rows: give at least one observation")
    return y


class GPModel:
    """Shared machinery: templates → sites, validation, point guides, components from posterior values.

    :param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (fields may be Params).
    :param kernel: a kernel template (fields numbers, Distributions or Params).
    :param likelihood: a likelihood template (default Gaussian with a LogNormal(−2, 1) noise variance).
    :param mean: constant mean: a number or a Distribution (site ``mean``).
    :param name: name of the latent function (prefix of the inducing site).
    """

    @validated
    def __init__(self, feature: AFeature, kernel: AKernel, likelihood: Annotated[Any, OrNone(_LIKELIHOOD)] = None,
                 mean: LatentMean = 0.0, *, name: AName = "f"):
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
        feature = current_feature(instantiate(self.feature, "feature_", point=point))  # refined_features
        if isinstance(self.mean, Distribution):
            if point:
                loc = numpyro.param("mean_map", lambda k: initial_value(self.mean), constraint=self.mean.support)
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
        if is_distributed(X) or is_distributed(y):  # rows in other processes: check this process's own
            return self._check_distributed_data(X, y, likelihood)
        X = check_inputs(X, "X")
        X = self.feature.check_inputs(X) if not isinstance(self.feature, type) else X
        if y is not None:
            y = likelihood.validate(check_targets(X, y), "y")
        return X, y

    def _check_distributed_data(self, X, y, likelihood):
        """:meth:`_check_data` for global arrays whose rows live in several processes (which no host can
        read whole): the shapes globally, the values block by block in the process that holds them."""
        if not (is_distributed(X) and (y is None or is_distributed(y))):
            raise ValueError("X and y must both be split over the processes (ppl_sparsegp.sharding.shard_data"
                             "(X, y)), not one of them")
        if X.ndim != 2:
            raise ValueError(f"X must have shape (N, D) (rank 2), got shape {X.shape}")
        if y is not None:
            check_targets(X, y)  # shapes and dtype only: nothing is read
        for block in local_blocks(X):
            self._check_data(block, None, likelihood)
        for block in local_blocks(y) if y is not None else ():
            likelihood.validate(block, "y")
        return X, y

    #: whether the model's factor ``y`` has one term per observation (for ArviZ's log_likelihood group)
    pointwise_likelihood = True

    @validated
    def posterior_predictive(self, samples: Samples, rng_key: AKey, X: DataInputs, y: MaybeTargets = None,
                             **model_kwargs) -> dict:
        """One draw of the model's predictive sites (``y``, and the latent ``f``) per posterior draw;
        ``samples`` ``{site: (chain, draw, ...)}``. Default: NumPyro's ``Predictive`` of the approximation's ``model``
        with ``y=None``."""
        return Predictive(self.model, posterior_samples=samples, batch_ndims=2)(rng_key, X, **model_kwargs)

    @validated
    def with_data(self, X: MaybeInputs, y: MaybeTargets) -> "GPModel":
        """This approximation holding its training data for ``predict``: those that condition on the
        data at prediction time (the collapsed ones) return a copy that holds them; the others, whose
        fitted q(u) or draws of u already carry the data, return themselves. So ``gp.with_data(X,
        y).predict(X_new, params=... or samples=...)`` serves every approximation."""
        return self

    @validated
    def constructor_argument(self, name: AName) -> Any:
        """The value of the constructor argument ``name`` that rebuilds this approximation, as
        ``type(gp)(**{name: gp.constructor_argument(name), ...})`` (what :func:`~ppl_sparsegp.saving.save_fit`
        records): the instance attribute of that name. A subclass whose constructor keeps an argument under
        another form overrides this for that argument.

        :param name: a constructor argument of ``type(self)``.
        :raises AttributeError: when no attribute holds it.
        """
        if name in vars(self):
            return vars(self)[name]
        raise AttributeError(name)

    def point_guide(self, *args, **kwargs):
        """Guide with a point mass (Delta at a constrained param ``<site>_map``) on every hyperparameter."""
        return self.components(point=True)

    @staticmethod
    def point_values(params: dict) -> dict:
        """Site values of a point guide's optimised params (``<site>_map`` → ``<site>``), plus the params."""
        out = dict(params)
        out.update({k[:-4]: v for k, v in params.items() if k.endswith("_map")})
        return out

    def _gaussian_predict(self, X_new, params, samples, data, optimal_q):
        """Predictive marginals of a Gaussian-likelihood model whose whitened q(v) is available in closed
        form per set of hyperparameter values (the collapsed approximations): ``data() -> (X, y)`` the
        training data held, ``optimal_q(values, X, y) -> (m_v, S_v)``; analytic for ``params``, mixed
        over the draws for ``samples`` (law of total variance; ``*_draws`` keep the per-draw marginals)."""
        if (params is None) == (samples is None):
            raise ValueError("give exactly one of params= (SVI) or samples= (MCMC, Stein particles)")
        X_new = self.feature.warn_outside(check_inputs(X_new, "X_new"), kernel=self.kernel)
        X, y = data()

        def one(values):
            kernel, likelihood, feature, c = self.components_from(values)
            m_v, S_v = optimal_q(values, X, y)
            m, v = conditional(feature, kernel, X_new, m_v, S_v, whiten=True)
            return m + c, v, v + likelihood.variance

        if params is not None:
            require_params(self, "predict", params)
            m, v, yv = one(self.point_values(params))
            return {"f_mean": m, "f_var": v, "y_mean": m, "y_var": yv}
        require_samples(self, "predict", samples)
        ms, vs, yvs = jax.lax.map(one, samples)
        return {"f_mean": ms.mean(0), "f_var": vs.mean(0) + ms.var(0), "y_mean": ms.mean(0),
                "y_var": yvs.mean(0) + ms.var(0), "f_mean_draws": ms, "f_var_draws": vs, "y_var_draws": yvs}
