# %% [markdown]
# # A spectral GP prior in your own NumPyro model
#
# `ppl_sparsegp.spectral_gp` is to this library what `numpyro.contrib.hsgp`'s basis expansion is to
# NumPyro: one call inside a model you write yourself adds a Gaussian-process prior and returns the
# latent function at your inputs. This notebook (jupytext percent format; the tests run it with
# `QUICK=1`) does two jobs the way a NumPyro user would:
#
# 1. a **count series** (Poisson with a log-GP rate) on 1-D inputs;
# 2. a **2-D spatial field** (Gaussian noise) on scattered sites, with a product kernel;
# 3. a **Gaussian series of a trend, a season and a linear mean** with the inducing variables integrated
#    out (`marginal_spectral_gp`), its features chosen by a pilot fit (`choose_features`), the
#    refinement check that tells a displaced posterior apart and the mode check that tells a posterior
#    in a minor mode apart.
#
# Each: the box and the number of features from the data and the lengthscale prior
# (`FourierFeatures.from_data`, `KroneckerFeatures.from_data`), NUTS, ArviZ's summary and plots, the
# post-fit adequacy check (did the features resolve the lengthscales the posterior found?), and
# prediction on a finer grid with `numpyro.infer.Predictive` through the model's `X_new` argument.

# %%
import os
import time

import arviz as az
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS, Predictive

import ppl_sparsegp as psg
from ppl_sparsegp import diagnostics
from ppl_sparsegp.features import FourierFeatures, KroneckerFeatures

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

jax.config.update("jax_enable_x64", True)

# %% tags=["remove-cell"]
# scaffolding, hidden in the docs: the tests and the docs build run the notebook small
# (QUICK=1) and collect its figures in NOTEBOOK_OUT
QUICK = os.environ.get("QUICK") == "1"
OUT = os.environ.get("NOTEBOOK_OUT", ".")

# %%
WARMUP, SAMPLES, CHAINS = (60, 60, 1) if QUICK else (500, 1000, 2)

# %% [markdown]
# ## 1. A count series
#
# 150 weekly counts whose log-rate is a smooth curve (known here, so we can see what the fit recovers).
# The lengthscale prior says "weeks to months"; `from_data` turns its 99% quantile ℓ_max into the box (3ℓ_max
# beyond the data on each side, at most one data span: the edge effect reaches one actual lengthscale into
# the box) and its 1% quantile ℓ_min into the number of frequencies (all but 1% of the Matérn-3/2 prior
# variance resolved at ℓ_min).

# %%
rng = np.random.default_rng(1)
t = np.arange(150.0) / 150.0  # time in units of the whole series
log_rate = 1.5 + np.sin(6 * t) + 0.6 * np.cos(17 * t)
counts = rng.poisson(np.exp(log_rate))

ell_prior = dist.LogNormal(np.log(0.1), 0.4)
kernel = psg.Matern32(variance=dist.LogNormal(0.0, 1.0), lengthscale=ell_prior)
# ν from the kernel's class, ℓ from its prior
feature = FourierFeatures.from_data(t, kernel, tolerance=0.01)
print(f"box [{feature.lower:.3f}, {feature.upper:.3f}],",
      f"{feature.num_frequencies} frequencies")


def count_model(t, y=None, t_new=None):
    c = numpyro.sample("c", dist.Normal(np.log(counts.mean()), 1.0))
    out = psg.spectral_gp("f", feature, kernel, t, X_new=t_new)
    f = out if t_new is None else out[0]
    numpyro.sample("y", dist.Poisson(jnp.exp(c + f)), obs=y)


mcmc = MCMC(NUTS(count_model, target_accept_prob=0.9), num_warmup=WARMUP,
            num_samples=SAMPLES, num_chains=CHAINS, chain_method="sequential",
            progress_bar=not QUICK)
mcmc.run(jax.random.PRNGKey(0), t, counts)
idata = diagnostics.from_mcmc(mcmc, count_model)  # the inducing site: dim "feature"
print(az.summary(idata, var_names=["c", "f_kernel_variance", "f_kernel_lengthscale"]))

# %% [markdown]
# **Adequacy.** For each posterior draw of the hyperparameters, the share of the prior variance at the
# data the features cannot represent. A draw whose lengthscale is shorter than the features resolve
# shows up here, with the fix.

# %%
check = diagnostics.adequacy(feature, mcmc.get_samples(), t, kernel=kernel)
print(check["message"])
diagnostics.add_adequacy(idata, check)  # stored in the InferenceData (group "adequacy")

