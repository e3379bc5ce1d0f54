"""The approximation-adequacy check: how much of the prior variance at the data the features miss, per
posterior draw, and the fix when too much."""
from __future__ import annotations

import warnings
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ..grid import Grid
from ..kernels import check_inputs
from ..validation import (
    AName,
    AnyOf,
    ArrayOf,
    InstanceOf,
    IsCallable,
    MaybeCount,
    OrNone,
    Samples,
    Tolerance,
    validated,
)
from ._arviz import az  # the hints name it (get_type_hints resolves them)
from .prediction import _thin, check_chain_grouping, check_draw_counts, posterior_samples, svi_params

__all__ = ["adequacy", "add_adequacy"]


_GP_OR_FEATURE = InstanceOf("ppl_sparsegp.approximations.base.GPModel", "ppl_sparsegp.features.base.InducingFeature",
                            what="a fitted approximation (SparseGP, CollapsedGP, ...) or a feature")
_INPUTS = AnyOf(ArrayOf(rank=(1, 2)), InstanceOf("ppl_sparsegp.grid.Grid"))
_RESULT = InstanceOf(dict, what="the dict that adequacy(...) or refinement_check(...) returned")
_IDATA = InstanceOf("arviz.InferenceData", what="the fit's arviz.InferenceData (from_mcmc, from_svi)")


