r"""The search for the modes of a model's hyperparameter posterior that the pilot
(:func:`~ppl_sparsegp.choose_features`) and the global mode check
(:func:`~ppl_sparsegp.diagnostics.mode_check`) share: dispersed starts, one compiled objective, distinct
optima and their Laplace masses.

* **Starts.** The priors' quantiles (every site at one quantile in 0.1–0.9), and starts that ask the data:
  every lengthscale site, independently of the others (a Latin hypercube: each component a random
  permutation of its levels), at ``data_starts`` log-spaced levels from twice the median spacing of the
  inputs (per input dimension; the shortest lengthscale the samples can resolve) up to their span, the
  other sites at their prior medians. A prior that puts the lengthscale far above the data's (a
  prior–data conflict) thus does not keep the search away from the data's mode.
* **The exact marginal.** Under ``exact_marginal.exact_marginals`` the
  model's ``marginal_spectral_gp`` is the exact GP (on all rows, or a random subsample): its modes are
  those of the exact posterior, not of an approximation whose features the prior sized (such features can
  have no mode at all near the data's lengthscale).
* **Optima.** L-BFGS-B (SciPy) on −log p(y, θ) in the unconstrained coordinates, one jitted value and
  gradient for every start; optima within 0.05 in every log |value| are one; each distinct optimum gets its
  Laplace log mass (MacKay 2003, Eq. 27.10) and its Laplace covariance in the unconstrained coordinates.

References:
    1. MacKay (2003), Information theory, inference and learning algorithms, ch. 27 (Laplace's method).
    2. McKay, Beckman, Conover (1979), A comparison of three methods for selecting values of input
       variables in the analysis of output from a computer code, Technometrics 21 (Latin hypercube).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.distributions.transforms import biject_to
from numpyro.infer.util import log_density
from scipy.optimize import minimize

from ..validation import warn_user
from .exact_marginal import exact_marginals

__all__: list = []  # the pilot's and mode_check's internals


def exact_model(model, rows=None):
    """``model`` with every ``marginal_spectral_gp`` the exact GP on the rows ``rows`` (None: all)."""
    def exact(*args, **kwargs):
        with exact_marginals(rows):
            return model(*args, **kwargs)

    return exact


def _quantile(prior, q):
    try:
        return jnp.asarray(prior.icdf(jnp.asarray(q)))
    except (NotImplementedError, AttributeError, ImportError):
        return jnp.quantile(prior.sample(jax.random.PRNGKey(1), (2001,)), q, axis=0)


def prior_starts(sites, starts):
    """``starts`` initial points: every site at the same prior quantile, spread over (0.1, 0.9)."""
    levels = [0.5] if starts == 1 else np.linspace(0.1, 0.9, starts)
    return [{k: _quantile(p, q) for k, p in sites.items()} for q in levels]


def data_range(X):
    """(lo (D,), hi (D,)) per input dimension: twice the median spacing of the sorted distinct inputs and
    their span (a dimension with one distinct value gets NaN)."""
    X = np.asarray(X, dtype=float).reshape(np.shape(X)[0], -1)
    lo, hi = [], []
    for col in X.T:
        u = np.unique(col)
        lo.append(2.0 * float(np.median(np.diff(u))) if u.size > 1 else math.nan)
        hi.append(float(u[-1] - u[0]) if u.size > 1 else math.nan)
    return np.array(lo), np.array(hi)


def data_starts(sites, ranges, num, rng_key):
    """``num`` initial points whose lengthscale sites (``ranges``: {site: (lo, hi) broadcastable to the
    site's shape}) cover their log-spaced range independently (a Latin hypercube over the components);
    the other sites at their prior medians."""
    if num == 0 or not ranges:
        return []
    median = {k: _quantile(p, 0.5) for k, p in sites.items()}
    rng = np.random.default_rng(int(jax.random.randint(rng_key, (), 0, 2**31 - 1)))
    out = [dict(median) for _ in range(num)]
    for k, (lo, hi) in ranges.items():
        shape = np.shape(median[k])
        lo, hi = np.broadcast_to(lo, shape).ravel(), np.broadcast_to(hi, shape).ravel()
        cols = [rng.permutation(np.geomspace(a, b, num)) for a, b in zip(lo, hi)]
        for i, point in enumerate(out):
            point[k] = jnp.asarray(np.reshape([c[i] for c in cols], shape), dtype=jnp.result_type(float))
    return out


def unconstrained(model, args, kwargs, sites, values):
    """``(objective, x0, unravel)``: ``objective(x, jacobian)`` = −log p(y, θ) at the unconstrained point
    ``x`` (``jacobian``: minus the log |det| of the transforms, the density of the unconstrained
    coordinates), ``x0`` the point of ``values`` and ``unravel`` the map from ``x`` to ``{site: u}``."""
    transforms = {k: biject_to(p.support) for k, p in sites.items()}
    x0, unravel = ravel_pytree({k: transforms[k].inv(jnp.asarray(values[k])) for k in sites})

    def objective(x, jacobian=False):
        u = unravel(x)
        theta = {k: transforms[k](v) for k, v in u.items()}
        out = -log_density(model, args, kwargs, theta)[0]
        if jacobian:
            out = out - sum(jnp.sum(transforms[k].log_abs_det_jacobian(v, theta[k])) for k, v in u.items())
        return out

    return objective, x0, unravel


def hessian(objective, x0, values, jacobian=False):
    """The eigendecomposition of the Hessian of ``objective`` at ``x0``; refuses a Hessian that is not finite."""
    # eager, not jitted: the jitted Hessian of the exact GP's density is garbage under the test suite's
    # --xla_backend_optimization_level=0 (measured: -7.9e274 where eager and -O2 give 123.4)
    H = np.asarray(jax.hessian(lambda x: objective(x, jacobian))(x0))
    if not np.all(np.isfinite(H)):
        raise FloatingPointError("choose_features: the Hessian of the log joint at the pilot's optimum is not "
                                 f"finite at {dict(values)}; check the model's priors and data (NaN, inf)")
    return np.linalg.eigh(0.5 * (H + H.T))


def laplace(objective, x0, values):
    r"""``(log mass, mean (d,), covariance (d, d))``: Laplace's log posterior mass (unnormalised) of the
    optimum at ``x0`` in the unconstrained coordinates u,
    :math:`\log p(y, \theta(\hat u)) + \log|\det J(\hat u)| + \tfrac d2 \log 2\pi - \tfrac12 \log\det H`,
    H the Hessian of :math:`-\log p(y, \theta(u)) - \log|\det J(u)|` there (MacKay 2003, Eq. 27.10), and
    the Gaussian N(x0, H⁻¹) (a flat direction: a very wide Laplace, not a crash)."""
    lam, U = hessian(objective, x0, values, jacobian=True)
    lam = np.maximum(lam, 1e-12)
    mass = (-float(objective(x0, True)) + 0.5 * lam.size * math.log(2 * math.pi) - 0.5 * float(np.sum(np.log(lam))))
    return mass, np.asarray(x0), (U / lam) @ U.T


def _key(values):
    return np.concatenate([np.ravel(np.log(np.abs(np.asarray(values[k])) + 1e-300)) for k in sorted(values)])


def find_optima(model, args, kwargs, sites, inits, num_steps, what="choose_features"):
    """Every distinct optimum of −log p(y, θ) from the starts ``inits``, the largest Laplace mass first: a
    list of dicts ``log_joint``, ``log_mass``, ``values`` ({site: array}), ``mean`` and ``cov`` (Laplace's,
    unconstrained) and ``sd`` ({site: the sd of its unconstrained coordinates}). A start where the
    objective is not finite is skipped; L-BFGS stopping at ``num_steps`` warns (then not an optimum)."""
    objective, x0, unravel = unconstrained(model, args, kwargs, sites, inits[0])
    value_and_grad = jax.jit(jax.value_and_grad(lambda x: objective(x)))
    transforms = {k: biject_to(p.support) for k, p in sites.items()}

    def fun(x):
        v, g = value_and_grad(jnp.asarray(x))
        return float(v), np.asarray(g, dtype=np.float64)

    found, seen = [], []
    for init in inits:
        x = np.asarray(ravel_pytree({k: transforms[k].inv(jnp.asarray(init[k])) for k in sites})[0], np.float64)
        v0, g0 = fun(x)
        if not (np.isfinite(v0) and np.all(np.isfinite(g0))):
            continue
        res = minimize(fun, x, jac=True, method="L-BFGS-B", options={"maxiter": num_steps})
        if not res.success and res.nit >= num_steps:
            warn_user(f"{what}: L-BFGS stopped short after num_steps={num_steps} iterations "
                      f"({res.message}), not at an optimum: the modes are read from a point that is not one; "
                      "raise num_steps (the default is 200)", UserWarning)
        found.append((float(res.fun), res.x))
    if not found:
        raise ValueError(f"{what}: the log joint is not finite at any start; check the model's priors and data")
    out = []
    for neg, x in sorted(found, key=lambda o: o[0]):
        values = {k: np.asarray(transforms[k](v)) for k, v in unravel(jnp.asarray(x)).items()}
        key = _key(values)
        if any(np.max(np.abs(key - s)) < 0.05 for s in seen):  # an optimum already found
            continue
        seen.append(key)
        mass, mean, cov = laplace(objective, jnp.asarray(x), values)
        sd = {k: np.asarray(v) for k, v in unravel(jnp.asarray(np.sqrt(np.maximum(np.diag(cov), 0.0)))).items()}
        out.append({"log_joint": -neg, "log_mass": mass, "values": values, "mean": mean, "cov": cov, "sd": sd})
    return sorted(out, key=lambda o: -o["log_mass"])
