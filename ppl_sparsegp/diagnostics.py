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
* ``observed_data`` (``y``) and ``constant_data`` (``X``, dims ``obs``, ``input``);
* for SVI, a group ``svi`` holding the optimised parameters and the loss (negative ELBO) trace (dim
  ``step``), so that :func:`predict` can use q(u) analytically after :func:`load`.

:func:`summary` (R-hat, ESS [2]), :func:`save` / :func:`load` (netCDF), :func:`predict` and
:func:`predictive_metrics` (RMSE, NLPD) from an InferenceData, and the plots :func:`plot_trace`,
:func:`plot_fit_1d` complete the module.

References:
    1. Hensman, Matthews, Filippone, Ghahramani (2015), MCMC for variationally sparse Gaussian processes.
    2. Vehtari, Gelman, Simpson, Carpenter, Bürkner (2021), Rank-normalization, folding, and
       localization: an improved R-hat for assessing convergence of MCMC.
"""
from __future__ import annotations

import contextlib
import logging
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
           "svi_params", "predict", "predictive_metrics", "plot_trace", "plot_fit_1d"]

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


def from_samples(gp, X, y, samples: dict, *, sample_stats=None, model_kwargs=None, coords=None,
                 dims=None, predictive=True, log_likelihood=True, rng_key=None,
                 attrs=None) -> az.InferenceData:
    """InferenceData from posterior draws ``{site: array (chain, draw, ...)}`` of ``gp.model``'s sites.

    The common builder of :func:`from_mcmc` and :func:`from_svi`; use it directly for other engines
    (e.g. SteinVI particles as draws of one chain). ``sample_stats``: ``{name: (chain, draw)}`` arrays;
    ``attrs``: stored on the posterior group (e.g. ``{"inference": "stein"}``). Other arguments as in
    :func:`from_mcmc`.
    """
    # the model receives X as given (a Grid stays a Grid: its Kronecker paths); the groups store points
    X = X if isinstance(X, Grid) else jnp.asarray(X)
    points, y = (X.points() if isinstance(X, Grid) else X), jnp.asarray(y)
    N = points.shape[0]
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
    return idata


def from_mcmc(mcmc, gp, X, y, *, model_kwargs=None, coords=None, dims=None, predictive=True,
              log_likelihood=True, rng_key=None) -> az.InferenceData:
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
    """
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
    return from_samples(gp, X, y, samples, sample_stats=stats, model_kwargs=model_kwargs,
                        coords=coords, dims=dims, predictive=predictive, log_likelihood=log_likelihood,
                        rng_key=rng_key, attrs=attrs)


def from_svi(svi_result_or_params, gp, X, y, *, num_samples: int = 1000, model_kwargs=None, coords=None,
             dims=None, predictive=True, log_likelihood=True, rng_key=None) -> az.InferenceData:
    """InferenceData from an SVI fit of ``gp.model`` / ``gp.guide``: one chain of guide draws.

    ``posterior`` holds ``num_samples`` draws of every latent site from the guide (the point-estimated
    hyperparameters are Delta sites: their draws are constant), the other groups are as in
    :func:`from_mcmc`, and the group ``svi`` holds the optimised parameters and, for an ``SVIRunResult``,
    the loss trace ``loss`` (negative ELBO per step, dim ``step``).

    :param svi_result_or_params: ``svi.run(...)``'s result or its ``params`` dict.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be positive, got {num_samples}")
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
    idata = from_samples(gp, X, y, samples, model_kwargs=model_kwargs, coords=coords, dims=dims,
                         predictive=predictive, log_likelihood=log_likelihood, rng_key=key_pred,
                         attrs={"inference": "svi",
                                "num_steps": 0 if losses is None else int(len(losses))})
    group = {k: xr.DataArray(np.asarray(v), dims=[f"{k}_dim_{i}" for i in range(np.ndim(v))])
             for k, v in params.items()}
    if losses is not None:
        group["loss"] = xr.DataArray(np.asarray(losses), dims=["step"])
    with warnings.catch_warnings():  # "svi" is not one of ArviZ's schema groups
        warnings.simplefilter("ignore", UserWarning)
        idata.add_groups({SVI_GROUP: xr.Dataset(group)})
    return idata


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
    S = next(iter(out.values())).shape[0]
    if max_draws is not None and max_draws < S:
        idx = np.round(np.linspace(0, S - 1, max_draws)).astype(int)
        out = {k: v[idx] for k, v in out.items()}
    return {k: jnp.asarray(v) for k, v in out.items()}


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