# %% [markdown]
# **Prediction on a finer grid**: the model's `t_new` evaluates the same inducing variables there (site
# `f_new`), so `Predictive` gives the latent rate per posterior draw.

# %%
t_fine = np.linspace(0.0, 1.0, 400)
predictive = Predictive(count_model, mcmc.get_samples())
draws = predictive(jax.random.PRNGKey(1), t, None, t_new=t_fine)
rate = np.exp(np.asarray(mcmc.get_samples()["c"])[:, None] + np.asarray(draws["f_new"]))
lo, mid, hi = np.percentile(rate, [5, 50, 95], axis=0)
true_rate = np.exp(1.5 + np.sin(6 * t_fine) + 0.6 * np.cos(17 * t_fine))
inside = np.mean((true_rate >= lo) & (true_rate <= hi))
print(f"the true rate lies inside the 90% band at {inside:.0%} of the fine grid")

fig, ax = plt.subplots(figsize=(8, 3))
ax.plot(t, counts, "k.", ms=3, label="counts")
ax.plot(t_fine, true_rate, "C3--", label="true rate")
ax.plot(t_fine, mid, "C0", label="posterior median rate")
ax.fill_between(t_fine, lo, hi, color="C0", alpha=0.3, label="90% band")
ax.set_xlabel("t")
ax.legend(fontsize=8)
fig.savefig(os.path.join(OUT, "own_model_counts.png"), dpi=90, bbox_inches="tight")
az.plot_trace(idata, var_names=["c", "f_kernel_lengthscale"])
plt.savefig(os.path.join(OUT, "own_model_counts_trace.png"), dpi=70)

# %% [markdown]
# ## 2. A 2-D spatial field
#
# 250 noisy observations (120 at QUICK) of a field on scattered sites in [0, 1] × [0, 2]; a product of Matérn-3/2
# kernels with one lengthscale per axis, `KroneckerFeatures.from_data` (the rule per axis, the tolerance
# split so the product keeps it). The exact GP on 250 points is cheap, so we compare with it at the
# posterior-mean hyperparameters.

# %%
n = 120 if QUICK else 250
S = np.column_stack([rng.uniform(0, 1, n), rng.uniform(0, 2, n)])


def truth(s):
    return np.sin(4 * s[:, 0]) * np.cos(2.5 * s[:, 1]) + 0.3 * s[:, 1]


z = truth(S) + 0.2 * rng.normal(size=n)

ell_prior2 = dist.LogNormal(np.log(jnp.array([0.3, 0.5])), 0.3)
feature2 = KroneckerFeatures.from_data(S, psg.Matern32(1.0, ell_prior2),
                                       tolerance=0.1 if QUICK else 0.02)
print("frequencies per axis:", [g.num_frequencies for g in feature2.features], "→",
      feature2.num_features, "features")


def field_model(S, z=None, S_new=None):
    ell = numpyro.sample("ell", ell_prior2)
    amp = numpyro.sample("amp", dist.LogNormal(0.0, 1.0))
    k = psg.Product([psg.Matern32(amp, ell[0]), psg.Matern32(1.0, ell[1])])
    out = psg.spectral_gp("f", feature2, k, S, X_new=S_new)
    f = out if S_new is None else out[0]
    mean = numpyro.sample("mean", dist.Normal(0.0, 1.0))
    noise = numpyro.sample("noise", dist.HalfNormal(1.0))
    numpyro.sample("z", dist.Normal(mean + f, noise), obs=z)


mcmc2 = MCMC(NUTS(field_model), num_warmup=WARMUP, num_samples=SAMPLES, num_chains=CHAINS,
             chain_method="sequential", progress_bar=not QUICK)
mcmc2.run(jax.random.PRNGKey(2), S, z)
idata2 = diagnostics.from_mcmc(mcmc2, field_model)
print(az.summary(idata2, var_names=["ell", "amp", "noise", "mean"]))
post = mcmc2.get_samples()
check2 = diagnostics.adequacy(
    feature2, post, S,
    kernel=lambda d: psg.Product([psg.Matern32(d["amp"], d["ell"][0]),
                                  psg.Matern32(1.0, d["ell"][1])]))
print(check2["message"])

# %% [markdown]
# Prediction on a 40 × 40 grid, and the exact GP's posterior mean at the posterior-mean hyperparameters
# for comparison (distance in exact-posterior sd).

# %%
g0, g1 = np.linspace(0, 1, 40), np.linspace(0, 2, 40)
S_fine = np.stack(np.meshgrid(g0, g1, indexing="ij"), -1).reshape(-1, 2)
pred = Predictive(field_model, post)(jax.random.PRNGKey(3), S, None, S_new=S_fine)
field = np.asarray(post["mean"])[:, None] + np.asarray(pred["f_new"])
field_mean = field.mean(0)

