r"""The refinement check: does the posterior survive a finer approximation?

The residual check (:func:`~ppl_sparsegp.diagnostics.adequacy`) evaluates what the features miss at the
posterior's own draws, so a posterior that the features pushed away from the lengthscales they cannot
resolve passes it by construction (measured: a posterior 22 sd from the exact GP's, 0.094% missed).
This check asks the question that such a posterior cannot pass: run the same model with every feature
refined (:func:`~ppl_sparsegp.refined_features`: VFF doubles its highest frequency) and see whether the
posterior moves.

* **Importance weights** (when the refined model has the same latent sites as the fit, i.e. the
  inducing variables are integrated out, :func:`~ppl_sparsegp.marginal_spectral_gp`): each draw θ_s gets
  :math:`\log w_s = \log p_{\text{refined}}(\mathbf y, \theta_s) - \log p(\mathbf y, \theta_s)`, smoothed
  by PSIS [1]; its Pareto :math:`\hat k > 0.7` says the draws cannot reach the refined posterior's mass,
  and below it the weighted moments give the shift of every hyperparameter's mean in the refined
  posterior's sd (as a distance to the exact GP is measured in the exact posterior's sd).
* **A short warm-started refit** (the proxy for latent models whose inducing sites change size with the
  features; by default run only where the weights cannot decide: latent models and k̂ > 0.7): NUTS on
  the refined model from the posterior medians, and the distance of its posterior means from the fit's,
  in the refit's posterior sd, judged net of its Monte Carlo
  error: :math:`\max(0, |\Delta| / \mathrm{sd} - 2\sqrt{1/\mathrm{ESS}_{\text{refit}} + 1/\mathrm{ESS}_{\text{fit}}})`
  (a 100 + 100 refit of an unchanged posterior moved a heavy-tailed variance by 0.64 sd, measured; the
  raw distance is reported too).

The check fails when :math:`\hat k > 0.7` or a hyperparameter moves by more than ``threshold`` sd; its
message names what moved and the fix (for VFF: the lengthscale the features resolve, and the
``from_data`` call that resolves the refit's lengthscales).

References:
    1. Vehtari, Simpson, Gelman, Yao, Gabry (2024), Pareto smoothed importance sampling, JMLR 25.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC, NUTS, init_to_value
from numpyro.infer.util import log_density

from ..features.base import refined_features
from ..validation import Boolean, Count, Integer, Key, NonNegativeInt, OrNone, Positive, Samples, validated
from ._arviz import az
from .prediction import _thin, check_chain_grouping, posterior_samples
from .traces import model_trace

__all__ = ["refinement_check"]

_K_HAT_MAX = 0.7  # PSIS's threshold: above it the draws cannot reach the refined posterior's mass

#: hyperparameters: latent sites with at most this many values per draw (inducing sites are larger)
MAX_HYPER_SIZE = 16


def _latent(trace) -> dict:
    return {n: jnp.shape(s["value"]) for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"]}


def _features(trace) -> list:
    """(gp name, feature, ν) of every primitive in the trace (they record them in the site's ``infer``)."""
    return [f for s in trace.values() if s["type"] == "sample" for f in s.get("infer", {}).get("ppl_sparsegp_gps", [])]


def _moments(draws: dict, names, weights=None):
    """{site: (mean, sd)} flattened per component, optionally importance-weighted."""
    out = {}
    for n in names:
        v = np.asarray(draws[n], dtype=float).reshape(len(draws[n]), -1)
        w = np.full(len(v), 1.0 / len(v)) if weights is None else weights
        mean = w @ v
        out[n] = (mean, np.sqrt(np.maximum(w @ (v - mean) ** 2, 0.0)))
    return out


def _ess(draws) -> float:
    """The smallest bulk effective sample size over a site's components (draws as one chain)."""
    v = np.asarray(draws, dtype=float).reshape(len(draws), -1)
    return float(max(1.0, np.min(effective_sample_size(v[None]))))


def _shifts(base: dict, other: dict, scale: dict) -> dict:
    """{site: max over components of |mean_other − mean_base| / sd_scale}."""
    return {n: float(np.max(np.abs(other[n][0] - base[n][0]) / np.maximum(scale[n][1], 1e-300))) for n in base}


@validated(forwards_to="model")
def refinement_check(model: Callable[..., Any], samples: Samples, *args, times: Count = 1,
                     refit: Annotated[bool | None, OrNone(Boolean())] = None,
                     num_warmup: Annotated[int, NonNegativeInt()] = 200, num_samples: Annotated[int, Integer(2)] = 200,
                     threshold: Positive = 0.5, max_draws: Annotated[int | None, OrNone(Integer(2))] = 1000,
                     rng_key: Annotated[Any, OrNone(Key(allow_int=False))] = None, **kwargs) -> dict:
    r"""Refine every feature of a model and report whether its posterior moves (module docstring).

    :param model: the NumPyro model that was fitted (a user's model with
        :func:`~ppl_sparsegp.marginal_spectral_gp` or :func:`~ppl_sparsegp.spectral_gp`, or a library
        model's ``gp.model``), called as ``model(*args, **kwargs)``.
    :param samples: the fit's posterior draws ``{site: (draws, ...)}`` (``mcmc.get_samples()``) or an
        InferenceData.
    :param args: the model's positional arguments, as in the fit (the data).
    :param times: refinements (each doubles VFF's highest frequency).
    :param refit: run the short NUTS refit on the refined model. None (default): where the importance
        weights cannot decide, i.e. for latent models (the refit is their check) and where k̂ > 0.7 (the
        refit then says where the refined posterior went, for the message's advice); with k̂ ≤ 0.7 the
        weights are the closed-form check and a refit would only add its Monte Carlo noise and its cost
        (873 s for the benchmark's 405-feature model, measured). True: always; False: never (latent
        models then get no verdict: a ValueError).
    :param num_warmup: the refit's warm-up iterations; ``num_samples`` its draws (one chain).
    :param threshold: the largest shift of a hyperparameter's posterior mean, in posterior sd, that passes.
    :param max_draws: draws used for the importance weights (evenly thinned).
    :param rng_key: the refit's key (default ``PRNGKey(0)``).
    :param kwargs: the model's keyword arguments.
    :returns: dict with ``ok``, ``message``, ``k_hat`` (None without importance weights), ``ess`` (the
        weights' effective sample size), ``shift_is`` and ``shift_refit`` (``{site: sd}``; the refit's net of
        twice its Monte Carlo error ``mcse_refit``, the raw distance in ``shift_refit_raw``), ``refit_mean``
        (``{site: mean}``), ``features`` (the features' descriptions before and after) and, when it fails,
        ``advised_features`` (``{gp name: FourierFeatures}`` for the next fit: the same box, the frequencies
        that resolve the refined posterior's lower 5% lengthscale quantile, at least the refined count).
    :raises ValueError: for empty or ragged draws, fewer than 2 draws, a model site missing from ``samples``,
        ``max_draws`` < 2, a threshold ≤ 0, or a model without refinable features.
    """
    if not threshold > 0:
        raise ValueError(f"threshold must be a positive number of posterior sd, got {threshold!r}")
    if hasattr(samples, "posterior"):
        samples = posterior_samples(samples)
    draws = _check_draws(samples, max_draws)
    flat = _thin(draws, max_draws)
    prior_trace = model_trace(model, {}, args, kwargs)  # the sites' own shapes: chain-grouped draws differ
    check_chain_grouping(flat, {n: jnp.shape(t["value"]) for n, t in prior_trace.items()
                                if t["type"] == "sample" and not t["is_observed"]}, "refinement_check")
    first = {k: v[0] for k, v in flat.items()}
    base_trace = model_trace(model, first, args, kwargs)
    inducing = {n for n, site in base_trace.items()  # spectral_gp's inducing sites: their size follows the features
                if site["type"] == "sample" and not site["is_observed"] and "ppl_sparsegp_gps" in site.get("infer", {})}
    missing = [n for n in _latent(base_trace) if n not in flat and n not in inducing]
    if missing:
        raise ValueError(f"refinement_check: samples lacks the model's site(s) {missing} (it has {sorted(flat)}): "
                         "pass every draw of the fit, mcmc.get_samples(), and the model's arguments as in the fit")
    small = {k: v for k, v in first.items() if k not in inducing}
    try:
        with refined_features(times):
            refined_trace = model_trace(model, small, args, kwargs)
    except NotImplementedError as err:
        raise ValueError(f"refinement_check: {err}") from err
    gps = _features(base_trace)
    if not gps:
        raise ValueError("refinement_check found no spectral_gp or marginal_spectral_gp in the model: "
                         "nothing to refine")
    base_latent, refined_latent = _latent(base_trace), _latent(refined_trace)
    hyper = [n for n, shape in base_latent.items() if n in flat and n not in inducing
             and int(np.prod(shape, dtype=int)) <= MAX_HYPER_SIZE and refined_latent.get(n) == shape]
    moments = _moments(flat, hyper)
    result = {"k_hat": None, "ess": None, "shift_is": {}, "shift_refit": {}, "refit_mean": {},
              "features": _describe(gps, _features(refined_trace)),
              "num_draws": int(next(iter(draws.values())).shape[0])}

    if base_latent == refined_latent and all(n in flat for n in base_latent):
        draws = {n: flat[n] for n in base_latent}
        result.update(_importance_weights(model, draws, flat, hyper, moments, args, kwargs, times))
    if refit is False and result["k_hat"] is None:
        raise ValueError("refinement_check(refit=False) on a model whose inducing variables are sampled: importance "
                         "weights need marginal_spectral_gp; let the check refit (refit=None or True)")
    if refit or (refit is None and (result["k_hat"] is None or result["k_hat"] > _K_HAT_MAX)):
        result.update(_refit(model, flat, hyper, moments, args, kwargs, times, num_warmup, num_samples, rng_key))
    result["ok"], result["message"] = _verdict(result, moments, threshold, gps)
    advised = {name: _advised_feature(result, name, feature, nu) for name, feature, nu in gps}
    result["advised_features"] = {} if result["ok"] else {n: a[0] for n, a in advised.items() if a is not None}
    return result


def _importance_weights(model, draws, flat, hyper, moments, args, kwargs, times) -> dict:
    """PSIS weights of the refined model's density ratio at the fit's draws, and the moments' shift."""
    lw = np.asarray(_log_ratio(model, draws, args, kwargs, times))
    if not np.all(np.isfinite(lw)):
        raise ValueError("refinement_check: a draw has a non-finite log density under the refined model")
    smoothed, k_hat = az.psislw(lw - lw.max())
    w = np.exp(np.asarray(smoothed) - np.max(smoothed))
    w /= w.sum()
    weighted = _moments(flat, hyper, w)  # the refined posterior's moments, by importance sampling
    return {"k_hat": float(k_hat), "ess": float(1.0 / np.sum(w**2)), "shift_is": _shifts(moments, weighted, weighted),
            "refined_q05": {n: _weighted_quantile(flat[n], w, 0.05).tolist() for n in hyper}}


def _refit(model, flat, hyper, moments, args, kwargs, times, num_warmup, num_samples, rng_key) -> dict:
    """The short NUTS refit of the refined model from the posterior medians, and its shifts net of MC error."""
    init = {n: jnp.median(flat[n], axis=0) for n in hyper}
    mcmc = MCMC(NUTS(model, init_strategy=init_to_value(values=init)), num_warmup=num_warmup,
                num_samples=num_samples, num_chains=1, progress_bar=False)
    with refined_features(times):
        mcmc.run(jax.random.PRNGKey(0) if rng_key is None else rng_key, *args, **kwargs)
    refit_draws = mcmc.get_samples()
    again = _moments(refit_draws, hyper)
    out = {"shift_refit_raw": _shifts(moments, again, again)}
    se = {n: float(np.sqrt(1.0 / _ess(refit_draws[n]) + 1.0 / _ess(flat[n]))) for n in hyper}
    out["mcse_refit"] = se
    out["shift_refit"] = {n: max(0.0, d - 2.0 * se[n]) for n, d in out["shift_refit_raw"].items()}
    out["refit_mean"] = {n: again[n][0].tolist() for n in hyper}
    out["refit_q05"] = {n: np.quantile(np.asarray(refit_draws[n]).reshape(num_samples, -1), 0.05,
                                       axis=0).tolist() for n in hyper}
    return out


def _check_draws(samples, max_draws) -> dict:
    """The draws as arrays, refused (naming the fix) when empty, ragged, or fewer than the two a posterior
    sd needs; ``max_draws`` None or at least 2."""
    if not hasattr(samples, "items") or not samples:
        raise ValueError("samples is empty or not a dict: pass mcmc.get_samples() or the fit's InferenceData")
    if max_draws is not None and (isinstance(max_draws, bool) or int(max_draws) != max_draws or max_draws < 2):
        raise ValueError(f"max_draws must be an integer ≥ 2 (a posterior sd needs two draws) or None for all, "
                         f"got {max_draws!r}")
    flat = {k: jnp.atleast_1d(jnp.asarray(v)) for k, v in samples.items()}
    counts = {k: int(v.shape[0]) for k, v in flat.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(f"samples has ragged draws: every site needs the same number of draws on its first axis, "
                         f"got {counts}; pass mcmc.get_samples() (chains merged)")
    if next(iter(counts.values())) < 2:
        raise ValueError(f"samples has {next(iter(counts.values()))} draw(s) per site: the check compares posterior "
                         "means in posterior sd, which needs at least 2 draws (use the fit's mcmc.get_samples())")
    return flat


def _log_ratio(model, draws, args, kwargs, times):
    """log p_refined(y, θ_s) − log p(y, θ_s) per draw (two compiled programs, the refined one traced
    inside :func:`refined_features`)."""
    def density(draw):
        return log_density(model, args, kwargs, draw)[0]

    base = jax.jit(lambda d: jax.lax.map(density, d))(draws)
    with refined_features(times):
        refined = jax.jit(lambda d: jax.lax.map(density, d))(draws)
    return refined - base


def _weighted_quantile(draws, w, q):
    """The q-quantile of each component of draws (S, ...) under normalised weights w (S,)."""
    v = np.asarray(draws, dtype=float).reshape(len(w), -1)
    order = np.argsort(v, axis=0)
    cdf = np.cumsum(w[order], axis=0)
    idx = np.argmax(cdf >= q, axis=0)
    return np.take_along_axis(v, order, axis=0)[idx, np.arange(v.shape[1])]


def _describe(gps, refined) -> list:
    """One line per GP: its features before and after refinement (and the family's note,
    :meth:`~ppl_sparsegp.features.InducingFeature.refinement_note`: the lengthscales VFF resolves)."""
    out = []
    for (name, feature, nu), (_, finer, _) in zip(gps, refined):
        out.append(f"{name}: {type(feature).__name__} {feature.num_features} → {finer.num_features} features"
                   + feature.refinement_note(finer, nu))
    return out


def _verdict(result, moments, threshold, gps):
    k_hat, shifts = result["k_hat"], {**result["shift_is"], **result["shift_refit"]}
    worst = max(shifts, key=shifts.get) if shifts else None
    bad_k = k_hat is not None and k_hat > _K_HAT_MAX
    bad_shift = worst is not None and shifts[worst] > threshold
    parts = []
    if k_hat is not None:
        parts.append(f"Pareto k̂ {k_hat:.2f}, importance ESS {result['ess']:.0f}")
    if worst is not None:
        parts.append(f"largest shift {shifts[worst]:.2f} sd ({worst})")
    summary = "; ".join(parts) + " under refined features (" + "; ".join(result["features"]) + ")"
    if not (bad_k or bad_shift):
        return True, f"survives refinement: {summary}"
    moved = ", ".join(f"{n} {float(np.mean(moments[n][0])):.3g} → {float(np.mean(result['refit_mean'][n])):.3g}"
                      for n in result["refit_mean"] if result["shift_refit"].get(n, 0) > threshold)
    advice = [a for a in (_advice(result, name, feature, nu) for name, feature, nu in gps) if a]
    fix = "; ".join(advice) or "refit with the refined features (refined_features() or more frequencies) and compare"
    why = "the draws cannot reach the refined posterior's mass" if bad_k else "the posterior moves"
    return False, f"fails refinement: {why} ({summary}){'; ' + moved if moved else ''}; {fix}"


def _advised_feature(result, name, feature, nu):
    """The family's ``(features for the next fit, advice)`` for one GP
    (:meth:`~ppl_sparsegp.features.InducingFeature.refinement_advice`), or None: given the refined
    posterior's 5% lengthscale quantile (the refit's, else the importance-weighted one) where known."""
    site = f"{name}_kernel_lengthscale"
    quantiles = result.get("refit_q05") or result.get("refined_q05") or {}
    short = float(np.min(quantiles[site])) if site in quantiles else None
    return feature.refinement_advice(name, short, nu)


def _advice(result, name, feature, nu):
    """The message's fix for one GP (None where there is none to give)."""
    advised = _advised_feature(result, name, feature, nu)
    return None if advised is None else advised[1]
