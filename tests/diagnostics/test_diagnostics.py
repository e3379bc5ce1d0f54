"""ArviZ conversion against independent dense computations: groups, pointwise log likelihood, posterior
predictive, SVI draws, metrics, netCDF round trip."""
import jax
import numpy as np
import numpyro.distributions as dist
import pytest
import xarray as xr
from numpyro import optim
from numpyro.infer import MCMC, NUTS, SVI, TraceMeanField_ELBO
from scipy import stats
from scipy.special import logsumexp

import ppl_sparsegp as psg
from ppl_sparsegp import diagnostics
from ppl_sparsegp.likelihoods import Gaussian

N, M = 20, 5
CHAINS, DRAWS = 2, 200
EXTRA = ("diverging", "energy", "num_steps", "accept_prob", "adapt_state.step_size", "potential_energy")


def data():
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 1, N))[:, None]
    y = np.sin(6 * X[:, 0]) + 0.2 * rng.normal(size=N)
    return X, y


Z = np.linspace(0, 1, M)[:, None]


def make_gp(cls=psg.SparseGP):
    kernel = psg.Matern52(variance=dist.LogNormal(0.0, 1.0), lengthscale=dist.LogNormal(-1.0, 0.5))
    return cls(psg.InducingPoints(Z), kernel, Gaussian(variance=dist.LogNormal(-3.0, 1.0)))


# --- an independent dense reference: Matérn-5/2 Gram, whitened conditional, Gaussian VE ------------
def matern52(A, B, variance, lengthscale):
    r = np.abs(A[:, None, 0] - B[None, :, 0]) / lengthscale
    return variance * (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r)


def dense_conditional(X, variance, lengthscale, v, S=None):
    """Marginals of f(X) given whitened v (S: covariance of q(v)); jitter 1e-10·σ² as InducingPoints."""
    L = np.linalg.cholesky(matern52(Z, Z, variance, lengthscale) + 1e-10 * variance * np.eye(M))
    A = np.linalg.solve(L, matern52(Z, X, variance, lengthscale))  # L⁻¹ Kzx
    mean = A.T @ v
    var = variance - np.sum(A**2, axis=0)
    if S is not None:
        var = var + np.sum(A * (S @ A), axis=0)
    return mean, var


def gaussian_ve(y, mean, var, s2):
    return -0.5 * np.log(2 * np.pi * s2) - ((y - mean) ** 2 + var) / (2 * s2)


def draw(post, c, d):
    return {k: np.asarray(post[k].values[c, d]) for k in post.data_vars}


@pytest.fixture(scope="module")
def mcmc_fit():
    X, y = data()
    gp = make_gp()
    mcmc = MCMC(NUTS(gp.model), num_warmup=DRAWS, num_samples=DRAWS, num_chains=CHAINS,
                chain_method="parallel", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X, y, extra_fields=EXTRA)
    idata = diagnostics.from_mcmc(mcmc, gp, X, y, rng_key=jax.random.PRNGKey(1))
    return gp, mcmc, idata, X, y


@pytest.fixture(scope="module")
def svi_fit():
    X, y = data()
    gp = make_gp()
    svi = SVI(gp.model, gp.guide, optim.Adam(0.02), TraceMeanField_ELBO())
    result = svi.run(jax.random.PRNGKey(0), 300, X, y, progress_bar=False)
    idata = diagnostics.from_svi(result, gp, X, y, num_samples=2000, rng_key=jax.random.PRNGKey(2))
    return gp, result, idata, X, y


