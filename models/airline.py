r"""Additive VFF regression, the VFF paper's airline-delay experiment (§6.2, Table 2) [1], on any CSV.

Data: ``--csv PATH --target NAME --covariates a,b,c`` (any numeric columns; rows with a missing value
are dropped), or ``--synthetic N`` (the default when no CSV is given): N rows of 8 airline-like
covariates and a target drawn from a known additive function plus Gaussian noise (:func:`synthetic`),
so the fit can be compared with the truth.

Preprocessing as the paper [1, §6.2; notes vff.md E4]: a random 2/3 train, 1/3 test split
(``--split-seed``); inputs normalised to [0, 1] by the training min/max; targets standardised with the
training mean and standard deviation.

Model: an additive sum of D Matérn-3/2 kernels (LogNormal priors on each variance and lengthscale) plus
Gaussian noise, with variational Fourier features on the box [−2, 3] per input and 30 frequencies per
dimension (59 features per input: 472 for D = 8, as the paper's code). All training inputs lie inside
the box, so Kuf does not depend on the hyperparameters: the sufficient statistics of all training rows
are computed once (:func:`~ppl_sparsegp.features.fourier_statistics.fourier_statistics`, NUFFT or dense)
and :class:`~ppl_sparsegp.CollapsedGP` evaluates the collapsed bound in O(M³) per step, under SVI
(point estimates) or NUTS.

The runner's ``spec.X, spec.y`` are a subsample of at most ``--diagnostic-rows`` training rows for the
InferenceData's ``constant_data`` and posterior-predictive groups; the GP holds the statistics of all
training rows and ignores the (X, y) it is given. Metrics (:func:`evaluate`): test MSE and mean NLPD on
the standardised target (the paper's Table 2 units), over the whole test third, streamed
(:func:`~ppl_sparsegp.features.fourier_statistics.fourier_conditional`). The plot shows the posterior
effect of each covariate, :math:`f_d(x_d)` (mean ± 2 sd; [1, Fig. 6]), from
:meth:`~ppl_sparsegp.features.AdditiveFeatures.parts`.

With ``--features spherical`` the GP is instead a :class:`~ppl_sparsegp.ChordalMatern` (ν = 3/2, with an
input scale per covariate) on spherical harmonic features of degrees 0…``--max-degree`` [2] (M = 210 for
8 covariates and degree 3), inputs centred in [−½, ½]: :func:`~ppl_sparsegp.fit_spherical` fixes the input
map from a MAP fit on ``--subsample`` rows and computes the one-pass statistics of all training rows; the
runner then fits σ², the chordal lengthscale and the noise on them at O(M³) per step. Not additive: the
plot shows slices of f through the centre of the data instead of additive effects.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
    2. Dutordoir, Durrande, Hensman (2020), Sparse Gaussian processes with spherical harmonic features, ICML.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from models import ModelSpec
from models._arguments import count, non_negative_int
from ppl_sparsegp import (
    Additive,
    ChordalMatern,
    CollapsedGP,
    Kuu,
    Matern32,
    SphericalHarmonicFeatures,
    diagnostics,
    fit_spherical,
)
from ppl_sparsegp.approximations import SphericalFit
from ppl_sparsegp.features import AdditiveFeatures, FourierFeatures
from ppl_sparsegp.features.fourier_statistics import fourier_conditional, fourier_statistics
from ppl_sparsegp.likelihoods import Gaussian

DESCRIPTION = ("additive Matérn-3/2 VFF regression (airline delays, VFF §6.2) on any CSV or synthetic "
               "data: one-pass statistics, collapsed bound; --features spherical: spherical harmonic features")

# the covariates of [1, §6.2] under the column names of the usual airline-delay CSV
AIRLINE_COVARIATES = ("plane_age", "Distance", "AirTime", "DepTime", "ArrTime", "DayOfWeek", "DayofMonth",
                      "Month")
AIRLINE_TARGET = "ArrDelay"
BOX = (-2.0, 3.0)
NUM_FREQUENCIES = 30
DEFAULT_SYNTHETIC = 10_000
MAX_DEGREE = 3  # spherical features: 210 for 8 covariates
SUBSAMPLE = 5000  # spherical features: rows of the MAP fit that fixes the input map


# --- data ---------------------------------------------------------------------------------------------
def _effects():
    """The true additive effects (minutes of delay) of the synthetic covariates, as functions of the raw
    values; their sum plus N(0, 12²) noise is the synthetic target."""
    return {
        "plane_age": lambda a: 2.0 * np.tanh((a - 10.0) / 8.0),
        "Distance": lambda d: 4.0 * np.exp(-d / 400.0),
        "AirTime": lambda t: -3.0 * np.sin(t / 120.0),
        "DepTime": lambda m: 12.0 * np.clip((m - 300.0) / 1140.0, 0, 1) ** 2 + 3.0 * np.sin(m / 229.0),
        "ArrTime": lambda m: 5.0 * np.cos(2 * np.pi * m / 1440.0),
        "DayOfWeek": lambda w: 3.0 * np.cos(2 * np.pi * (w - 5.0) / 7.0),
        "DayofMonth": lambda d: 1.5 * np.sin(2 * np.pi * d / 31.0),
        "Month": lambda m: 6.0 * np.exp(-0.5 * ((m - 7.0) / 1.2) ** 2) + 5.0 * np.exp(-0.5 * ((m - 12.5) / 0.8) ** 2),
    }


NOISE_SD = 12.0


def synthetic(n: int, seed: int = 0):
    """n rows of airline-like covariates (columns :data:`AIRLINE_COVARIATES`) and a target: the sum of
    the known effects :func:`_effects` plus N(0, 12²) noise (noise-only test MSE ≈ 0.75 on the standardised
    target; the airline data reach 0.83).

    :returns: ``(X (n, 8), y (n,), names, f (n,))`` with f the noise-free target.
    """
    if int(n) != n or n < 3:
        raise ValueError(f"--synthetic needs at least 3 rows, got {n!r}")
    rng = np.random.default_rng(seed)
    n = int(n)
    distance = np.clip(rng.lognormal(math.log(700.0), 0.6, n), 30.0, 5000.0).round()
    cols = {
        "plane_age": rng.integers(0, 40, n).astype(float),
        "Distance": distance,
        "AirTime": np.maximum(15.0, distance / 7.5 + 15.0 + rng.normal(0, 8, n)).round(),
        "DepTime": rng.uniform(300.0, 1439.0, n).round(),
    }
    cols["ArrTime"] = np.mod(cols["DepTime"] + cols["AirTime"] + 20.0, 1440.0)
    cols["DayOfWeek"] = rng.integers(1, 8, n).astype(float)
    cols["DayofMonth"] = rng.integers(1, 32, n).astype(float)
    cols["Month"] = rng.integers(1, 13, n).astype(float)
    effects = _effects()
    X = np.stack([cols[k] for k in AIRLINE_COVARIATES], axis=1)
    f = sum(effects[k](cols[k]) for k in AIRLINE_COVARIATES)
    y = f + NOISE_SD * rng.normal(size=n)
    return X, y, list(AIRLINE_COVARIATES), f


def read_csv(path, target: str, covariates):
    """``(X, y)`` from the named numeric columns of a CSV with a header row; rows with a missing or
    non-numeric value in any used column are dropped. Uses pandas when installed (fast for millions of
    rows), else NumPy."""
    covariates = list(covariates)
    if not covariates:
        raise ValueError("--covariates must name at least one column")
    with open(path) as fh:
        header = [h.strip().strip('"') for h in fh.readline().strip().split(",")]
    if target not in header:
        raise ValueError(f"--target {target!r} is not a column of {path} (its columns: {', '.join(header)})")
    missing = [c for c in covariates if c not in header]
    if missing:
        raise ValueError(f"--covariates: columns {missing} are not in {path} (its columns: {', '.join(header)})")
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if pd is not None:
        frame = pd.read_csv(path, usecols=[target] + covariates)
        frame = frame.apply(pd.to_numeric, errors="coerce")
        data = frame[[target] + covariates].to_numpy(dtype=np.float64)
    else:
        idx = [header.index(c) for c in [target] + covariates]
        data = np.genfromtxt(path, delimiter=",", skip_header=1, usecols=idx, dtype=np.float64)
        data = np.atleast_2d(data)
    keep = np.all(np.isfinite(data), axis=1)
    if keep.sum() < 3:
        raise ValueError(f"{path} has fewer than 3 complete rows in columns {[target] + covariates}")
    return data[keep, 1:], data[keep, 0]


def prepare(X, y, *, seed: int = 0, test_fraction: float = 1 / 3):
    """Random train/test split, inputs to [0, 1] by the training min/max, y standardised by training
    mean and sd [1, §6.2]. Returns a dict with the arrays and the scalings."""
    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    n = len(y)
    perm = np.random.default_rng(seed).permutation(n)
    n_test = max(1, int(round(n * test_fraction)))
    test, train = perm[:n_test], perm[n_test:]
    lo, hi = X[train].min(axis=0), X[train].max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)  # a constant covariate stays at 0
    y_mean, y_std = y[train].mean(), y[train].std()
    if not y_std > 0:
        raise ValueError("the training target is constant: nothing to regress")

    def scale(A):
        return (A - lo) / span

    return {"X": scale(X[train]), "y": (y[train] - y_mean) / y_std, "X_test": scale(X[test]),
            "y_test": (y[test] - y_mean) / y_std, "x_min": lo, "x_span": span, "y_mean": float(y_mean),
            "y_std": float(y_std), "train_index": train, "test_index": test}


# --- model --------------------------------------------------------------------------------------------
def make_feature(D: int, num_frequencies: int = NUM_FREQUENCIES):
    return AdditiveFeatures([FourierFeatures(BOX[0], BOX[1], num_frequencies) for _ in range(D)])


def make_gp(feature, statistics=None):
    """Additive Matérn-3/2 with LogNormal priors, in normalised units (inputs in [0, 1], unit-variance
    y): each effect's variance has median 0.1, each lengthscale median 0.3, the noise median 0.5."""
    D = len(feature.features)
    kernel = Additive([Matern32(variance=dist.LogNormal(math.log(0.1), 1.5),
                                lengthscale=dist.LogNormal(math.log(0.3), 1.0)) for _ in range(D)])
    likelihood = Gaussian(variance=dist.LogNormal(math.log(0.5), 1.0))
    return CollapsedGP(feature, kernel, likelihood, statistics=statistics)


