r"""Building :class:`arviz.InferenceData` from MCMC, SVI and other engines' results.

The groups: ``posterior`` (the hyperparameter sites and the inducing site, dim ``feature``),
``sample_stats`` (MCMC), ``log_likelihood`` (dim ``obs``: for :class:`~ppl_sparsegp.SparseGP` the
per-observation term of the factor site ``y``,
:math:`\ell_n = \mathbb E_{p(f_n\mid\mathbf u)}[\log p(y_n\mid f_n)]`, evaluated per draw [1]),
``posterior_predictive``, ``observed_data`` / ``constant_data`` and, for SVI, ``svi`` (the optimised
parameters and the loss trace). At large N the pointwise groups hold a thinned, evenly spaced subset of
the draws (at most :data:`MAX_POINTWISE` values per variable), each labelled by its posterior draw.

References:
    1. Hensman, Matthews, Filippone, Ghahramani (2015), MCMC for variationally sparse Gaussian processes.
"""
from __future__ import annotations

import warnings
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import xarray as xr
from numpyro.infer import Predictive, log_likelihood as _numpyro_log_likelihood

from ..grid import Grid
from ..numpyro_internals import mcmc_run_arguments
from ..validation import (
    AnyOf,
    ArrayOf,
    Count,
    Flag,
    InstanceOf,
    IsCallable,
    Key,
    MaybeCount,
    OrNone,
    validated,
    with_fix,
)
from ._arviz import _quiet_arviz, az
from .traces import model_trace

__all__ = ["from_samples", "from_mcmc", "from_svi", "MAX_POINTWISE", "SVI_GROUP"]

SVI_GROUP = "svi"

#: the declared hints of the builders' shared arguments
_APPROXIMATION = InstanceOf("ppl_sparsegp.approximations.base.GPModel",
                            what="an approximation (SparseGP, CollapsedGP, SparseSpectrumGP, ...)")
_GP = Annotated[Any, _APPROXIMATION]
_INPUTS = AnyOf(ArrayOf(rank=(1, 2)), InstanceOf(Grid))
_TARGETS = ArrayOf(rank=(1, 2))
_DICT = Annotated[dict | None, OrNone(InstanceOf(dict))]
_KEY = Annotated[Any, OrNone(Key(allow_int=False))]
_MCMC = with_fix(InstanceOf("numpyro.infer.MCMC", what="the numpyro.infer.MCMC object after mcmc.run(...)"),
                 "for a dict of draws use from_samples(gp, X, y, samples)")
_GP_OR_MODEL = AnyOf(_APPROXIMATION, IsCallable())
_GP_OR_MODEL.allowed = "an approximation (SparseGP, CollapsedGP, ...) or the NumPyro model function that was sampled"

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


def _data_kwargs(model_kwargs):
    """Model kwargs for whole-data evaluation: no subsampling."""
    kw = dict(model_kwargs or {})
    if "batch_size" in kw:
        kw["batch_size"] = None
    return kw


def _model_inputs(X):
    """X as the model receives it (a Grid stays a Grid: its Kronecker paths) and its number of rows."""
    X = X if isinstance(X, Grid) else jnp.asarray(X)
    return X, X.shape[0]  # a Grid's shape is that of its points, without forming them