hat = {k: float(np.mean(post[k])) for k in ("amp", "noise", "mean")}
ell_hat = np.asarray(post["ell"]).mean(0)
k_hat = psg.Product([psg.Matern32(hat["amp"], ell_hat[0]), psg.Matern32(1.0, ell_hat[1])])
K = np.asarray(k_hat(jnp.asarray(S))) + hat["noise"] ** 2 * np.eye(n)
Ks = np.asarray(k_hat(jnp.asarray(S_fine), jnp.asarray(S)))
exact = hat["mean"] + Ks @ np.linalg.solve(K, z - hat["mean"])
exact_var = hat["amp"] - np.sum(Ks * np.linalg.solve(K, Ks.T).T, 1)
exact_sd = np.sqrt(np.maximum(exact_var, 1e-12))
distance = np.median(np.abs(field_mean - exact) / exact_sd)
print(f"median |posterior mean − exact GP mean| = {distance:.2f} exact-posterior sd "
      "(hyperparameters integrated vs fixed at their means)")

fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
titles = ("truth", "spectral_gp + NUTS, posterior mean",
          "exact GP at the posterior mean θ")
for ax, img, title in zip(axes, (truth(S_fine), field_mean, exact), titles):
    im = ax.imshow(img.reshape(40, 40).T, origin="lower", extent=(0, 1, 0, 2),
                   aspect="auto")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax)
axes[0].plot(S[:, 0], S[:, 1], "k.", ms=2)
fig.savefig(os.path.join(OUT, "own_model_field.png"), dpi=90, bbox_inches="tight")

# %% [markdown]
# ## 3. Gaussian observations: integrate the inducing variables out
#
# With Gaussian noise nothing needs to stay latent: `marginal_spectral_gp` adds the exact marginal
# density of y given the hyperparameters (two GPs and a linear mean with a Gaussian prior on its weights),
# so NUTS samples four numbers. The lengthscale prior here is deliberately off: the truth (ℓ = 0.8) sits
# in its 1% tail.

# %%
n3 = 120 if QUICK else 300
t3 = np.sort(rng.uniform(0.0, 20.0, n3))
T3 = jnp.asarray(t3)[:, None]
K3 = np.asarray(psg.Matern52(0.5, 0.8)(T3) + psg.Periodic(0.3, 1.0, 1.0)(T3))
L3 = np.linalg.cholesky(K3 + 1e-9 * np.eye(n3))
y3 = 0.3 + 0.02 * t3 + L3 @ rng.normal(size=n3) + 0.1 * rng.normal(size=n3)
# the truth at the prior's 1% quantile
ell_prior3 = dist.LogNormal(np.log(0.8 * np.exp(0.5 * 2.326)), 0.5)


def linear3(s):
    """The linear mean's basis as a function of the inputs, written with jax.numpy: the
    library evaluates it at the data (and at t_new) when the model is traced, so it stays
    data; an array built with jnp inside the model would be a tracer under NUTS, and every
    gradient would pay for N."""
    return jnp.stack([jnp.ones_like(s), s / 20], -1)


def series_model(t, y, trend_feature, t_new=None):
    h = {"var": numpyro.sample("trend_var", dist.LogNormal(np.log(0.5), 1.0)),
         "ell": numpyro.sample("trend_ell", ell_prior3),
         "season": numpyro.sample("season_var", dist.LogNormal(np.log(0.3), 1.0)),
         "noise": numpyro.sample("noise", dist.HalfNormal(0.3))}
    gps = {"trend": (trend_feature, psg.Matern52(h["var"], h["ell"])),
           "season": (FourierFeatures(0.0, 1.0, 8), psg.Periodic(h["season"], 1.0, 1.0))}
    return psg.marginal_spectral_gp(
        "y", gps, t, y, h["noise"], mean_basis=linear3,
        mean_prior=dist.Normal(jnp.zeros(2), 1.0), X_new=t_new)


def fit_series(feature):
    m = MCMC(NUTS(series_model), num_warmup=WARMUP, num_samples=SAMPLES,
             num_chains=CHAINS, chain_method="sequential", progress_bar=not QUICK)
    m.run(jax.random.PRNGKey(4), t3, y3, feature, extra_fields=("num_steps",))
    return m