@validated
def adequacy(gp_or_feature: Annotated[Any, _GP_OR_FEATURE], samples: Samples, X: Annotated[Any, _INPUTS], *,
             kernel: Annotated[Any, OrNone(IsCallable())] = None, name: AName = "f",
             params: Annotated[dict | None, OrNone(InstanceOf(dict))] = None, tolerance: Tolerance = 0.05,
             max_draws: MaybeCount = 500) -> dict:
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
    :param name: for a feature with a kernel template: the ``name`` given to ``spectral_gp`` (default
        ``"f"``), the prefix of the kernel's sites ``<name>_kernel_<field>`` read from each draw.
    :param tolerance: the check fails when the median of :math:`r_s` exceeds it (the typical draw: the
        tail of short lengthscales is reported as the 95% quantile; on the pines LGCP the median is 2.5%
        and the 95% quantile 13% with the posterior within 0.11 sd of the exact GP's).
    :param max_draws: at most this many draws, evenly spaced over the S given (default 500; None: all of
        them); each draw costs one Kuu and one Kuf at every input. When the hyperparameters are equal in
        every draw (point estimates) one draw is computed and repeated.
    :returns: dict with ``residual_fraction`` (draws,), one value per draw used (min(S, ``max_draws``)),
        ``median``, ``q95``, ``ok`` and ``message`` (the fix when it fails: "increase num_frequencies to
        …", "widen the box to …", "add inducing points").
    :raises ValueError: for a ``tolerance`` outside (0, 1), empty ``samples``, or a feature without
        ``kernel``.
    """
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    if hasattr(samples, "posterior"):
        params = svi_params(samples) if params is None else params
        samples = posterior_samples(samples)
    if not hasattr(samples, "items") or not samples:
        raise ValueError("adequacy: samples is empty or not a dict: pass mcmc.get_samples() or the fit's InferenceData")
    draws = check_draw_counts({k: jnp.asarray(v) for k, v in samples.items()}, "adequacy")
    flat = _thin(draws, max_draws)
    X = X if isinstance(X, Grid) else check_inputs(jnp.asarray(X)[:, None] if jnp.ndim(X) == 1 else X, "X")
    parts, feature, hyper = _draw_parts(gp_or_feature, kernel, name, params)
    _require_sites(gp_or_feature, kernel, name, flat, params)
    r = _residual_fractions(parts, flat, X, hyper)
    med, q95 = float(np.median(r)), float(np.quantile(r, 0.95))
    ok = med <= tolerance
    summary = (f"the features miss {100 * med:.2g}% of the prior variance at the data in the median draw, "
               f"{100 * q95:.2g}% at the 95% quantile (tolerance {100 * tolerance:g}% for the median)")
    if ok:
        message = f"adequate: {summary}"
    else:
        message = f"inadequate: {summary}; {_advice(feature, gp_or_feature, flat, X, kernel, name, tolerance)}"
    return {"residual_fraction": r, "median": med, "q95": q95, "ok": bool(ok), "message": message,
            "num_draws": int(next(iter(draws.values())).shape[0])}


def _require_sites(gp_or_feature, kernel, name, flat, params):
    """Refuse draws that lack a site the kernel or the features need (the check would otherwise draw it
    from its prior and judge a fit it never saw), naming the sites and the prefix looked for, and draws
    grouped by chain (one axis more than each site's shape)."""
    from ..approximations.base import GPModel
    from ..parameters import free_sites

    if isinstance(gp_or_feature, GPModel):
        needed = {**free_sites(gp_or_feature.kernel, "kernel_"), **free_sites(gp_or_feature.feature, "feature_")}
        given = set(flat) | set(gp_or_feature.point_values(params or {}))
        prefix, fix = "kernel_ / feature_", "pass the fit's draws (mcmc.get_samples()) or its params= (SVI)"
    elif kernel is not None and not (callable(kernel) and not hasattr(kernel, "diag")):
        needed, given = free_sites(kernel, f"{name}_kernel_"), set(flat)
        prefix = f"{name}_kernel_"
        fix = (f"pass the draws of the fit and the name= given to spectral_gp (the sites are {prefix}<field>; the "
               f"draws hold {sorted(flat)})")
    else:  # a callable draw -> kernel: the sites it reads are its own business
        return
    missing = sorted(k for k in needed if k not in given)
    if missing:
        raise ValueError(f"adequacy: samples lacks the site(s) {missing} the kernel/features need (looked for the "
                         f"prefix {prefix!r}; samples has {sorted(flat)}): {fix}")
    check_chain_grouping(flat, {k: tuple(p.shape()) for k, p in needed.items()}, "adequacy")

def _draw_parts(gp_or_feature, kernel, name, params):
    """``(parts, feature, hyper)``: ``parts(draw) -> (feature, kernel)`` concrete for one draw, the feature
    (template) whose adequacy is checked, and the hyperparameter sites (None: unknown, a callable kernel)."""
    from ..approximations.base import GPModel
    from ..parameters import free_sites, instantiate

    if isinstance(gp_or_feature, GPModel):
        gp = gp_or_feature

        def parts(draw):
            k, _, f, _ = gp.components_from({**gp.point_values(params or {}), **draw})
            return f, k
        return parts, gp.feature, set(gp.hyperparameter_sites())
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
    return parts, feature, hyper


def _residual_fractions(parts, flat, X, hyper):
    """r_s per draw (S,): the conditional variance at ``q_cov=None`` over the prior variance at X."""
    from ..conditionals import conditional

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
    return np.full(S, r[0]) if same else r


@validated
def add_adequacy(idata: Annotated[Any, _IDATA], result: Annotated[dict, _RESULT]) -> az.InferenceData:
    """Store an :func:`adequacy` or a :func:`~ppl_sparsegp.diagnostics.refinement_check` result in
    ``idata`` as the group ``adequacy``: the residual check's ``residual_fraction`` (dim
    ``adequacy_draw``) and its summary (``median``, ``q95``, ``ok``, ``message``) as attributes; the
    refinement check's ``refinement_ok``, ``refinement_k_hat`` (−1 without importance weights),
    ``refinement_max_shift`` (posterior sd) and ``refinement_message`` as attributes of the same group
    (either may come first). It survives :func:`save` / :func:`load`.

    :returns: ``idata``.
    :raises TypeError: when ``result`` is not a dict; ``ValueError`` when it lacks keys of either result.
    """
    _check_result(result)
    _check_idata(idata, result)
    old = getattr(idata, "adequacy", None)
    if "k_hat" in result:  # a refinement check
        shifts = {**result["shift_is"], **result["shift_refit"]}
        attrs = {"refinement_ok": int(result["ok"]), "refinement_message": result["message"],
                 "refinement_k_hat": -1.0 if result["k_hat"] is None else float(result["k_hat"]),
                 "refinement_max_shift": float(max(shifts.values())) if shifts else 0.0}
        # a group needs a variable (ArviZ drops an attrs-only Dataset): the verdict, as a 0-d one
        ds = (xr.Dataset({"refinement_ok": ((), int(result["ok"]))}, attrs=attrs) if old is None
              else old.assign_attrs(attrs))
    else:
        ds = xr.Dataset({"residual_fraction": (("adequacy_draw",), np.asarray(result["residual_fraction"]))},
                        attrs={**({k: v for k, v in old.attrs.items() if k.startswith("refinement_")}
                                  if old is not None else {}),
                               "median": result["median"], "q95": result["q95"], "ok": int(result["ok"]),
                               "message": result["message"]})
    with warnings.catch_warnings():  # not one of ArviZ's schema groups
        warnings.simplefilter("ignore", UserWarning)
        if old is None:
            idata.add_groups({"adequacy": ds})
        else:
            idata.adequacy = ds
    return idata


_KEYS = {"refinement_check": ("ok", "message", "k_hat", "shift_is", "shift_refit"),
         "adequacy": ("residual_fraction", "median", "q95", "ok", "message")}


def _check_result(result):
    """The dict :func:`adequacy` or :func:`~ppl_sparsegp.diagnostics.refinement_check` returned, unchanged."""
    if not isinstance(result, dict):
        raise TypeError(f"add_adequacy: result must be the dict that adequacy(...) or refinement_check(...) "
                        f"returns, got {type(result).__name__}")
    which = "refinement_check" if "k_hat" in result else "adequacy"
    missing = [k for k in _KEYS[which] if k not in result]
    if missing:
        raise ValueError(f"add_adequacy: result lacks {missing} of a {which} result (it has {sorted(result)}): pass "
                         f"the dict {which}(...) returned, unchanged")


def _check_idata(idata, result):
    """Refuse an ``idata`` that is not an InferenceData, and a result computed from another number of draws
    than its posterior holds (another fit's result)."""
    if not (hasattr(idata, "add_groups") and hasattr(idata, "groups")):
        raise TypeError(f"add_adequacy: idata must be the fit's arviz.InferenceData (from_mcmc, from_svi), got "
                        f"{type(idata).__name__}; a dict of samples has no groups to store the result in")
    post = getattr(idata, "posterior", None)
    if post is None or "num_draws" not in result:
        return
    sizes = dict(post.sizes)
    held = int(sizes.get("chain", 1)) * int(sizes.get("draw", 1))
    if int(result["num_draws"]) != held:
        raise ValueError(f"add_adequacy: the result was computed from {result['num_draws']} draws but this "
                         f"InferenceData's posterior holds {held} (chain × draw): it is another fit's result; run "
                         "the check on this fit (adequacy(gp, idata, X) / refinement_check(model, idata, ...))")


def _advice(feature, gp_or_feature, flat, X, kernel, name, tolerance) -> str:
    """The fix: the family's own rule (:meth:`~ppl_sparsegp.features.InducingFeature.adequacy_advice`),
    from the posterior's lengthscales where it has one (VFF)."""
    ells = next((np.asarray(flat[s]) for s in ("kernel_lengthscale", f"{name}_kernel_lengthscale") if s in flat),
                None)
    points = X.points() if isinstance(X, Grid) else X
    return feature.adequacy_advice(ells, points, getattr(gp_or_feature, "kernel", kernel), tolerance)
