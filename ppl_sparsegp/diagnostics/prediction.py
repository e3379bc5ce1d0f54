"""Prediction from a fitted InferenceData: posterior draws, the stored SVI parameters, predictive
marginals at new inputs and the test metrics of the library's predictive."""
from __future__ import annotations

from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from ..kernels import check_inputs
from ..validation import ArrayOf, InstanceOf, MaybeCount, Names, OrNone, validated
from .inference_data import SVI_GROUP

_IDATA = InstanceOf("arviz.InferenceData", what="an arviz.InferenceData")
_GP = Annotated[Any, InstanceOf("ppl_sparsegp.approximations.base.GPModel",
                                what="the approximation that was fitted (SparseGP, CollapsedGP, ...)")]
_FIT = Annotated[Any, InstanceOf("arviz.InferenceData", what="the fit's arviz.InferenceData (from_svi, from_mcmc)")]
_NEW_INPUTS = Annotated[Any, ArrayOf(rank=(1, 2))]

__all__ = ["posterior_samples", "svi_params", "predict", "predictive_metrics"]


@validated
def posterior_samples(idata: Annotated[Any, _IDATA], var_names: Annotated[Any, OrNone(Names())] = None,
                      max_draws: MaybeCount = None) -> dict:
    """Posterior draws as ``{site: array (S, ...)}`` with chains concatenated.

    :param idata: an InferenceData with a ``posterior`` group.
    :param var_names: the sites to return (default: all).
    :param max_draws: keep at most this many draws, evenly spaced (for cheaper prediction).
    """
    post = idata.posterior
    names = (list(post.data_vars) if var_names is None else [var_names] if isinstance(var_names, str)
             else list(var_names))
    missing = [n for n in names if n not in post.data_vars]
    if missing:
        raise ValueError(f"posterior_samples: no site {missing[0]!r} in the posterior (it has {list(post.data_vars)})")
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


def check_draw_counts(draws: dict, who: str) -> dict:
    """``draws`` unchanged, refused (naming the fix) when the sites hold different numbers of draws on their
    first axis (ragged: draws of different fits, or thinned apart)."""
    counts = {k: int(np.shape(v)[0]) if np.ndim(v) else 0 for k, v in draws.items()}
    if len(set(counts.values())) > 1 or 0 in counts.values():
        raise ValueError(f"{who}: samples has ragged draws: every site needs the same number (≥ 1) of draws on its "
                         f"first axis, got {counts}; pass mcmc.get_samples() (chains merged) of one fit")
    return draws


def check_chain_grouping(draws: dict, shapes: dict, who: str):
    """Refuse draws grouped by chain, ``(chains, draws, ...)``: a site whose draws have one axis more than its
    shape ``shapes[site]`` (the prior's) with the site's shape after the first two."""
    for k, shape in shapes.items():
        if k not in draws:
            continue
        got = tuple(np.shape(draws[k])[1:])
        if got != tuple(shape) and got[1:] == tuple(shape):
            dims = "".join(f", {n}" for n in shape)
            raise ValueError(f"{who}: samples[{k!r}] has shape {tuple(np.shape(draws[k]))}, i.e. (chains, draws"
                             f"{dims}) for a site of shape {tuple(shape)}: "
                             "draws grouped by chain; pass mcmc.get_samples() (group_by_chain=False) or the "
                             "InferenceData (its chains are merged)")


@validated
def svi_params(idata: Annotated[Any, _IDATA]) -> dict | None:
    """The optimised SVI parameters stored by :func:`~ppl_sparsegp.diagnostics.from_svi` (``None`` for an
    MCMC result).

    :param idata: an InferenceData.
    :returns: ``{param: array}`` or None."""
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


@validated
def predict(gp: _GP, idata: _FIT, X_new: _NEW_INPUTS, *, max_draws: MaybeCount = None) -> dict:
    """Predictive marginals at ``X_new`` from a fitted InferenceData.

    SVI results (an ``svi`` group) use q(u) analytically (``gp.predict(params=...)``); MCMC results mix
    the per-draw predictions (``gp.predict(samples=...)``, law of total variance). For CollapsedGP the
    training data are read from ``constant_data`` / ``observed_data``.

    :param gp: the approximation that was fitted.
    :param idata: its InferenceData (from :func:`~ppl_sparsegp.diagnostics.from_svi` or
        :func:`~ppl_sparsegp.diagnostics.from_mcmc`, possibly after :func:`~ppl_sparsegp.diagnostics.load`).
    :param X_new: inputs (N*, D).
    :param max_draws: use at most this many (evenly spaced) posterior draws.
    :raises ValueError: for bad inputs.
    :returns: ``gp.predict``'s dict (``f_mean``, ``f_var``, ``y_mean``, ``y_var``, ...).
    """
    return _predict(gp, idata, X_new, _predict_kwargs(gp, idata, max_draws))


@validated
def predictive_metrics(gp: _GP, idata: _FIT, X_test: _NEW_INPUTS, y_test: Annotated[Any, ArrayOf(rank=1)], *,
                       max_draws: MaybeCount = None) -> dict:
    r"""Test RMSE of the predictive mean and the NLPD (mean negative log predictive density).

    SVI: :math:`\mathrm{NLPD} = -\frac1N\sum_n \log\int p(y_n\mid f)\,q(f_n)\,df`; MCMC: the posterior
    predictive is the mixture over draws,
    :math:`-\frac1N\sum_n \log\frac1S\sum_s \int p_s(y_n\mid f)\,\mathcal N(f\mid m_{sn}, v_{sn})\,df`,
    each term by ``likelihood.predict_log_density``.

    :param gp: the approximation that was fitted; ``idata`` its InferenceData.
    :param X_test: test inputs (N*, D); ``y_test``: test targets (N*,).
    :param max_draws: use at most this many (evenly spaced) posterior draws.
    :returns: ``{"rmse": ..., "nlpd": ...}`` in the units of ``y_test``.
    :raises ValueError: when y_test does not hold one target per row of X_test.
    """
    y_test = jnp.asarray(y_test)
    rows = np.shape(X_test)[0]
    if y_test.shape[0] != rows:
        raise ValueError(f"predictive_metrics: X_test has {rows} rows but y_test has {y_test.shape[0]} targets; pass "
                         "one target per test input")
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