# the old rule (the prior's 5% quantile, the margin uncapped) cannot resolve the truth
coarse = FourierFeatures.from_data(t3, psg.Matern52(1.0, ell_prior3), quantile=0.05,
                                   max_margin=np.inf)
# the documented start: the prior's rule, then a pilot fit chooses the frequencies for
# what the data support, keeping the prior's box: on up to 2 000 rows the pilot is the
# exact GP (type-II MAP from the priors' quantiles and from lengthscales over the data's
# range, each mode's Laplace lower quantile of the lengthscale, a tolerance set by the
# noise)
start = FourierFeatures.from_data(t3, psg.Matern52(1.0, ell_prior3))
clock = time.perf_counter()
chosen = psg.choose_features(series_model, t3, y3, start)
pilot_s = time.perf_counter() - clock
resolved = chosen["trend"]
needed = {k: round(v["lengthscale"], 3) for k, v in chosen.info["needed"].items()}
print(f"pilot ({chosen.info['pilot']} GP on {chosen.info['rows']} rows,",
      f"{pilot_s:.0f} s):",
      needed, "->", resolved)
checks = {}
for label, feat in (("old rule", coarse), ("pilot's choice", resolved)):
    m = fit_series(feat)
    post3 = m.get_samples()
    steps = float(np.mean(m.get_extra_fields()["num_steps"]))
    checks[label] = diagnostics.refinement_check(series_model, post3, t3, y3, feat,
                                                 num_warmup=WARMUP, num_samples=SAMPLES)
    ell3, noise3 = post3["trend_ell"], float(post3["noise"].mean())
    print(f"{label}: box [{feat.lower:.1f}, {feat.upper:.1f}], "
          f"{feat.num_frequencies} frequencies; "
          f"trend ℓ {float(ell3.mean()):.2f} ± {float(ell3.std()):.2f} (truth 0.8), "
          f"noise {noise3:.3f} (truth 0.1), {steps:.0f} leapfrog steps per draw")
    print("   ", checks[label]["message"])
    series_mcmc = m
# the global check beside it, on the documented fit: the exact GP's optima from dispersed
# starts, each draw assigned to one; it fails a fit sitting in a minor mode
clock = time.perf_counter()
modes = diagnostics.mode_check(series_model, post3, t3, y3, resolved)
print(f"mode check ({time.perf_counter() - clock:.0f} s):", modes["message"])

# %% [markdown]
# `psg.choose_features` is the start of the workflow: it runs the model you wrote (here with the prior's
# rule as its features) as a pilot and returns the features to pass back. On up to `exact_rows` (2 000)
# rows the pilot's marginal is the exact GP (O(n³) per gradient: seconds at this size, about half a
# minute of CPU at n = 500), so its modes are the exact posterior's even where the prior puts the
# lengthscale far from the data's. The refinement check reruns the model with twice the highest
# frequency. The old rule's posterior moves (and the message names the fix); the residual check would
# have passed it, since it looks only at the lengthscales the posterior found. The refinement check is
# local (it reweights and refits from the fit's own draws); `diagnostics.mode_check` is global: it finds
# the exact GP's optima from dispersed starts (O(n³) per gradient, like the pilot) and fails a fit whose
# draws sit in a mode with less than a third of the main one's Laplace mass, naming the main mode to
# restart NUTS from. With the inducing variables integrated out NUTS needs a handful of
# leapfrog steps per draw; the latent model of the same series saturates the tree depth.
#
# **Prediction**: under `Predictive` with `t_new` each GP is drawn from its exact conditional given y.

# %%
t_new3 = np.linspace(0.0, 20.0, 400)
predictive3 = Predictive(series_model, series_mcmc.get_samples())
pred3 = predictive3(jax.random.PRNGKey(5), t3, y3, resolved, t_new=t_new3)
lo3, mid3, hi3 = np.percentile(np.asarray(pred3["y_new"]), [5, 50, 95], axis=0)
fig, axes = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
axes[0].plot(t3, y3, "k.", ms=3, label="y")
axes[0].plot(t_new3, mid3, "C0", label="trend + season + mean")
axes[0].fill_between(t_new3, lo3, hi3, color="C0", alpha=0.3, label="90% band")
axes[0].legend(fontsize=8)
axes[1].plot(t_new3, np.median(np.asarray(pred3["trend_new"]), 0), "C1", label="trend")
axes[1].plot(t_new3, np.median(np.asarray(pred3["season_new"]), 0), "C2", label="season")
axes[1].set_xlabel("t")
axes[1].legend(fontsize=8)
fig.savefig(os.path.join(OUT, "own_model_series.png"), dpi=90, bbox_inches="tight")
