# %% [markdown]
# # Variational Fourier features
#
# Hensman, Durrande & Solin (2018): inducing variables that are RKHS projections of f onto a Fourier
# basis on an interval [a, b]. For Matérn-1/2, 3/2, 5/2 kernels Kuu is diagonal plus rank 1/2/3 and, for
# inputs inside [a, b], Kuf does not depend on the hyperparameters.
#
# This notebook (jupytext percent format; the tests run it with `QUICK=1`) fits a 1-D regression with the
# collapsed bound, compares it with the exact GP and shows the bound closing as M grows.

# %%
import os

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import SVI, TraceMeanField_ELBO

import ppl_sparsegp as psg
from ppl_sparsegp.features import FourierFeatures
from ppl_sparsegp.likelihoods import Gaussian

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

jax.config.update("jax_enable_x64", True)

# %% tags=["remove-cell"]
# scaffolding, hidden in the docs: the tests and the docs build run the notebook small
# (QUICK=1) and collect its figures in NOTEBOOK_OUT
QUICK = os.environ.get("QUICK") == "1"
OUT = os.environ.get("NOTEBOOK_OUT", ".")

# %% [markdown]
# Data: 200 noisy points of a smooth function on [0, 1]; box [a, b] = [−1, 2] as in the paper's toy.

# %%
rng = np.random.default_rng(0)
X = jnp.asarray(np.sort(rng.uniform(0, 1, 200))[:, None])
y = np.sin(3 * X[:, 0]) + 0.4 * np.cos(9 * X[:, 0]) + 0.1 * rng.normal(size=200)
y = jnp.asarray(y)

prior = psg.Matern52(variance=dist.LogNormal(0.0, 1.0),
                     lengthscale=dist.LogNormal(-1.0, 1.0))
gp = psg.CollapsedGP(FourierFeatures(-1.0, 2.0, 30), prior,
                     Gaussian(variance=dist.LogNormal(-3.0, 1.0)))
svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.05), TraceMeanField_ELBO())
result = svi.run(jax.random.PRNGKey(0), 300 if QUICK else 1500, X, y, progress_bar=False)
values = gp.point_values(result.params)
print({k: float(values[k]) for k in gp.hyperparameter_sites()})

# %% [markdown]
# Prediction from the optimal q(u) against the exact GP with the same hyperparameters.

# %%
kernel = psg.Matern52(values["kernel_variance"], values["kernel_lengthscale"])
noise = values["likelihood_variance"]
Xs = jnp.linspace(-0.3, 1.3, 200)[:, None]
predict = jax.jit(lambda Xs, X, y, p: gp.with_data(X, y).predict(Xs, params=p))
pred = predict(Xs, X, y, result.params)
K = kernel(X) + noise * jnp.eye(200)
mean_exact = kernel(Xs, X) @ jnp.linalg.solve(K, y)
print("max |VFF mean − exact mean| =",
      float(jnp.max(jnp.abs(pred["f_mean"] - mean_exact))))

fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(X[:, 0], y, "k.", ms=3, label="data")
sd = jnp.sqrt(pred["y_var"])
ax.plot(Xs[:, 0], pred["f_mean"], "C0", label="VFF (M = 30)")
ax.fill_between(Xs[:, 0], pred["f_mean"] - 2 * sd, pred["f_mean"] + 2 * sd, color="C0",
                alpha=0.2)
ax.plot(Xs[:, 0], mean_exact, "C1--", label="exact GP")
ax.legend()
fig.savefig(os.path.join(OUT, "vff_fit.png"), dpi=90)

# %% [markdown]
# The collapsed bound never exceeds the exact log marginal likelihood and approaches it as M grows.

# %%
exact = float(psg.exact_log_marginal_likelihood(kernel, X, y, noise))
Ms = [4, 8, 16, 32] if QUICK else [4, 8, 16, 32, 64, 128]
gaps = [exact - float(psg.collapsed_elbo(FourierFeatures(-1.0, 2.0, M), kernel, X, y,
                                        noise)) for M in Ms]
for M, g in zip(Ms, gaps):
    print(f"M = {M:4d}: exact − ELBO = {g:.3e}")
assert all(g >= -1e-8 for g in gaps)