def test_mcmc_groups_dims_and_values(mcmc_fit):
    gp, mcmc, idata, X, y = mcmc_fit
    samples = mcmc.get_samples(group_by_chain=True)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    assert set(idata.posterior.data_vars) == {"f_v", "kernel_variance", "kernel_lengthscale",
                                              "likelihood_variance"}
    assert idata.posterior["f_v"].dims == ("chain", "draw", "feature")
    for k, v in samples.items():
        np.testing.assert_array_equal(idata.posterior[k].values, v)
    assert idata.log_likelihood["y"].dims == ("chain", "draw", "obs")
    assert idata.posterior_predictive["y"].dims == ("chain", "draw", "obs")
    np.testing.assert_array_equal(idata.observed_data["y"].values, y)
    np.testing.assert_array_equal(idata.constant_data["X"].values, X)
    assert idata.constant_data["X"].dims == ("obs", "input")
    stats = idata.sample_stats
    np.testing.assert_array_equal(stats["diverging"].values, extra["diverging"])
    np.testing.assert_array_equal(stats["lp"].values, -extra["potential_energy"])  # ArviZ lp = −U
    np.testing.assert_array_equal(stats["energy"].values, extra["energy"])
    np.testing.assert_array_equal(stats["n_steps"].values, extra["num_steps"])
    # a full binary tree of depth d has 2^d − 1 leapfrog steps
    assert np.all(2 ** (stats["tree_depth"].values - 1) <= stats["n_steps"].values)
    assert np.all(stats["n_steps"].values < 2 ** stats["tree_depth"].values)
    assert idata.posterior.attrs["inference"] == "mcmc" and idata.posterior.attrs["sampler"] == "NUTS"


