"""Type-II maximum likelihood / MAP of a model's hyperparameters by L-BFGS on the model's own log density.

For a collapsed model (the u integrated out: ``CollapsedGP``) the objective is deterministic and has few
dimensions, so a quasi-Newton method converges in tens of iterations where Adam needs thousands of steps;
``python -m inference fit <model> --method map`` uses it. Use it as
``map_lbfgs(gp.model, gp.hyperparameter_sites(), model_args=(X, y))``.


The objective is :math:`-\\log p(\\mathbf y, \\theta)` from ``numpyro.infer.util.log_density`` of the
model, in the constrained space (no Jacobian), i.e. the objective of SVI with the point (Delta) guide,
optimised over unconstrained coordinates :math:`\\theta = T(u)` (``biject_to(site.support)``) with
SciPy's L-BFGS-B and a jitted value-and-gradient.
"""
from __future__ import annotations

import time
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.distributions.transforms import biject_to
from numpyro.infer.util import log_density

from ..parameters import as_rng_key
from ..validation import Count, InstanceOf, IsCallable, OrNone, RngKey, validated

_SITES = InstanceOf(dict, what="a dict {site name: NumPyro prior} (gp.hyperparameter_sites())")

__all__ = ["map_lbfgs", "prior_medians"]


@validated
def prior_medians(sites: Annotated[dict, _SITES], rng_key: RngKey = 0, num: Count = 101) -> dict:
    """Median of ``num`` prior draws per site (a robust starting point).

    :param sites: ``{name: NumPyro distribution}``.
    :param rng_key: the JAX PRNG key of the draws, or an int (``jax.random.PRNGKey(rng_key)``).
    :param num: draws per site.
    :returns: ``{name: array}`` of the sites' shapes."""
    keys = jax.random.split(as_rng_key(rng_key), len(sites))
    return {k: jnp.median(p.sample(key, (num,)), axis=0) for key, (k, p) in zip(keys, sites.items())}


@validated
def map_lbfgs(model: Annotated[Any, IsCallable()], sites: Annotated[dict, _SITES], *,
              model_args: Annotated[Any, InstanceOf(tuple, list, what="a tuple of the model's positional arguments")]
              = (), model_kwargs: Annotated[dict | None, OrNone(InstanceOf(dict))] = None,
              init: Annotated[dict | None, OrNone(InstanceOf(dict))] = None, num_steps: Count = 500,
              rng_key: RngKey = 0) -> tuple[dict[str, jax.Array], dict]:
    """Maximise the model's log joint over the hyperparameter ``sites`` (``{name: prior}``).

    :param model: a NumPyro model whose only latent sites are ``sites`` (e.g. ``CollapsedGP.model``).
    :param sites: ``{name: NumPyro distribution}`` (e.g. ``gp.hyperparameter_sites()``).
    :param model_args: positional arguments of the model (e.g. ``(X, y)``); ``model_kwargs`` keyword ones.
    :param num_steps: at most this many L-BFGS-B iterations (it stops earlier at convergence).
    :param rng_key: the JAX PRNG key of the default starting point, or an int (``jax.random.PRNGKey(rng_key)``).
    :param init: starting values per site (default: the median of 101 prior draws).
    :raises ValueError: when the objective is not finite at the start (a bad ``init``).

    :returns: ``(values, info)``: constrained values per site and a dict with ``iterations``,
        ``evaluations``, ``neg_log_joint``, ``success``, ``message``, ``time_s`` (compilation included)
        and ``compile_s``.
    """
    model_kwargs = dict(model_kwargs or {})
    transforms = {k: biject_to(p.support) for k, p in sites.items()}
    init = prior_medians(sites, rng_key) if init is None else init
    u0 = {k: transforms[k].inv(jnp.asarray(init[k])) for k in sites}
    flat0, unravel = ravel_pytree(u0)

    def constrained(u):
        return {k: transforms[k](v) for k, v in u.items()}

    def objective(flat):
        return -log_density(model, model_args, model_kwargs, constrained(unravel(flat)))[0]

    value_and_grad = jax.jit(jax.value_and_grad(objective))
    t0 = time.perf_counter()
    v0, g0 = jax.block_until_ready(value_and_grad(flat0))
    compile_s = time.perf_counter() - t0
    if not (np.isfinite(float(v0)) and np.all(np.isfinite(np.asarray(g0)))):
        raise ValueError(f"map_lbfgs: the negative log joint or its gradient is not finite at the start "
                         f"({float(v0)}); give init= values inside the priors' support")

    def fun(x):
        v, g = value_and_grad(jnp.asarray(x))
        return float(v), np.asarray(g, dtype=np.float64)

    from scipy.optimize import minimize

    res = minimize(fun, np.asarray(flat0, np.float64), jac=True, method="L-BFGS-B",
                   options={"maxiter": num_steps})
    values = {k: np.asarray(v) for k, v in constrained(unravel(jnp.asarray(res.x))).items()}
    info = {"iterations": int(res.nit), "evaluations": int(res.nfev), "neg_log_joint": float(res.fun),
            "success": bool(res.success), "message": str(res.message),
            "time_s": time.perf_counter() - t0, "compile_s": compile_s}
    return values, info
