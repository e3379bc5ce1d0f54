"""Gaussian observations in a user's own model: the collapsed primitive against the latent model, HSGP and
the exact GP, in the same run, with the refinement check's verdict.

``python -m inference.benchmarks.gaussian_own_model [--quick] [--settings tail centre] [--models ...]
[--warmup 500] [--samples 1000] [--check-draws 100] [--exact-chains 4] [--exact-warmup W] [--exact-samples S]
[--skip-gradients] [--pilot-times] [--n N] [--cpu N] [--out JSONL] [--merge JSONL ...]``

A series of ``N`` = 500 points on t ∈ [0, 40] (years, fixed seed) is simulated from a linear mean
(β = (0.3, 0.2) on H = [1, (t − 20)/20]), a Matérn-5/2 trend GP (σ² = 0.5, ℓ = 2), a periodic seasonal GP
(σ² = 0.3, ℓ = 1, period 1) and Gaussian noise (σ = 0.1). Every model has the same priors: trend
ℓ ~ LogNormal(log m, 0.5), trend σ² ~ LogNormal(log 0.5, 1), seasonal σ² ~ LogNormal(log 0.3, 1), noise
σ ~ HalfNormal(0.3), β ~ N(0, I); the trend's prior median m puts the true ℓ at the prior's centre
(``centre``: m = 2), in its 1% tail (``tail``: m = 2·e^{0.5·2.326} = 6.4) or at its 0.01% quantile
(``deep tail``: m = 2·e^{0.5·3.719} = 12.9). The ``bimodal`` setting (m = 2) has its own series
(``BIMODAL``, seed 1): a trend of ℓ = 6 plus a weak quasi-periodic cycle (period 1.5 years, variance
0.0025) that no model term describes, so that the exact posterior has two trend-lengthscale modes (the
trend follows the cycle, ℓ ≈ 1.3, or leaves it to the noise, ℓ ≈ 4.4); its rows report the share of the
draws with ℓ below the modes' valley (``short_mode_mass``, per chain too) and the exact log posterior's
profile over ℓ (``exact_profile``), to find a mode no chain visits. The ``conflict`` setting (issue 48;
``CONFLICT``, seed 1) is the same construction with little noise (σ = 0.02) and a faster cycle (period
0.7 years, variance 0.00164): the exact posterior's main mode follows the cycle (ℓ ≈ 0.7, put at the
trend prior's 10⁻⁶ quantile: m = 0.7·e^{0.5·4.753} = 7.5), its minor mode (ℓ ≈ 5.5, near the prior)
leaves it to the noise. Models, each NUTS
2 × (500 + 1 000) draws (the exact GP: ``--exact-chains`` 4 chains from dispersed starts, uniform in (−2, 2)
on the unconstrained scale, with their own warm-up and draw counts), chains one after another, on one
pinned core (split the models over cores with ``--out``, ``--skip-gradients`` and one ``--merge`` run;
each row records its own run lengths, ``run``, so rows of runs of different lengths merge):

* **exact**: y ~ N(Hβ̄, K_trend + K_season + HBHᵀ + σ²I) by dense Cholesky (O(N³) per gradient);
* **collapsed VFF**: ``marginal_spectral_gp`` with ``FourierFeatures.from_data(t, Matern52(1.0, prior),
  tolerance=0.01·σ_n²/σ_f²)`` (the rule's advice for Gaussian data at the true σ_n and σ_f, ``TOLERANCE``)
  for the trend and ``FourierFeatures(0, 1, 8)`` for the seasonal kernel, β integrated out;
* **latent VFF**: the same features through ``spectral_gp`` (whitened inducing sites, β sampled, a
  ``dist.Normal`` likelihood): the model a user writes without the collapsed primitive;
* **HSGP**: ``numpyro.contrib.hsgp``'s ``hsgp_matern`` (m = 79, L = 1.5 × the half span) for the trend;
  the seasonal part is the same 8-term Fourier series as the others' (``hsgp_periodic_non_centered``
  computes that series too, but needs TensorFlow Probability for its Bessel functions), β sampled;
* **collapsed / latent VFF, tolerance 1%**: the same two models on ``from_data``'s default tolerance
  (fewer features: the collapsed model's cost per gradient is M'³, the latent model's N·M);
* **collapsed VFF, pilot** (issues 40, 48): the documented path, ``psg.choose_features`` (its defaults:
  the exact-GP pilot on N ≤ ``exact_rows``, data-range starts) run on the collapsed model with
  ``from_data``'s default rule (the pilot's seconds reported apart), one NUTS fit, the refinement check
  and ``diagnostics.mode_check`` beside it, and when either fails a second fit (on the refinement check's
  ``advised_features`` where it failed, from ``mode_check``'s main mode where that failed); the failed
  first fit is a row of its own (``…: first fit``), ``nuts_fits`` counts the fits;
* **collapsed VFF, pilot before issue 48**: the same path from the pilot as it was before issue 48
  (``choose_features(..., exact_rows=None, data_starts=0)``: the refined-feature pilot from the priors'
  quantiles), refit only where the refinement check fails (the path then); its mode check is reported;
* **collapsed VFF, old rule**: the collapsed model on the size rule before issue 29 (``features``'s
  "old"): a posterior the features can displace, for the refinement check to fail.

Per row: each hyperparameter's posterior mean ± sd and its distance to the exact posterior
(|mean − exact mean| / exact sd), leapfrog steps per draw, min bulk ESS, min bulk ESS per second of sampling
(the fit's wall less its compilation, which is reported apart; the JSON also keeps ESS per wall second)
and the verdicts of the residual check (``adequacy``) and the refinement
check (``refinement_check``: importance weights under the refined features, and a 100 + 100
warm-started refit where they cannot decide: the latent models, k̂ > 0.7).
Also the collapsed model's ms per gradient at N = 500 and at
N = 100 000 (the statistics path: no N per gradient). Writes ``results/gaussian_own_model.json``, keeping
whatever of the JSON already there it does not recompute (keys added by hand or by other runs, the rows,
ratios, gradient costs and profiles of the settings it does not show; with ``--table-only``, its machine).

**Long series** (``--n``, issue 40 item 6's series of 10⁵ points; default 500, the series above): beyond
``EXACT_MAX_N`` = 2 000 points the GP draw is out of reach (a dense Cholesky), so the series is the cheap
stand-in of :func:`stand_in` (a smooth trend sin(t/3), a yearly sine, noise 0.1; the settings then differ
only in their priors), and so is the exact GP (O(N³) per gradient: refused). The reference row is
**reference: collapsed, refined ×2 (not the exact GP)**: the collapsed model on the pilot's trend features
refined twice (``refined()``: 4M − 3 frequencies, lengthscales a quarter as long resolved); the distances
are to it. Default models there: the reference, the pilot, today's rule, HSGP (its gradient is O(N m):
give it short chains in a run of its own). Every collapsed row stays on the statistics path (t and y as
data, no N per gradient); each row records its ms per gradient (measured before its fit), and its
``setting`` reads ``"centre, N = 100000"``.
"""
from __future__ import annotations