def test_mcmc_log_likelihood_is_pointwise_variational_expectation(mcmc_fit):
    gp, mcmc, idata, X, y = mcmc_fit
    for c, d in [(0, 0), (1, DRAWS // 2), (1, DRAWS - 1)]:
        s = draw(idata.posterior, c, d)
        mean, var = dense_conditional(X, s["kernel_variance"], s["kernel_lengthscale"], s["f_v"])
        ref = gaussian_ve(y, mean, var, s["likelihood_variance"])
        # dense float64 reference; differences are Cholesky round-off, ~1e-12 relative
        np.testing.assert_allclose(idata.log_likelihood["y"].values[c, d], ref, rtol=1e-8, atol=1e-10)


def test_mcmc_posterior_predictive_distribution(mcmc_fit):
    """y draws standardised by each draw's dense N(m, v + σ²) are N(0, 1) over 4000 values."""
    gp, mcmc, idata, X, y = mcmc_fit
    z_y, z_f = [], []
    for c in range(CHAINS):
        for d in range(DRAWS):
            s = draw(idata.posterior, c, d)
            mean, var = dense_conditional(X, s["kernel_variance"], s["kernel_lengthscale"], s["f_v"])
            f = idata.posterior_predictive["f"].values[c, d]
            y_pp = idata.posterior_predictive["y"].values[c, d]
            z_f.append((f - mean) / np.sqrt(var + 1e-12))
            z_y.append((y_pp - f) / np.sqrt(s["likelihood_variance"]))
    for z in (np.concatenate(z_f), np.concatenate(z_y)):
        # 4000 values: SE of the mean 0.016, of the variance 0.022; 5 SE tolerances
        assert abs(z.mean()) < 0.08 and abs(z.var() - 1) < 0.11


def test_mcmc_pointwise_groups_above_the_cap_are_thinned_per_chain_with_the_draws_values(mcmc_fit):
    """Above ``max_pointwise`` (chains × draws × N values) from_mcmc evaluates D evenly spaced draws per
    chain, labelled by their posterior draw: the log likelihood equals the full group's at those draws
    (deterministic given the draw), and the predictive f is the draw's p(f | u) (z-scores)."""
    gp, mcmc, idata, X, y = mcmc_fit
    N = X.shape[0]
    capped = diagnostics.from_mcmc(mcmc, gp, X, y, rng_key=jax.random.PRNGKey(1), max_pointwise=CHAINS * 9 * N + 5,
                                   coords={"obs": 3.0 * X[:, 0]})
    kept = np.round(np.linspace(0, DRAWS - 1, 9)).astype(int)
    assert capped.posterior.sizes["draw"] == DRAWS and capped.posterior.attrs["pointwise_draws"] == 9
    for group in ("log_likelihood", "posterior_predictive"):
        np.testing.assert_array_equal(getattr(capped, group).draw.values, kept)
        np.testing.assert_array_equal(getattr(capped, group).obs.values, 3.0 * X[:, 0])  # the user's coords
        assert getattr(capped, group).sizes["chain"] == CHAINS
    np.testing.assert_allclose(capped.log_likelihood["y"].values, idata.log_likelihood["y"].values[:, kept],
                               rtol=1e-10, atol=1e-12)
    z = []
    for c in range(CHAINS):
        for i, d in enumerate(kept):
            s = draw(idata.posterior, c, d)
            mean, var = dense_conditional(X, s["kernel_variance"], s["kernel_lengthscale"], s["f_v"])
            z.append((capped.posterior_predictive["f"].values[c, i] - mean) / np.sqrt(var + 1e-12))
    z = np.concatenate(z)
    assert abs(z.mean()) < 5 / np.sqrt(z.size) and abs(z.var() - 1) < 5 * np.sqrt(2 / z.size)
    with pytest.raises(ValueError, match="max_pointwise must be None or a positive int"):
        diagnostics.from_mcmc(mcmc, gp, X, y, max_pointwise=0)


def test_summary_has_rhat_and_matches_posterior(mcmc_fit):
    gp, mcmc, idata, X, y = mcmc_fit
    names = ["kernel_variance", "kernel_lengthscale", "likelihood_variance"]
    table = diagnostics.summary(idata, var_names=names)
    assert {"r_hat", "ess_bulk", "ess_tail"} <= set(table.columns)
    assert list(table.index) == names
    for name in names:
        np.testing.assert_allclose(table.loc[name, "mean"], idata.posterior[name].values.mean(),
                                   atol=1e-3)  # the summary rounds to 3 decimals
    r_hat = table["r_hat"].to_numpy()
    # 2 × 200 draws of a 3-parameter posterior (at 2 × 100 R-hat reached 1.23 by chance)
    assert np.all(np.isfinite(r_hat)) and np.all(r_hat < 1.2)


def test_save_load_round_trip(mcmc_fit, svi_fit, tmp_path):
    for idata in (mcmc_fit[2], svi_fit[2]):
        path = diagnostics.save(idata, tmp_path / "run" / "idata.nc")
        back = diagnostics.load(path)
        assert set(back.groups()) == set(idata.groups())
        for group in idata.groups():
            xr.testing.assert_equal(getattr(back, group), getattr(idata, group))
        assert back.posterior.attrs["inference"] == idata.posterior.attrs["inference"]
    with pytest.raises(FileNotFoundError, match="no InferenceData"):
        diagnostics.load(tmp_path / "missing.nc")


def test_svi_draws_and_groups(svi_fit, tmp_path):
    gp, result, idata, X, y = svi_fit
    params = result.params
    post = idata.posterior
    assert post.sizes["chain"] == 1 and post.sizes["draw"] == 2000
    for site in ("kernel_variance", "kernel_lengthscale", "likelihood_variance"):  # Delta sites
        np.testing.assert_allclose(post[site].values, params[f"{site}_map"], rtol=1e-12)
    v = post["f_v"].values[0]
    loc, L = np.asarray(params["f_v_loc"]), np.asarray(params["f_v_scale_tril"])
    S = L @ L.T
    # 2000 draws: 5 standard errors on the mean, 0.15 relative on the variances (SE ≈ 3%)
    assert np.all(np.abs(v.mean(0) - loc) < 5 * np.sqrt(np.diag(S) / 2000))
    np.testing.assert_allclose(v.var(0), np.diag(S), rtol=0.15)
    np.testing.assert_array_equal(idata.svi["loss"].values, result.losses)
    # the pointwise log likelihood of one draw against the dense reference
    s = draw(post, 0, 7)
    mean, var = dense_conditional(X, s["kernel_variance"], s["kernel_lengthscale"], s["f_v"])
    np.testing.assert_allclose(idata.log_likelihood["y"].values[0, 7],
                               gaussian_ve(y, mean, var, s["likelihood_variance"]), rtol=1e-8, atol=1e-10)
    # after a round trip the stored params give exactly gp.predict(params=...)
    back = diagnostics.load(diagnostics.save(idata, tmp_path / "svi.nc"))
    Xs = np.linspace(-0.1, 1.1, 7)[:, None]
    ours, ref = diagnostics.predict(gp, back, Xs), gp.predict(Xs, params=params)
    for key in ("f_mean", "f_var", "y_mean", "y_var"):
        np.testing.assert_allclose(ours[key], ref[key], rtol=1e-12, atol=1e-14)


def test_predictive_metrics_against_dense(mcmc_fit, svi_fit):
    Xs = np.linspace(0.05, 0.95, 9)[:, None]
    ys = np.sin(6 * Xs[:, 0])
    # SVI: one Gaussian predictive N(m_q, v_q + σ²)
    gp, result, idata, X, y = svi_fit
    p = {k: np.asarray(v) for k, v in result.params.items()}
    L = p["f_v_scale_tril"]
    mean, var = dense_conditional(Xs, p["kernel_variance_map"], p["kernel_lengthscale_map"], p["f_v_loc"],
                                  L @ L.T)
    tot = var + p["likelihood_variance_map"]
    nlpd = np.mean(0.5 * np.log(2 * np.pi * tot) + (ys - mean) ** 2 / (2 * tot))
    m = diagnostics.predictive_metrics(gp, idata, Xs, ys)
    np.testing.assert_allclose(m["nlpd"], nlpd, rtol=1e-9)
    np.testing.assert_allclose(m["rmse"], np.sqrt(np.mean((mean - ys) ** 2)), rtol=1e-9)
    # MCMC: the mixture over draws
    gp, mcmc, idata, X, y = mcmc_fit
    logp, means = [], []
    for c in range(CHAINS):
        for d in range(DRAWS):
            s = draw(idata.posterior, c, d)
            mean, var = dense_conditional(Xs, s["kernel_variance"], s["kernel_lengthscale"], s["f_v"])
            tot = var + s["likelihood_variance"]
            logp.append(-0.5 * np.log(2 * np.pi * tot) - (ys - mean) ** 2 / (2 * tot))
            means.append(mean)
    nlpd = -np.mean(logsumexp(np.array(logp), axis=0) - np.log(len(logp)))
    m = diagnostics.predictive_metrics(gp, idata, Xs, ys)
    np.testing.assert_allclose(m["nlpd"], nlpd, rtol=1e-8)
    np.testing.assert_allclose(m["rmse"], np.sqrt(np.mean((np.mean(means, 0) - ys) ** 2)), rtol=1e-8)


def test_collapsed_gp_has_no_pointwise_log_likelihood():
    """CollapsedGP: no log_likelihood group; y draws follow the optimal-q predictive N(m, v + σ²)."""
    X, y = data()
    gp = make_gp(psg.CollapsedGP)
    svi = SVI(gp.model, gp.guide, optim.Adam(0.02), TraceMeanField_ELBO())
    result = svi.run(jax.random.PRNGKey(0), 200, X, y, progress_bar=False)
    idata = diagnostics.from_svi(result, gp, X, y, num_samples=400, rng_key=jax.random.PRNGKey(3))
    assert "log_likelihood" not in idata.groups()
    p = {k: np.asarray(v) for k, v in result.params.items()}
    # optimal q for Gaussian noise = the exact posterior of f(X) under the Nyström prior Qff
    s2, var_k, ls = p["likelihood_variance_map"], p["kernel_variance_map"], p["kernel_lengthscale_map"]
    Kzz = matern52(Z, Z, var_k, ls) + 1e-10 * var_k * np.eye(M)
    Kzx = matern52(Z, X, var_k, ls)
    Sigma = np.linalg.inv(Kzz + Kzx @ Kzx.T / s2)
    mean = Kzx.T @ Sigma @ Kzx @ y / s2
    var = var_k - np.sum(Kzx * np.linalg.solve(Kzz, Kzx), 0) + np.sum(Kzx * (Sigma @ Kzx), 0)
    z = (idata.posterior_predictive["y"].values[0] - mean) / np.sqrt(var + s2)
    # 8000 values: 5-SE tolerances (0.056 on the mean, 0.08 on the variance)
    assert abs(z.mean()) < 0.06 and abs(z.var() - 1) < 0.08
    ours = diagnostics.predict(gp, idata, X)
    np.testing.assert_allclose(ours["f_mean"], mean, rtol=1e-6, atol=1e-8)


def test_plots_write_pngs(mcmc_fit, tmp_path):
    import matplotlib.image as mpimg

    gp, mcmc, idata, X, y = mcmc_fit
    trace = diagnostics.plot_trace(idata, ["kernel_variance", "kernel_lengthscale"], tmp_path / "t.png")
    pred = diagnostics.predict(gp, idata, X)
    fit = diagnostics.plot_fit_1d(tmp_path / "f.png", X, y, X, pred["y_mean"], np.sqrt(pred["y_var"]),
                                  shade=[(0.2, 0.3)])
    for path in (trace, fit):
        img = mpimg.imread(path)
        assert img.ndim == 3 and img.shape[0] > 100 and img[..., :3].std() > 0.05  # a non-blank image
    # the mixed predictive mean is the average of the per-draw means (law of total expectation)
    np.testing.assert_allclose(pred["f_mean"], np.mean(pred["f_mean_draws"], 0), rtol=1e-12)


def test_plot_adequacy_draws_the_residual_check(tmp_path):
    """The residual check's plot: a 640 × 280 PNG of the per-draw shares (not blank); a dict that is not
    adequacy's result (no per-draw shares) and a tolerance outside (0, 1) are refused, naming the fix."""
    import matplotlib.image as mpimg

    x = np.linspace(0.0, 1.0, 40)
    draws = {"f_kernel_lengthscale": np.linspace(0.05, 0.3, 20), "f_kernel_variance": np.ones(20)}
    check = diagnostics.adequacy(psg.FourierFeatures(-0.2, 1.2, 8), draws, x,
                                 kernel=psg.Matern32(dist.LogNormal(0.0, 1.0), dist.LogNormal(-1.0, 1.0)))
    path = diagnostics.plot_adequacy(check, tmp_path / "adequacy.png", tolerance=0.05)
    img = mpimg.imread(path)
    assert img.shape[:2] == (280, 640) and img[..., :3].std() > 0.05
    with pytest.raises(ValueError, match="diagnostics.adequacy"):
        diagnostics.plot_adequacy({"ok": True, "message": "survives refinement"}, tmp_path / "r.png")
    with pytest.raises(ValueError, match="tolerance"):
        diagnostics.plot_adequacy(check, tmp_path / "t.png", tolerance=5.0)


# --- the approximation-adequacy check ----------------------------------------------------------------
def test_adequacy_residual_fraction_against_a_dense_computation_and_its_advice():
    """r_s = 1 − tr(K_fu K_uu⁻¹ K_uf)/tr(K_ff) per draw, for inducing points (a SparseGP) and VFF in a
    user's own model (kernel template sites f_kernel_*), against dense matrices; the message names
    the fix when the 95% quantile exceeds the tolerance, and passes when the features span the GP."""
    import numpyro.distributions as dist

    x = np.linspace(0.0, 1.0, 40)[:, None]
    Z = np.linspace(0.0, 1.0, 6)[:, None]
    ells = np.array([0.05, 0.1, 0.3, 1.0])
    gp = psg.SparseGP(psg.InducingPoints(Z), psg.Matern32(1.0, dist.LogNormal(-2.0, 0.5)), psg.Gaussian(0.1))
    out = diagnostics.adequacy(gp, {"kernel_lengthscale": ells, "f_v": np.zeros((4, 6))}, x)
    ref = []
    for ell in ells:
        k = psg.Matern32(1.0, ell)
        Kuu, Kuf = np.asarray(k(Z)), np.asarray(k(Z, x))
        ref.append(1 - np.trace(Kuf.T @ np.linalg.solve(Kuu, Kuf)) / np.trace(np.asarray(k(x))))
    # absolute tolerance: at ℓ = 1 Kuu's condition number is ~1e7, so 1 − tr(Q)/tr(K) ≈ 1e-3 carries ~1e-10
    np.testing.assert_allclose(out["residual_fraction"], ref, rtol=1e-8, atol=1e-9)
    assert not out["ok"] and "add inducing points" in out["message"]
    # point estimates (SVI, MAP: the hyperparameters equal in every draw, f_v varying) give every draw
    # the dense value of that lengthscale (evaluated once)
    point = diagnostics.adequacy(gp, {"kernel_lengthscale": np.full(5, ells[2]),
                                      "f_v": np.random.default_rng(0).normal(size=(5, 6))}, x)
    np.testing.assert_allclose(point["residual_fraction"], np.full(5, ref[2]), rtol=1e-8, atol=1e-9)

    template = psg.Matern32(dist.LogNormal(0.0, 1.0), dist.LogNormal(-1.0, 1.0))
    draws = {"f_kernel_lengthscale": np.array([0.05, 0.2]), "f_kernel_variance": np.array([1.0, 2.0])}
    small = psg.FourierFeatures(-0.2, 1.2, 8)
    bad = diagnostics.adequacy(small, draws, x[:, 0], kernel=template)
    for r, ell, var in zip(bad["residual_fraction"], [0.05, 0.2], [1.0, 2.0]):
        k = psg.Matern32(var, ell)
        Kuf = np.asarray(psg.Kuf(small, k, x))
        q = np.einsum("mn,mn->n", Kuf, np.asarray(psg.Kuu(small, k).solve(Kuf)))
        np.testing.assert_allclose(r, 1 - q.sum() / (40 * var), rtol=1e-8)
    assert not bad["ok"] and "increase num_frequencies to" in bad["message"] and "widen the box" in bad["message"]
    # the box rule at the shortest lengthscale, with a margin of 3 of the longest (0.6 = 12 × 0.05)
    spanning = psg.FourierFeatures.from_data(x, psg.Matern32(1.0, 0.05), tolerance=0.01, margin=12.0)
    good = diagnostics.adequacy(spanning, draws, x, kernel=template)
    assert good["ok"] and good["q95"] < 0.05, good["message"]
    with pytest.raises(ValueError, match="kernel="):
        diagnostics.adequacy(small, draws, x)


def test_mixture_metrics_against_direct_formulas():
    rng = np.random.default_rng(0)
    y, mu, var = rng.normal(size=6), rng.normal(size=(3, 6)), rng.uniform(0.1, 1.0, (3, 6))
    out = diagnostics.mixture_metrics(y, mu, var, y_scale=2.0)
    logp = stats.norm.logpdf(y, mu, np.sqrt(var))
    np.testing.assert_allclose(out["nlpd_point"], -np.mean(logsumexp(logp, 0) - np.log(3)), rtol=1e-12)
    np.testing.assert_allclose(out["nlpd_joint"], -(logsumexp(logp.sum(1)) - np.log(3)), rtol=1e-12)
    m, v = mu.mean(0), var.mean(0) + mu.var(0)
    np.testing.assert_allclose(out["nlpd_gaussian"], -stats.norm.logpdf(y, m, np.sqrt(v)).sum(), rtol=1e-12)
    np.testing.assert_allclose(out["rmse"], 2.0 * np.sqrt(np.mean((y - m) ** 2)), rtol=1e-12)
    one = diagnostics.mixture_metrics(y, mu[:1], var[:1])  # one component: joint = Σ pointwise = moment-matched
    np.testing.assert_allclose(one["nlpd_joint"], 6 * one["nlpd_point"], rtol=1e-12)
    np.testing.assert_allclose(one["nlpd_joint"], one["nlpd_gaussian"], rtol=1e-12)


@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto:UserWarning")  # 40 draws: k is noisy
def test_from_mcmc_of_a_users_own_model_has_named_dims_and_a_loo_ready_log_likelihood():
    """A plain model function with spectral_gp: the inducing site gets the dim ``feature``; the
    log-likelihood group holds log N(y_n | f_n, σ²) per draw (checked against scipy at the saved draws'
    f, recomputed from the conditional), so az.loo runs."""
    import arviz as az
    import numpyro
    from numpyro import handlers
    from scipy import stats as st

    x = np.linspace(0.0, 1.0, 20)
    y = np.sin(5 * x) + 0.1 * np.random.default_rng(0).normal(size=20)
    feature = psg.FourierFeatures(-0.5, 1.5, 6)

    def model(x, y=None):
        f = psg.spectral_gp("f", feature, psg.Matern32(1.0, dist.LogNormal(-1.0, 0.3)), x)
        numpyro.sample("y", dist.Normal(f, 0.2), obs=y)

    mcmc = MCMC(NUTS(model), num_warmup=20, num_samples=40, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), x, y)
    idata = diagnostics.from_mcmc(mcmc, model)
    assert idata.posterior["f_v"].dims == ("chain", "draw", "feature")
    draws = mcmc.get_samples()
    f = handlers.substitute(handlers.seed(lambda: psg.spectral_gp(
        "f", feature, psg.Matern32(1.0, draws["f_kernel_lengthscale"][3]), x), 0), {"f_v": draws["f_v"][3]})()
    np.testing.assert_allclose(idata.log_likelihood["y"].values.reshape(40, 20)[3],
                               st.norm.logpdf(y, np.asarray(f), 0.2), rtol=1e-10)
    assert np.isfinite(az.loo(idata).elpd_loo)
    with pytest.raises(TypeError, match="model function"):
        diagnostics.from_mcmc(mcmc, "model")
