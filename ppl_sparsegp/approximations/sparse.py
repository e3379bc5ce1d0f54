r"""The sparse GP with explicit inducing variables: one model for SVI (SVGP), NUTS/HMC and SteinVI.

Hyperparameters (sites from the templates), the inducing variables u (centred) or v (whitened,
u = R v), and the likelihood entering as :math:`\sum_n \mathbb E_{p(f_n\mid\mathbf u)}[\log p(y_n\mid
f_n)]` inside a (sub-sampled) data plate. Under NUTS this is the MCMC formulation of Hensman et al.
(2015) [1]; with :meth:`SparseGP.guide` (a Gaussian q(u) from :mod:`.variational`, point estimates of the
hyperparameters) and ``TraceMeanField_ELBO`` it is the sparse variational GP [2] with an analytic KL and
an unbiased one-sample estimate of :math:`\mathbb E_{q(\mathbf u)}\mathbb E_{p(f\mid\mathbf u)}\log
p(y\mid f) = \mathbb E_{q(f)}\log p(y\mid f)`; :meth:`SparseGP.elbo` evaluates that ELBO exactly.

**Several latent GPs** (``num_latent_gps`` = L > 1, e.g. C classes under a
:class:`~ppl_sparsegp.likelihoods.Softmax` or :class:`~ppl_sparsegp.likelihoods.RobustMax` likelihood):
L independent GPs with one shared kernel and one shared inducing feature, as GPflow's SVGP with
``num_latent_gps``. All of them live in one sample site of size L·M, latent-major (whitened
:math:`\mathcal N(0, I)`, or :math:`\mathcal N(0, I_L\otimes K_{uu})` as a block-diagonal operator), so
the KL stays one :func:`~ppl_sparsegp.gaussian_kl`; the guide gives each latent GP its own q (params
``<site>_<l>_...``) and :func:`~ppl_sparsegp.conditional` is called once for all of them (Kuf, the
dominant cost, once) [3].

References:
    1. Hensman, Matthews, Filippone, Ghahramani (2015), MCMC for variationally sparse Gaussian processes.
    2. Hensman, Matthews, Ghahramani (2015), Scalable variational Gaussian process classification.
    3. Sun, Shi, Wilson, Grosse (2021), Scalable variational Gaussian processes via harmonic kernel
       decomposition, ICML (the multiclass SVGP of its code).
"""
from __future__ import annotations

from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro import handlers

from ..conditionals import conditional
from ..covariances import Kuu
from ..gaussian import StructuredNormal, gaussian_kl
from ..kernels import check_inputs
from ..linalg import BlockDiag, Identity
from ..sharding import map_rows
from ..validation import (
    AFeature,
    AKernel,
    ALikelihood,
    AName,
    Flag,
    MaybeCount,
    OneOf,
    OrNone,
    validated,
)
from .base import GPModel
from .common import (
    DataInputs,
    FittedParams,
    LatentMean,
    MaybeDraws,
    MaybeInputs,
    MaybeKey,
    MaybeParams,
    MaybeTargets,
    Targets,
    require_params,
    require_samples,
)
from .primitives import inducing_prior
from .variational import QFamily, q_cov_name, resolve_q_family

_LIKELIHOOD = ALikelihood.__metadata__[0]

__all__ = ["SparseGP"]


