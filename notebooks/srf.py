# %% [markdown]
# # Random Fourier features, sparse-spectrum GPs and Stein random features
#
# Warren, Oliveira & Ramos (2024), *Stein random feature regression*. A stationary kernel is an
# expectation over its spectral density, k(r) = σ² E[cos ωᵀr], so R frequencies give 2R features with
# k ≈ σ² φᵀφ (random Fourier features). The sparse-spectrum GP makes y | Ω a Gaussian with covariance
# σ²ΦᵀΦ + σₙ²I (evaluated in O(NR² + R³) with the corrected constants of the notes); M-SRFR puts M
# Stein particles on whole frequency matrices Ω_m and predicts with their mixture, through NumPyro's
# SteinVI with point-mass particles (SVGD).
#
# This notebook (jupytext percent format; the tests run it with `QUICK=1`): (1) Gram-matrix error of
# Monte Carlo, quasi-Monte Carlo and orthogonal frequencies; (2) M-SRFR on a 1-D toy problem, its
# mixture predictive, ArviZ InferenceData with a `particle` dimension, and the learned spectral density
# against the prior.

# %%
import os
import time

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import numpyro.distributions as dist

import ppl_sparsegp as psg
from ppl_sparsegp import diagnostics
from ppl_sparsegp.approximations.spectrum import SparseSpectrumGP
from ppl_sparsegp.features.random_fourier import RandomFourierFeatures, sample_frequencies
from ppl_sparsegp.likelihoods import Gaussian
from ppl_sparsegp.stein import fit_msrfr

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

jax.config.update("jax_enable_x64", True)

# %% tags=["remove-cell"]
# scaffolding, hidden in the docs: the tests and the docs build run the notebook small
# (QUICK=1) and collect its figures in NOTEBOOK_OUT
QUICK = os.environ.get("QUICK") == "1"
OUT = os.environ.get("NOTEBOOK_OUT", ".")

# %% [markdown]
# ## 1. Kernel approximation: relative Frobenius error of the Gram matrix

# %%
kernel = psg.SquaredExponential(variance=1.0, lengthscale=1.0)
X = jax.random.uniform(jax.random.PRNGKey(0), (200, 2))
K = kernel(X)
for method in ("mc", "qmc", "orf"):
    errs = []
    for R in (10, 100, 1000):
        W = sample_frequencies(kernel, jax.random.PRNGKey(R), R, 2, method)
        K_rff = RandomFourierFeatures(W).gram(kernel, X)
        errs.append(float(jnp.linalg.norm(K - K_rff) / jnp.linalg.norm(K)))
    print(f"{method:4s}  R = 10, 100, 1000: " + ", ".join(f"{e:.4f}" for e in errs))

# %% [markdown]
# ## 2. M-SRFR on a 1-D problem
#
# 60 noisy observations of a two-frequency signal; R = 8 frequencies per particle, M = 4 particles,
# shared lengthscale (a Param), noise fixed, frequency prior N(0, 3²).

# %%
rng = np.random.default_rng(1)
x = np.sort(rng.uniform(0, 1, 60))[:, None]
f_true = lambda t: np.sin(12 * t) + 0.5 * np.cos(31 * t)  # noqa: E731
y = f_true(x[:, 0]) + 0.1 * rng.normal(size=60)
ym, ys = y.mean(), y.std()
X_train, y_train = jnp.asarray(x), jnp.asarray((y - ym) / ys)

lengthscale = psg.Param(jnp.array([0.1]), dist.constraints.positive)
gp = SparseSpectrumGP(
    psg.SquaredExponential(variance=1.0, lengthscale=lengthscale),
    Gaussian(0.01), frequencies=dist.Normal(0.0, 3.0).expand((8, 1)).to_event(2))
start = time.perf_counter()
result = fit_msrfr(gp, X_train, y_train, jax.random.PRNGKey(0), num_particles=4,
                   num_steps=60 if QUICK else 500, lr=0.05, lr_shared=0.01, repulsion=1.0,
                   annealing_power=0.5)
jax.block_until_ready(result.params)
print(f"fitted in {time.perf_counter() - start:.1f} s; "
      f"lengthscale {np.asarray(result.shared['kernel_lengthscale'])}")

# %%
x_test = np.linspace(-0.1, 1.1, 200)[:, None]
pred = gp.predict_particles(jnp.asarray(x_test), X_train, y_train, result.values())
y_test = (f_true(x_test[:, 0]) - ym) / ys
metrics = diagnostics.mixture_metrics(y_test, pred["f_mean_draws"], pred["y_var_draws"],
                                      y_scale=ys)
print({k: round(v, 3) for k, v in metrics.items()})

mean = ym + ys * np.asarray(pred["f_mean"])
sd = ys * np.sqrt(np.asarray(pred["y_var"]))
fig, ax = plt.subplots(figsize=(7, 3))
for m in np.asarray(pred["f_mean_draws"]):
    ax.plot(x_test[:, 0], ym + ys * m, lw=0.7, alpha=0.6)
ax.plot(x_test[:, 0], mean, "k", label="mixture mean")
ax.fill_between(x_test[:, 0], mean - 2 * sd, mean + 2 * sd, color="k", alpha=0.15,
                label="±2 sd")
ax.plot(x[:, 0], y, ".", color="C3", label="data")
ax.legend(loc="lower left", fontsize=8)
fig.tight_layout()
fig.savefig(os.path.join(OUT, "srf_msrfr.png"), dpi=100)

# %% [markdown]
# ## 3. The particle posterior in ArviZ, and the learned spectral density

# %%
idata = diagnostics.stein_inference_data(result, gp, X_train, y_train)
print(idata.posterior["feature_frequencies"].dims)
log_ml = idata.sample_stats["log_marginal_likelihood"].values
print("per-particle log marginal likelihood:", log_ml.round(1))
print({k: round(v, 3) for k, v in diagnostics.stein_diagnostics(idata).items()})
diagnostics.plot_spectral_density(idata.posterior["feature_frequencies"].values,
                                  gp.feature.frequencies,
                      os.path.join(OUT, "srf_spectrum.png"))
