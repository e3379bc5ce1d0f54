"""The approximations against exact GP computations: collapsed bound, SVGP optimum, NUTS posterior."""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS, SVI, TraceMeanField_ELBO
from numpyro.infer.util import log_density

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.collapsed import optimal_whitened_q
from ppl_sparsegp.covariances import SufficientStatistics
from ppl_sparsegp.likelihoods import Gaussian, Poisson

NOISE = 0.05


def data(n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0, 1, n))[:, None]
    y = np.sin(6 * X[:, 0]) + 0.2 * rng.normal(size=n)
    return jnp.asarray(X), jnp.asarray(y)


KERNEL = psg.Matern52(variance=1.2, lengthscale=0.3)


def dense_posterior(X, y, Xs, kernel=KERNEL, noise=NOISE):
    K = np.asarray(kernel(X)) + noise * np.eye(len(X))
    Ks, Kss = np.asarray(kernel(Xs, X)), np.asarray(kernel(Xs))
    mean = Ks @ np.linalg.solve(K, np.asarray(y))
    cov = Kss - Ks @ np.linalg.solve(K, Ks.T)
    return mean, np.diag(cov)


def test_collapsed_equals_exact_when_z_is_x():
    X, y = data()
    exact = psg.exact_log_marginal_likelihood(KERNEL, X, y, NOISE)
    bound = psg.collapsed_elbo(psg.InducingPoints(X), KERNEL, X, y, NOISE)
    # jitter εσ² (ε = 1e-10) lowers the bound by about Nεσ²/(2σn²) ≈ 4e-8 ≪ 1e-6
    np.testing.assert_allclose(bound, exact, atol=1e-6)
    # independent dense reference for the exact value
    K = np.asarray(KERNEL(X)) + NOISE * np.eye(len(X))
    sign, logdet = np.linalg.slogdet(K)
    ref = -0.5 * (y @ np.linalg.solve(K, y) + logdet + len(X) * np.log(2 * np.pi))
    np.testing.assert_allclose(exact, ref, rtol=1e-12)


def test_collapsed_below_exact_for_subsets():
    X, y = data()
    exact = psg.exact_log_marginal_likelihood(KERNEL, X, y, NOISE)
    rng = np.random.default_rng(1)
    previous = -np.inf
    for m in (3, 8, 15, 29):
        Z = X[np.sort(rng.choice(len(X), m, replace=False))]
        bound = psg.collapsed_elbo(psg.InducingPoints(Z), KERNEL, X, y, NOISE)
        assert bound < exact
        previous = bound
    assert exact - previous < 1.0  # 29 of 30 points: nearly tight


def test_collapsed_matches_titsias_dense_formula():
    """Independent dense evaluation: log N(y|0, Qff+σ²I) − tr(Kff−Qff)/(2σ²)."""
    X, y = data()
    Z = X[::4]
    Kzz = np.asarray(KERNEL(Z)) + 1e-10 * 1.2 * np.eye(len(Z))
    Kzx = np.asarray(KERNEL(Z, X))
    Q = Kzx.T @ np.linalg.solve(Kzz, Kzx)
    C = Q + NOISE * np.eye(len(X))
    ref = (-0.5 * (y @ np.linalg.solve(C, y) + np.linalg.slogdet(C)[1] + len(X) * np.log(2 * np.pi))
           - 0.5 * np.trace(np.asarray(KERNEL(X)) - Q) / NOISE)
    np.testing.assert_allclose(psg.collapsed_elbo(psg.InducingPoints(Z), KERNEL, X, y, NOISE), ref,
                               rtol=1e-9)


def optimal_params(gp, X, y):
    """Analytic optimum of q for SparseGP with fixed hyperparameters, in gp's parameterisation."""
    feature = gp.feature
    Kmm = psg.Kuu(feature, KERNEL)
    stats = SufficientStatistics.from_kuf(psg.Kuf(feature, KERNEL, X), y)
    m_v, S_v = optimal_whitened_q(Kmm, stats, NOISE)
    if gp.whiten:
        return {"f_v_loc": m_v, "f_v_scale_tril": jnp.linalg.cholesky(S_v.to_dense())}
    R = Kmm.sqrt()
    return {"f_u_loc": R @ m_v, "f_u_scale_tril": jnp.linalg.cholesky(R @ S_v.to_dense() @ R.T)}