import functools
import math

from inference.benchmarks import harness
from inference.benchmarks.gaussian_own_model_parts import keep_stored, pilot_times, stored_summary  # noqa: F401

N, SPAN, NOISE = 500, 40.0, 0.1
TRUTH = {"trend_ell": 2.0, "trend_var": 0.5, "season_var": 0.3, "noise": NOISE}
HYPER = ("trend_ell", "trend_var", "season_var", "noise")
# true ℓ at the prior's centre (50%), its 1% quantile and its 0.01% quantile (issue 40); "bimodal": its own
# series (BIMODAL), whose exact posterior has two trend-lengthscale modes, the prior centred between them
PRIOR_MEDIAN = {"centre": 2.0, "tail": 2.0 * math.exp(0.5 * 2.326), "deep tail": 2.0 * math.exp(0.5 * 3.719),
                "bimodal": 2.0}
TOLERANCE = 0.01 * NOISE**2 / TRUTH["trend_var"]  # from_data's advice: 0.01 σ_n²/σ_f²
# the bimodal series: a long trend (Matérn-5/2, ℓ = 6) plus a weak quasi-periodic cycle (variance 0.0025,
# period 1.5 years, its phase drifting: a Matérn-5/2 envelope of ℓ = 2 times a cosine) that the model has no
# term for: the trend either follows the cycle (short ℓ ≈ 1.25, less noise) or leaves it to the noise
# (long ℓ ≈ 4.4); an ℓ between does neither (the exact profile's valley, ``split``). Found by the Whittle
# approximation of the profile (sums of two Matérn spectra gave one mode) and checked on the exact profile
BIMODAL = {"trend_ell": 6.0, "trend_var": 0.5, "cycle_var": 0.0025, "cycle_ell": 2.0, "cycle_period": 1.5,
           "season_var": 0.3, "noise": NOISE, "seed": 1, "split": 2.2}
# the conflict series (issue 48): the bimodal construction with little noise (σ = 0.02: 2.2 % of the GPs'
# prior sd √0.8, 3.3 % of the series' sd 0.60) and a faster cycle (period 0.7 years, variance 0.00164): the
# trend follows it (ℓ ≈ 0.7, the exact posterior's main mode, at the trend prior's 10⁻⁶ quantile: the
# median CONFLICT_ELL·e^{0.5·4.753}) or leaves it to the noise (ℓ ≈ 5.5, the prior's side: the minor mode)
CONFLICT = {"trend_ell": 6.0, "trend_var": 0.5, "cycle_var": 0.00164, "cycle_ell": 2.0, "cycle_period": 0.7,
            "season_var": 0.3, "noise": 0.02, "seed": 1, "split": 1.7, "main": "short"}
CONFLICT_ELL = 0.7  # the exact posterior's main trend-ℓ mode (the profile's peak, ``exact_profile``)
PRIOR_MEDIAN["conflict"] = CONFLICT_ELL * math.exp(0.5 * 4.753)  # 10⁻⁶ quantile: z = 4.753
SERIES = {"bimodal": BIMODAL, "conflict": CONFLICT}  # the settings with a series of their own
PROFILE_ELLS = {"bimodal": (0.8, 1.0, 1.25, 1.6, 2.0, 2.2, 2.6, 3.4, 4.4, 5.6, 7.0),  # their profiles' grids
                "conflict": (0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.3, 1.7, 2.2, 3.0, 4.0, 5.5, 7.5, 10.0)}