@validated
def from_samples(gp: _GP, X: Annotated[Any, _INPUTS], y: Annotated[Any, _TARGETS],
                 samples: Annotated[dict, InstanceOf(dict, what="draws {site: array (chain, draw, ...)}")], *,
                 sample_stats: _DICT = None, model_kwargs: _DICT = None, coords: _DICT = None, dims: _DICT = None,
                 predictive: Flag = True, log_likelihood: Flag = True, rng_key: _KEY = None,
                 attrs: _DICT = None) -> az.InferenceData:
    """InferenceData from posterior draws ``{site: array (chain, draw, ...)}`` of ``gp.model``'s sites.

    The common builder of :func:`from_mcmc` and :func:`from_svi`; use it directly for other engines
    (e.g. SteinVI particles as draws of one chain).

    :param gp: the approximation whose ``model`` the draws are of.
    :param X: training inputs (N, D) or a Grid; ``y``: training targets (N,).
    :param samples: ``{site: array (chain, draw, ...)}``.
    :param sample_stats: ``{name: (chain, draw)}`` arrays.
    :param attrs: stored on the posterior group (e.g. ``{"inference": "stein"}``).
    :param model_kwargs: the model's keyword arguments (``batch_size`` is dropped).
    :param coords: extra ArviZ coordinates; ``dims``: extra dims.
    :param predictive: add ``posterior_predictive``; ``log_likelihood``: add ``log_likelihood``.
    :param rng_key: key for the posterior predictive draws (default ``PRNGKey(0)``).
    :returns: an :class:`arviz.InferenceData`.
    :raises ValueError: when the sites do not all hold (chain, draw) axes of the same sizes, or y does not
        have X's rows.
    """
    counts = {k: tuple(np.shape(v)[:2]) for k, v in samples.items()}
    if not samples or len(set(counts.values())) > 1 or any(len(c) < 2 for c in counts.values()):
        raise ValueError(f"from_samples: samples must hold (chain, draw, ...) arrays of the same chains and draws at "
                         f"every site, got {counts}; add a chain axis with v[None] (mcmc.get_samples("
                         f"group_by_chain=True))")
    return _from_samples(gp, X, y, samples, sample_stats=sample_stats, model_kwargs=model_kwargs, coords=coords,
                         dims=dims, predictive=predictive, log_likelihood=log_likelihood, rng_key=rng_key, attrs=attrs)


def _from_samples(gp, X, y, samples, *, sample_stats=None, model_kwargs=None, coords=None, dims=None,
                  predictive=True, log_likelihood=True, rng_key=None, attrs=None, pointwise=None):
    """:func:`from_samples` without the argument checks, and with ``pointwise``: ``(draws, groups)`` computed
    by the caller for a subset of the draws (:func:`from_svi`, :func:`from_mcmc` at large N)."""
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
    if pointwise is not None:  # from_svi: computed for a subset of the draws (``draw`` coordinates below)
        pointwise_draws, computed = pointwise
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
    if pointwise is not None:  # the draws of a thinned group are labelled by the posterior draws they are of
        for name in ("log_likelihood", "posterior_predictive"):
            if name in idata.groups():
                setattr(idata, name, getattr(idata, name).assign_coords(draw=pointwise_draws))
    return idata