def make_spherical_gp(X, y, *, max_degree: int = MAX_DEGREE, subsample: int = SUBSAMPLE, chunk_size: int = 8192):
    """ChordalMatern(3/2) on spherical harmonic features of degrees 0…max_degree for inputs centred in
    [−½, ½] and a standardised y (priors: per-covariate scales median 0.5, bias, σ² and chordal
    lengthscale median 1, noise median 0.5), fitted by :func:`~ppl_sparsegp.fit_spherical`. Returns
    ``(gp, fit)``: the statistics-backed CollapsedGP with the map fixed (σ², ℓ and the noise keep their
    priors, for the runner) and the library's MAP fit."""
    D = X.shape[1]
    kernel = ChordalMatern(1.5, variance=dist.LogNormal(0.0, 1.0),
                           lengthscale=dist.LogNormal(jnp.full(D, math.log(0.5)), 1.0).to_event(1),
                           bias=dist.LogNormal(0.0, 1.0), chordal_lengthscale=dist.LogNormal(0.0, 1.0))
    likelihood = Gaussian(variance=dist.LogNormal(math.log(0.5), 1.0))
    feature = SphericalHarmonicFeatures(D, max_degree)
    fit = fit_spherical(feature, kernel, likelihood, X, y, map_feature=SphericalHarmonicFeatures(D, min(max_degree, 3)),
                        subsample=subsample, chunk_size=chunk_size, rng_key=1)
    return fit.gp, fit


