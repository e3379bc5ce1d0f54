r"""A data-driven choice of the features of a user's own model: a cheap pilot fit before NUTS.

The size rule :meth:`FourierFeatures.from_data(x, kernel) <ppl_sparsegp.features.fourier.FourierFeatures.from_data>`
reads the lengthscales from the prior of the kernel template (``Matern52(1.0, prior)``). When the data put a
lengthscale far into the prior's tail, or the noise is small against the signal (then 1 % of the prior
variance left unresolved is as large as the noise variance), features sized by the prior displace the
posterior, and only the refinement check says so.
:func:`choose_features` asks the data first:

1. **Pilot.** The model (with :func:`~ppl_sparsegp.marginal_spectral_gp`: nothing latent but the
   hyperparameters) runs as the exact GP where N ≤ ``exact_rows`` (every ``marginal_spectral_gp`` made
   ``exact=True``: the exact posterior's modes, wherever the data put the lengthscales; a pilot on
   features the prior sized can have no mode at the data's lengthscale), else with every
   feature refined ``refine`` times (:func:`~ppl_sparsegp.refined_features`; O(M'³) per evaluation from
   the statistics) on all rows, started also at the optima of the exact GP on a random subsample of
   ``exact_rows`` rows, all of which join the sizing. Its log joint is maximised by L-BFGS (type-II MAP;
   one compiled objective for every start, ``pilot_search``) from ``starts`` points spread over the priors'
   quantiles and ``data_starts`` points over every lengthscale's data-supported range (twice the inputs'
   median spacing to their span, log-spaced, each site independently), so that a second mode, or one far
   below the prior, is not lost.
2. **Modes.** Every distinct optimum whose Laplace log mass (in the unconstrained coordinates: the peak,
   its width and the transforms' Jacobian) is within ``log_mass_gap`` of the largest is kept (the mass,
   not the peak height: a broad mode below a narrow one can hold more of the posterior; measured, the
   benchmark's bimodal series: peaks 4.4 nats apart, masses 2.0, a long-ℓ share of 0.12 by Laplace against
   the exact GP's 0.12 from NUTS); at each a Laplace approximation (the Hessian in the unconstrained
   coordinates) gives the lengthscale's lower ``quantile``,
   :math:`\ell_q = \exp(\log\hat\ell - z_q\,\mathrm{sd}(\log\ell))`, and the GP's variance
   :math:`\sigma_f^2` and the noise :math:`\sigma_n^2` there.
3. **Features.** Each GP of the model (every term of a sum) gets its own choice: its kernel with every
   lengthscale site at the shortest :math:`\ell_q` of the kept modes (the union of what the modes need)
   goes to its family's size rule, :meth:`InducingFeature.resized(X, kernel, tolerance)
   <ppl_sparsegp.features.InducingFeature.resized>`, at the tolerance
   :math:`\tau = c\,\sigma_n^2/\sigma_f^2` (``noise_fraction`` c = 1 %, at most 1 %; :math:`\sigma_f^2` the
   GP's largest prior variance at the data, the smallest τ of the modes). The rules, each that of the
   family's ``from_data`` with the domain kept:

   * VFF (:class:`~ppl_sparsegp.FourierFeatures`, Matérn): the box as given (from the prior: it serves the
     prior's long lengthscales), the fewest frequencies leaving at most τ of the prior variance
     unresolved at :math:`\ell_q` (:func:`~ppl_sparsegp.features.fourier.frequencies_needed`);
   * the periodic kernel on one period (``FourierFeatures`` with :class:`~ppl_sparsegp.Periodic`): the
     fewest harmonics whose truncated series leaves at most τ of σ²
     (:func:`~ppl_sparsegp.features.fourier.harmonics_needed`);
   * multi-D VFF (:class:`~ppl_sparsegp.AdditiveFeatures`, :class:`~ppl_sparsegp.KroneckerFeatures`) and
     :class:`~ppl_sparsegp.AdditiveOrthogonal`: each dimension by its own rule at its own lengthscale, at
     the per-dimension tolerance of ``from_data``;
   * trigonometric VOF: the band and M of ``from_data`` at :math:`\ell_q`, the centre and basis kept;
   * Hermite VOF (SE kernel): the fewest M resolving :math:`\ell_q` at the data, input scale and centre kept;
   * spherical harmonic features (zonal kernels): the fewest degrees at the kernel's chordal lengthscale
     :math:`\ell_q` (arc-cosine kernels: at τ; they have no lengthscale in the rule).

   Features of a family without a rule (inducing points, random Fourier features, ...) or with a
   sampled domain are kept as given, and ``info["kept"]`` names them with the reason. No GP gets more
   than ``max_features`` (2 000): with little noise τ is tiny and a rule could ask for thousands of
   features, each fit then paying an M' × M' Cholesky per gradient (O(M'³)); such a choice raises
   :class:`~ppl_sparsegp.features.TooManyFeatures`, naming the GP, τ, the size wanted and the fixes.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, §3 (the
       spectral tail the size rule bounds).
    2. MacKay (2003), Information theory, inference and learning algorithms, ch. 27 (Laplace's method).
"""
from __future__ import annotations