@validated
def from_mcmc(mcmc: Annotated[Any, _MCMC], gp: Annotated[Any, _GP_OR_MODEL],
              X: Annotated[Any, OrNone(_INPUTS)] = None, y: Annotated[Any, OrNone(_TARGETS)] = None, *,
              model_kwargs: _DICT = None, coords: _DICT = None, dims: _DICT = None, predictive: Flag = True,
              log_likelihood: Flag = True, rng_key: _KEY = None, max_pointwise: MaybeCount = None) -> az.InferenceData:
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
        chain (the same in every chain), one draw after another, labelled by the posterior draw they are of
        (``idata.log_likelihood.sel(draw=d)``), in bounded memory: e.g. 4 chains × 2 000 draws at
        N = 200 000 would be 1.6·10⁹ values (13 GB) per variable.

    A user's own NumPyro model function may be passed as ``gp`` (with ``spectral_gp`` inside): then
    ``az.from_numpyro`` builds the groups (posterior, sample_stats, log_likelihood of the observed sites, so
    that ``az.loo`` works, observed data) and the inducing sites ``<name>_v`` / ``<name>_u`` get the dim
    ``feature``; X, y, ``predictive`` and ``rng_key`` are not used (draw predictions with
    ``numpyro.infer.Predictive``). ``max_pointwise`` holds there too, with N the size of the largest
    observed site: above it the ``log_likelihood`` group holds D evenly spaced draws per chain, evaluated
    one after another and labelled by their posterior draw, with the values, dims and coords the uncapped
    group has at those draws.
    """
    if not hasattr(mcmc, "get_samples"):
        raise TypeError(f"from_mcmc: mcmc must be the numpyro.infer.MCMC object after mcmc.run(...), got "
                        f"{type(mcmc).__name__}; for a dict of draws use from_samples(gp, X, y, samples)")
    if not hasattr(gp, "model"):
        if not callable(gp):
            raise TypeError(f"gp must be an approximation (SparseGP, CollapsedGP, ...) or the NumPyro model "
                            f"function that was sampled, got {type(gp).__name__}")
        return _from_user_model(mcmc, coords, dims, log_likelihood, max_pointwise)
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
    return _from_samples(gp, X, y, samples, sample_stats=stats, model_kwargs=model_kwargs,
                         coords=coords, dims=dims, predictive=predictive, log_likelihood=log_likelihood,
                         rng_key=rng_key, attrs=attrs, pointwise=pointwise)


def _from_user_model(mcmc, coords, dims, log_likelihood, max_pointwise):
    """az.from_numpyro with named dims for the inducing sites of spectral_gp (the last axis: feature); the
    pointwise log likelihood for at most ``max_pointwise`` values per observed site (evenly spaced draws)."""
    cap = MAX_POINTWISE if max_pointwise is None else _check_max_pointwise(max_pointwise)
    samples = mcmc.get_samples(group_by_chain=True)
    all_dims = {}
    for site, value in samples.items():
        if site.endswith(("_v", "_u")) and np.ndim(value) >= 3:
            all_dims[site] = [f"{site}_dim_{i}" for i in range(np.ndim(value) - 3)] + ["feature"]
    all_dims.update(dims or {})
    C, S = next(iter(samples.values())).shape[:2]
    terms = _observed_terms(mcmc) if log_likelihood else None
    N = max((int(np.size(v)) for v in terms[1].values()), default=1) if terms else 1
    thinned = terms is not None and C * S * N > cap
    with _quiet_arviz():
        idata = az.from_numpyro(mcmc, coords=coords, dims=all_dims, log_likelihood=log_likelihood and not thinned)
    if thinned:  # D evenly spaced draws per chain (the same in every chain), as from_svi
        which = _pointwise_draws(S, N, max(1, cap // C))
        values = _user_terms_at(terms[0], samples, which)
        ds = _log_likelihood_dataset(values, coords, all_dims, draws=which)
        with warnings.catch_warnings():  # added after the fact: ArviZ warns about the group order
            warnings.simplefilter("ignore", UserWarning)
            idata.add_groups({"log_likelihood": ds})
        idata.posterior.attrs["pointwise_draws"] = int(len(which))
    elif log_likelihood:
        _marginal_loo(idata, mcmc, terms, coords, all_dims)
    return idata


def _log_likelihood_dataset(values, coords, dims, draws=None):
    """``{site: (C, D, ...)}`` as the ``log_likelihood`` Dataset ``az.from_numpyro`` builds (its
    ``dict_to_dataset``: the user's ``dims`` and ``coords``, the same errors for a coordinate whose length is
    not its dim's), the draws labelled ``draws`` (the posterior draws they are of; None: ArviZ's 0..D-1)."""
    coords = dict(coords or {})
    if draws is not None:
        coords["draw"] = np.asarray(draws)
    return az.dict_to_dataset(values, library=numpyro, coords=coords, dims=dims, skip_event_dims=True)


def _marginal_base(fn):
    """The :class:`~ppl_sparsegp.approximations.MarginalGaussian` (or exact) inside ``fn``, else None."""
    from ..approximations.exact_marginal import ExactMarginalGaussian
    from ..approximations.marginal_gaussian import MarginalGaussian

    while not isinstance(fn, (MarginalGaussian, ExactMarginalGaussian)) and hasattr(fn, "base_dist"):
        fn = fn.base_dist
    return fn if isinstance(fn, (MarginalGaussian, ExactMarginalGaussian)) else None


def _observed_terms(mcmc):
    """``(terms, first, marginal)``: ``terms(draw) -> {site: pointwise values}`` of every observed site of
    the sampled model (its log density as ``numpyro.infer.log_likelihood``; for a marginal site of
    ``marginal_spectral_gp``, which does not factorise over observations, the leave-one-out terms
    log p(y_i | y_-i, θ)), ``first``, the observed values of the first draw's trace, and ``marginal``, the
    names of the marginal sites."""
    model, (args, kwargs) = mcmc.sampler.model, mcmc_run_arguments(mcmc)
    draw0 = {k: v[0] for k, v in mcmc.get_samples().items()}
    tr0 = model_trace(model, draw0, args, kwargs)
    sites = [n for n, s in tr0.items() if s["type"] == "sample" and s["is_observed"]]
    marginal = {n for n in sites if _marginal_base(tr0[n]["fn"]) is not None}

    def terms(draw):
        tr = model_trace(model, draw, args, kwargs)
        return {n: (_marginal_base(tr[n]["fn"]).loo_log_prob(tr[n]["value"]) if n in marginal
                    else tr[n]["fn"].log_prob(tr[n]["value"])) for n in sites}
    return terms, {n: tr0[n]["value"] for n in sites}, marginal


def _user_terms_at(terms, samples, which):
    """``terms`` at the draws ``which`` of every chain: ``{site: (C, D, ...)}``, one draw at a time.

    Unbatched on purpose (:func:`_map_draws`): a draw's terms factorise matrices that depend on its
    hyperparameters."""
    C, S = next(iter(samples.values())).shape[:2]
    idx = jnp.asarray((np.arange(C)[:, None] * S + np.asarray(which)[None, :]).reshape(-1))
    flat = {k: jnp.reshape(v, (C * S,) + v.shape[2:])[idx] for k, v in samples.items()}
    out = jax.jit(lambda d: _map_draws(terms, d))(flat)
    return {n: np.asarray(v).reshape((C, len(which)) + v.shape[1:]) for n, v in out.items()}


def _marginal_loo(idata, mcmc, terms, coords, dims):
    """Replace the joint log density of every :class:`~ppl_sparsegp.approximations.MarginalGaussian`
    site (``marginal_spectral_gp``; the model does not factorise over observations) in the
    ``log_likelihood`` group by its pointwise leave-one-out terms log p(y_i | y_-i, θ) per draw
    (:meth:`~ppl_sparsegp.approximations.MarginalGaussian.loo_log_prob`), which ``az.loo`` takes
    as the pointwise values of a non-factorised model; with the user's ``dims`` and ``coords``."""
    fn, _, marginal = terms
    if not marginal or "log_likelihood" not in idata.groups():
        return
    samples = mcmc.get_samples(group_by_chain=True)
    S = next(iter(samples.values())).shape[1]
    values = _user_terms_at(lambda d: {n: v for n, v in fn(d).items() if n in marginal}, samples, np.arange(S))
    ds = _log_likelihood_dataset(values, coords, dims)
    for n in values:
        idata.log_likelihood[n] = ds[n]