OLD_RULE = "collapsed VFF, old rule"
# --n beyond 2 000 (issue 40 item 6: the 10⁵-point series): no exact GP (O(N³)); the reference is the
# collapsed model on the pilot's features refined twice
REFERENCE = "reference: collapsed, refined ×2 (not the exact GP)"
EXACT_MAX_N = 2000
COARSE = ("collapsed VFF, tolerance 1%", "latent VFF, tolerance 1%")  # from_data's default tolerance
PILOT = "collapsed VFF, pilot"  # the documented path: choose_features (issue 48's defaults), NUTS, checks
PILOT_FIRST = PILOT + ": first fit"  # its first fit, where a check failed it and it was refit
OLD_PILOT = "collapsed VFF, pilot before issue 48"  # choose_features(exact_rows=None, data_starts=0)
PROFILE = "exact profile"  # the bimodal setting's profile of the exact log posterior over the trend ℓ
MODELS = ("exact", PILOT, OLD_PILOT, "collapsed VFF", "latent VFF", "HSGP", *COARSE, OLD_RULE)
LARGE_MODELS = (REFERENCE, PILOT, "collapsed VFF", "HSGP")  # the default --models beyond EXACT_MAX_N


def rule(name):
    """The size rule of a model's trend features: "advised", "default" (tolerance 1%) or "old"."""
    return "old" if name == OLD_RULE else ("default" if name in (*COARSE, PILOT, OLD_PILOT) else "advised")
HSGP_M, HSGP_C, SEASON_TERMS = 79, 1.5, 8


def stand_in(n):
    """(t, y, H): a cheap stand-in for the GP draw at large ``n`` (a dense Cholesky is out of reach): on
    the same span, a smooth trend sin(t/3) plus a yearly cycle 0.5 sin(2πt) plus N(0, 0.1²) noise, seed 1;
    H as in :func:`simulate`."""
    import numpy as np

    rng = np.random.default_rng(1)
    t = np.sort(rng.uniform(0.0, SPAN, n))
    H = np.stack([np.ones(n), (t - SPAN / 2) / (SPAN / 2)], 1)
    return t, np.sin(t / 3.0) + 0.5 * np.sin(2 * np.pi * t) + NOISE * rng.normal(size=n), H


def label(setting, n):
    """The rows' ``setting`` field: the setting's name, with ``", N = n"`` for a series not of ``N`` points."""
    return setting if n == N else f"{setting}, N = {n}"


def simulate(n=N, seed=0, setting=None):
    """(t, y, H): the series described in the module docstring, drawn from the exact model (``setting``
    "bimodal": the series of ``BIMODAL``, its own seed); beyond ``EXACT_MAX_N`` points the cheap
    :func:`stand_in` series instead (whatever the setting: only the priors differ)."""
    import jax.numpy as jnp
    import numpy as np

    if n > EXACT_MAX_N:
        return stand_in(n)

    from ppl_sparsegp import Matern52, Periodic

    truth = SERIES.get(setting, TRUTH)
    rng = np.random.default_rng(truth.get("seed", seed))
    t = np.sort(rng.uniform(0.0, SPAN, n))
    H = np.stack([np.ones(n), (t - SPAN / 2) / (SPAN / 2)], 1)
    T = jnp.asarray(t)[:, None]
    K = Matern52(truth["trend_var"], truth["trend_ell"])(T) + Periodic(truth["season_var"], 1.0, 1.0)(T)
    if setting in SERIES:
        cycle = jnp.cos(2 * jnp.pi * (T - T.T) / truth["cycle_period"])
        K = K + Matern52(truth["cycle_var"], truth["cycle_ell"])(T) * cycle
    f = np.linalg.cholesky(np.asarray(K) + 1e-9 * np.eye(n)) @ rng.normal(size=n)
    return t, H @ np.array([0.3, 0.2]) + f + truth["noise"] * rng.normal(size=n), H


def priors(setting):
    import numpy as np
    import numpyro.distributions as dist

    return {"trend_ell": dist.LogNormal(np.log(PRIOR_MEDIAN[setting]), 0.5),
            "trend_var": dist.LogNormal(np.log(0.5), 1.0), "season_var": dist.LogNormal(np.log(0.3), 1.0),
            "noise": dist.HalfNormal(0.3)}


def _hyper(setting):
    import numpyro

    return {k: numpyro.sample(k, p) for k, p in priors(setting).items()}