@pytest.mark.parametrize("whiten", [True, False])
def test_svgp_optimum_equals_collapsed_bound(whiten):
    X, y = data()
    Z = X[::3]
    gp = psg.SparseGP(psg.InducingPoints(Z), KERNEL, Gaussian(NOISE), whiten=whiten)
    params = optimal_params(gp, X, y)
    bound = psg.collapsed_elbo(psg.InducingPoints(Z), KERNEL, X, y, NOISE)
    np.testing.assert_allclose(gp.elbo(params, X, y), bound, rtol=1e-8)
    # any other q is worse
    worse = dict(params)
    key = next(k for k in params if k.endswith("_loc"))
    worse[key] = params[key] + 0.05
    assert gp.elbo(worse, X, y) < bound


def test_whitened_and_unwhitened_predictions_agree_and_match_exact_gp():
    X, y = data()
    Xs = jnp.linspace(-0.2, 1.2, 17)[:, None]
    preds = []
    for whiten in (True, False):
        gp = psg.SparseGP(psg.InducingPoints(X), KERNEL, Gaussian(NOISE), whiten=whiten)
        preds.append(gp.predict(Xs, params=optimal_params(gp, X, y)))
    np.testing.assert_allclose(preds[0]["f_mean"], preds[1]["f_mean"], atol=1e-7)
    np.testing.assert_allclose(preds[0]["f_var"], preds[1]["f_var"], atol=1e-7)
    mean, var = dense_posterior(X, y, Xs)
    np.testing.assert_allclose(preds[0]["f_mean"], mean, atol=1e-6)
    np.testing.assert_allclose(preds[0]["f_var"], var, atol=1e-6)
    np.testing.assert_allclose(preds[0]["y_var"], var + NOISE, atol=1e-6)


def test_svi_monte_carlo_elbo_is_unbiased():
    """−loss of TraceMeanField_ELBO (one draw of u) averages to the exact ELBO within 4 standard errors."""
    X, y = data(20)
    gp = psg.SparseGP(psg.InducingPoints(X[::2]), KERNEL, Gaussian(NOISE), whiten=True)
    params = optimal_params(gp, X, y)
    params["f_v_loc"] = params["f_v_loc"] * 0.8  # away from the optimum
    exact = gp.elbo(params, X, y)
    elbo = TraceMeanField_ELBO()
    keys = jax.random.split(jax.random.PRNGKey(0), 2000)
    vals = jax.vmap(lambda k: -elbo.loss(k, params, gp.model, gp.guide, X, y))(keys)
    se = vals.std() / np.sqrt(len(vals))
    assert abs(vals.mean() - exact) < 4 * se + 1e-9


def test_minibatch_factor_is_unbiased():
    X, y = data(40)
    gp = psg.SparseGP(psg.InducingPoints(X[::4]), KERNEL, Gaussian(NOISE), whiten=True)
    v = jax.random.normal(jax.random.PRNGKey(2), (10,))
    full, _ = log_density(gp.model, (X, y), {}, {"f_v": v})

    def batch(key):
        return log_density(numpyro.handlers.seed(gp.model, key), (X, y), {"batch_size": 8}, {"f_v": v})[0]

    vals = jax.vmap(batch)(jax.random.split(jax.random.PRNGKey(3), 4000))
    assert abs(vals.mean() - full) < 4 * vals.std() / np.sqrt(len(vals))


def test_svi_fit_approaches_collapsed_bound():
    X, y = data(30)
    Z = X[::3]
    gp = psg.SparseGP(psg.InducingPoints(Z), KERNEL, Gaussian(NOISE), whiten=True)
    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.02), TraceMeanField_ELBO(num_particles=4))
    res = svi.run(jax.random.PRNGKey(0), 3000, X, y, progress_bar=False)
    bound = psg.collapsed_elbo(psg.InducingPoints(Z), KERNEL, X, y, NOISE)
    gap = bound - gp.elbo(res.params, X, y)
    assert -1e-8 < gap < 0.5  # never above the optimum; Adam with MC gradients gets within 0.5 nats