class SparseGP(GPModel):
    r"""Sparse GP with explicit inducing variables: NUTS/HMC on (u or v, θ), or SVGP under SVI.

    One model for every engine: :meth:`model` emits the hyperparameter sites (``kernel_<field>``,
    ``likelihood_<field>``, ``mean``), the inducing site (``f_v`` whitened, ``f_u`` otherwise; M values
    per latent GP) and the likelihood of y given f at X; :meth:`guide` is the SVGP q(u) with point
    estimates of the hyperparameters [2]; under NUTS the inducing variables are sampled jointly with the
    hyperparameters [1].

    :param feature: the :class:`~ppl_sparsegp.features.InducingFeature` (M features).
    :param kernel: the kernel, a template: numbers fixed, NumPyro distributions priors, ``Param`` point
        estimates.
    :param likelihood: a :class:`~ppl_sparsegp.likelihoods.Likelihood` (default Gaussian).
    :param mean: a constant mean (a number or a prior, site ``mean``).
    :param whiten: parameterise by v ~ N(0, I), u = R v (default), or by u ~ N(0, Kuu).
    :param q_cov: q(u) covariance family for :meth:`guide`: ``"auto"`` (default: from Kuu's structure),
        ``"full"``, ``"diag"``, ``"block-diag"``, ``"two-kron"`` or a callable
        ``(name, dim, Kmm, whiten) -> (loc, operator)`` (see :mod:`ppl_sparsegp.approximations.variational`).
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
    :param num_latent_gps: L, the number of independent latent GPs (default: the likelihood's
        ``num_latent``, e.g. C for a multiclass likelihood; it must match it).
    :param name: the prefix of the inducing site.
    :raises ValueError: for an unknown ``q_cov`` or ``residual``, ``num_latent_gps`` not matching the
        likelihood, or a feature/kernel pair the feature cannot represent.
    """

    RESIDUALS = ("expected", "marginal", "none")

    @validated
    def __init__(self, feature: AFeature, kernel: AKernel, likelihood: Annotated[Any, OrNone(_LIKELIHOOD)] = None,
                 mean: LatentMean = 0.0, *, whiten: Flag = True, q_cov: QFamily = "auto",
                 residual: Annotated[str, OneOf("expected", "marginal", "none")] = "expected",
                 num_latent_gps: MaybeCount = None, name: AName = "f"):
        super().__init__(feature, kernel, likelihood, mean, name=name)
        if residual not in self.RESIDUALS:
            raise ValueError(f"residual must be one of {self.RESIDUALS}, got {residual!r}")
        wanted = self.likelihood.num_latent
        if num_latent_gps is None:
            num_latent_gps = wanted
        if isinstance(num_latent_gps, bool) or not isinstance(num_latent_gps, (int, np.integer)) \
                or num_latent_gps < 1:
            raise ValueError(f"num_latent_gps must be a positive int, got {num_latent_gps!r}")
        if num_latent_gps != wanted:
            raise ValueError(f"num_latent_gps={num_latent_gps} but the likelihood "
                             f"{type(self.likelihood).__name__} reads {wanted} latent value(s) per "
                             f"observation; use a multiclass likelihood (Softmax, RobustMax) with "
                             f"num_classes={num_latent_gps}, or leave num_latent_gps unset")
        self.whiten, self.q_family, self.residual = whiten, resolve_q_family(q_cov), residual
        self.num_latent_gps = int(num_latent_gps)

    @property
    def site(self):
        return f"{self.name}_v" if self.whiten else f"{self.name}_u"

    def _dim(self, Kmm):
        return Kmm.sqrt_cols if self.whiten else Kmm.size

    def _inducing(self, feature, kernel):
        """Sample the inducing site: (value, Kmm); value (L, M') latent-major when L > 1."""
        L = self.num_latent_gps
        if L == 1:
            return inducing_prior(self.name, feature, kernel, whiten=self.whiten)
        Kmm = Kuu(feature, kernel)
        dim, dtype = L * self._dim(Kmm), Kmm.dtype
        prior = Identity(dim, dtype) if self.whiten else BlockDiag((Kmm,) * L)
        U = numpyro.sample(self.site, StructuredNormal(jnp.zeros(dim, dtype), prior))
        return U.reshape(L, -1), Kmm

    def _key(self, feature, likelihood, y):
        """The step's PRNG key for Monte Carlo estimates (of a feature's Kuf or a likelihood's expectation)
        when y is observed under a seed handler (every NumPyro ELBO); else None: deterministic rules."""
        if y is None or not (feature.monte_carlo or likelihood.monte_carlo):
            return None
        return numpyro.prng_key()

    @validated
    def model(self, X: DataInputs, y: MaybeTargets = None, *, batch_size: MaybeCount = None) -> None:
        """The joint model. With ``y=None`` it draws f and y (posterior/prior predictive).

        :param X: inputs (N, D) or a :class:`~ppl_sparsegp.Grid`.
        :param y: targets (N,) (class labels for a multiclass likelihood), or None to draw them.
        :param batch_size: a minibatch of this many rows per step (``numpyro.plate`` subsampling, the
            likelihood scaled by N/batch_size), or None for all N rows.
        :raises ValueError: for bad data (see ``check_inputs``) or a ``batch_size`` that is not an int in
            1..N.
        """
        if batch_size is not None and (isinstance(batch_size, bool)
                                       or not isinstance(batch_size, (int, np.integer))):
            raise ValueError(f"batch_size must be a positive int (rows per minibatch) or None, got "
                             f"{batch_size!r} of type {type(batch_size).__name__}")
        kernel, likelihood, feature, c = self.components()
        X, y = self._check_data(X, y, likelihood)
        u, Kmm = self._inducing(feature, kernel)
        key = self._key(feature, likelihood, y)
        N, L = X.shape[0], self.num_latent_gps
        if batch_size is not None and not 0 < batch_size <= N:
            raise ValueError(f"batch_size must be in 1..{N}, got {batch_size}")
        with numpyro.plate("data", N, subsample_size=batch_size) as idx:
            Xb = X if batch_size is None else X[idx]
            # per data block where the rows live (one device's Kuf block; see ppl_sparsegp.sharding)
            mean, var = map_rows(lambda Xs, rng_key=None: conditional(feature, kernel, Xs, u if L == 1 else u.T,
                                                                      whiten=self.whiten, Kmm=Kmm, rng_key=rng_key),
                                 Xb, rng_key=None if L > 1 else key)
            mean = mean + c
            if L > 1:
                var = jnp.broadcast_to(var[:, None], mean.shape)
            lik = likelihood if batch_size is None else likelihood.subsample(idx)
            if y is None:
                fd = dist.Normal(mean, jnp.sqrt(self._model_variance(var) + 1e-12))
                f = numpyro.sample(self.name, fd if L == 1 else fd.to_event(1))
                numpyro.sample("y", lik.dist(f))
            else:
                yb = y if batch_size is None else y[idx]
                numpyro.factor("y", self._log_likelihood(lik, yb, mean, var, key))

    def _model_variance(self, var):
        """The variance of f given u in this model: p(f | u)'s, or 0 for the projected process."""
        return jnp.zeros_like(var) if self.residual == "none" else var

    def _log_likelihood(self, lik, y, mean, var, rng_key=None):
        """Per-point likelihood term for p(f | u) = N(mean, var) (see ``residual``)."""
        if self.residual == "expected":
            if lik.monte_carlo:
                return lik.variational_expectation(y, mean, var, rng_key=rng_key)
            return lik.variational_expectation(y, mean, var)
        if self.residual == "marginal":
            return lik.predict_log_density(y, mean, var)
        return lik.log_prob(y, mean)

    @validated
    def guide(self, X: MaybeInputs = None, y: MaybeTargets = None, *, batch_size: MaybeCount = None) -> None:
        """Gaussian q over the inducing site (one per latent GP) and point estimates of the
        hyperparameters."""
        kernel, likelihood, feature, c = self.components(point=True)
        loc, cov = self._q_all(Kuu(feature, kernel))
        numpyro.sample(self.site, StructuredNormal(loc, cov))

    # --- exact evaluation and prediction -----------------------------------------------------------
    def _q_all(self, Kmm):
        """q's (loc, covariance operator) from the q family: one, or one per latent GP (block-diagonal)."""
        if self.num_latent_gps == 1:
            return self.q_family(self.site, self._dim(Kmm), Kmm, self.whiten)
        pairs = [self.q_family(f"{self.site}_{l}", self._dim(Kmm), Kmm, self.whiten)
                 for l in range(self.num_latent_gps)]
        return jnp.concatenate([p[0] for p in pairs]), BlockDiag(tuple(p[1] for p in pairs))

    def _fitted(self, params: dict, method: str):
        """(kernel, likelihood, feature, c, Kmm, loc, S) at SVI params (all of the guide's: a missing one
        raises ``ValueError``)."""
        require_params(self, method, params)
        values = self.point_values(params)
        kernel, likelihood, feature, c = self.components_from(values)
        Kmm = Kuu(feature, kernel)
        with handlers.block(), handlers.substitute(data=values):
            loc, S = self._q_all(Kmm)
        return kernel, likelihood, feature, c, Kmm, loc, S

    def _marginals(self, feature, kernel, X, loc, S, Kmm):
        """q(f(X)) marginals: (N,) for one latent GP; (N, L) for L, one ``conditional`` vmapped over the
        latent GPs' q (Kuf computed once)."""
        if self.num_latent_gps == 1:
            return conditional(feature, kernel, X, loc, S, whiten=self.whiten, Kmm=Kmm)
        locs = loc.reshape(self.num_latent_gps, -1)
        stacked = jax.tree.map(lambda *a: jnp.stack(a), *S.blocks)
        return jax.vmap(lambda m, Sl: conditional(feature, kernel, X, m, Sl, whiten=self.whiten, Kmm=Kmm),
                        out_axes=-1)(locs, stacked)

    @validated
    def elbo(self, params: FittedParams, X: DataInputs, y: Targets, rng_key: MaybeKey = None, *,
             num_data: MaybeCount = None) -> jax.Array:
        r"""The ELBO :math:`\sum_n\mathbb E_{q(f_n)}\log p(y_n\mid f_n) - \mathrm{KL}(q(\mathbf u)\,\|\,
        p(\mathbf u))` at the given SVI params (all of the guide's params: a missing one raises
        ``ValueError``); exact, or Monte Carlo with ``rng_key`` for a Monte Carlo likelihood (Softmax). With
        ``num_data`` = N, (X, y) is a minibatch and its data term is scaled by N / len(X) (unbiased)."""
        if self.residual != "expected":
            raise NotImplementedError(f"elbo() is the SVGP bound of residual='expected'; this model has "
                                      f"residual={self.residual!r}")
        X, y = self._check_data(X, y, self.likelihood)  # the data first: their errors name the fix
        kernel, likelihood, feature, c, Kmm, loc, S = self._fitted(params, "elbo")
        mean, var = map_rows(lambda Xs: self._marginals(feature, kernel, Xs, loc, S, Kmm), X)
        prior = Identity(S.size, dtype=Kmm.dtype) if self.whiten else (
            Kmm if self.num_latent_gps == 1 else BlockDiag((Kmm,) * self.num_latent_gps))
        ve = likelihood.variational_expectation(y, mean + c, var, rng_key=rng_key) if likelihood.monte_carlo \
            else likelihood.variational_expectation(y, mean + c, var)
        scale = 1.0 if num_data is None else num_data / X.shape[0]
        return scale * jnp.sum(ve) - gaussian_kl(loc, S, prior)

    @validated
    def constructor_argument(self, name: AName) -> Any:
        """:meth:`~ppl_sparsegp.GPModel.constructor_argument`; ``q_cov`` is the name of the q family
        (the string :func:`~ppl_sparsegp.approximations.variational.resolve_q_family` takes back).

        :raises ValueError: for ``q_cov`` a user-defined callable (no name rebuilds it)."""
        if name == "q_cov":
            return q_cov_name(self.q_family)
        return super().constructor_argument(name)

    @validated
    def predict(self, X_new: DataInputs, *, params: MaybeParams = None, samples: MaybeDraws = None) -> dict[str,
                jax.Array]:
        """Predictive marginals at X_new.

        :param params: SVI params (``svi_result.params``): q(u) is used analytically.
        :param samples: posterior draws (``mcmc.get_samples()``): per-draw p(f|u) marginals, mixed.
        :returns: dict with ``f_mean``, ``f_var``, ``y_mean``, ``y_var`` (latent and observation; (N, L)
            and, for a multiclass likelihood, the class probabilities and their p(1 − p) when L > 1).
        :raises ValueError: when ``params`` lacks a param of :meth:`guide` or ``samples`` a sampled site.
        """
        if (params is None) == (samples is None):
            raise ValueError("give exactly one of params= (SVI) or samples= (MCMC)")
        X_new = self.feature.warn_outside(check_inputs(X_new, "X_new"), kernel=self.kernel)
        L = self.num_latent_gps
        if params is not None:
            kernel, likelihood, feature, c, Kmm, loc, S = self._fitted(params, "predict")
            m, v = self._marginals(feature, kernel, X_new, loc, S, Kmm)
            m = m + c
            ym, yv = likelihood.predict_mean_and_var(m, v)
            return {"f_mean": m, "f_var": v, "y_mean": ym, "y_var": yv}

        def one(values):
            kernel, likelihood, feature, c = self.components_from(values)
            u = values[self.site]
            m, v = conditional(feature, kernel, X_new, u if L == 1 else u.reshape(L, -1).T, whiten=self.whiten)
            v = self._model_variance(v)
            if L > 1:
                v = jnp.broadcast_to(v[:, None], m.shape)
            ym, yv = likelihood.predict_mean_and_var(m + c, v)
            return m + c, v, ym, yv

        require_samples(self, "predict", samples, self.site)
        ms, vs, yms, yvs = jax.lax.map(one, samples)
        return {"f_mean": ms.mean(0), "f_var": vs.mean(0) + ms.var(0),  # law of total variance
                "y_mean": yms.mean(0), "y_var": yvs.mean(0) + yms.var(0),
                "f_mean_draws": ms, "f_var_draws": vs}