def features(t, setting, size_rule="advised"):
    """(trend feature, seasonal feature): the size rule at the trend prior, 8 seasonal frequencies.
    ``size_rule``: "advised" (tolerance ``TOLERANCE``), "default" (``from_data``'s default tolerance, 1%:
    fewer features, to show how the cost per gradient, M'³, sets the ESS/s ratio) or "old" (the rule
    before issue 29 as a user would have called it: the default tolerance, ℓ_min and ℓ_max the prior's
    5%/95% quantiles, the margin 3ℓ_max uncapped; the features that displaced the issue's posterior,
    which the refinement check must fail)."""
    from ppl_sparsegp import FourierFeatures, Matern52

    prior = priors(setting)["trend_ell"]
    truth = SERIES.get(setting, TRUTH)
    kw = {"advised": {"tolerance": 0.01 * truth["noise"] ** 2 / truth["trend_var"]}, "default": {},
          "old": {"quantile": 0.05, "max_margin": math.inf}}[size_rule]
    return FourierFeatures.from_data(t, Matern52(1.0, prior), **kw), FourierFeatures(0.0, 1.0, SEASON_TERMS)


def models(t, H, setting, y=None, pilots=(PILOT,)):
    """name -> NumPyro model(t, y) of the module docstring (with y: also the models of ``pilots``, their
    features from ``choose_features`` started at ``from_data``'s default rule (:func:`pilot_model`), and,
    with the documented pilot, the reference refined twice)."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    from ppl_sparsegp import Matern52, Periodic, marginal_spectral_gp, spectral_gp

    trend, season = features(t, setting)
    coarse, old = features(t, setting, "default")[0], features(t, setting, "old")[0]
    beta = dist.Normal(jnp.zeros(2), 1.0)

    def exact(t, y):
        h = _hyper(setting)
        T = jnp.asarray(t)[:, None]
        K = (Matern52(h["trend_var"], h["trend_ell"])(T) + Periodic(h["season_var"], 1.0, 1.0)(T)
             + H @ H.T + h["noise"] ** 2 * jnp.eye(len(t)))
        numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(len(t)), K), obs=y)

    def collapsed(t, y, trend=trend):
        h = _hyper(setting)
        marginal_spectral_gp("y", {"trend": (trend, Matern52(h["trend_var"], h["trend_ell"])),
                                   "season": (season, Periodic(h["season_var"], 1.0, 1.0))},
                             t, y, h["noise"], mean_basis=H, mean_prior=beta)

    def latent(t, y, trend=trend):
        h = _hyper(setting)
        f = (spectral_gp("trend", trend, Matern52(h["trend_var"], h["trend_ell"]), t)
             + spectral_gp("season", season, Periodic(h["season_var"], 1.0, 1.0), t))
        b = numpyro.sample("mean_weights", beta.to_event(1))
        numpyro.sample("y", dist.Normal(H @ b + f, h["noise"]), obs=y)

    def hsgp(t, y):
        from numpyro.contrib.hsgp.approximation import hsgp_matern

        h = _hyper(setting)
        x = (t - SPAN / 2)[:, None]
        f = (hsgp_matern(x, nu=2.5, alpha=h["trend_var"], length=h["trend_ell"], ell=HSGP_C * SPAN / 2, m=HSGP_M)
             + spectral_gp("season", season, Periodic(h["season_var"], 1.0, 1.0), t))
        b = numpyro.sample("mean_weights", beta.to_event(1))
        numpyro.sample("y", dist.Normal(H @ b + f, h["noise"]), obs=y)

    out = {"exact": exact, "collapsed VFF": collapsed, "latent VFF": latent, "HSGP": hsgp,
           COARSE[0]: lambda t, y: collapsed(t, y, coarse), COARSE[1]: lambda t, y: latent(t, y, coarse),
           OLD_RULE: lambda t, y: collapsed(t, y, old)}
    if y is not None:
        for name in pilots:  # the documented path's start (issue 48's defaults) and the pilot before it
            out[name] = pilot_model(collapsed, t, y, coarse, name)
        if PILOT in out:
            fine = out[PILOT].record["feature"].refined().refined()
            out[REFERENCE] = lambda t, y: collapsed(t, y, fine)
            out[REFERENCE].record = {"frequencies": fine.num_frequencies, "feature": fine}
    return out


def pilot_model(collapsed, t, y, coarse, name):
    """The collapsed model on the trend features ``choose_features`` picks from ``coarse`` (today's rule at
    the default tolerance): with issue 48's defaults (``PILOT``: the exact-GP pilot, data-range starts) or
    as before it (``OLD_PILOT``: ``exact_rows=None, data_starts=0``, the refined-feature pilot from the
    priors' quantiles); its record (pilot seconds, frequencies, modes) in ``record``, ``refit(feature)``."""
    from ppl_sparsegp import choose_features

    options = {} if name == PILOT else {"exact_rows": None, "data_starts": 0}
    with harness.clock() as c:
        chosen = choose_features(collapsed, t, y, coarse, **options)
    model = functools.partial(collapsed, trend=chosen["trend"])
    model.record = {"pilot_s": c.wall, "pilot_cpu_s": c.cpu, "frequencies": chosen["trend"].num_frequencies,
                    "trend_m_prime": chosen["trend"].num_features, "needed": chosen.info["needed"],
                    "pilot": chosen.info["pilot"], "feature": chosen["trend"],
                    "pilot_modes": [{"log_joint": m["log_joint"], "log_mass": m["log_mass"],
                                     **m["gps"].get("trend", {})} for m in chosen.info["modes"]]}
    model.refit = lambda feature: functools.partial(collapsed, trend=feature)
    return model


def fit(model, t, y, *, warmup, samples, seed=0, chains=2, dispersed=False, init=None):
    """NUTS, ``chains`` chains one after another (``dispersed``: each from its own uniform draw in (-2, 2)
    on the unconstrained scale, Stan's default, instead of the prior's median; ``init``: from these values,
    ``init_to_value``); the row's posterior summary and sampler figures."""
    import jax
    import numpy as np
    from numpyro.diagnostics import effective_sample_size, split_gelman_rubin
    from numpyro.infer import init_to_uniform, init_to_value

    from ppl_sparsegp.engines import fit_nuts

    strategy = init_to_uniform(radius=2.0) if dispersed else None if init is None else init_to_value(values=init)
    with harness.clock() as c:
        mcmc, _ = fit_nuts(model, t, y, rng_key=jax.random.PRNGKey(seed), num_warmup=warmup, num_samples=samples,
                           num_chains=chains, chain_method="sequential", extra_fields=("num_steps", "diverging"),
                           init_strategy=strategy)
    s = mcmc.get_samples(group_by_chain=True)
    post = {k: {"mean": float(np.mean(s[k])), "sd": float(np.std(s[k])),
                "bulk_ess": float(effective_sample_size(np.asarray(s[k]))),
                "rhat": float(split_gelman_rubin(np.asarray(s[k])))} for k in HYPER}
    extra = mcmc.get_extra_fields()
    bulk = min(v["bulk_ess"] for v in post.values())
    row = {"wall_s": c.wall, "cpu_s": c.cpu, "compile_s": c.compile, "min_bulk_ess": bulk,
           "min_bulk_ess_per_s": bulk / (c.wall - c.compile), "min_bulk_ess_per_s_with_compile": bulk / c.wall,
           "leapfrog_per_draw": float(np.mean(extra["num_steps"])),
           "divergences": int(np.sum(extra["diverging"])), "max_rhat": max(v["rhat"] for v in post.values()),
           "posterior": post}
    return row, mcmc


def mode_mass(mcmc, setting="bimodal"):
    """The bimodal and conflict settings' figures: the share of the draws with trend ℓ below their series'
    ``split`` (the short-ℓ mode), pooled and per chain, and each mode's posterior (``posterior_by_mode``:
    "short", "long", each hyperparameter's mean and sd over the draws on that side)."""
    import numpy as np

    s = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    below = s["trend_ell"] < SERIES[setting]["split"]
    by_mode = {side: {k: {"mean": float(np.mean(s[k][mask])), "sd": float(np.std(s[k][mask])),
                          "draws": int(np.sum(mask))} for k in HYPER}
               for side, mask in (("short", below), ("long", ~below)) if np.sum(mask) > 1}
    return {"short_mode_mass": float(np.mean(below)), "short_mode_mass_by_chain": np.mean(below, 1).tolist(),
            "posterior_by_mode": by_mode}


def exact_profile(model, t, y, setting, ells=(0.8, 1.0, 1.25, 1.6, 2.0, 2.2, 2.6, 3.4, 4.4, 5.6, 7.0)):
    """The exact GP's log posterior density on the unconstrained scale (Jacobians included: the density
    NUTS samples) profiled over the trend ℓ, the other hyperparameters maximised (L-BFGS-B, warm-started
    sweeps up and down the grid, the better kept): ``{"ell": [...], "log_density": [...] (max 0),
    "noise": [...]}``, to find the modes and to see a mode no chain visits."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from numpyro.distributions.transforms import biject_to
    from numpyro.infer.util import log_density
    from scipy.optimize import minimize

    sites = priors(setting)
    rest = [k for k in HYPER if k != "trend_ell"]
    to = {k: biject_to(p.support) for k, p in sites.items()}

    @jax.jit
    def neg(u, log_ell):
        values = {"trend_ell": jnp.exp(log_ell), **{k: to[k](u[i]) for i, k in enumerate(rest)}}
        jac = log_ell + sum(to[k].log_abs_det_jacobian(u[i], values[k]) for i, k in enumerate(rest))
        return -(log_density(model, (t, y), {}, values)[0] + jac)

    grad = jax.jit(jax.value_and_grad(neg))
    logs = np.log(np.asarray(ells, float))
    truth = SERIES.get(setting, TRUTH)
    start = np.array([to[k].inv(v) for k, v in zip(rest, (TRUTH["trend_var"], TRUTH["season_var"], truth["noise"]))])
    best = [(-np.inf, None)] * len(logs)
    for order in (range(len(logs)), reversed(range(len(logs)))):
        u = start
        for i in order:
            r = minimize(lambda v: tuple(map(np.asarray, grad(jnp.asarray(v), logs[i]))), u, jac=True,
                         method="L-BFGS-B")
            u = r.x
            if -r.fun > best[i][0]:
                best[i] = (-float(r.fun), np.exp(u))
    top = max(b[0] for b in best)
    return {"ell": list(map(float, ells)), "log_density": [b[0] - top for b in best],
            "noise": [float(b[1][2]) for b in best]}


def checks(name, model, mcmc, t, y, setting, quick, check_draws=100, max_draws=1000):
    """The residual and refinement checks' verdicts for the library's models (None for the others and for
    the reference, whose check would refine it a third time)."""
    from ppl_sparsegp import Matern52, diagnostics

    if name in ("exact", "HSGP", REFERENCE):
        return {}
    samples = mcmc.get_samples()
    trend = getattr(model, "record", {}).get("feature") or features(t, setting, rule(name))[0]
    residual = diagnostics.adequacy(trend, samples, t,
                                    kernel=lambda d: Matern52(d["trend_var"], d["trend_ell"]))
    n = 50 if quick else check_draws
    with harness.clock() as c:
        refined = diagnostics.refinement_check(model, samples, t, y, num_warmup=n, num_samples=n, max_draws=max_draws)
    out = {"_advised": refined.get("advised_features", {}).get("trend"),
           "adequacy_ok": residual["ok"], "adequacy_median": residual["median"],
           "refinement_ok": refined["ok"], "refinement_k_hat": refined["k_hat"],
           "refinement_shift_is": refined["shift_is"], "refinement_shift_refit": refined["shift_refit"],
           "refinement_message": refined["message"], "refinement_s": c.wall}
    if name in (PILOT, OLD_PILOT):  # the global mode check beside it (issue 48)
        with harness.clock() as c:
            modes = diagnostics.mode_check(model, samples, t, y)
        out.update(mode_ok=modes["ok"], mode_message=modes["message"], mode_s=c.wall, _main_mode=modes["main_mode"],
                   mode_draws_share=modes["modes"][modes["draws_mode"]]["draws_share"],
                   mode_laplace=[{"trend_ell": m["values"]["trend_ell"], "noise": m["values"]["noise"],
                                  "log_mass": m["log_mass"], "laplace_share": m["laplace_share"],
                                  "draws_share": m["draws_share"]} for m in modes["modes"]])
    return out


def gradient_costs(sizes, setting):
    """{N: ms per gradient} of the collapsed model's potential (the statistics path), on series of N
    points over the same span (beyond ``EXACT_MAX_N`` the cheap :func:`stand_in` series)."""
    from inference.benchmarks.harness import gradient_cost

    out = {}
    for n in sizes:
        t, y, H = simulate(n)
        out[str(n)] = gradient_cost(models(t, H, setting)["collapsed VFF"], (t, y), repeats=100)[1]
    return out


COLUMNS = [("setting", "setting", ""), ("model", "name", "")] + [
    (k, lambda r, k=k: (r["posterior"][k]["mean"], r["posterior"][k]["sd"]), harness.pm(3, always=True))
    for k in HYPER] + [
    ("max distance (exact sd)", "max_sd_distance", ".2f"), ("leapfrog/draw", "leapfrog_per_draw", ".0f"),
    ("min bulk ESS", "min_bulk_ess", ".0f"), ("min bulk ESS/s", "min_bulk_ess_per_s", ".2f"),
    ("wall s", "wall_s", ".0f"), ("compile s", "compile_s", ".0f"), ("max R-hat", "max_rhat", ".3f"),
    ("pilot: trend frequencies", "frequencies", "d"), ("NUTS fits", "nuts_fits", "d"),
    ("draws", lambda r: r.get("run") and f"{r['run']['chains']} × ({r['run']['warmup']} + {r['run']['samples']})", ""),
    ("short-ℓ mass", "short_mode_mass", ".2f"),
    ("residual check", lambda r: None if "adequacy_ok" not in r else ("pass" if r["adequacy_ok"] else "fail"), ""),
    ("refinement check", lambda r: None if "refinement_ok" not in r else ("pass" if r["refinement_ok"] else "fail"),
     "")]
MODE_COLUMNS = [("mode check", lambda r: None if "mode_ok" not in r else ("pass" if r["mode_ok"] else "fail"), ""),
                ("pilot s", "pilot_s", ".0f")]  # shown where a row has them (issue 48's rows)


def parse(argv=None):
    """The command line (see the module docstring), checked; ``--quick`` and the exact GP's defaults applied."""
    p = harness.parser("gaussian_own_model", __doc__, cpu="last")
    p.add_argument("--settings", nargs="+", default=["tail", "centre", "deep tail"], choices=sorted(PRIOR_MEDIAN))
    p.add_argument("--models", nargs="+", default=None, choices=(*MODELS, REFERENCE),
                   help="default: every model of MODELS; beyond --n 2000 those of LARGE_MODELS")
    p.add_argument("--n", type=int, default=N, help=f"series length (default {N}; beyond {EXACT_MAX_N} the "
                   "cheap stand-in series, no exact GP, the reference row instead)")
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--check-draws", type=int, default=100, help="the refinement check's refit: warm-up and "
                   "draws (default 100 + 100; where k̂ > 0.7)")
    p.add_argument("--check-max-draws", type=int, default=1000, help="the refinement check's importance "
                   "weights: at most this many draws (evenly thinned; default 1000)")
    p.add_argument("--exact-chains", type=int, default=4, help="the exact GP's chains, from dispersed starts")
    p.add_argument("--exact-warmup", type=int, default=None, help="the exact GP's warm-up (default --warmup)")
    p.add_argument("--exact-samples", type=int, default=None, help="the exact GP's draws (default --samples)")
    p.add_argument("--skip-gradients", action="store_true", help="no ms-per-gradient measurement (runs split "
                   "over cores: the merging run measures it)")
    p.add_argument("--pilot-times", action="store_true", help="fit nothing: time choose_features with issue 48's "
                   "defaults against the pilot before it, alternating, in this process (JSON: pilot_seconds)")
    p.add_argument("--table-only", action="store_true", help="fit nothing: the table and JSON of the stored "
                   "(and --merge'd) rows of --settings (the JSON's other keys are kept)")
    args = p.parse_args(argv)
    if args.n < 10:
        p.error(f"--n must be at least 10 points, got {args.n}")
    if args.models is None:
        args.models = list(MODELS) if args.n <= EXACT_MAX_N else list(LARGE_MODELS)
    if args.n > EXACT_MAX_N and "exact" in args.models:
        p.error(f"--n {args.n}: the exact GP is O(N³) per gradient, out of reach beyond {EXACT_MAX_N} "
                f"points; drop it from --models (the {REFERENCE!r} row is the reference there)")
    if args.quick:
        args.warmup, args.samples = 50, 50
    args.exact_warmup = args.warmup if args.exact_warmup is None else args.exact_warmup
    args.exact_samples = args.samples if args.exact_samples is None else args.exact_samples
    return args