def test_nuts_reproduces_exact_posterior():
    """Z = X, fixed hyperparameters, Gaussian likelihood: p(v|y) is Gaussian and f = Aᵀv is exact."""
    X, y = data(8, seed=3)
    gp = psg.SparseGP(psg.InducingPoints(X), KERNEL, Gaussian(NOISE), whiten=True)
    mcmc = MCMC(NUTS(gp.model), num_warmup=500, num_samples=4000, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), X, y)
    samples = mcmc.get_samples()
    pred = gp.predict(X, samples=samples)
    draws = np.asarray(pred["f_mean_draws"])
    mean, var = dense_posterior(X, y, X)
    ess = np.asarray(numpyro.diagnostics.effective_sample_size(draws[None]))
    se_mean = np.sqrt(var / ess)
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * se_mean)
    # sampling variance of a variance estimate: var·sqrt(2/ESS)
    assert np.all(np.abs(draws.var(0) - var) < 5 * var * np.sqrt(2 / ess))


def test_collapsed_gp_under_nuts_and_svi_recovers_noise():
    rng = np.random.default_rng(4)
    X = jnp.asarray(np.sort(rng.uniform(0, 1, 60))[:, None])
    y = jnp.asarray(np.sin(6 * X[:, 0]) + 0.3 * rng.normal(size=60))
    gp = psg.CollapsedGP(psg.InducingPoints(X[::4]),
                         psg.Matern52(variance=dist.LogNormal(0, 1), lengthscale=dist.LogNormal(-1, 1)),
                         Gaussian(variance=dist.LogNormal(-2, 1)))
    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.05), TraceMeanField_ELBO())
    res = svi.run(jax.random.PRNGKey(0), 1500, X, y, progress_bar=False)
    noise = res.params["likelihood_variance_map"]
    assert 0.05 < noise < 0.15  # true 0.09
    mcmc = MCMC(NUTS(gp.model), num_warmup=300, num_samples=300, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), X, y)
    s = mcmc.get_samples()
    assert 0.05 < float(jnp.median(s["likelihood_variance"])) < 0.15
    pred = gp.with_data(X, y).predict(X, samples=s)
    assert float(jnp.mean((pred["f_mean"] - jnp.sin(6 * X[:, 0])) ** 2)) < 0.02


def test_spectral_gp_primitive_log_density():
    """The primitive inside a user's Poisson model: log joint equals a dense hand computation."""
    X, _ = data(12)
    Z = X[::3]
    counts = jnp.arange(12) % 4

    def model(X, y=None):
        f = psg.spectral_gp("g", psg.InducingPoints(Z), KERNEL, X)
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

    v = jax.random.normal(jax.random.PRNGKey(0), (4,))
    lp, _ = log_density(model, (X, counts), {}, {"g_v": v})
    Kzz = np.asarray(KERNEL(Z)) + 1e-10 * 1.2 * np.eye(4)
    L = np.linalg.cholesky(Kzz)
    f = np.asarray(KERNEL(X, Z)) @ np.linalg.solve(Kzz, L @ np.asarray(v))
    from scipy import stats
    ref = stats.norm.logpdf(v).sum() + stats.poisson.logpmf(np.asarray(counts), np.exp(f)).sum()
    np.testing.assert_allclose(lp, ref, rtol=1e-8)


def test_poisson_sparse_gp_svi_runs_with_minibatches():
    rng = np.random.default_rng(5)
    X = jnp.asarray(rng.uniform(0, 1, (200, 1)))
    rate = np.exp(1 + np.sin(6 * np.asarray(X[:, 0])))
    y = jnp.asarray(rng.poisson(rate))
    gp = psg.SparseGP(psg.InducingPoints(jnp.linspace(0, 1, 10)[:, None]), KERNEL, Poisson(), q_cov="diag",
                      mean=dist.Normal(0, 3))
    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.03), TraceMeanField_ELBO())
    res = svi.run(jax.random.PRNGKey(0), 2000, X, y, batch_size=50, progress_bar=False)
    pred = gp.predict(X, params=res.params)
    rel = np.abs(np.asarray(pred["y_mean"]) - rate) / rate
    assert np.median(rel) < 0.15


