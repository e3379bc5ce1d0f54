r"""The global mode check: is the posterior in the mode that holds the most mass?

The refinement check (:func:`~ppl_sparsegp.diagnostics.refinement_check`) is local by construction: it
reweights the fit's own draws and warm-starts a refit at them, so a posterior sitting in a minor mode
passes it when a mode elsewhere holds more mass (measured: a real series' fit at trend ℓ 3.0 passed with
k̂ 0.56 where the exact GP sits at 0.91). This check looks elsewhere:

1. **Optima of the exact marginal** (``marginal_spectral_gp`` as the exact GP,
   ``exact_marginal.exact_marginals``; on a random subsample of
   ``exact_rows`` rows beyond that size) by L-BFGS from dispersed starts
   (``approximations.pilot_search``: the priors' quantiles, every lengthscale over its
   data-supported range independently, the draws' median and a few draws), each distinct optimum with its
   Laplace log mass and Gaussian :math:`\mathcal N(\hat{\mathbf u}_k, H_k^{-1})` in the unconstrained
   coordinates.
2. **The draws' modes.** Each draw goes to the optimum whose Laplace Gaussian gives it the largest
   density; the draws' mode is the one holding most of them.
3. **Verdict.** The check fails when the draws' mode has ``log_mass_gap`` (default log 3) less Laplace
   mass than the mode of the largest: the fit is in a minor mode. The message says what to do: refit with
   NUTS initialised at the main mode (``result["main_mode"]`` for ``init_to_value``) and features that
   resolve it (:func:`~ppl_sparsegp.choose_features` sizes them from every mode it keeps).

Cost: (starts) L-BFGS runs of the exact GP on n ≤ ``exact_rows`` rows, O(n³) per gradient, and one
Hessian per optimum; seconds for a few hundred rows, about a minute at 2 000.

References:
    1. MacKay (2003), Information theory, inference and learning algorithms, ch. 27 (Laplace's method).
"""
from __future__ import annotations

import math
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.distributions.transforms import biject_to

from ..approximations.pilot import EXACT_ROWS, _sites, _trace, dispersed_starts
from ..approximations.pilot_search import exact_model, find_optima
from ..parameters import as_rng_key
from ..validation import Count, IsCallable, MaybeCount, NonNegative, NonNegativeInt, RngKey, Samples, validated
from .prediction import _thin, posterior_samples

__all__ = ["mode_check"]


@validated(forwards_to="model")
def mode_check(model: Annotated[Any, IsCallable()], samples: Samples, *args, exact_rows: MaybeCount = EXACT_ROWS,
               starts: Count = 5, data_starts: Annotated[int, NonNegativeInt()] = 6, num_steps: Count = 200,
               log_mass_gap: NonNegative = math.log(3.0), max_draws: Count = 1000, rng_key: RngKey = 0,
               **kwargs) -> dict:
    r"""Check globally that a fit's draws sit in the hyperparameter posterior's main mode (module docstring).

    :param model: the fitted NumPyro model with :func:`~ppl_sparsegp.marginal_spectral_gp` (Gaussian
        observations: nothing latent but the hyperparameters), called ``model(*args, **kwargs)``.
    :param samples: the fit's draws ``{site: (draws, ...)}`` (``mcmc.get_samples()``) or an InferenceData.
    :param args: the model's positional arguments, as in the fit (the data).
    :param exact_rows: the exact GP runs on at most this many rows (a random subsample beyond; O(n³) per
        gradient). None: every row (no cap).
    :param starts: starts at the priors' quantiles; ``data_starts`` over each lengthscale's
        data-supported range (the pilot's, :func:`~ppl_sparsegp.choose_features`).
    :param num_steps: at most this many L-BFGS iterations per start.
    :param log_mass_gap: the Laplace log mass by which the draws' mode may trail the main one (default
        log 3: a mode with a third of the main one's mass fails).
    :param max_draws: draws assigned to the modes (evenly thinned).
    :param rng_key: the key of the subsample and of the data starts.
    :param kwargs: the model's keyword arguments (e.g. ``features=``).
    :returns: dict with ``ok``, ``message``, ``modes`` (per distinct optimum, the largest Laplace mass first:
        ``values``, ``log_joint``, ``log_mass``, ``laplace_share`` (its share of the Laplace masses) and
        ``draws_share`` (the fraction of draws assigned to it)), ``main_mode`` ({site: value} of the largest
        mass, for ``init_to_value``), ``draws_mode`` (the index of the draws' mode), ``rows`` (the exact
        GP's rows) and ``num_starts``.
    :raises ValueError: for a model with latent functions or without ``marginal_spectral_gp``, or draws
        missing one of its hyperparameters (or with fewer than 2 draws).
    """
    with jax.enable_x64(True):  # as the pilot: the marginal's Hessians need float64
        return _check(model, samples, args, kwargs, exact_rows, starts, data_starts, num_steps, log_mass_gap,
                      max_draws, as_rng_key(rng_key))


