"""Banana binary classification with Kronecker VFF and a Bernoulli likelihood (VFF paper §6.3).

400 points in 2-D (bundled), product Matérn-3/2 kernel (as the paper's code), VFF with 12 frequencies
per dimension (``--num-frequencies``; 23² = 529 features) on the box [min − 2.5, max + 2.5]² per
dimension, q(u) full, diagonal or the sum of two Kroneckers (``--q-cov``), fitted by SVI; NUTS on the
whitened v works too. A fixed random quarter of the points is held out for test accuracy and NLPD.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from models import ModelSpec
from models._arguments import count
from ppl_sparsegp import Matern32, Product, SparseGP
from ppl_sparsegp.approximations.variational import two_kronecker_covariance
from ppl_sparsegp.datasets import load_banana
from ppl_sparsegp.features import FourierFeatures, KroneckerFeatures
from ppl_sparsegp.likelihoods import Bernoulli

DESCRIPTION = "Banana classifier: Bernoulli likelihood, product Matérn-3/2 Kronecker VFF, SVI or NUTS"
# 12 frequencies per dimension (23² = 529 features): at the fitted lengthscales (≈ 0.8) 8 missed 6 % of the
# prior variance at the data and failed the runner's adequacy check; 10 passed at 4.9 % (the lengthscales
# shrank to 0.62-0.75 with more features), too near the 5 % line; 12 leave a margin
NUM_FREQUENCIES = 12
Q_COV = {"full": "full", "diag": "diag", "two-kron": two_kronecker_covariance}


def add_arguments(parser):
    parser.add_argument("--num-frequencies", type=count, default=NUM_FREQUENCIES,
                        help="VFF frequencies per dimension (default %(default)s)")
    parser.add_argument("--q-cov", choices=sorted(Q_COV), default="two-kron",
                        help="q(u) covariance (default %(default)s)")


def split(X, y, seed=0, test_fraction=0.25):
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    return idx[n_test:], idx[:n_test]


def build(args) -> ModelSpec:
    X, y = load_banana()
    train, test = split(X, y)
    M = getattr(args, "num_frequencies", NUM_FREQUENCIES)
    lo, hi = X.min(0) - 2.5, X.max(0) + 2.5
    feature = KroneckerFeatures([FourierFeatures(lo[d], hi[d], M) for d in range(2)])
    kernel = Product([Matern32(variance=dist.LogNormal(0.0, 1.0), lengthscale=dist.LogNormal(0.0, 1.0)),
                      Matern32(variance=1.0, lengthscale=dist.LogNormal(0.0, 1.0))])
    gp = SparseGP(feature, kernel, Bernoulli(), q_cov=Q_COV[getattr(args, "q_cov", "two-kron")])
    return ModelSpec(name="banana", gp=gp, X=jnp.asarray(X[train]), y=jnp.asarray(y[train]),
                     X_test=jnp.asarray(X[test]), y_test=jnp.asarray(y[test]), methods=("svi", "nuts"),
                     defaults={"svi": {"num_steps": 3000, "lr": 0.02},
                               "nuts": {"warmup": 500, "samples": 500, "chains": 2}},
                     evaluate=evaluate, plot=plot)


def _predict(spec, idata, X):
    from ppl_sparsegp.diagnostics import predict
    return predict(spec.gp, idata, X, max_draws=200)


def evaluate(spec, idata):
    pred = _predict(spec, idata, spec.X_test)
    p = np.clip(np.asarray(pred["y_mean"]), 1e-12, 1 - 1e-12)
    y = np.asarray(spec.y_test)
    return {"test_accuracy": float(np.mean((p > 0.5) == (y > 0.5))),
            "test_nlpd": float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))}


def plot(spec, idata, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X = np.asarray(spec.X)
    g0, g1 = np.meshgrid(np.linspace(X[:, 0].min() - 0.5, X[:, 0].max() + 0.5, 60),
                         np.linspace(X[:, 1].min() - 0.5, X[:, 1].max() + 0.5, 60))
    G = jnp.asarray(np.stack([g0.ravel(), g1.ravel()], 1))
    p = np.asarray(_predict(spec, idata, G)["y_mean"]).reshape(g0.shape)
    fig, ax = plt.subplots(figsize=(5, 4.5))
    cs = ax.contourf(g0, g1, p, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.7)
    ax.contour(g0, g1, p, levels=[0.5], colors="k")
    y = np.asarray(spec.y)
    ax.scatter(X[:, 0], X[:, 1], c=y, cmap="RdBu_r", edgecolors="k", s=12)
    ax.set_title("banana: p(y = 1 | x), VFF")
    fig.colorbar(cs, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