def test_bad_inputs():
    X, y = data(10)
    gp = psg.SparseGP(psg.InducingPoints(X[::2]), KERNEL, Gaussian(NOISE))
    with pytest.raises(ValueError, match="10 rows but y has 9"):
        log_density(gp.model, (X, y[:9]), {}, {"f_v": jnp.zeros(5)})
    with pytest.raises(ValueError, match="y must be a vector"):
        log_density(gp.model, (X, y[:, None]), {}, {"f_v": jnp.zeros(5)})
    with pytest.raises(ValueError, match="NaN or inf"):
        log_density(gp.model, (X.at[0, 0].set(jnp.nan), y), {}, {"f_v": jnp.zeros(5)})
    with pytest.raises(ValueError, match="batch_size"):
        log_density(gp.model, (X, y), {"batch_size": 0}, {"f_v": jnp.zeros(5)})
    with pytest.raises(ValueError, match="q_cov"):
        psg.SparseGP(psg.InducingPoints(X), KERNEL, q_cov="kronecker-ish")
    with pytest.raises(ValueError, match="positive support"):
        psg.SparseGP(psg.InducingPoints(X), psg.Matern32(lengthscale=dist.Normal(0, 1)))
    with pytest.raises(ValueError, match="Gaussian likelihood"):
        psg.CollapsedGP(psg.InducingPoints(X), KERNEL, Poisson())
    with pytest.raises(ValueError, match="noise_variance must be positive"):
        psg.collapsed_elbo(psg.InducingPoints(X), KERNEL, X, y, -1.0)
    with pytest.raises(TypeError, match="feature must be an InducingFeature"):
        psg.SparseGP(X, KERNEL)


def test_predict_and_elbo_refuse_missing_or_misspelt_params():
    """Issue 17 item 3: predict(params={}) used to return mean 0 and the prior variance (q(u) at its
    initial value, hyperparameters drawn from the prior with seed 0). Every param of the guide is now
    required; missing ones and keys that match nothing are named, eagerly and under jit."""
    X, y = data(12)
    gp = psg.SparseGP(psg.InducingPoints(X[::3]),
                      psg.Matern52(variance=psg.Param(1.0, dist.constraints.positive),
                                   lengthscale=dist.LogNormal(-1.0, 1.0)),
                      Gaussian(variance=dist.LogNormal(-2.0, 1.0)), mean=dist.Normal(0.0, 1.0))
    params = {"kernel_variance": 1.3, "kernel_lengthscale_map": 0.25, "likelihood_variance_map": 0.05,
              "mean_map": 0.1, "f_v_loc": 0.3 * jnp.ones(4), "f_v_scale_tril": 0.5 * jnp.eye(4)}
    full = gp.predict(X, params=params)
    # the point values (site names instead of <site>_map) are accepted and mean the same
    np.testing.assert_allclose(gp.predict(X, params=gp.point_values(params))["f_mean"], full["f_mean"])
    with pytest.raises(ValueError, match=r"predict: params is missing 'kernel_variance', 'kernel_lengthscale_map'"
                                         r", 'likelihood_variance_map', 'mean_map', 'f_v_loc', 'f_v_scale_tril' "
                                         r"\(pass svi_result.params from SVI on this model's guide\)"):
        gp.predict(X, params={})
    without_q = {k: v for k, v in params.items() if k != "f_v_scale_tril"}
    with pytest.raises(ValueError, match=r"is missing 'f_v_scale_tril' \(pass"):
        jax.jit(lambda p: gp.predict(X, params=p))(without_q)
    typo = dict(without_q, f_v_scale_trill=params["f_v_scale_tril"])
    with pytest.raises(ValueError, match="elbo: params is missing 'f_v_scale_tril'; it has unexpected "
                                         "'f_v_scale_trill'"):
        gp.elbo(typo, X, y)
    # a complete dict with an extra key is fine (and the extra key changes nothing)
    np.testing.assert_array_equal(gp.predict(X, params=dict(params, loss=0.0))["f_var"], full["f_var"])