def _is_spherical(gp):
    return isinstance(gp.feature, SphericalHarmonicFeatures)


def _spherical_predictive(gp, values, X, chunk_size=None):
    """(f_mean, f_var, noise_variance) of the spherical model at X, streamed in chunks."""
    kernel, likelihood, _, _ = gp.components_from(values)
    fit = SphericalFit(gp=gp, values=values, kernel=kernel, noise_variance=float(likelihood.variance),
                       bound=float("nan"), q=_optimal_q(gp)(values), info={})
    m, v = fit.predict(X, chunk_size=chunk_size or 8192)
    return m, v, fit.noise_variance


def _draws(gp, idata, max_draws):
    """Hyperparameter values per draw: one dict for SVI (point estimates), up to max_draws for MCMC."""
    params = diagnostics.svi_params(idata)
    if params is not None:
        return [gp.point_values(params)]
    samples = diagnostics.posterior_samples(idata, var_names=list(gp.hyperparameter_sites()),
                                            max_draws=max_draws)
    S = next(iter(samples.values())).shape[0]
    return [{k: v[s] for k, v in samples.items()} for s in range(S)]


@lru_cache(maxsize=8)
def _optimal_q(gp):
    """gp.optimal_q jitted once per GP (eager op-by-op dispatch is slow)."""
    return jax.jit(gp.optimal_q)