def _map_draws(fn, draws):
    """``fn`` over the leading axis of ``draws``, one draw after another (``lax.map`` without a batch):
    never a batched matrix factorisation across draws. jaxlib's CPU LAPACK kernels (Cholesky, triangular
    solves, ...) split a batch over XLA's intra-op thread pool and block the pool thread they run on
    until the pieces finish; when as many such batched kernels run at once as the pool has threads (two
    on a 2-core machine: XLA runs independent operations concurrently), every pool thread waits for a
    piece no thread is left to run, and the program never returns (measured: ``from_mcmc``'s leave-one-out
    block on a 2-core machine, every thread idle, two ``tf_XLAEigen`` threads in
    ``lapack_dpotrf_ffi`` → ``ParallelBatchMap`` → ``BlockingCounter::Wait``). An unbatched factorisation
    runs inline on its thread."""
    return jax.lax.map(fn, draws)


#: the most values (draws × observations) from_svi puts in each variable of the pointwise groups
#: (``log_likelihood``, ``posterior_predictive``): 2·10⁷, 160 MB in float64 (e.g. 100 draws at N = 200 000;
#: every draw while N ≤ 20 000 for the default 1 000 draws)
MAX_POINTWISE = 20_000_000
# values (draws × observations) evaluated at once in one vectorised block
_BLOCK_VALUES = 4_000_000