def test_predict_refuses_missing_sample_sites_and_collapsed_params():
    """samples= must hold every sampled site (no silent prior draws); CollapsedGP's params and
    optimal_q's values likewise."""
    X, y = data(12)
    kernel = psg.Matern52(variance=dist.LogNormal(0.0, 1.0), lengthscale=dist.LogNormal(-1.0, 1.0))
    gp = psg.SparseGP(psg.InducingPoints(X[::3]), kernel, Gaussian(NOISE))
    draws = {"kernel_variance": jnp.array([1.0, 1.5]), "kernel_lengthscale": jnp.array([0.2, 0.3]),
             "f_v": jnp.ones((2, 4))}
    out = gp.predict(X, samples=draws)
    assert out["f_mean_draws"].shape == (2, 12) and np.all(np.isfinite(out["f_var"]))
    with pytest.raises(ValueError, match=r"predict: samples is missing 'kernel_lengthscale'; it has unexpected "
                                         r"'kernel_lengthscale_map' \(pass mcmc.get_samples\(\)"):
        gp.predict(X, samples={"kernel_lengthscale_map" if k == "kernel_lengthscale" else k: v
                               for k, v in draws.items()})
    with pytest.raises(ValueError, match="samples is missing 'f_v'"):
        gp.predict(X, samples={k: v for k, v in draws.items() if k != "f_v"})

    collapsed = psg.CollapsedGP(psg.InducingPoints(X), kernel, Gaussian(dist.LogNormal(-2.0, 1.0)))
    with pytest.raises(ValueError, match="predict: params is missing 'kernel_lengthscale_map', "
                                         "'likelihood_variance_map'"):
        collapsed.with_data(X, y).predict(X, params={"kernel_variance_map": 1.2})
    point = {"kernel_variance_map": 1.2, "kernel_lengthscale_map": 0.3, "likelihood_variance_map": NOISE}
    mean, var = dense_posterior(X, y, X)  # Z = X: the exact GP at KERNEL's values
    pred = collapsed.with_data(X, y).predict(X, params=point)
    np.testing.assert_allclose(pred["f_mean"], mean, atol=1e-6)
    np.testing.assert_allclose(pred["f_var"], var, atol=1e-6)
    with pytest.raises(ValueError, match="samples is missing 'likelihood_variance'"):
        collapsed.with_data(X, y).predict(X, samples={k: v for k, v in draws.items() if k != "f_v"})
    with pytest.raises(ValueError, match="optimal_q: values is missing 'kernel_lengthscale'"):
        collapsed.optimal_q({"kernel_variance": 1.0, "likelihood_variance": NOISE}, X, y)


def test_multiclass_predict_refuses_missing_params_and_sites():
    """The same guard in SparseGP: one q per class, every class's params required."""
    from ppl_sparsegp import SparseGP
    from ppl_sparsegp.likelihoods import RobustMax

    X, _ = data(9)
    labels = jnp.arange(9) % 3
    gp = SparseGP(psg.InducingPoints(X[::3]), psg.Matern52(lengthscale=dist.LogNormal(-1.0, 1.0)),
                            RobustMax(3), q_cov="diag")
    params = {"kernel_lengthscale_map": 0.3, **{f"f_v_{c}_loc": jnp.full(3, c - 1.0) for c in range(3)},
              **{f"f_v_{c}_scale": 0.5 * jnp.ones(3) for c in range(3)}}
    pred = jax.jit(lambda p: gp.predict(X, params=p))(params)
    assert np.all(np.argmax(pred["f_mean"], 1) == 2)  # class 2 has the largest q mean: params were used
    partial = {k: v for k, v in params.items() if k != "f_v_2_scale"}
    with pytest.raises(ValueError, match=r"predict: params is missing 'f_v_2_scale' \(pass svi_result"):
        gp.predict(X, params=partial)
    with pytest.raises(ValueError, match="elbo: params is missing 'f_v_2_scale'"):
        gp.elbo(partial, X, labels)
    with pytest.raises(ValueError, match="samples is missing 'kernel_lengthscale'"):
        gp.predict(X, samples={"f_v": jnp.zeros((2, 9))})