def predictive(gp, values, X, *, method="nufft", chunk_size=None):
    """Predictive marginals of f at X for one set of hyperparameter values, from the GP's precomputed
    statistics: streamed over the rows inside the box (``fourier_conditional``), the generic
    conditional (with the edge formulas of Kuf) for any row outside. Returns
    ``(f_mean, f_var, noise_variance)``."""
    if _is_spherical(gp):
        return _spherical_predictive(gp, values, X, chunk_size)
    kernel, likelihood, feature, c = gp.components_from(values)
    m_v, S_v = _optimal_q(gp)(values)
    X = np.asarray(X, np.float64)
    inside = np.all((X >= BOX[0]) & (X <= BOX[1]), axis=1)
    m, v = np.empty(len(X)), np.empty(len(X))
    if inside.any():
        m[inside], v[inside] = fourier_conditional(feature, kernel, X[inside], m_v, S_v, whiten=True,
                                                   method=method, chunk_size=chunk_size)
    if not inside.all():
        params = {k + "_map": jnp.asarray(val) for k, val in values.items()}
        out = jax.jit(lambda Xo: gp.predict(Xo, params=params))(jnp.asarray(X[~inside]))
        m[~inside], v[~inside] = np.asarray(out["f_mean"]) - float(c), np.asarray(out["f_var"])
    return m + float(c), v, float(likelihood.variance)


def test_metrics(gp, draws, X_test, y_test, *, method="nufft", chunk_size=None):
    """Test MSE of the predictive mean and mean NLPD (mixture over draws), standardised units."""
    means, variances = [], []
    for values in draws:
        m, v, noise = predictive(gp, values, X_test, method=method, chunk_size=chunk_size)
        means.append(m)
        variances.append(v + noise)
    mean = np.mean(means, axis=0)
    return {"test_mse": diagnostics.rmse(y_test, mean) ** 2,
            "test_nlpd": diagnostics.mixture_nlpd(y_test, np.stack(means), np.stack(variances))}


def evaluate(spec, idata):
    """Test MSE and NLPD on the standardised target over the whole test set (≤ 50 draws for MCMC)."""
    e = spec.extra
    out = test_metrics(spec.gp, _draws(spec.gp, idata, 50), e["X_test_all"], e["y_test_all"],
                       method=e["stats_method"])
    out.update({"num_train": int(e["num_train"]), "num_test": int(len(e["y_test_all"])),
                "num_features": int(spec.gp.feature.num_features),
                "statistics_method": e["stats_method"], "statistics_time_s": round(e["stats_time_s"], 3)})
    if "noise_only_mse" in e:
        out["noise_only_mse"] = e["noise_only_mse"]  # the MSE of the true function (synthetic data)
    return out


@jax.jit
def _effect(Kd, Kmm, m_v, S_v, kdd):
    A = Kmm.whiten(Kd)  # Rᵀ Kuu⁻¹ k_u of dimension d alone
    return A.T @ m_v, jnp.maximum(kdd - jnp.sum(A * A, 0) + jnp.sum(A * S_v.matmul(A), 0), 0.0)


def covariate_effects(gp, values, d, grid):
    """Posterior mean and variance of the effect f_d at normalised values ``grid`` of covariate d
    (the other dimensions' features zeroed by ``AdditiveFeatures.parts``) [1, Fig. 6]."""
    kernel, likelihood, feature, c = gp.components_from(values)
    D = len(feature.features)
    Xg = np.full((len(grid), D), 0.5)
    Xg[:, d] = grid
    Kd = feature.parts(kernel, jnp.asarray(Xg), d)
    m_v, S_v = _optimal_q(gp)(values)
    return _effect(Kd, Kuu(feature, kernel), m_v, S_v, kernel.kernels[d].diag(jnp.asarray(grid)[:, None]))


