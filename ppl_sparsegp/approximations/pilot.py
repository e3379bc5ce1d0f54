r"""A data-driven choice of the features of a user's own model: a cheap pilot fit before NUTS.

The size rule :meth:`FourierFeatures.from_data(x, kernel) <ppl_sparsegp.features.fourier.FourierFeatures.from_data>`
reads the lengthscales from the prior of the kernel template (``Matern52(1.0, prior)``). When the data put a
lengthscale far into the prior's tail, or the noise is small against the signal (then 1 % of the prior
variance left unresolved is as large as the noise variance), features sized by the prior displace the
posterior, and only the refinement check says so.
:func:`choose_features` asks the data first:

1. **Pilot.** The model (with :func:`~ppl_sparsegp.marginal_spectral_gp`: nothing latent but the
   hyperparameters) runs with every feature refined ``refine`` times (:func:`~ppl_sparsegp.refined_features`:
   generously resolved; O(M'³) per evaluation from the statistics), and its log joint is maximised by
   L-BFGS (:func:`~ppl_sparsegp.approximations.map_estimate.map_lbfgs`, type-II MAP) from ``starts`` points
   spread over the priors' quantiles, so that a second mode is not lost.
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
import warnings
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.distributions.transforms import biject_to
from numpyro.infer.util import log_density

from ..features.base import TooManyFeatures, refined_features
from ..parameters import is_concrete
from ..validation import Count, IsCallable, NonNegative, NonNegativeInt, Positive, Real, validated
from .map_estimate import map_lbfgs

__all__ = ["choose_features", "ChosenFeatures"]

#: the largest latent site (values per draw) the pilot treats as a hyperparameter
_MAX_HYPER_SIZE = 16

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


def _starts(sites, starts):
    """``starts`` initial points: every site at the same prior quantile, spread over (0.1, 0.9)."""
    levels = np.linspace(0.5, 0.5, 1) if starts == 1 else np.linspace(0.1, 0.9, starts)
    out = []
    for q in levels:
        point = {}
        for k, p in sites.items():
            try:
                point[k] = jnp.asarray(p.icdf(jnp.asarray(q)))
            except (NotImplementedError, AttributeError, ImportError):
                point[k] = jnp.quantile(p.sample(jax.random.PRNGKey(1), (2001,)), q, axis=0)
        out.append(point)
    return out


def _unconstrained(model, args, kwargs, sites, values):
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


def _hessian(objective, x0, values, jacobian=False):
    """The eigendecomposition of the Hessian of ``objective`` at ``x0``; refuses a Hessian that is not finite."""
    H = np.asarray(jax.hessian(lambda x: objective(x, jacobian))(x0))
    if not np.all(np.isfinite(H)):
        raise FloatingPointError("choose_features: the Hessian of the log joint at the pilot's optimum is not "
                                 f"finite at {dict(values)}; check the model's priors and data (NaN, inf)")
    return np.linalg.eigh(0.5 * (H + H.T))


def _laplace_sd(model, args, kwargs, sites, values):
    """{site: sd of its unconstrained coordinate} from the Hessian of −log p(y, θ) at ``values``."""
    objective, x0, unravel = _unconstrained(model, args, kwargs, sites, values)
    lam, U = _hessian(objective, x0, values)
    cov = (U / np.maximum(lam, 1e-12)) @ U.T  # a flat direction: a very wide Laplace, not a crash
    sd = unravel(jnp.asarray(np.sqrt(np.maximum(np.diag(cov), 0.0))))
    return {k: np.asarray(v) for k, v in sd.items()}


def _laplace_log_mass(model, args, kwargs, sites, values):
    r"""Laplace's log posterior mass (unnormalised) of the optimum at ``values``, in the unconstrained
    coordinates u (where the priors' supports are the whole space):
    :math:`\log p(y, \theta(\hat u)) + \log|\det J(\hat u)| + \tfrac d2 \log 2\pi - \tfrac12
    \log\det H`, H the Hessian of :math:`-\log p(y, \theta(u)) - \log|\det J(u)|` at the optimum
    (MacKay 2003, Eq. 27.10). Exact for a posterior Gaussian in u (``tests/test_pilot.py``)."""
    objective, x0, _ = _unconstrained(model, args, kwargs, sites, values)
    lam, _ = _hessian(objective, x0, values, jacobian=True)
    return (-float(objective(x0, True)) + 0.5 * lam.size * math.log(2 * math.pi)
            - 0.5 * float(np.sum(np.log(np.maximum(lam, 1e-12)))))


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


def _mode_record(model, args, kwargs, sites, values, log_joint, z):
    """The per-GP figures at one optimum (module docstring, step 2): the mode's shortest lengthscale, its
    lower quantile, ``lowered`` ({site: the lower quantile of each lengthscale site}), σ_f², σ_n²."""
    trace = _trace(model, args, kwargs, values)
    sd = _laplace_sd(model, args, kwargs, sites, values)
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
    return {"log_joint": log_joint, "values": {k: np.asarray(v).tolist() for k, v in values.items()}, "gps": gps}


@validated(forwards_to="model")
def choose_features(model: Annotated[object, IsCallable()], *args, refine: Annotated[int, NonNegativeInt()] = 2,
                    starts: Count = 5, quantile: Annotated[float, Real(0.0, 0.5, low_open=True, high_open=True)] = 0.05,
                    noise_fraction: Positive = 0.01, log_mass_gap: NonNegative = math.log(100.0),
                    num_steps: Count = 200, max_features: Count = MAX_FEATURES, **kwargs) -> ChosenFeatures:
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
    :param refine: refinements of every feature in the pilot (``refined()``: VFF doubles its highest
        frequency, trigonometric features their band and M, Hermite features M, spherical harmonic features
        their highest degree; arc-cosine spherical features skip the kernel's vanishing degrees when built
        with ``kernel=``, as ``from_data`` builds them, and otherwise need max_degree ≥ 4 or ``refine=0``).
    :param starts: L-BFGS starts, every site at one prior quantile in (0.1, 0.9).
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
        return _choose(model, args, kwargs, refine, starts, quantile, noise_fraction, log_mass_gap, num_steps,
                       int(max_features))


def _choose(model, args, kwargs, refine, starts, quantile, noise_fraction, log_mass_gap, num_steps, max_features):
    """choose_features' body, in float64: with little noise the marginal's capacitance is ill-conditioned
    and float32's Hessian at the optimum is not finite (measured: the own-model guide's series, N = 80,
    noise sd 0.1, 'Eigenvalues did not converge'); the pilot is small, and what it returns is static
    (feature sizes), so the user's model keeps its own precision."""
    base_sites, gps = _sites(_trace(model, args, kwargs))
    given = {gp: (feature, site["infer"].get("ppl_sparsegp_inputs")) for site in gps
             for gp, feature, _ in site["infer"]["ppl_sparsegp_gps"]}
    _check_refinable(given, refine, max_features)
    z = -float(jax.scipy.stats.norm.ppf(quantile))
    with refined_features(refine) if refine else contextlib.nullcontext():
        sites = _sites(_trace(model, args, kwargs))[0]
        optima = []
        for init in _starts(sites, starts):
            values, info = map_lbfgs(model, sites, model_args=args, model_kwargs=kwargs, init=init, num_steps=num_steps)
            _warn_short(info, num_steps)
            optima.append((-float(info["neg_log_joint"]), values))
        distinct, seen = [], []
        for lj, values in sorted(optima, key=lambda o: -o[0]):
            key = np.concatenate([np.ravel(np.log(np.abs(np.asarray(values[k])) + 1e-300)) for k in sorted(values)])
            if not any(np.max(np.abs(key - s)) < 0.05 for s in seen):  # not an optimum already found
                seen.append(key)
                distinct.append((_laplace_log_mass(model, args, kwargs, sites, values), lj, values))
        best = max(mass for mass, _, _ in distinct)
        modes = [{**_mode_record(model, args, kwargs, sites, values, lj, z), "log_mass": mass}
                 for mass, lj, values in sorted(distinct, key=lambda o: -o[0]) if mass >= best - log_mass_gap]
    features, needed, kept = _resize(model, args, kwargs, given, modes, noise_fraction, max_features)
    out = ChosenFeatures(features)
    out.info = {"modes": modes, "needed": needed, "kept": kept, "starts": starts, "refine": refine,
                "hyperparameters": sorted(base_sites)}
    return out


def _warn_short(info, num_steps):
    """Warn when L-BFGS stopped at its iteration limit (not at an optimum): the modes, their Laplace
    masses and lengthscale quantiles are then read from a point that is not one."""
    if not info["success"] and info["iterations"] >= num_steps:
        warnings.warn(f"choose_features: L-BFGS stopped short after num_steps={num_steps} iterations "
                      f"({info['message']}), "
                      "not at an optimum: the features are chosen from a point that is not a mode; raise num_steps "
                      "(the default is 200)", UserWarning, stacklevel=4)


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
