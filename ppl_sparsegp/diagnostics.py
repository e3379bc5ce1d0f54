r"""ArviZ diagnostics: every ArviZ call of the library lives here.

Inference results become :class:`arviz.InferenceData` with the groups

* ``posterior``: the hyperparameter sites and the inducing site (dim ``feature``);
* ``sample_stats``: for MCMC the sampler's extra fields in ArviZ's names (``diverging``, ``energy``,
  ``lp``, ``n_steps``, ``acceptance_rate``, ``step_size``, ``tree_depth``);
* ``log_likelihood``: the pointwise log likelihood (dim ``obs``). For :class:`~ppl_sparsegp.SparseGP`
  it is the per-observation term of the factor site ``y``,
  :math:`\ell_n = \mathbb E_{p(f_n\mid\mathbf u)}[\log p(y_n\mid f_n)]`, evaluated per draw [1]. The
  collapsed bound of :class:`~ppl_sparsegp.CollapsedGP` has no pointwise term: the group is omitted;
* ``posterior_predictive``: ``y`` (and the latent ``f``) drawn from the model with ``y=None``, one draw
  per posterior draw (for CollapsedGP from the per-draw predictive marginals
  :math:`\mathcal N(m_s, v_s + \sigma_s^2)`);
* for SVI (:func:`from_svi`) at large N the two pointwise groups hold a thinned, evenly spaced subset of
  the draws (at most :data:`MAX_POINTWISE` values per variable), each labelled by its posterior draw;
* ``observed_data`` (``y``) and ``constant_data`` (``X``, dims ``obs``, ``input``);
* for SVI, a group ``svi`` holding the optimised parameters and the loss (negative ELBO) trace (dim
  ``step``), so that :func:`predict` can use q(u) analytically after :func:`load`.

:func:`adequacy` says, per posterior draw, how much of the prior variance at the data the features miss
(and the fix when too much). :func:`summary` (R-hat, ESS [2]), :func:`save` / :func:`load` (netCDF),
:func:`predict` and :func:`predictive_metrics` from an InferenceData, the metrics :func:`rmse`,
:func:`nlpd`, :func:`mixture_nlpd`, :func:`mixture_metrics`, :func:`categorical_nlpd`, the Stein particle
results (:func:`stein_inference_data`, :func:`stein_diagnostics`) and the plots :func:`plot_trace`,
:func:`plot_fit_1d`, :func:`plot_spectral_density` complete the module.

References:
    1. Hensman, Matthews, Filippone, Ghahramani (2015), MCMC for variationally sparse Gaussian processes.
    2. Vehtari, Gelman, Simpson, Carpenter, Bürkner (2021), Rank-normalization, folding, and
       localization: an improved R-hat for assessing convergence of MCMC.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from jax.scipy.special import logsumexp
from numpyro.infer import Predictive
from numpyro.infer import log_likelihood as _numpyro_log_likelihood

from .grid import Grid
from .kernels import check_inputs

with warnings.catch_warnings():  # arviz 0.2x announces its 1.0 refactor on import
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

__all__ = ["from_samples", "from_mcmc", "from_svi", "summary", "save", "load", "posterior_samples",
           "svi_params", "predict", "predictive_metrics", "plot_trace", "plot_fit_1d",
           "adequacy", "add_adequacy", "rmse", "nlpd", "mixture_nlpd", "mixture_metrics", "categorical_nlpd",
           "stein_inference_data", "stein_diagnostics", "plot_spectral_density"]

SVI_GROUP = "svi"

# NumPyro extra field -> (ArviZ sample_stats name, transform)
_SAMPLE_STATS = {
    "diverging": ("diverging", lambda x: np.asarray(x, bool)),
    "energy": ("energy", np.asarray),
    "potential_energy": ("lp", lambda x: -np.asarray(x)),
    "num_steps": ("n_steps", np.asarray),
    "accept_prob": ("acceptance_rate", np.asarray),
    "adapt_state.step_size": ("step_size", np.asarray),
    "mean_accept_prob": ("mean_acceptance_rate", np.asarray),
}


# --- building InferenceData --------------------------------------------------------------------------
def _data_kwargs(model_kwargs):
    """Model kwargs for whole-data evaluation: no subsampling."""
    kw = dict(model_kwargs or {})
    if "batch_size" in kw:
        kw["batch_size"] = None
    return kw


def _flatten(samples: dict) -> dict:
    """(chain, draw, ...) -> (chain * draw, ...)."""
    return {k: jnp.reshape(v, (-1,) + v.shape[2:]) for k, v in samples.items()}


def _model_inputs(X):
    """X as the model receives it (a Grid stays a Grid: its Kronecker paths) and its number of rows."""
    X = X if isinstance(X, Grid) else jnp.asarray(X)
    return X, X.shape[0]  # a Grid's shape is that of its points, without forming them


def from_samples(gp, X, y, samples: dict, *, sample_stats=None, model_kwargs=None, coords=None,
                 dims=None, predictive=True, log_likelihood=True, rng_key=None,
                 attrs=None, _pointwise=None) -> az.InferenceData:
    """InferenceData from posterior draws ``{site: array (chain, draw, ...)}`` of ``gp.model``'s sites.

    The common builder of :func:`from_mcmc` and :func:`from_svi`; use it directly for other engines
    (e.g. SteinVI particles as draws of one chain). ``sample_stats``: ``{name: (chain, draw)}`` arrays;
    ``attrs``: stored on the posterior group (e.g. ``{"inference": "stein"}``). Other arguments as in
    :func:`from_mcmc`.
    """
    X, N = _model_inputs(X)
    points, y = (X.points() if isinstance(X, Grid) else X), jnp.asarray(y)  # the groups store points
    rng_key = jax.random.PRNGKey(0) if rng_key is None else rng_key
    kw = _data_kwargs(model_kwargs)
    all_dims = {"y": ["obs"], "f": ["obs"], "X": ["obs", "input"]}
    site = getattr(gp, "site", None)
    if site is not None and site in samples:
        all_dims[site] = ["feature"]
    all_dims.update(dims or {})

    groups = {"posterior": {k: np.asarray(v) for k, v in samples.items()},
              "observed_data": {"y": np.asarray(y)}, "constant_data": {"X": np.asarray(points)}}
    if sample_stats:
        groups["sample_stats"] = sample_stats
    if _pointwise is not None:  # from_svi: computed for a subset of the draws (``draw`` coordinates below)
        pointwise_draws, computed = _pointwise
        groups.update({name: group for name, group in computed.items() if group})
        log_likelihood = predictive = False
    if log_likelihood and gp.pointwise_likelihood:
        # jit at the boundary: one compilation instead of op-by-op dispatch
        ll = jax.jit(lambda s, X, y: _numpyro_log_likelihood(gp.model, s, X, y, batch_ndims=2, **kw))(
            samples, X, y)
        # keep the pointwise terms only (a scalar factor, e.g. a collapsed bound, has none)
        ll = {k: np.asarray(v) for k, v in ll.items() if v.shape[2:] == (N,)}
        if ll:
            groups["log_likelihood"] = ll
    if predictive:
        pp = jax.jit(lambda s, key, X, y: gp.posterior_predictive(s, key, X, y, **kw))(samples, rng_key, X, y)
        groups["posterior_predictive"] = {k: np.asarray(v) for k, v in pp.items()
                                          if k not in samples and v.shape[2:] == (N,)}
    base_attrs = {"inference_library": "numpyro", "approximation": type(gp).__name__}
    base_attrs.update(attrs or {})
    idata = az.from_dict(**groups, coords=coords, dims=all_dims, attrs=base_attrs)
    idata.posterior.attrs.update(base_attrs)  # from_dict puts attrs on the data groups only
    if _pointwise is not None:  # the draws of a thinned group are labelled by the posterior draws they are of
        for name in ("log_likelihood", "posterior_predictive"):
            if name in idata.groups():
                setattr(idata, name, getattr(idata, name).assign_coords(draw=pointwise_draws))
    return idata


def from_mcmc(mcmc, gp, X=None, y=None, *, model_kwargs=None, coords=None, dims=None, predictive=True,
              log_likelihood=True, rng_key=None, max_pointwise: int | None = None) -> az.InferenceData:
    """InferenceData from a finished :class:`numpyro.infer.MCMC` run of ``gp.model``.

    ``sample_stats`` holds whatever extra fields the run collected (pass e.g.
    ``extra_fields=("diverging", "energy", "num_steps", "accept_prob", "adapt_state.step_size",
    "potential_energy")`` to ``mcmc.run``), renamed to ArviZ's conventions; ``tree_depth`` is derived
    from ``num_steps`` as :math:`\\lfloor\\log_2 n\\rfloor + 1`.

    :param mcmc: the MCMC object after ``run``.
    :param gp: the approximation whose ``model`` was sampled.
    :param X: training inputs (N, D); ``y`` training targets (N,), as passed to ``mcmc.run``.
    :param model_kwargs: the keyword arguments of the run (``batch_size`` is dropped: the groups use
        all data).
    :param coords: extra ArviZ coordinates; ``dims`` extra dims (defaults: the inducing site has dim
        ``feature``, per-observation quantities ``obs``).
    :param predictive: add ``posterior_predictive``; ``log_likelihood``: add ``log_likelihood``
        (both are (chain, draw, N) arrays: switch off for very large N).
    :param rng_key: key for the posterior predictive draws.
    :param max_pointwise: the most values (chains × draws × N) per variable of the pointwise groups
        (default :data:`MAX_POINTWISE` = 2·10⁷, 160 MB in float64; ``None`` as well: the default). Below
        it every draw is evaluated at once; above it, as :func:`from_svi` does, D evenly spaced draws per
        chain (the same in every chain), in vectorised blocks, labelled by the posterior draw they are of
        (``idata.log_likelihood.sel(draw=d)``), in bounded memory: e.g. 4 chains × 2 000 draws at
        N = 200 000 would be 1.6·10⁹ values (13 GB) per variable.

    A user's own NumPyro model function may be passed as ``gp`` (with ``spectral_gp`` inside): then
    ``az.from_numpyro`` builds the groups (posterior, sample_stats, log_likelihood of the observed sites, so
    that ``az.loo`` works, observed data) and the inducing sites ``<name>_v`` / ``<name>_u`` get the dim
    ``feature``; X, y, ``predictive`` and ``rng_key`` are not used (draw predictions with
    ``numpyro.infer.Predictive``).
    """
    if not hasattr(gp, "model"):
        if not callable(gp):
            raise TypeError(f"gp must be an approximation (SparseGP, CollapsedGP, ...) or the NumPyro model "
                            f"function that was sampled, got {type(gp).__name__}")
        return _from_user_model(mcmc, coords, dims, log_likelihood)
    samples = mcmc.get_samples(group_by_chain=True)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    stats = {}
    for field, value in extra.items():
        if field in _SAMPLE_STATS:
            name, fn = _SAMPLE_STATS[field]
            stats[name] = fn(value)
    if "n_steps" in stats:
        stats["tree_depth"] = np.floor(np.log2(np.maximum(stats["n_steps"], 1))).astype(np.int64) + 1
    attrs = {"inference": "mcmc", "sampler": type(mcmc.sampler).__name__,
             "num_warmup": int(mcmc.num_warmup)}
    cap = MAX_POINTWISE if max_pointwise is None else _check_max_pointwise(max_pointwise)
    C, S = next(iter(samples.values())).shape[:2]
    Xm, N = _model_inputs(X)
    pointwise = None
    if (log_likelihood or predictive) and C * S * N > cap:  # thinned, in blocks (see from_svi)
        which = _pointwise_draws(S, N, max(1, cap // C))
        flat = {k: jnp.reshape(v, (C * S,) + v.shape[2:]) for k, v in samples.items()}
        computed = _pointwise_groups(
            gp, Xm, jnp.asarray(y), flat,
            (np.arange(C)[:, None] * S + which[None, :]).reshape(-1), _data_kwargs(model_kwargs),
            jax.random.PRNGKey(0) if rng_key is None else rng_key,
            log_likelihood=log_likelihood and gp.pointwise_likelihood, predictive=predictive)
        computed = {group: {k: v.reshape((C, len(which)) + v.shape[2:]) for k, v in values.items()}
                    for group, values in computed.items()}
        pointwise, attrs["pointwise_draws"] = (which, computed), int(len(which))
    return from_samples(gp, X, y, samples, sample_stats=stats, model_kwargs=model_kwargs,
                        coords=coords, dims=dims, predictive=predictive, log_likelihood=log_likelihood,
                        rng_key=rng_key, attrs=attrs, _pointwise=pointwise)


def _from_user_model(mcmc, coords, dims, log_likelihood):
    """az.from_numpyro with named dims for the inducing sites of spectral_gp (the last axis: feature)."""
    all_dims = {}
    for site, value in mcmc.get_samples(group_by_chain=True).items():
        if site.endswith(("_v", "_u")) and np.ndim(value) >= 3:
            all_dims[site] = [f"{site}_dim_{i}" for i in range(np.ndim(value) - 3)] + ["feature"]
    all_dims.update(dims or {})
    with _quiet_arviz():
        return az.from_numpyro(mcmc, coords=coords, dims=all_dims, log_likelihood=log_likelihood)


#: the most values (draws × observations) from_svi puts in each variable of the pointwise groups
#: (``log_likelihood``, ``posterior_predictive``): 2·10⁷, 160 MB in float64 (e.g. 100 draws at N = 200 000;
#: every draw while N ≤ 20 000 for the default 1 000 draws)
MAX_POINTWISE = 20_000_000
# values (draws × observations) evaluated at once in one vectorised block
_BLOCK_VALUES = 4_000_000


def from_svi(svi_result_or_params, gp, X, y, *, num_samples: int = 1000, model_kwargs=None, coords=None,
             dims=None, predictive=True, log_likelihood=True, rng_key=None,
             max_pointwise: int | None = MAX_POINTWISE) -> az.InferenceData:
    r"""InferenceData from an SVI fit of ``gp.model`` / ``gp.guide``: one chain of guide draws.

    ``posterior`` holds ``num_samples`` draws of every latent site from the guide (the point-estimated
    hyperparameters are Delta sites: their draws are constant), the other groups are as in
    :func:`from_mcmc`, and the group ``svi`` holds the optimised parameters and, for an ``SVIRunResult``,
    the loss trace ``loss`` (negative ELBO per step, dim ``step``).

    **Cost at large N.** The pointwise groups (``log_likelihood``, ``posterior_predictive``: one value per
    draw and observation) are evaluated for at most :math:`D = \max(1, \lfloor\texttt{max\_pointwise}
    / N\rfloor)` of the S draws, evenly spaced; their ``draw`` coordinate is the index of the posterior
    draw each row belongs to (``idata.log_likelihood.sel(draw=d)`` is draw d's), so their meaning does
    not change, and ``az.loo`` (one chain) uses the D rows. Evaluating the model once per draw cost
    O(NM²) per draw (Kuf and its solve against Kuu at every training input, twice: log likelihood and
    predictive; 1.1 s per draw at N = 200 000, M = 100). Now the sites identical in every draw (the point
    estimates) enter unbatched, so what depends only on them (Kuf, Kuu and its factor, the residual
    variances) is computed once per block of :math:`\lfloor 4\cdot10^6/N\rfloor` draws, and only the
    :math:`\mathbf u`-dependent part (O(NM) per draw) and the random draws run per draw, vectorised: time
    O(NM²·D/block + NM·D) and memory O(max_pointwise + NM), whatever ``num_samples``.

    :param svi_result_or_params: ``svi.run(...)``'s result or its ``params`` dict.
    :param num_samples: S, the draws from the guide (all in ``posterior``).
    :param max_pointwise: the most values (draws × N) per variable of the pointwise groups (default
        :data:`MAX_POINTWISE` = 2·10⁷, 160 MB in float64); ``None`` evaluates them for every draw.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be positive, got {num_samples}")
    if max_pointwise is not None:
        _check_max_pointwise(max_pointwise)
    params = getattr(svi_result_or_params, "params", svi_result_or_params)
    if not isinstance(params, dict):
        raise TypeError(f"svi_result_or_params must be an SVIRunResult or a params dict, "
                        f"got {type(svi_result_or_params).__name__}")
    losses = getattr(svi_result_or_params, "losses", None)
    rng_key = jax.random.PRNGKey(0) if rng_key is None else rng_key
    key_guide, key_pred = jax.random.split(rng_key)
    kw = _data_kwargs(model_kwargs)
    draws = jax.jit(lambda p, key, X, y: Predictive(gp.guide, params=p, num_samples=num_samples)(
        key, X, y, **kw))(params, key_guide, jnp.asarray(X), jnp.asarray(y))
    samples = {k: v[None] for k, v in draws.items()}
    Xm, N = _model_inputs(X)
    which = _pointwise_draws(num_samples, N, max_pointwise)
    computed = _pointwise_groups(gp, Xm, jnp.asarray(y), draws, which, kw, key_pred,
                                 log_likelihood=log_likelihood and gp.pointwise_likelihood, predictive=predictive)
    idata = from_samples(gp, X, y, samples, model_kwargs=model_kwargs, coords=coords, dims=dims,
                         attrs={"inference": "svi", "num_steps": 0 if losses is None else int(len(losses)),
                                "pointwise_draws": int(len(which))},
                         _pointwise=(which, computed))
    group = {k: xr.DataArray(np.asarray(v), dims=[f"{k}_dim_{i}" for i in range(np.ndim(v))])
             for k, v in params.items()}
    if losses is not None:
        group["loss"] = xr.DataArray(np.asarray(losses), dims=["step"])
    with warnings.catch_warnings():  # "svi" is not one of ArviZ's schema groups
        warnings.simplefilter("ignore", UserWarning)
        idata.add_groups({SVI_GROUP: xr.Dataset(group)})
    return idata


def _check_max_pointwise(max_pointwise):
    if isinstance(max_pointwise, bool) or not isinstance(max_pointwise, int) or max_pointwise < 1:
        raise ValueError(f"max_pointwise must be a positive int or None, got {max_pointwise!r}")
    return max_pointwise


def _pointwise_draws(S: int, N: int, max_pointwise: int | None) -> np.ndarray:
    """Indices of the (at most ``max_pointwise // N``, at least 1) evenly spaced draws of S."""
    D = S if max_pointwise is None else max(1, min(S, max_pointwise // max(N, 1)))
    return np.unique(np.round(np.linspace(0, S - 1, D)).astype(int))


def _pointwise_groups(gp, X, y, draws: dict, which, kw, key, *, log_likelihood: bool, predictive: bool) -> dict:
    """``{"log_likelihood": {site: (1, D, N)}, "posterior_predictive": {site: (1, D, N)}}`` for the draws
    ``which`` (D indices) of ``draws`` ``{site: (S, ...)}``; draw s uses the key ``split(key, S)[s]``, so
    its values do not depend on which other draws are evaluated.

    Per draw: the log density of every observed site of ``gp.model`` (as ``numpyro.infer.log_likelihood``)
    and a posterior predictive draw (the model with ``y=None``, as ``numpyro.infer.Predictive``, or the
    approximation's own ``posterior_predictive``: the collapsed ones). Sites equal in every draw enter
    unbatched, the others are mapped in vectorised blocks (``lax.map`` with ``batch_size``), so what
    depends on the constant sites only is computed once per block, not once per draw."""
    from numpyro import handlers

    from .approximations.base import GPModel

    if not (log_likelihood or predictive):
        return {}
    N = (X.points() if isinstance(X, Grid) else X).shape[0]
    host = {k: np.asarray(v) for k, v in draws.items()}
    S = next(iter(host.values())).shape[0]
    constant = {k: v[0] for k, v in host.items() if S == 1 or bool(np.all(v == v[:1]))}
    varying = {k: v[which] for k, v in host.items() if k not in constant}
    default_predictive = getattr(type(gp), "posterior_predictive", None) is GPModel.posterior_predictive
    # a draw whose hyperparameters vary (MCMC) builds its own Kuf and projection, N × M' values: the block
    # holds fewer draws then (with constant hyperparameters, SVI's point estimates, a draw costs O(N))
    site = getattr(gp, "site", None)
    per_draw = N * (np.shape(host[site])[-1] if set(varying) - {site} and site in host else 1)
    block = max(1, min(len(which), _BLOCK_VALUES // max(per_draw, 1)))

    def one(constant, part, key, X, y):
        values = {**constant, **part}
        out = {"log_likelihood": {}, "posterior_predictive": {}}
        if log_likelihood:
            tr = handlers.trace(handlers.substitute(gp.model, data=values)).get_trace(X, y, **kw)
            out["log_likelihood"] = {name: site["fn"].log_prob(site["value"]) for name, site in tr.items()
                                     if site["type"] == "sample" and site["is_observed"]}
        if predictive and default_predictive:  # GPModel's: the model with y=None, as Predictive runs it
            tr = handlers.trace(handlers.seed(handlers.substitute(gp.model, data=values), key)).get_trace(X, **kw)
            out["posterior_predictive"] = {name: site["value"] for name, site in tr.items()
                                           if site["type"] == "sample" and name not in values}
        elif predictive:  # the approximation's own, for one draw
            pp = gp.posterior_predictive({k: v[None, None] for k, v in values.items()}, key, X, y, **kw)
            out["posterior_predictive"] = {k: v[0, 0] for k, v in pp.items() if k not in values}
        return out

    def evaluate(constant, varying, key, which, X, y):
        keys = jax.random.split(key, S)[which]
        if block >= len(which):
            return jax.vmap(lambda part, k: one(constant, part, k, X, y))(varying, keys)
        return jax.lax.map(lambda a: one(constant, *a, X, y), (varying, keys), batch_size=block)

    # everything enters as an argument: closed-over arrays would be constants that XLA folds at compile time
    out = jax.jit(evaluate)(constant, varying, key, jnp.asarray(which), X, y)
    # keep the pointwise terms only (a scalar factor, e.g. a collapsed bound, has none)
    return {group: {k: np.asarray(v)[None] for k, v in values.items() if v.shape[1:] == (N,)}
            for group, values in out.items()}


# --- the approximation-adequacy check ----------------------------------------------------------------
def adequacy(gp_or_feature, samples, X, *, kernel=None, name: str = "f", params: dict | None = None,
             tolerance: float = 0.05, max_draws: int | None = 500) -> dict:
    r"""How much of the prior variance at the data the features miss, per posterior draw.

    For each draw θ_s of the hyperparameters the residual fraction
    :math:`r_s = \sum_n (k_{nn} - [Q_{ff}]_{nn}) / \sum_n k_{nn}`, with :math:`Q_{ff} = K_{fu}K_{uu}^{-1}K_{uf}`
    at θ_s, is the share of the prior variance at the data the inducing features cannot represent: 0
    when they span the GP at the data, 1 when they see nothing. Draws whose lengthscale is shorter than
    the features resolve (VFF's highest frequency, too few inducing points) show a large :math:`r_s`,
    so the check also says whether the lengthscale posterior sits where the features can resolve it.
    Every family works: it is the ``conditional`` variance at ``q_cov=None``.

    :param gp_or_feature: a fitted approximation (``SparseGP``, ``CollapsedGP``, ...; its templates give
        the kernel per draw), or the feature of a user's own model with :func:`spectral_gp`.
    :param samples: posterior draws ``{site: (draws, ...)}`` (``mcmc.get_samples()``) or an InferenceData.
    :param params: optimised params that the draws do not hold (an SVI fit's inducing locations, ...).
    :param X: the training inputs (an array or a Grid).
    :param kernel: for a feature: a callable ``draw -> kernel``, or the kernel template given to
        ``spectral_gp`` (its sites are ``<name>_kernel_<field>``), or a concrete kernel.
    :param tolerance: the check fails when the median of :math:`r_s` exceeds it (the typical draw: the
        tail of short lengthscales is reported as the 95% quantile; on the pines LGCP the median is 2.5%
        and the 95% quantile 13% with the posterior within 0.11 sd of the exact GP's).
    :returns: dict with ``residual_fraction`` (draws,), ``median``, ``q95``, ``ok`` and ``message`` (the
        fix when it fails: "increase num_frequencies to …", "widen the box to …", "add inducing points").
    """
    from .approximations.base import GPModel
    from .conditionals import conditional
    from .parameters import free_sites, instantiate

    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    if hasattr(samples, "posterior"):
        params = svi_params(samples) if params is None else params
        samples = posterior_samples(samples)
    if not samples:
        raise ValueError("samples is empty")
    flat = _thin({k: jnp.asarray(v) for k, v in samples.items()}, max_draws)
    X = X if isinstance(X, Grid) else check_inputs(jnp.asarray(X)[:, None] if jnp.ndim(X) == 1 else X, "X")

    if isinstance(gp_or_feature, GPModel):
        gp = gp_or_feature

        def parts(draw):
            k, _, f, _ = gp.components_from({**gp.point_values(params or {}), **draw})
            return f, k
        feature, hyper = gp.feature, set(gp.hyperparameter_sites())
    else:
        feature = gp_or_feature
        if kernel is None:
            raise ValueError("adequacy(feature, ...) needs kernel=: a callable draw -> kernel, the kernel "
                             "template given to spectral_gp, or a concrete kernel")
        by_draw = callable(kernel) and not hasattr(kernel, "diag")
        hyper = None if by_draw else set(free_sites(kernel, f"{name}_kernel_"))

        def parts(draw):
            if by_draw:
                return feature, kernel(draw)
            from numpyro import handlers
            with handlers.block(), handlers.seed(rng_seed=0), handlers.substitute(data=draw):
                return feature, instantiate(kernel, f"{name}_kernel_")

    def one(draw):
        f, k = parts(draw)
        M = f.num_features
        _, var = conditional(f, k, X, jnp.zeros(M), None, whiten=False)
        kff = k.diag(X.points() if isinstance(X, Grid) else X)
        return jnp.sum(var) / jnp.sum(kff)

    S = next(iter(flat.values())).shape[0]
    # the residual depends on the hyperparameters only: when they are the same in every draw (point
    # estimates: SVI, MAP) one draw says it (each draw recomputes Kuf at every input: minutes at large N)
    same = hyper is not None and all(k not in flat or bool(np.all(flat[k] == flat[k][:1])) for k in hyper)
    r = np.asarray(jax.jit(lambda d: jax.lax.map(one, d))({k: v[:1] for k, v in flat.items()} if same else flat))
    r = np.full(S, r[0]) if same else r
    med, q95 = float(np.median(r)), float(np.quantile(r, 0.95))
    ok = med <= tolerance
    summary = (f"the features miss {100 * med:.2g}% of the prior variance at the data in the median draw, "
               f"{100 * q95:.2g}% at the 95% quantile (tolerance {100 * tolerance:g}% for the median)")
    if ok:
        message = f"adequate: {summary}"
    else:
        message = f"inadequate: {summary}; {_advice(feature, gp_or_feature, flat, X, kernel, name, tolerance)}"
    return {"residual_fraction": r, "median": med, "q95": q95, "ok": bool(ok), "message": message}


def add_adequacy(idata, result: dict):
    """Store an :func:`adequacy` result in ``idata`` as the group ``adequacy``: ``residual_fraction``
    (dim ``adequacy_draw``) and the summary (``median``, ``q95``, ``ok``, ``message``) as attributes; it
    survives :func:`save` / :func:`load`."""
    ds = xr.Dataset({"residual_fraction": (("adequacy_draw",), np.asarray(result["residual_fraction"]))},
                    attrs={"median": result["median"], "q95": result["q95"], "ok": int(result["ok"]),
                           "message": result["message"]})
    with warnings.catch_warnings():  # not one of ArviZ's schema groups
        warnings.simplefilter("ignore", UserWarning)
        idata.add_groups({"adequacy": ds})
    return idata


def _advice(feature, gp_or_feature, flat, X, kernel, name, tolerance) -> str:
    """The fix, from the posterior's lengthscales where a rule exists (VFF: the box 3 lengthscales, at
    the 95% quantile, beyond the data; M to resolve the 5% quantile over that box, as
    ``FourierFeatures.from_data``)."""
    from .features import FourierFeatures, InducingPoints

    ells = next((np.asarray(flat[s]) for s in ("kernel_lengthscale", f"{name}_kernel_lengthscale") if s in flat),
                None)
    if isinstance(feature, FourierFeatures) and ells is not None:
        from .features.fourier import frequencies_needed

        short, long = float(np.quantile(ells, 0.05)), float(np.quantile(ells, 0.95))
        nu = float(getattr(getattr(gp_or_feature, "kernel", kernel), "nu", 1.5))
        x = np.asarray(X.points() if isinstance(X, Grid) else X)[:, 0]
        lo, hi = min(float(x.min()) - 3 * long, feature.a), max(float(x.max()) + 3 * long, feature.b)
        need = frequencies_needed(lo, hi, short, nu, tolerance / 2)  # from_data's rule
        tips = []
        if (lo, hi) != (feature.a, feature.b):
            tips.append(f"widen the box to [{lo:.4g}, {hi:.4g}] (3 lengthscales beyond the data at the 95% "
                        f"quantile {long:.3g})")
        if need > feature.num_frequencies:
            tips.append(f"increase num_frequencies to {need} (to resolve the 5% lengthscale quantile "
                        f"{short:.3g} over that box)")
        return "; ".join(tips) or "increase num_frequencies"
    if isinstance(feature, InducingPoints):
        return "add inducing points (or place them where the data are)"
    return "increase the number of features"


# --- summaries and files --------------------------------------------------------------------------
def summary(idata, var_names=None, **kwargs):
    """``az.summary``: mean, sd, HDI, MCSE, ESS (bulk, tail) and rank-normalised split R-hat [2].

    :param var_names: variables to summarise (default: every posterior variable).
    :returns: a pandas DataFrame (columns include ``r_hat``, ``ess_bulk``, ``ess_tail``).
    """
    quiet = idata.posterior.attrs.get("inference") == "svi"  # one chain of guide draws, by design
    with warnings.catch_warnings(), (_quiet_arviz() if quiet else contextlib.nullcontext()):
        warnings.simplefilter("ignore", RuntimeWarning)  # R-hat of constant draws (point estimates)
        warnings.simplefilter("ignore", UserWarning)
        return az.summary(idata, var_names=var_names, **kwargs)


@contextlib.contextmanager
def _quiet_arviz():
    """Silence ArviZ's "shape validation failed" log line (fewer than 2 chains)."""
    logger = logging.getLogger("arviz")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def save(idata, path) -> str:
    """Write ``idata`` (all groups, the ``svi`` group included) to a netCDF file; returns the path."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return idata.to_netcdf(path)


def load(path):
    """Read an InferenceData written by :func:`save`, into memory (the file is closed afterwards)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no InferenceData file at {path}")
    with warnings.catch_warnings(), az.rc_context({"data.load": "eager"}):
        warnings.simplefilter("ignore", UserWarning)
        return az.from_netcdf(path)


# --- prediction from an InferenceData --------------------------------------------------------------
def posterior_samples(idata, var_names=None, max_draws: int | None = None) -> dict:
    """Posterior draws as ``{site: array (S, ...)}`` with chains concatenated.

    :param max_draws: keep at most this many draws, evenly spaced (for cheaper prediction).
    """
    post = idata.posterior
    names = list(post.data_vars) if var_names is None else list(var_names)
    out = {}
    for name in names:
        v = np.asarray(post[name].values)
        out[name] = v.reshape((-1,) + v.shape[2:])
    return {k: jnp.asarray(v) for k, v in _thin(out, max_draws).items()}


def _thin(draws: dict, max_draws: int | None) -> dict:
    """At most ``max_draws`` evenly spaced draws of ``{site: (S, ...)}``."""
    S = next(iter(draws.values())).shape[0]
    if max_draws is None or max_draws >= S:
        return draws
    idx = np.round(np.linspace(0, S - 1, max_draws)).astype(int)
    return {k: v[idx] for k, v in draws.items()}


def svi_params(idata) -> dict | None:
    """The optimised SVI parameters stored by :func:`from_svi` (``None`` for an MCMC result)."""
    if SVI_GROUP not in idata.groups():
        return None
    group = getattr(idata, SVI_GROUP)
    return {k: jnp.asarray(group[k].values) for k in group.data_vars if k != "loss"}


def fitted_params(idata_or_params, who: str) -> dict:
    """A params dict as given, or the SVI params stored in an InferenceData; ``who`` names the caller
    in the error raised for a result without them (e.g. an MCMC fit)."""
    if isinstance(idata_or_params, dict):
        return idata_or_params
    params = svi_params(idata_or_params)
    if params is None:
        raise ValueError(f"{who} needs an SVI fit (params)")
    return params


def _predict_kwargs(gp, idata, max_draws):
    params = svi_params(idata)
    if params is not None:
        return {"params": params}
    return {"samples": posterior_samples(idata, max_draws=max_draws)}


def _predict(gp, idata, X_new, kw):
    """gp.predict under one jit (validation of X_new first, outside the trace)."""
    X_new = check_inputs(X_new, "X_new")
    X, y = jnp.asarray(idata.constant_data["X"].values), jnp.asarray(idata.observed_data["y"].values)
    return jax.jit(lambda Xn, X, y, kw: gp.with_data(X, y).predict(Xn, **kw))(X_new, X, y, kw)


def predict(gp, idata, X_new, *, max_draws: int | None = None) -> dict:
    """Predictive marginals at ``X_new`` from a fitted InferenceData.

    SVI results (an ``svi`` group) use q(u) analytically (``gp.predict(params=...)``); MCMC results mix
    the per-draw predictions (``gp.predict(samples=...)``, law of total variance). For CollapsedGP the
    training data are read from ``constant_data`` / ``observed_data``.

    :param max_draws: use at most this many (evenly spaced) posterior draws.
    :returns: ``gp.predict``'s dict (``f_mean``, ``f_var``, ``y_mean``, ``y_var``, ...).
    """
    return _predict(gp, idata, X_new, _predict_kwargs(gp, idata, max_draws))


def predictive_metrics(gp, idata, X_test, y_test, *, max_draws: int | None = None) -> dict:
    r"""Test RMSE of the predictive mean and the NLPD (mean negative log predictive density).

    SVI: :math:`\mathrm{NLPD} = -\frac1N\sum_n \log\int p(y_n\mid f)\,q(f_n)\,df`; MCMC: the posterior
    predictive is the mixture over draws,
    :math:`-\frac1N\sum_n \log\frac1S\sum_s \int p_s(y_n\mid f)\,\mathcal N(f\mid m_{sn}, v_{sn})\,df`,
    each term by ``likelihood.predict_log_density``.

    :returns: ``{"rmse": ..., "nlpd": ...}`` in the units of ``y_test``.
    """
    y_test = jnp.asarray(y_test)
    kw = _predict_kwargs(gp, idata, max_draws)
    pred = _predict(gp, idata, X_test, kw)

    @jax.jit
    def log_density(y_test, pred, kw):
        if "params" in kw:
            likelihood = gp.components_from(gp.point_values(kw["params"]))[1]
            return likelihood.predict_log_density(y_test, pred["f_mean"], pred["f_var"])

        def one(args):
            values, m, v = args
            return gp.components_from(values)[1].predict_log_density(y_test, m, v)

        per_draw = jax.lax.map(one, (kw["samples"], pred["f_mean_draws"], pred["f_var_draws"]))
        return logsumexp(per_draw, axis=0) - jnp.log(per_draw.shape[0])

    lpd = log_density(y_test, pred, kw)
    rmse = jnp.sqrt(jnp.mean((pred["y_mean"] - y_test) ** 2))
    return {"rmse": float(rmse), "nlpd": float(-jnp.mean(lpd))}


# --- plots ------------------------------------------------------------------------------------------
def plot_trace(idata, var_names, path) -> str:
    """``az.plot_trace`` of ``var_names`` written to the PNG ``path``."""
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        axes = az.plot_trace(idata, var_names=var_names, compact=True)
    fig = np.ravel(axes)[0].figure
    fig.tight_layout()
    path = os.fspath(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_fit_1d(path, x, y, x_pred, mean, sd, *, x_test=None, y_test=None, title=None, xlabel="x",
                ylabel="y", shade=None) -> str:
    """Data, held-out data and the predictive mean ± 2 sd on a 1-D grid, written to the PNG ``path``.

    :param shade: optional list of ``(lo, hi)`` x-intervals to shade (e.g. removed segments).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x_pred, mean, sd = (np.ravel(np.asarray(a)) for a in (x_pred, mean, sd))
    for lo, hi in shade or ():
        ax.axvspan(lo, hi, color="0.9", zorder=0)
    ax.fill_between(x_pred, mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.25, label="mean ± 2 sd")
    ax.plot(x_pred, mean, color="C0", lw=1.5, label="predictive mean")
    ax.plot(np.ravel(x), np.ravel(y), "k.", ms=3, label="training data")
    if x_test is not None:
        ax.plot(np.ravel(x_test), np.ravel(y_test), ".", color="C3", ms=3, label="held-out data")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    path = os.fspath(path)
    fig.savefig(path, dpi=100)
    return path


# --- predictive metrics -----------------------------------------------------------------------------
# Test metrics from predictive means and variances (NumPy in, floats out). Targets standardised by a
# training sd s (``y_scale``) are reported in the original units: RMSE × s, NLPD + log s per point.


def rmse(y, mean, *, y_scale: float = 1.0) -> float:
    r""":math:`s\sqrt{\frac1N\sum_n (y_n - m_n)^2}`."""
    y, mean = np.asarray(y), np.asarray(mean)
    return float(np.sqrt(np.mean((y - mean) ** 2))) * y_scale


def nlpd(y, mean, var, *, y_scale: float = 1.0) -> float:
    r"""Mean negative log density of Gaussian predictives,
    :math:`\frac1N\sum_n \tfrac12\big(\log 2\pi v_n + (y_n - m_n)^2/v_n\big) + \log s`."""
    y, mean, var = np.asarray(y), np.asarray(mean), np.asarray(var)
    return float(np.mean(0.5 * (np.log(2 * np.pi * var) + (y - mean) ** 2 / var))) + math.log(y_scale)


def mixture_nlpd(y, mean_draws, var_draws, *, y_scale: float = 1.0, joint: bool = False) -> float:
    r"""NLPD of an equally weighted mixture of S Gaussian predictives (``mean_draws``, ``var_draws``: (S, N)).

    Per point (default): :math:`-\frac1N\sum_n\log\frac1S\sum_s\mathcal N(y_n\mid m_{sn}, v_{sn}) + \log s`;
    ``joint``: :math:`-\log\frac1S\sum_s\prod_n\mathcal N(y_n\mid m_{sn}, v_{sn}) + N\log s` (summed over
    the test set).
    """
    y = np.asarray(y)
    m, v = np.atleast_2d(np.asarray(mean_draws)), np.atleast_2d(np.asarray(var_draws))
    logp = -0.5 * (np.log(2 * np.pi * v) + (y - m) ** 2 / v)  # (S, N)
    S, N = logp.shape
    if joint:
        return float(-(logsumexp(np.sum(logp, 1)) - math.log(S))) + N * math.log(y_scale)
    return float(-np.mean(logsumexp(logp, axis=0) - math.log(S))) + math.log(y_scale)


def mixture_metrics(y, mean_draws, var_draws, *, y_scale=1.0) -> dict:
    r"""Test metrics of an equally weighted mixture of M Gaussian predictives (M-SRFR's particles, or
    posterior draws): ``mean_draws``, ``var_draws`` (M, N) per-component y predictives of standardised
    targets ``y``.

    :returns: ``rmse`` (of the mixture mean, original units), ``nlpd_point`` (mean over test points of
        :math:`-\log\frac1M\sum_m\mathcal N(y_i\mid\mu_{mi},\sigma^2_{mi})`), ``nlpd_joint`` (the SRF
        paper's :math:`-\log\frac1M\sum_m\prod_i\mathcal N(y_i\mid\mu_{mi},\sigma^2_{mi})`, summed over
        the test set) and ``nlpd_gaussian`` (the summed NLPD of the moment-matched Gaussian, Algorithm 2);
        the NLPDs on the standardised scale.
    """
    m, v = np.atleast_2d(np.asarray(mean_draws)), np.atleast_2d(np.asarray(var_draws))
    mu, var = m.mean(0), v.mean(0) + m.var(0)  # law of total variance
    return {"rmse": rmse(y, mu, y_scale=y_scale), "nlpd_point": mixture_nlpd(y, m, v),
            "nlpd_joint": mixture_nlpd(y, m, v, joint=True), "nlpd_gaussian": len(mu) * nlpd(y, mu, var)}


def categorical_nlpd(y, probs) -> float:
    r"""Mean negative log predictive probability of the labels, :math:`-\frac1N\sum_n\log p_{n,y_n}`
    (``probs``: (N, C); probabilities clipped at 1e-300)."""
    p, y = np.asarray(probs), np.asarray(y)
    return float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-300, None))))


# --- Stein particle results ---------------------------------------------------------------------------


def stein_inference_data(result, gp=None, X=None, y=None, *, attrs=None):
    """ArviZ InferenceData of a Stein particle posterior (a :class:`~ppl_sparsegp.stein.SteinResult`).

    ``posterior``: particle sites with dims ``(chain=1, draw=1, particle, ...)`` (frequencies:
    ``particle, frequency, input_dim``) and the shared parameters without a particle dim;
    ``sample_stats``: ``stein_force`` (the force norm per step, dim ``step``) and, with gp/X/y (a
    :class:`~ppl_sparsegp.SparseSpectrumGP` and its training data), ``log_marginal_likelihood`` per
    particle. ``attrs`` (e.g. ``{"training_time_s": ...}``, timed by the caller) are stored on the
    posterior group.
    """
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
        lml = jax.lax.map(lambda v: gp.log_marginal_likelihood(v, X, y), result.values())
        stats["log_marginal_likelihood"] = np.asarray(lml)[None, None]
        dims["log_marginal_likelihood"] = ["particle"]
    idata = az.from_dict(posterior=posterior, sample_stats=stats, dims=dims)
    idata.posterior.attrs["inference"] = "SteinVI (point-mass particles: SVGD)"
    idata.posterior.attrs.update(attrs or {})
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


def plot_spectral_density(frequencies, prior, path=None, *, max_dims: int = 4, rng_key=None):
    """Histogram of learned frequencies (pooled over particles) against the prior, per input dimension.

    :param frequencies: (..., D) learned unit-lengthscale frequencies (any leading dims, pooled).
    :param prior: the frequency prior, a NumPyro distribution (its samples give the reference histogram).
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