def _spherical_slice(gp, values, d, grid):
    """Posterior mean and variance of f along covariate d (normalised values ``grid``) with the other
    covariates at the centre of their range (the spherical model is not additive)."""
    Xg = np.full((len(grid), gp.feature.input_dim), 0.5)
    Xg[:, d] = grid
    m, v, _ = _spherical_predictive(gp, values, Xg - 0.5)
    return m, v


def plot(spec, idata, path):
    """One panel per covariate: its posterior effect on the target (mean ± 2 sd, target units)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    e = spec.extra
    names = e["covariates"]
    D = len(names)
    draws = _draws(spec.gp, idata, 20)
    grid = np.linspace(0.0, 1.0, 101)
    cols = min(4, D)
    rows = -(-D // cols)
    fig = Figure(figsize=(3.2 * cols, 2.6 * rows))
    FigureCanvasAgg(fig)
    spherical = _is_spherical(spec.gp)
    for d, name in enumerate(names):
        effect = _spherical_slice if spherical else covariate_effects
        ms, vs = zip(*(effect(spec.gp, values, d, grid) for values in draws))
        ms, vs = np.asarray(ms), np.asarray(vs)
        mean, var = ms.mean(0), vs.mean(0) + ms.var(0)  # mixture over draws
        x = e["x_min"][d] + grid * e["x_span"][d]
        mean, sd = mean * e["y_std"], np.sqrt(var) * e["y_std"]
        ax = fig.add_subplot(rows, cols, d + 1)
        ax.fill_between(x, mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.25)
        ax.plot(x, mean, color="C0")
        if "truth" in e:
            t = e["truth"][name](x)
            ax.plot(x, t - t.mean() + mean.mean(), "k--", lw=1, label="truth (shifted)")
        ax.set_xlabel(name)
        ax.set_ylabel(f"effect on {e['target']}")
    kind = "spherical harmonic features (slices through the centre)" if spherical else "additive VFF"
    fig.suptitle(f"airline-style {kind}: {e['source']}, N = {e['num_train']} training rows")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return str(path)


# --- command line -------------------------------------------------------------------------------------
def _default_method():
    """NUFFT statistics when jax-finufft is installed (the ``nufft`` extra), the dense path otherwise."""
    import importlib.util

    return "nufft" if importlib.util.find_spec("jax_finufft") is not None else "dense"


def add_arguments(parser):
    parser.add_argument("--csv", default=None, help="CSV file with a header row (default: synthetic data)")
    parser.add_argument("--target", default=AIRLINE_TARGET, help=f"target column (default {AIRLINE_TARGET})")
    parser.add_argument("--covariates", default=",".join(AIRLINE_COVARIATES),
                        help="comma-separated covariate columns (default: the 8 of the VFF paper)")
    parser.add_argument("--synthetic", type=count, default=None, metavar="N",
                        help=f"N synthetic rows with 8 covariates (default {DEFAULT_SYNTHETIC} without --csv)")
    parser.add_argument("--num-frequencies", type=count, default=NUM_FREQUENCIES,
                        help=f"frequencies per input including 0 (default {NUM_FREQUENCIES}: 59 features)")
    parser.add_argument("--stats-method", choices=("nufft", "dense"), default=_default_method(),
                        help="sufficient statistics by NUFFT (default) or dense products")
    parser.add_argument("--split-seed", type=non_negative_int, default=0, help="seed of the 2/3 : 1/3 split")
    parser.add_argument("--diagnostic-rows", type=count, default=2000,
                        help="training rows kept in the InferenceData (the fit uses all)")
    parser.add_argument("--features", choices=("vff", "spherical"), default="vff",
                        help="additive VFF (default) or spherical harmonic features (fit_spherical)")
    parser.add_argument("--max-degree", type=count, default=MAX_DEGREE,
                        help=f"spherical features: the highest degree (default {MAX_DEGREE}: 210 features for 8 "
                             "covariates)")
    parser.add_argument("--subsample", type=count, default=SUBSAMPLE,
                        help=f"spherical features: rows of the MAP fit that fixes the input map (default {SUBSAMPLE})")


def build(args) -> ModelSpec:
    import time

    csv = getattr(args, "csv", None)
    n_synth = getattr(args, "synthetic", None)
    if csv is not None and n_synth is not None:
        raise ValueError("give --csv or --synthetic, not both")
    target = getattr(args, "target", AIRLINE_TARGET)
    extra = {}
    if csv is not None:
        if not Path(csv).is_file():
            raise FileNotFoundError(f"--csv {csv}: No such file or directory")
        covariates = [c.strip() for c in getattr(args, "covariates", ",".join(AIRLINE_COVARIATES)).split(",")
                      if c.strip()]
        X, y = read_csv(csv, target, covariates)
        source = str(csv)
    else:
        n_synth = DEFAULT_SYNTHETIC if n_synth is None else n_synth
        X, y, covariates, f = synthetic(n_synth, seed=getattr(args, "split_seed", 0))
        target, source = AIRLINE_TARGET, f"synthetic({n_synth})"
        effects = _effects()
        extra["truth"] = effects
    data = prepare(X, y, seed=getattr(args, "split_seed", 0))
    if csv is None:
        f_test = (f[data["test_index"]] - data["y_mean"]) / data["y_std"]
        extra["noise_only_mse"] = float(np.mean((data["y_test"] - f_test) ** 2))
    features = getattr(args, "features", "vff")
    if features == "spherical":
        if X.shape[1] < 2:
            raise ValueError("--features spherical needs at least 2 covariates; use the default VFF for one")
        for flag in ("max_degree", "subsample"):
            v = getattr(args, flag, None)
            if v is not None and (int(v) != v or v < (0 if flag == "max_degree" else 2)):
                raise ValueError(f"--{flag.replace('_', '-')} must be an integer >= "
                                 f"{0 if flag == 'max_degree' else 2}, got {v!r}")
        for key in ("X", "X_test"):  # centred in [−½, ½]: the map's scales act around the centre
            data[key] = data[key] - 0.5
        t0 = time.perf_counter()
        gp, fit = make_spherical_gp(data["X"], data["y"], max_degree=getattr(args, "max_degree", MAX_DEGREE),
                                    subsample=getattr(args, "subsample", SUBSAMPLE))
        stats_time, method = time.perf_counter() - t0, "spherical"
        extra["spherical_fit_seconds"] = fit.seconds
    else:
        M = getattr(args, "num_frequencies", NUM_FREQUENCIES)
        if int(M) != M or M < 1:
            raise ValueError(f"--num-frequencies must be a positive integer, got {M!r}")
        method = getattr(args, "stats_method", None) or _default_method()
        feature = make_feature(X.shape[1], M)
        t0 = time.perf_counter()
        stats = fourier_statistics(feature, data["X"], data["y"], method=method)
        stats_time = time.perf_counter() - t0
        gp = make_gp(feature, stats)
    keep = min(len(data["y"]), max(1, getattr(args, "diagnostic_rows", 2000)))
    sub = np.random.default_rng(1).choice(len(data["y"]), keep, replace=False)
    extra.update({"X_test_all": data["X_test"], "y_test_all": data["y_test"], "x_min": data["x_min"],
                  "x_span": data["x_span"], "y_mean": data["y_mean"], "y_std": data["y_std"],
                  "covariates": covariates, "target": target, "source": source,
                  "num_train": len(data["y"]), "stats_method": method, "stats_time_s": stats_time})
    n_test = min(len(data["y_test"]), keep)
    return ModelSpec(
        name="airline", gp=gp, X=data["X"][sub], y=data["y"][sub], X_test=data["X_test"][:n_test],
        y_test=data["y_test"][:n_test], methods=("map", "svi", "nuts"),
        defaults={"svi": {"num_steps": 1500, "lr": 0.03, "samples": 10},
                  "nuts": {"warmup": 200, "samples": 200, "chains": 2, "max_tree_depth": 6}},
        var_names=list(gp.hyperparameter_sites()), plot=plot, evaluate=evaluate, extra=extra)