import contextlib
import math
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers

from ..features.base import TooManyFeatures, refined_features
from ..parameters import as_rng_key, is_concrete
from ..validation import Count, IsCallable, MaybeCount, NonNegative, NonNegativeInt, Positive, Real, RngKey, validated
from .pilot_search import (
    data_range,
    data_starts as _lhs_starts,
    exact_model,
    find_optima,
    laplace,
    prior_starts,
    unconstrained,
)

__all__ = ["choose_features", "ChosenFeatures"]

#: the largest latent site (values per draw) the pilot treats as a hyperparameter
_MAX_HYPER_SIZE = 16

#: choose_features' default for the most rows of its exact-GP pilot (O(n³) per gradient)
EXACT_ROWS = 2000

#: choose_features' default cap on the features of one GP (an M' x M' Cholesky per gradient: O(M'^3))
MAX_FEATURES = 2000


class ChosenFeatures(dict):
    """``{gp name: feature}`` for the model's ``features`` argument, with the pilot's record in ``info``:
    ``modes`` (per kept optimum, the largest mass first: ``log_joint``, ``log_mass`` (Laplace's), ``values``,
    per GP ``lengthscale`` and ``lengthscale_q`` (the shortest), ``lowered`` ({lengthscale site: its lower
    quantile}), ``variance``, ``noise_variance``), per resized GP the ``needed`` lengthscale, tolerance and
    ``num_features`` (given, chosen), and ``kept`` ({gp name: why its features are kept as given})."""

    info: dict


def _trace(model, args, kwargs, values=None):
    m = handlers.seed(model, 0) if values is None else handlers.substitute(handlers.seed(model, 0), data=values)
    with handlers.block():
        return handlers.trace(m).get_trace(*args, **kwargs)