@validated
def from_svi(svi_result_or_params: Annotated[Any, InstanceOf(dict, "numpyro.infer.svi.SVIRunResult",
                                                              what="svi.run(...)'s result or its params dict")],
             gp: _GP, X: Annotated[Any, _INPUTS], y: Annotated[Any, _TARGETS], *, num_samples: Count = 1000,
             model_kwargs: Annotated[dict | None, OrNone(InstanceOf(dict))] = None,
             coords: Annotated[dict | None, OrNone(InstanceOf(dict))] = None,
             dims: Annotated[dict | None, OrNone(InstanceOf(dict))] = None, predictive: Flag = True,
             log_likelihood: Flag = True, rng_key: Annotated[Any, OrNone(Key(allow_int=False))] = None,
             max_pointwise: MaybeCount = MAX_POINTWISE) -> az.InferenceData:
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
    :param gp: the approximation whose ``model`` / ``guide`` were fitted.
    :param X: training inputs (N, D) or a Grid; ``y``: training targets (N,).
    :param num_samples: S, the draws from the guide (all in ``posterior``).
    :param model_kwargs: the fit's keyword arguments (``batch_size`` is dropped: the groups use all data).
    :param coords: extra ArviZ coordinates; ``dims``: extra dims.
    :param predictive: add ``posterior_predictive``; ``log_likelihood``: add ``log_likelihood``.
    :param rng_key: key for the guide and predictive draws (default ``PRNGKey(0)``).
    :param max_pointwise: the most values (draws × N) per variable of the pointwise groups (default
        :data:`MAX_POINTWISE` = 2·10⁷, 160 MB in float64); ``None`` evaluates them for every draw.
    :returns: an :class:`arviz.InferenceData` with the groups above and ``svi``.
    :raises ValueError: for ``num_samples`` < 1 or a ``max_pointwise`` that is not a positive int.
    :raises TypeError: when ``svi_result_or_params`` is neither an SVIRunResult nor a params dict.
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
    idata = _from_samples(gp, X, y, samples, model_kwargs=model_kwargs, coords=coords, dims=dims,
                          attrs={"inference": "svi", "num_steps": 0 if losses is None else int(len(losses)),
                                 "pointwise_draws": int(len(which))},
                          pointwise=(which, computed))
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


def _pointwise_groups(gp, X, y, draws: dict, which, kw, rng_key, *, log_likelihood: bool, predictive: bool) -> dict:
    """``{"log_likelihood": {site: (1, D, N)}, "posterior_predictive": {site: (1, D, N)}}`` for the draws
    ``which`` (D indices) of ``draws`` ``{site: (S, ...)}``; draw s uses the key ``split(key, S)[s]``, so
    its values do not depend on which other draws are evaluated.

    Per draw: the log density of every observed site of ``gp.model`` (as ``numpyro.infer.log_likelihood``)
    and a posterior predictive draw (the model with ``y=None``, as ``numpyro.infer.Predictive``, or the
    approximation's own ``posterior_predictive``: the collapsed ones). Sites equal in every draw enter
    unbatched; where only the inducing site varies (SVI's point estimates) the draws are mapped in
    vectorised blocks (``lax.map`` with ``batch_size``), so what depends on the constant sites only is
    computed once per block, not once per draw; where hyperparameters vary too (MCMC) each draw factorises
    its own matrices and the draws run one after another (:func:`_map_draws`)."""
    from numpyro import handlers

    from ..approximations.base import GPModel

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

    def one(constant, part, rng_key, X, y):
        values = {**constant, **part}
        out = {"log_likelihood": {}, "posterior_predictive": {}}
        if log_likelihood:
            tr = handlers.trace(handlers.substitute(gp.model, data=values)).get_trace(X, y, **kw)
            out["log_likelihood"] = {name: site["fn"].log_prob(site["value"]) for name, site in tr.items()
                                     if site["type"] == "sample" and site["is_observed"]}
        if predictive and default_predictive:  # GPModel's: the model with y=None, as Predictive runs it
            tr = handlers.trace(handlers.seed(handlers.substitute(gp.model, data=values), rng_key)).get_trace(X, **kw)
            out["posterior_predictive"] = {name: site["value"] for name, site in tr.items()
                                           if site["type"] == "sample" and name not in values}
        elif predictive:  # the approximation's own, for one draw
            pp = gp.posterior_predictive({k: v[None, None] for k, v in values.items()}, rng_key, X, y, **kw)
            out["posterior_predictive"] = {k: v[0, 0] for k, v in pp.items() if k not in values}
        return out

    def evaluate(constant, varying, rng_key, which, X, y):
        keys = jax.random.split(rng_key, S)[which]
        if set(varying) - {site}:  # hyperparameters vary (MCMC): each draw factorises its own Kuu
            return _map_draws(lambda a: one(constant, *a, X, y), (varying, keys))
        if block >= len(which):
            return jax.vmap(lambda part, k: one(constant, part, k, X, y))(varying, keys)
        return jax.lax.map(lambda a: one(constant, *a, X, y), (varying, keys), batch_size=block)

    # everything enters as an argument: closed-over arrays would be constants that XLA folds at compile time
    out = jax.jit(evaluate)(constant, varying, rng_key, jnp.asarray(which), X, y)
    # keep the pointwise terms only (a scalar factor, e.g. a collapsed bound, has none)
    return {group: {k: np.asarray(v)[None] for k, v in values.items() if v.shape[1:] == (N,)}
            for group, values in out.items()}