def fit_setting(store, args, setting):
    """Fit every model of ``--models`` not yet in ``store`` on the series of ``setting`` (and the bimodal
    setting's exact profile) and store its row."""
    t, y, H = simulate(args.n, setting=setting)
    pilots = [p for p in (PILOT, OLD_PILOT) if p in args.models or (p == PILOT and REFERENCE in args.models)]
    built = models(t, H, setting, y if pilots else None, pilots)
    base, setting = setting, label(setting, args.n)
    if setting in SERIES and "exact" in args.models and not store.done(setting, PROFILE):
        with harness.clock() as c:
            profile = exact_profile(built["exact"], t, y, base, PROFILE_ELLS[base])
        store.add({"setting": setting, "name": PROFILE, **profile, "wall_s": c.wall})
        print("exact profile:", {e: round(v, 1) for e, v in zip(profile["ell"], profile["log_density"])})
    for name in args.models:
        if store.done(setting, name):
            continue
        print(f"{setting}: {name} ...", flush=True)
        row, mcmc, first = fit_row(built[name], name, t, y, base, args)
        print(f"  done: {row['wall_s']:.0f} s, max R-hat {row['max_rhat']:.3f}, nuts fits {row.get('nuts_fits')}",
              flush=True)
        if args.n != N:
            row["n"] = args.n
        if base in SERIES:
            row.update(mode_mass(mcmc, base))
        if first is not None:  # the failed first fit, a row of its own
            store.add({"setting": setting, "name": name + ": first fit", **first})
        store.add({"setting": setting, "name": name, **row})