def _sites(trace):
    """{name: prior} of the latent sites; refuses a model with latent functions (not collapsed)."""
    sites = {n: s["fn"] for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"]}
    big = [n for n, s in trace.items() if n in sites and np.size(s["value"]) > _MAX_HYPER_SIZE]
    if big or not sites:
        raise ValueError("choose_features needs a model whose only latent sites are hyperparameters (Gaussian "
                         "observations through marginal_spectral_gp); " + (f"{big} are latent functions" if big
                                                                           else "this model has none"))
    gps = [s for s in trace.values() if s["type"] == "sample" and "ppl_sparsegp_kernels" in s.get("infer", {})]
    if not gps:
        raise ValueError("choose_features found no marginal_spectral_gp in the model")
    return sites, gps


def _laplace_log_mass(model, args, kwargs, sites, values):
    r"""Laplace's log posterior mass (unnormalised) of the optimum at ``values``, in the unconstrained
    coordinates u (where the priors' supports are the whole space):
    :math:`\log p(y, \theta(\hat u)) + \log|\det J(\hat u)| + \tfrac d2 \log 2\pi - \tfrac12
    \log\det H`, H the Hessian of :math:`-\log p(y, \theta(u)) - \log|\det J(u)|` at the optimum
    (MacKay 2003, Eq. 27.10). Exact for a posterior Gaussian in u (``tests/approximations/test_pilot.py``)."""
    objective, x0, _ = unconstrained(model, args, kwargs, sites, values)
    return laplace(objective, x0, values)[0]


def _lengthscale_sites(gp, kernel, values):
    """The sites sampling a GP's lengthscales: every ``<gp>_kernel_…lengthscale`` site of a kernel template
    (per-dimension kernels and a zonal kernel's chordal lengthscale included), else the sites whose values
    are the lengthscales of the kernel or of its per-dimension kernels (values the model sampled itself)."""
    prefix = f"{gp}_kernel_"
    found = [k for k in values if k.startswith(prefix) and k.endswith("lengthscale")]
    if found:
        return found
    for part in (kernel, *getattr(kernel, "kernels", ())):
        for field in ("lengthscale", "chordal_lengthscale"):
            ell = getattr(part, field, None)
            if ell is None:
                continue
            ell = np.asarray(ell)
            found += [k for k, v in values.items() if k not in found and np.shape(v) == ell.shape
                      and np.allclose(np.asarray(v), ell)][:1]
    return found


def _prior_variance(kernel, X):
    """The GP's largest prior variance at the data, max k(x, x) (the variance of a stationary kernel)."""
    try:
        return float(np.max(np.asarray(kernel.diag(X))))
    except (AttributeError, NotImplementedError, TypeError, ValueError):
        return float(np.max(np.asarray(kernel.variance)))


def _lowered(value, sd, z):
    """ℓ·exp(−z·sd(log ℓ)) entry by entry: a Laplace lower quantile of a lengthscale (module docstring)."""
    value, sd = np.asarray(value, dtype=float), np.broadcast_to(np.asarray(sd, dtype=float), np.shape(value))
    return np.reshape([float(v) * math.exp(-z * float(s)) for v, s in zip(value.ravel(), sd.ravel())],
                      value.shape)


def _mode_record(model, args, kwargs, optimum, z):
    """The per-GP figures at one optimum (module docstring, step 2): the mode's shortest lengthscale, its
    lower quantile, ``lowered`` ({site: the lower quantile of each lengthscale site}), σ_f², σ_n²; the
    GPs' structure read from the model as given (its features and noise at the optimum's values)."""
    values, sd = optimum["values"], optimum["sd"]
    trace = _trace(model, args, kwargs, values)
    gps = {}
    for site in _sites(trace)[1]:
        s2 = float(np.reshape(site["fn"].noise_variance, ()))
        X = site["infer"].get("ppl_sparsegp_inputs")
        for (gp, _, _) in site["infer"]["ppl_sparsegp_gps"]:
            kernel = site["infer"]["ppl_sparsegp_kernels"][gp]
            lsites = [k for k in _lengthscale_sites(gp, kernel, values) if k in sd]
            lowered = {k: _lowered(values[k], sd[k], z) for k in lsites}
            fixed = getattr(kernel, "lengthscale", None)  # a lengthscale the model fixes: its own quantile
            fixed = float(np.min(np.asarray(fixed))) if lsites == [] and is_concrete(fixed) else math.nan
            ell = min((float(np.min(np.asarray(values[k]))) for k in lsites), default=fixed)
            gps[gp] = {"lengthscale": ell, "lowered": {k: v.tolist() for k, v in lowered.items()},
                       "lengthscale_q": min((float(np.min(v)) for v in lowered.values()), default=fixed),
                       "variance": _prior_variance(kernel, X), "noise_variance": s2}
    return {"log_joint": optimum["log_joint"], "log_mass": optimum["log_mass"],
            "values": {k: np.asarray(v).tolist() for k, v in values.items()}, "gps": gps}


def lengthscale_ranges(trace, values):
    """{lengthscale site: (lo, hi)}: the data-supported range of every GP's lengthscale sites, from twice
    the median spacing of its inputs to their span (per input dimension for a site with one value per
    dimension, else the widest over the dimensions)."""
    out = {}
    for site in _sites(trace)[1]:
        lo, hi = data_range(site["infer"]["ppl_sparsegp_inputs"])
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
            continue
        for gp, kernel in site["infer"]["ppl_sparsegp_kernels"].items():
            for k in _lengthscale_sites(gp, kernel, values):
                per_dim = np.size(values[k]) == lo.size and lo.size > 1
                out[k] = (lo, hi) if per_dim else (float(np.min(lo)), float(np.max(hi)))
    return out


def dispersed_starts(model, args, kwargs, sites, starts, num_data, rng_key):
    """The pilot's starts (the module docstring of ``pilot_search``): ``starts`` at the priors' quantiles,
    ``num_data`` over the data-supported range of every lengthscale, independently."""
    trace = _trace(model, args, kwargs)
    values = {k: s["value"] for k, s in trace.items() if s["type"] == "sample" and not s["is_observed"]}
    return prior_starts(sites, starts) + _lhs_starts(sites, lengthscale_ranges(trace, values), num_data, rng_key)


@validated(forwards_to="model")
def choose_features(model: Annotated[object, IsCallable()], *args, refine: Annotated[int, NonNegativeInt()] = 2,
                    starts: Count = 5, quantile: Annotated[float, Real(0.0, 0.5, low_open=True, high_open=True)] = 0.05,
                    noise_fraction: Positive = 0.01, log_mass_gap: NonNegative = math.log(100.0),
                    num_steps: Count = 200, max_features: Count = MAX_FEATURES, exact_rows: MaybeCount = EXACT_ROWS,
                    data_starts: Annotated[int, NonNegativeInt()] = 6, rng_key: RngKey = 0,
                    **kwargs) -> ChosenFeatures:
    r"""Choose the features of a model with :func:`~ppl_sparsegp.marginal_spectral_gp` from a pilot fit to
    the data (module docstring): every GP's features, by its family's size rule, resolving what the data
    support at a tolerance set by the noise, their domain kept (VFF's box from the prior). Families with a
    rule: VFF (1-D, additive, Kronecker), the periodic kernel's harmonics, trigonometric and Hermite VOF,
    spherical harmonics; the others are kept as given (``info["kept"]``).

    :param model: the NumPyro model, called ``model(*args, **kwargs)``; its features are read where
        ``marginal_spectral_gp`` receives them (build them with ``FourierFeatures.from_data(x, kernel)``, a
        kernel template holding the prior: the documented start) and the result is passed back as
        ``{gp name: feature}`` (e.g. a ``features`` argument of the model).
    :param args: the model's positional arguments (the data).
    :param exact_rows: the pilot's marginal is the exact GP (``marginal_spectral_gp(..., exact=True)``, the
        features ignored: its modes are the exact posterior's, wherever the data put the lengthscales) on
        at most this many rows (default 2 000; O(n³) per gradient): all of them where N ≤ ``exact_rows``;
        beyond, the refined-feature pilot runs on all rows, started also at the optima of the exact GP on a
        random subsample of ``exact_rows`` rows, every one of which joins the sizing (a cross-check: the
        features resolve what either finds; the subsample's masses cannot rank the modes of all N rows).
        None: the refined-feature pilot alone (the pilot before the exact-GP pilot existed).
    :param data_starts: starts that ask the data, besides the prior's: every lengthscale site at
        log-spaced levels from twice the median spacing of the inputs to their span, each site
        independently (a Latin hypercube), the other sites at their prior medians.
    :param rng_key: the key of the subsample and of the data starts' permutations.
    :param refine: refinements of every feature in the refined-feature pilot (N > ``exact_rows``, or
        ``exact_rows=None``) (``refined()``: VFF doubles its highest
        frequency, trigonometric features their band and M, Hermite features M, spherical harmonic features
        their highest degree; arc-cosine spherical features skip the kernel's vanishing degrees when built
        with ``kernel=``, as ``from_data`` builds them, and otherwise need max_degree ≥ 4 or ``refine=0``).
    :param starts: L-BFGS starts at the priors' quantiles, every site at one quantile in (0.1, 0.9).
    :param quantile: the lower quantile of each mode's Laplace lengthscale the features resolve.
    :param noise_fraction: c in the tolerance :math:`c\,\sigma_n^2/\sigma_f^2` (capped at 1 %).
    :param log_mass_gap: optima whose Laplace log mass is this much below the largest are dropped
        (default log 100: modes with under about 1 % of the best one's mass).
    :param num_steps: at most this many L-BFGS iterations per start.
    :param max_features: the most features M' any one GP may get (default 2 000). With little noise τ is
        tiny and a size rule can ask for a huge set; the fit that follows then needs an M' × M' Cholesky
        per gradient, O(M'³) time and M'² memory (2 000 features: 32 MB in float64 and ~2.7 GFLOP per
        factorisation), so a larger choice is refused rather than built silently.
    :param kwargs: the model's keyword arguments (a keyword that is neither an option above nor a parameter
        of the model is refused, naming the closest option).
    :returns: a :class:`ChosenFeatures` ``{gp name: feature}`` with the pilot's record in ``.info``.
    :raises ValueError: for a model with latent functions or without ``marginal_spectral_gp``, bad options,
        or ``refine`` > 0 with features of a family that has no ``refined()`` (inducing points).
    :raises TooManyFeatures: (a ``ValueError``) when a GP's size rule needs more than ``max_features``: it
        names the GP, the tolerance, the size wanted and the fixes (a larger ``max_features`` if the
        O(M'³) cost is affordable, a larger ``noise_fraction``, or another family); and, before any
        fit, when a GP's features refined ``refine`` times (the pilot's) exceed it.
    :raises FloatingPointError: where the log joint's Hessian at an optimum is not finite.
    :warns UserWarning: when L-BFGS stops short (``num_steps`` iterations) at a start: the modes are then
        read from points that are not optima; raise ``num_steps``.

    The pilot runs in float64 (``jax.enable_x64``) whatever the user's setting: it is small, and what it
    returns (feature sizes) is static.
    """
    with jax.enable_x64(True):  # the pilot computes in float64 whatever the user's setting (see below)
        options = {"refine": refine, "starts": starts, "data_starts": data_starts, "num_steps": num_steps,
                   "exact_rows": exact_rows, "rng_key": as_rng_key(rng_key), "gap": log_mass_gap}
        return _choose(model, args, kwargs, options, quantile, noise_fraction, int(max_features))


def _choose(model, args, kwargs, options, quantile, noise_fraction, max_features):
    """choose_features' body, in float64: with little noise the marginal's capacitance is ill-conditioned
    and float32's Hessian at the optimum is not finite (measured: the own-model guide's series, N = 80,
    noise sd 0.1, 'Eigenvalues did not converge'); the pilot is small, and what it returns is static
    (feature sizes), so the user's model keeps its own precision."""
    base_sites, gps = _sites(_trace(model, args, kwargs))
    given = {gp: (feature, site["infer"].get("ppl_sparsegp_inputs")) for site in gps
             for gp, feature, _ in site["infer"]["ppl_sparsegp_gps"]}
    n = max(int(np.shape(X)[0]) for _, X in given.values())
    z = -float(jax.scipy.stats.norm.ppf(quantile))
    inits = dispersed_starts(model, args, kwargs, base_sites, options["starts"], options["data_starts"],
                             options["rng_key"])
    rows, exact_optima = _exact_pilot(model, args, kwargs, base_sites, inits, n, options)
    optima = exact_optima
    if rows is not None:  # N > exact_rows (or no exact pilot): the refined features on all rows
        refine = options["refine"]
        _check_refinable(given, refine, max_features)
        with refined_features(refine) if refine else contextlib.nullcontext():
            sites = _sites(_trace(model, args, kwargs))[0]
            starts = inits + [o["values"] for o in exact_optima]
            optima = find_optima(model, args, kwargs, sites, starts, options["num_steps"])
            modes = _kept(model, args, kwargs, optima, z, options["gap"])
        # every optimum of the subsample joins the sizing: its masses cannot rank the modes of all N rows
        # (the prior weighs as much on fewer data: measured, the conflict test's series on 70 of 100 rows puts
        # the data's mode 15 nats below the prior's, which holds 3.3 nats less on all 100)
        modes += [dict(m, source="subsample") for m in _kept(model, args, kwargs, exact_optima, z, math.inf)]
    else:
        modes = _kept(model, args, kwargs, optima, z, options["gap"])
    features, needed, kept = _resize(model, args, kwargs, given, modes, noise_fraction, max_features)
    out = ChosenFeatures(features)
    out.info = {"modes": modes, "needed": needed, "kept": kept, "starts": len(inits), "refine": options["refine"],
                "hyperparameters": sorted(base_sites), "pilot": "exact" if rows is None else "refined",
                "rows": n if rows is None or not len(rows) else len(rows),
                "optima": [{"log_joint": o["log_joint"], "log_mass": o["log_mass"],
                            "values": {k: np.asarray(v).tolist() for k, v in o["values"].items()}} for o in optima]}
    return out


def _exact_pilot(model, args, kwargs, sites, inits, n, options):
    """``(rows, optima)``: the exact GP's optima from the starts ``inits``, on every row (rows None) or, for
    N > ``exact_rows``, on a random subsample of that many (rows its indices); without an exact pilot
    (``exact_rows`` None) an empty ``rows`` and no optima."""
    limit = options["exact_rows"]
    if limit is None:
        return np.zeros(0, int), []
    rows = None if n <= limit else np.sort(np.asarray(jax.random.choice(options["rng_key"], n, (limit,), False)))
    return rows, find_optima(exact_model(model, rows), args, kwargs, sites, inits, options["num_steps"])


def _kept(model, args, kwargs, optima, z, gap):
    """The records (:func:`_mode_record`) of the optima whose Laplace log mass is within ``gap`` of the best."""
    if not optima:
        return []
    best = optima[0]["log_mass"]
    return [_mode_record(model, args, kwargs, o, z) for o in optima if o["log_mass"] >= best - gap]


def _check_refinable(given, refine, max_features):
    """Refuse, naming the fix, features the pilot cannot refine (a family without ``refined()``), and a
    pilot whose refined features exceed ``max_features`` (each of its evaluations factorises an M' × M'
    matrix: the cap bounds the pilot's cost as it bounds the fit's)."""
    for gp, (feature, _) in given.items() if refine else ():
        pilot = feature
        try:
            for _ in range(refine):
                pilot = pilot.refined()
        except NotImplementedError as err:
            raise ValueError(f"choose_features: the features of {gp!r} cannot be refined for the pilot ({err}); "
                             "pass refine=0 to run the pilot on the features as given") from err
        if pilot.num_features > max_features:
            raise TooManyFeatures(
                f"choose_features: the pilot of {gp!r} would fit M' = {pilot.num_features} features (its "
                f"{feature.num_features} refined {refine} times), more than max_features = {max_features} (an "
                f"M' x M' Cholesky per evaluation); pass refine={refine - 1} (or 0), start from fewer features, "
                "or raise max_features", pilot.num_features, max_features)


def _resize(model, args, kwargs, given, modes, noise_fraction, max_features):
    """Step 3: each GP's features resized (:meth:`~ppl_sparsegp.features.InducingFeature.resized`) for its
    kernel with every lengthscale at the shortest lower quantile of the kept modes, at the smallest
    tolerance of the modes, at most ``max_features`` (:func:`_over_cap`); a family without a rule is kept
    as given and named in ``kept``."""
    lowest = {}
    for mode in modes:
        for figures in mode["gps"].values():
            for k, v in figures["lowered"].items():
                lowest[k] = np.minimum(lowest[k], v) if k in lowest else np.asarray(v)
    values = {**{k: jnp.asarray(v) for k, v in modes[0]["values"].items()},
              **{k: jnp.asarray(v) for k, v in lowest.items()}}
    kernels = {gp: k for site in _sites(_trace(model, args, kwargs, values))[1]
               for gp, k in site["infer"]["ppl_sparsegp_kernels"].items()}
    out, needed, kept = {}, {}, {}
    for gp, (feature, X) in given.items():
        figures = [m["gps"][gp] for m in modes if gp in m["gps"]]
        tol = min(min(0.01, noise_fraction * f["noise_variance"] / f["variance"]) for f in figures)
        try:
            new = feature.resized(np.asarray(X), kernels[gp], tol, max_features)
        except TooManyFeatures as err:
            raise _over_cap(gp, feature, tol, figures, err.wanted, max_features, str(err)) from err
        if new is not None and new.num_features > max_features:  # a family whose rule ignores the cap
            raise _over_cap(gp, feature, tol, figures, new.num_features, max_features, "")
        out[gp] = feature if new is None else new
        if new is None:
            kept[gp] = (f"{type(feature).__name__} has no size rule for {type(kernels[gp]).__name__} (or its "
                        "domain is sampled): kept as given")
        else:
            needed[gp] = {"lengthscale": min((f["lengthscale_q"] for f in figures), default=math.nan),
                          "tolerance": tol, "num_features": (feature.num_features, new.num_features)}
    return out, needed, kept


def _over_cap(gp, feature, tol, figures, wanted, max_features, detail):
    """The error for a GP whose size rule wants more than ``max_features``: the GP, the tolerance, the
    size wanted and the fixes."""
    ell = min((f["lengthscale_q"] for f in figures), default=math.nan)
    size = f"M' = {wanted}" if wanted is not None else f"more than {max_features}"
    return TooManyFeatures(
        f"choose_features: the GP {gp!r} ({type(feature).__name__}) wants {size} features at tolerance "
        f"{tol:.3g} (noise_fraction · σ_n²/σ_f², lengthscale quantile {ell:.3g}), above max_features = "
        f"{max_features}" + (f" ({detail})" if detail else "") + ". Fixes: raise max_features if an M' × M' "
        "Cholesky per gradient (O(M'³)) is affordable, pass a larger noise_fraction (τ grows with it, up to "
        "1 %), or give this GP another family (e.g. InducingPoints, kept as given)", wanted, max_features)