def _check(model, samples, args, kwargs, exact_rows, starts, data_starts, num_steps, gap, max_draws, rng_key):
    if hasattr(samples, "posterior"):
        samples = posterior_samples(samples)
    sites, gps = _sites(_trace(model, args, kwargs))
    missing = [k for k in sites if k not in samples]
    if missing:
        raise ValueError(f"mode_check: samples lacks the model's hyperparameter(s) {missing} (it has "
                         f"{sorted(samples)}): pass mcmc.get_samples() and the model's arguments as in the fit")
    draws = _thin({k: jnp.atleast_1d(jnp.asarray(samples[k])) for k in sites}, max_draws)
    if len(next(iter(draws.values()))) < 2:
        raise ValueError("mode_check needs at least 2 draws per site (pass mcmc.get_samples())")
    n = max(int(np.shape(s["infer"]["ppl_sparsegp_inputs"])[0]) for s in gps)
    key_rows, key_starts = jax.random.split(rng_key)
    rows = None if exact_rows is None or n <= exact_rows else np.sort(
        np.asarray(jax.random.choice(key_rows, n, (exact_rows,), False)))
    inits = dispersed_starts(model, args, kwargs, sites, starts, data_starts, key_starts)
    S = len(next(iter(draws.values())))
    inits += [{k: jnp.median(v, axis=0) for k, v in draws.items()}]
    inits += [{k: v[i] for k, v in draws.items()} for i in np.linspace(0, S - 1, 3).astype(int)]
    optima = find_optima(exact_model(model, rows), args, kwargs, sites, inits, num_steps, what="mode_check")
    shares = _draws_shares(draws, sites, optima)
    masses = np.array([o["log_mass"] for o in optima])
    laplace = np.exp(masses - masses.max())
    modes = [{"values": {k: np.asarray(v).tolist() for k, v in o["values"].items()}, "log_joint": o["log_joint"],
              "log_mass": o["log_mass"], "laplace_share": float(w), "draws_share": float(q)}
             for o, w, q in zip(optima, laplace / laplace.sum(), shares)]
    where = int(np.argmax(shares))
    out = {"modes": modes, "main_mode": {k: jnp.asarray(v) for k, v in optima[0]["values"].items()},
           "draws_mode": where, "rows": n if rows is None else len(rows), "num_starts": len(inits)}
    out["ok"], out["message"] = _verdict(modes, where, gap, out["rows"], len(inits))
    return out


def _draws_shares(draws, sites, optima):
    """The fraction of the draws whose largest Laplace density (in the unconstrained coordinates) is each
    optimum's."""
    transforms = {k: biject_to(p.support) for k, p in sites.items()}
    U = np.asarray(jax.vmap(lambda d: ravel_pytree({k: transforms[k].inv(d[k]) for k in sites})[0])(draws))
    logp = []
    for o in optima:
        cov = np.atleast_2d(o["cov"])
        L = np.linalg.cholesky(cov + 1e-12 * np.eye(len(cov)))
        z = np.linalg.solve(L, (U - o["mean"]).T)
        logp.append(-0.5 * np.sum(z * z, axis=0) - np.sum(np.log(np.diag(L))))
    nearest = np.argmax(np.stack(logp), axis=0)
    return np.bincount(nearest, minlength=len(optima)) / len(nearest)


def _describe(values):
    """``site=value, ...`` with 4 significant digits."""
    def fmt(v):
        v = np.asarray(v, dtype=float)
        return f"{float(v):.4g}" if v.size == 1 else "[" + ", ".join(f"{x:.4g}" for x in v.ravel()) + "]"
    return ", ".join(f"{k}={fmt(v)}" for k, v in values.items())


def _verdict(modes, where, gap, rows, num_starts):
    found = f"{len(modes)} distinct optimum(a) of the exact GP on {rows} rows from {num_starts} dispersed starts"
    main, at = modes[0], modes[where]
    deficit = main["log_mass"] - at["log_mass"]
    if where == 0 or deficit <= gap:
        return True, (f"in the main mode: {at['draws_share']:.0%} of the draws at the optimum "
                      f"({_describe(at['values'])}) of {'the largest' if where == 0 else 'near-equal'} Laplace "
                      f"mass; {found}")
    return False, (
        f"in a minor mode: {at['draws_share']:.0%} of the draws sit at ({_describe(at['values'])}), whose Laplace "
        f"mass is {deficit:.1f} nats ({math.exp(min(deficit, 700.0)):.3g}x) below the main mode's at "
        f"({_describe(main['values'])}), which holds {main['draws_share']:.0%} of them; {found}. Refit with NUTS "
        "initialised at the main mode, NUTS(model, init_strategy=init_to_value(values=check['main_mode'])), with "
        "features that resolve it (psg.choose_features(model, ...) sizes them from every mode it keeps), and run "
        "the checks again")