def fit_row(model, name, t, y, base, args):
    """``(row, mcmc, first)``: one model's NUTS fit (the exact GP's from dispersed starts), its checks and
    run lengths; for a pilot's row the path it documents: the documented one (``PILOT``) refits once when
    the refinement or the mode check fails it (:func:`refit_pilot`), the one before issue 48
    (``OLD_PILOT``) when the refinement check fails it (its mode check only reported); ``first``: the
    failed first fit's row (else None)."""
    if name == "exact":
        run = {"chains": args.exact_chains, "warmup": args.exact_warmup, "samples": args.exact_samples,
               "init": "uniform(-2, 2) unconstrained"}
        row, mcmc = fit(model, t, y, warmup=args.exact_warmup, samples=args.exact_samples,
                        chains=args.exact_chains, dispersed=True)
    else:
        run = {"chains": 2, "warmup": args.warmup, "samples": args.samples, "init": "prior median"}
        large = {} if args.n == N else {"n": args.n, "ms_per_gradient": harness.gradient_cost(
            model, (t, y), repeats=20)[1]}  # measured first (HSGP's is O(N m))
        row, mcmc = fit(model, t, y, warmup=args.warmup, samples=args.samples)
        row.update(large)
    row.update(checks(name, model, mcmc, t, y, base, args.quick, args.check_draws, args.check_max_draws), run=run)
    if name == REFERENCE:
        row["frequencies"] = model.record["frequencies"]
    first = None
    if name in (PILOT, OLD_PILOT):  # the pilot, a fit, its checks, and one refit where they fail it
        row.update(nuts_fits=1, **{k: v for k, v in model.record.items() if k != "feature"})
        failed = not row["refinement_ok"] or (name == PILOT and not row["mode_ok"])
        if failed:
            first = {k: v for k, v in row.items() if not k.startswith("_")}
            row, mcmc = refit_pilot(model, name, row, t, y, base, args, run)
    for k in [k for k in row if k.startswith("_")]:
        row.pop(k)
    return row, mcmc, first


