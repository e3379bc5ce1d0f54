"""Finnish pines log-Gaussian Cox process with whitened variational Fourier features (VFF paper §6.5).

The 127 sapling locations (bundled; the first row is repeated in the published file, and like the
paper's code we keep all 127 rows, ``--drop-duplicate`` removes it) are binned on a 64 × 64 grid over
[0, 1]². log λ(s) = f(s) + c, f ~ GP(0, k₁(s₁)k₂(s₂)) with Matérn-3/2 factors, VFF on the box [−1, 2]²
(Kronecker features, Kuu = ⊗(D_d + B_dB_dᵀ)), Poisson counts per cell with the closed-form expected
log-likelihood, and NUTS on the whitened v (u = (⊗R_d) v) jointly with the lengthscales, the variance and c.
Priors follow the paper's code: lengthscales Gamma(0.1, 1), variance of factor 0 Gamma(1, 1) (factor 1
fixed at 1), c ~ N(0, 3) (variance 3); the cell area Δ is absorbed into c.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from models import ModelSpec
from ppl_sparsegp import Matern32, Product, SparseGP
from ppl_sparsegp.datasets import load_pines
from ppl_sparsegp.features import FourierFeatures, KroneckerFeatures
from ppl_sparsegp.grid import Grid
from ppl_sparsegp.likelihoods import Poisson

DESCRIPTION = "Finnish pines LGCP: 64x64 grid, product Matérn-3/2 VFF on [-1,2]^2, whitened NUTS"
DEFAULT_FREQUENCIES = 64  # where the lengthscale posteriors stop moving: inference/benchmarks/pines.py
GRID = 64


def add_arguments(parser):
    parser.add_argument("--num-frequencies", type=int, default=DEFAULT_FREQUENCIES,
                        help="VFF frequencies per dimension (2M-1 features each; default %(default)s)")
    parser.add_argument("--grid", type=int, default=GRID, help="cells per side (default %(default)s)")
    parser.add_argument("--drop-duplicate", action="store_true",
                        help="drop the repeated first row of pines.csv (126 distinct trees)")
    parser.add_argument("--centred", action="store_true", help="sample u instead of the whitened v")


def counts_on_grid(points, n):
    """Counts per cell of an n × n grid on [0, 1]², flattened with the first coordinate slowest."""
    H, _, _ = np.histogram2d(points[:, 0], points[:, 1], bins=n, range=[[0, 1], [0, 1]])
    return H.reshape(-1)


def make_gp(num_frequencies=DEFAULT_FREQUENCIES, whiten=True):
    """The LGCP as a :class:`~ppl_sparsegp.SparseGP` with paper-code priors."""
    feature = KroneckerFeatures([FourierFeatures(-1.0, 2.0, num_frequencies)] * 2)
    kernel = Product([Matern32(variance=dist.Gamma(1.0, 1.0), lengthscale=dist.Gamma(0.1, 1.0)),
                      Matern32(variance=1.0, lengthscale=dist.Gamma(0.1, 1.0))])
    return SparseGP(feature, kernel, Poisson(), mean=dist.Normal(0.0, math.sqrt(3.0)), whiten=whiten)


def build(args) -> ModelSpec:
    points = load_pines()
    if getattr(args, "drop_duplicate", False):
        points = np.unique(points, axis=0)
    n = getattr(args, "grid", GRID)
    if n < 2:
        raise ValueError(f"--grid must be at least 2, got {n}")
    centres = (np.arange(n) + 0.5) / n
    X = Grid([centres, centres])
    y = jnp.asarray(counts_on_grid(points, n))
    gp = make_gp(getattr(args, "num_frequencies", DEFAULT_FREQUENCIES), not getattr(args, "centred", False))
    return ModelSpec(
        name="pines", gp=gp, X=X, y=y, methods=("nuts", "svi"),
        defaults={"nuts": {"warmup": 1000, "samples": 1000, "chains": 4},
                  "svi": {"steps": 3000, "lr": 0.01}},
        var_names=["kernel_0_variance", "kernel_0_lengthscale", "kernel_1_lengthscale", "mean"],
        plot=plot, extra={"points": points, "grid": n})


def intensity(spec, samples):
    """Posterior mean intensity per cell, E[exp(f + c)] = mean over draws of exp(m + v/2)."""
    pred = spec.gp.predict(spec.X, samples=samples)
    lam = jnp.exp(pred["f_mean_draws"] + 0.5 * pred["f_var_draws"])
    n = spec.extra["grid"]
    return np.asarray(lam.mean(0)).reshape(n, n)


def plot(spec, idata, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ppl_sparsegp.diagnostics import posterior_samples

    names = list(spec.gp.hyperparameter_sites()) + [spec.gp.site]
    lam = intensity(spec, posterior_samples(idata, names, max_draws=200))
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    im = ax.imshow(lam.T, origin="lower", extent=[0, 1, 0, 1], cmap="viridis")
    pts = spec.extra["points"]
    ax.scatter(pts[:, 0], pts[:, 1], s=6, c="white", edgecolors="black", linewidths=0.4)
    ax.set_title("pines: posterior mean intensity (counts per cell)")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
