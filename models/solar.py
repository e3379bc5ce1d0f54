"""Solar irradiance (Lean 2004): 1-D regression with removed segments, the VFF paper's §6.4 [1].

The data are yearly values 1610.5–2000.5 of the 11-year cycle plus background (the third column of
``solar_data.txt``). Inputs are the years mapped to [0, 1]; targets are standardised with the training
mean and standard deviation. The segments 1620–50, 1700–20, 1780–1800, 1850–70 and 1930–50 are
removed and form the test set (implementer's notes vff.md E6; the paper replicates Gal & Turner [2]).

Model: ``SparseGP(InducingPoints(Z), Matern52(variance, lengthscale), Gaussian(variance))``, whitened,
M = 50 inducing inputs evenly spaced on [0, 1] (``--num-features``), LogNormal priors on the three
hyperparameters. Metrics: test RMSE and NLPD in the data's units (W/m²).

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
    2. Gal, Turner (2015), Improving the Gaussian process sparse spectrum approximation by representing
       uncertainty in frequency inputs, ICML.
"""
from __future__ import annotations

import math

import numpy as np
import numpyro.distributions as dist

from models import ModelSpec
from models._arguments import count
from ppl_sparsegp import CollapsedGP, InducingPoints, Matern52, SparseGP, diagnostics
from ppl_sparsegp.datasets import load_solar
from ppl_sparsegp.features import FourierFeatures
from ppl_sparsegp.likelihoods import Gaussian

DESCRIPTION = "solar irradiance 1610-2000 with five removed segments (VFF §6.4): 1-D Matérn-5/2 regression"

# removed segments [lo, hi) in years (vff.md E6)
TEST_SEGMENTS = ((1620, 1650), (1700, 1720), (1780, 1800), (1850, 1870), (1930, 1950))
VAR_NAMES = ["kernel_variance", "kernel_lengthscale", "likelihood_variance"]


def add_arguments(parser):
    parser.add_argument("--num-features", type=count, default=50,
                        help="number of inducing features M (default 50)")
    parser.add_argument("--features", choices=["inducing", "fourier"], default="inducing",
                        help="inducing points evenly spaced on [0, 1] (default), or variational Fourier "
                             "features on the paper's box [1590, 2010] with --num-features frequencies")
    _add_collapsed(parser)


def _add_collapsed(parser):
    parser.add_argument("--collapsed", action="store_true",
                        help="integrate u out analytically (Titsias bound, CollapsedGP) as in the paper")


def load_data():
    """Train/test split and scalings: dict with X, y, X_test, y_test (normalised) and the scalers."""
    d = load_solar()
    year, target = d.year, d.cycle_background
    x0, span = year.min(), year.max() - year.min()
    test = np.zeros(len(year), bool)
    for lo, hi in TEST_SEGMENTS:
        test |= (year >= lo) & (year < hi)
    y_mean, y_std = target[~test].mean(), target[~test].std()
    x = ((year - x0) / span)[:, None]
    y = (target - y_mean) / y_std
    return {"X": x[~test], "y": y[~test], "X_test": x[test], "y_test": y[test],
            "x_offset": float(x0), "x_scale": float(span), "y_mean": float(y_mean), "y_std": float(y_std)}


BOX_YEARS = (1590.0, 2010.0)  # the VFF paper's code: a = 1590, b = 2010


def make_feature(args, X, x_offset=None, x_scale=None):
    """The inducing features for inputs X in [0, 1] (the one place that chooses the family)."""
    family = getattr(args, "features", "inducing")
    M = getattr(args, "num_features", 50)
    if not isinstance(M, int) or M < 1:
        raise ValueError(f"--num-features must be a positive integer, got {M!r}")
    if family == "inducing":
        return InducingPoints(np.linspace(0.0, 1.0, M)[:, None])
    if family == "fourier":
        a, b = ((y - x_offset) / x_scale for y in BOX_YEARS)
        return FourierFeatures(a, b, M)
    raise ValueError(f"unknown --features {family!r}")


def make_gp(feature, collapsed=False):
    # priors in normalised units: 1 unit of x = 390 years, y has unit training variance
    kernel = Matern52(variance=dist.LogNormal(0.0, 1.0),
                      lengthscale=dist.LogNormal(math.log(0.05), 1.0))  # median ≈ 20 years
    likelihood = Gaussian(variance=dist.LogNormal(math.log(0.01), 1.5))
    if collapsed:
        return CollapsedGP(feature, kernel, likelihood)
    return SparseGP(feature, kernel, likelihood, whiten=True)


def evaluate(spec, idata):
    """Test RMSE and mean NLPD in W/m² (the standardised metrics rescaled by the training sd)."""
    m = diagnostics.predictive_metrics(spec.gp, idata, spec.X_test, spec.y_test)
    s = spec.extra["y_std"]
    return {"test_rmse": m["rmse"] * s, "test_nlpd": m["nlpd"] + math.log(s),
            "num_train": int(len(spec.y)), "num_test": int(len(spec.y_test))}


def plot(spec, idata, path):
    """Data, held-out segments and the predictive mean ± 2 sd of y, in years and W/m²."""
    e = spec.extra
    years = np.linspace(1600.0, 2010.0, 821)
    Xg = ((years - e["x_offset"]) / e["x_scale"])[:, None]
    pred = diagnostics.predict(spec.gp, idata, Xg)

    def to_year(X):
        return np.asarray(X)[:, 0] * e["x_scale"] + e["x_offset"]

    def to_wm2(v):
        return np.asarray(v) * e["y_std"] + e["y_mean"]

    return diagnostics.plot_fit_1d(
        path, to_year(spec.X), to_wm2(spec.y), years, to_wm2(pred["y_mean"]),
        np.sqrt(np.asarray(pred["y_var"])) * e["y_std"], x_test=to_year(spec.X_test),
        y_test=to_wm2(spec.y_test), shade=TEST_SEGMENTS, xlabel="year", ylabel="irradiance (W/m²)",
        title=f"solar: {type(spec.gp.feature).__name__}, M = {spec.gp.feature.num_features}, "
              f"{idata.posterior.attrs.get('inference', '')}")


def build(args) -> ModelSpec:
    data = load_data()
    gp = make_gp(make_feature(args, data["X"], data["x_offset"], data["x_scale"]),
                 getattr(args, "collapsed", False))
    extra = {k: data[k] for k in ("x_offset", "x_scale", "y_mean", "y_std")}
    return ModelSpec(
        name="solar", gp=gp, X=data["X"], y=data["y"], X_test=data["X_test"], y_test=data["y_test"],
        methods=("svi", "nuts"),
        defaults={"svi": {"num_steps": 5000, "lr": 0.01, "samples": 1000},
                  # the whitened posterior is narrow along data-determined directions: NUTS trees reach
                  # depth 8 (255 leapfrog steps, ~0.6 ms each on one CPU core); cap the cost there
                  "nuts": {"warmup": 500, "samples": 500, "chains": 2, "max_tree_depth": 8}},
        var_names=VAR_NAMES, plot=plot, evaluate=evaluate, extra=extra)