def refit_pilot(pilot, name, row, t, y, base, args, run):
    """``(row, mcmc)`` of a pilot's second fit: on the refinement check's advised trend features where it
    failed (else the pilot's), and, where the mode check failed (``PILOT``), NUTS started at its main mode
    (``init_to_value``), as the checks' messages say."""
    advised = row["_advised"] if not row["refinement_ok"] and row.get("_advised") is not None else None
    model = pilot if advised is None else pilot.refit(advised)
    init = row["_main_mode"] if name == PILOT and not row["mode_ok"] else None
    cost = {} if args.n == N else {"ms_per_gradient": harness.gradient_cost(model, (t, y), repeats=20)[1]}
    new, mcmc = fit(model, t, y, warmup=args.warmup, samples=args.samples, init=init)
    new.update(checks(name, model, mcmc, t, y, base, args.quick, args.check_draws, args.check_max_draws),
               nuts_fits=2, run=dict(run), **cost,
               **{k: v for k, v in pilot.record.items() if k != "feature"})
    if init is not None:
        new["run"]["init"] = "mode_check's main mode"
    if advised is not None:
        new.update(advice_frequencies=advised.num_frequencies, trend_m_prime=advised.num_features)
    return new, mcmc


def table_rows(store, settings):
    """``(rows, labels)``: the stored rows of ``settings`` and of their longer series (``labels``, in that
    order), each with its distances to its setting's exact (or reference) row."""
    rows, labels = [], []
    for setting in settings:  # each setting's stored rows, then those of its longer series
        labels += [setting, *sorted({r["setting"] for r in store.rows if r["setting"].startswith(setting + ", N = ")})]
    for setting in labels:
        group = {r["name"]: r for r in store.rows if r["setting"] == setting}
        exact = group.get("exact", group.get(REFERENCE))
        # the conflict setting: distances to the exact GP's main mode (its chains there), not to its pooled draws
        main = SERIES.get(setting, {}).get("main")
        ref = exact and (exact.get("posterior_by_mode", {}).get(main) or exact["posterior"])
        for name in ("exact", REFERENCE, PILOT_FIRST, *MODELS[1:]):
            if name in group:
                r = dict(group[name])
                if exact is not None:
                    d = {k: abs(r["posterior"][k]["mean"] - ref[k]["mean"]) / ref[k]["sd"] for k in HYPER}
                    r.update(sd_distance=d, max_sd_distance=max(d.values()))
                    if "short_mode_mass" in r and "short_mode_mass" in exact:
                        r["short_mode_mass_gap"] = abs(r["short_mode_mass"] - exact["short_mode_mass"])
                rows.append(r)
    return rows, labels


def ess_ratios(rows, labels):
    """``{label: {"<a> over <b>": ratio}}``: the collapsed rows' min bulk ESS/s over the others'."""
    ratios = {}
    for setting in labels:
        by = {r["name"]: r for r in rows if r["setting"] == setting}
        ratios[setting] = {f"{a} over {b}": by[a]["min_bulk_ess_per_s"] / by[b]["min_bulk_ess_per_s"]
                           for a, others in ((PILOT, ("exact", "HSGP")),
                                             ("collapsed VFF", ("exact", "latent VFF", "HSGP")),
                                             (COARSE[0], ("exact", COARSE[1], "HSGP")))
                           for b in others if a in by and b in by}
    return ratios


def main(argv=None):
    args = parse(argv)
    machine = harness.setup(args, one_thread=True)
    import jax  # noqa: F401  (after setup)

    # the store's settings fix the data; each row records its own run lengths ("run"), so that rows of
    # runs of different lengths (e.g. the exact GP's, reused) merge into one table
    settings = {"n": N, "tolerance": TOLERANCE}
    store = harness.Store(args.out, ["setting", "name"], settings=settings, resume=args.resume, merge=args.merge)
    stored = stored_summary(store.path.with_suffix(".json"))  # read first: a bad file stops the run before its fits
    for setting in [] if args.table_only or args.pilot_times else args.settings:
        fit_setting(store, args, setting)
    timed = pilot_times(args.settings) if args.pilot_times else {}
    rows, labels = table_rows(store, args.settings)
    large = [("ms/gradient", "ms_per_gradient", ".2f")] if any("ms_per_gradient" in r for r in rows) else []
    large += MODE_COLUMNS if any("mode_ok" in r for r in rows) else []
    print(harness.table(rows, COLUMNS + large))
    costs = {} if args.skip_gradients else {
        setting: gradient_costs([N] if args.quick else [N, 100_000], setting) for setting in args.settings}
    print("\ncollapsed VFF, ms per gradient by N:",
          {s: {k: round(v, 3) for k, v in c.items()} for s, c in costs.items()})
    ratios = ess_ratios(rows, labels)
    print("collapsed VFF's min bulk ESS/s over the others':", ratios)
    summary = {"machine": machine, "settings": settings, "truth": TRUTH, "prior_median": PRIOR_MEDIAN,
               "bimodal": BIMODAL, "conflict": CONFLICT, "rows": rows,
               "exact_profile": {r["setting"]: r for r in store.rows if r["name"] == PROFILE},
               "ms_per_gradient_by_n": costs, "ess_per_s_ratios": ratios, **({"pilot_seconds": timed} if timed else {})}
    store.write_json(keep_stored(summary, stored, args.table_only))


if __name__ == "__main__":
    main()
