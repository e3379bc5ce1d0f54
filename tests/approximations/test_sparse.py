"""SparseGP (SVGP under SVI, the MCMC formulation under NUTS, ``num_latent_gps``) against exact GP
computations: the SVGP optimum equals the collapsed bound, predictions equal the exact GP when Z = X,
the Monte Carlo SVI objective and the minibatch factor are unbiased, NUTS reproduces the exact posterior;
several latent GPs (multiclass) against dense per-latent marginals and KLs."""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import optim
from numpyro.infer import MCMC, NUTS, SVI, TraceMeanField_ELBO
from numpyro.infer.util import log_density
from regression import KERNEL, NOISE, data, dense_posterior

import ppl_sparsegp as psg
from ppl_sparsegp import SparseGP
from ppl_sparsegp.approximations.collapsed import optimal_whitened_q
from ppl_sparsegp.approximations.variational import block_diagonal_covariance
from ppl_sparsegp.covariances import SufficientStatistics
from ppl_sparsegp.features.harmonic import HarmonicFeatures
from ppl_sparsegp.groups import Negation
from ppl_sparsegp.likelihoods import Gaussian, Poisson, RobustMax, Softmax


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
    keys = jax.random.split(jax.random.PRNGKey(0), 500)
    vals = jax.jit(jax.vmap(lambda k: -elbo.loss(k, params, gp.model, gp.guide, X, y)))(keys)
    se = vals.std() / np.sqrt(len(vals))
    assert abs(vals.mean() - exact) < 4 * se + 1e-9


def test_minibatch_factor_is_unbiased():
    X, y = data(40)
    gp = psg.SparseGP(psg.InducingPoints(X[::4]), KERNEL, Gaussian(NOISE), whiten=True)
    v = jax.random.normal(jax.random.PRNGKey(2), (10,))
    full, _ = log_density(gp.model, (X, y), {}, {"f_v": v})

    def batch(key):
        return log_density(numpyro.handlers.seed(gp.model, key), (X, y), {"batch_size": 8}, {"f_v": v})[0]

    vals = jax.jit(jax.vmap(batch))(jax.random.split(jax.random.PRNGKey(3), 1000))
    assert abs(vals.mean() - full) < 4 * vals.std() / np.sqrt(len(vals))


@pytest.mark.slow  # SVI to convergence; test_svgp_optimum_equals_collapsed_bound checks the optimum exactly
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
    mcmc = MCMC(NUTS(gp.model), num_warmup=300, num_samples=1500, progress_bar=False)
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


@pytest.mark.slow  # SVI to convergence; the minibatch factor and Poisson's expectation are fast tests
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


# --- several latent GPs (num_latent_gps = C, multiclass likelihoods) ----------------------------------
def test_num_latent_gps_must_match_the_likelihood():
    with pytest.raises(ValueError, match="multiclass likelihood"):
        SparseGP(psg.InducingPoints(np.zeros((2, 1))), psg.Matern32(), psg.likelihoods.Bernoulli(), num_latent_gps=3)


MC_KERNEL = psg.SquaredExponential(variance=1.5, lengthscale=0.8)
_MC_RNG = np.random.default_rng(0)
MC_X = _MC_RNG.normal(size=(25, 2))
MC_Y = _MC_RNG.integers(0, 3, 25)


def random_q(rng, C, sizes, scale=0.4):
    """Per class: a loc and a list of lower-triangular blocks."""
    out = []
    for _ in range(C):
        blocks = []
        for n in sizes:
            L = np.tril(rng.normal(size=(n, n))) * scale
            L[np.arange(n), np.arange(n)] = np.abs(L[np.arange(n), np.arange(n)]) + 0.3
            blocks.append(L)
        out.append((rng.normal(size=sum(sizes)) * 0.5, blocks))
    return out


def dense_kl(mu, S, P):
    Pinv = np.linalg.inv(P)
    return 0.5 * (np.trace(Pinv @ S) + mu @ Pinv @ mu - len(mu) + np.linalg.slogdet(P)[1] - np.linalg.slogdet(S)[1])


MC_CASES = {
    "points-whitened": (psg.InducingPoints(MC_X[:5]), "full", True, (5,)),
    "points-centred": (psg.InducingPoints(MC_X[:5]), "full", False, (5,)),
    "harmonic-centred": (HarmonicFeatures(Negation(), MC_X[:3]), block_diagonal_covariance, False, (3, 3)),
    "harmonic-whitened": (HarmonicFeatures(Negation(), MC_X[:3]), block_diagonal_covariance, True, (3, 3)),
}


def multiclass_setup(case, C=3):
    feature, q_cov, whiten, sizes = MC_CASES[case]
    gp = SparseGP(feature, MC_KERNEL, RobustMax(C, epsilon=0.02), whiten=whiten, q_cov=q_cov)
    qs = random_q(np.random.default_rng(2), C, sizes)
    params = {}
    for c, (mu, blocks) in enumerate(qs):
        params[f"{gp.site}_{c}_loc"] = mu
        params[f"{gp.site}_{c}_scale_tril"] = blocks[0] if len(blocks) == 1 else np.stack(blocks)
    Kuu, Kuf = jax.jit(lambda f: (psg.Kuu(f, MC_KERNEL).to_dense(), psg.Kuf(f, MC_KERNEL, MC_X)))(feature)
    Kuu, Kuf = np.asarray(Kuu), np.asarray(Kuf)
    Ls = [np.asarray(jax.scipy.linalg.block_diag(*blocks)) for _, blocks in qs]
    return gp, params, qs, Ls, Kuu, Kuf, whiten


def dense_marginals(qs, Ls, Kuu, Kuf, whiten):
    """q(f_c(MC_X)) per class from dense matrices (notes §1 predictive, per latent)."""
    R = np.linalg.cholesky(Kuu)
    A = np.linalg.solve(Kuu, Kuf)
    means, varis = [], []
    for (mu, _), L in zip(qs, Ls):
        S = L @ L.T
        mu_u, S_u = (R @ mu, R @ S @ R.T) if whiten else (mu, S)
        means.append(A.T @ mu_u)
        varis.append(1.5 - np.sum(Kuf * A, 0) + np.sum(A * (S_u @ A), 0))
    return np.stack(means, 1), np.stack(varis, 1)


@pytest.mark.parametrize("case", list(MC_CASES))
def test_elbo_and_predict_against_dense(case):
    """ELBO = Σ_n E_q log p(y_n|f_n) − Σ_c KL(q(u_c)‖p(u_c)), q(f_c) and the predictive, densely."""
    gp, params, qs, Ls, Kuu, Kuf, whiten = multiclass_setup(case)
    mean, var = dense_marginals(qs, Ls, Kuu, Kuf, whiten)
    prior = np.eye(len(Kuu)) if whiten else Kuu
    kl = sum(dense_kl(mu, L @ L.T, prior) for (mu, _), L in zip(qs, Ls))
    lik = RobustMax(3, epsilon=0.02)
    ref = float(np.sum(lik.variational_expectation(MC_Y, mean, var))) - kl
    elbo, pred = jax.jit(lambda p: (gp.elbo(p, MC_X, MC_Y), gp.predict(MC_X, params=p)))(params)
    np.testing.assert_allclose(elbo, ref, rtol=1e-9)
    np.testing.assert_allclose(pred["f_mean"], mean, atol=1e-10)
    np.testing.assert_allclose(pred["f_var"], var, atol=1e-10)
    np.testing.assert_allclose(pred["y_mean"], lik.class_probabilities(mean, var), atol=1e-10)


def test_svi_objective_is_unbiased_for_the_elbo():
    """TraceMeanField_ELBO (u ~ q for all classes in one site, minibatch of 6, KL analytic over the
    class blocks) averages to −ELBO (tolerance 4 standard errors)."""
    gp, params, *_ = multiclass_setup("harmonic-centred")
    params = {k: jnp.asarray(v) for k, v in params.items()}
    keys = jax.random.split(jax.random.PRNGKey(0), 1000)
    loss = TraceMeanField_ELBO()
    losses = jax.jit(jax.vmap(lambda k: loss.loss(k, params, gp.model, gp.guide, MC_X, MC_Y, batch_size=6)))(keys)
    exact = -float(jax.jit(lambda p: gp.elbo(p, MC_X, MC_Y))(params))
    se = float(jnp.std(losses)) / np.sqrt(len(keys))
    assert abs(float(jnp.mean(losses)) - exact) < 4 * se


def test_predict_from_samples_mixes_the_per_draw_conditionals():
    gp, params, qs, Ls, Kuu, Kuf, whiten = multiclass_setup("points-whitened")
    draws = np.random.default_rng(4).normal(size=(2, 3 * 5))
    out = jax.jit(lambda s: gp.predict(MC_X, samples=s))({gp.site: draws})
    A = np.linalg.solve(np.linalg.cholesky(Kuu), Kuf)  # whitened: f | v has mean Aᵀ v
    means = np.stack([A.T @ d.reshape(3, 5).T for d in draws])  # (2, N, C)
    np.testing.assert_allclose(out["f_mean"], means.mean(0), atol=1e-10)
    np.testing.assert_allclose(out["f_mean_draws"], means, atol=1e-10)
    np.testing.assert_allclose(np.sum(out["y_mean"], -1), 1.0, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("likelihood", [RobustMax(3), Softmax(3, num_samples=16)], ids=["robustmax", "softmax"])
def test_svi_learns_a_three_class_problem(likelihood):
    """End to end with harmonic features: three angular sectors of the plane are separable, so the
    fitted classifier is accurate (> 90 %) and its ELBO improves on the prior's."""
    rng = np.random.default_rng(5)
    Xc = rng.normal(size=(240, 2))
    yc = ((np.arctan2(Xc[:, 1], Xc[:, 0]) + np.pi) // (2 * np.pi / 3)).astype(int) % 3
    gp = SparseGP(HarmonicFeatures(Negation(), psg.Param(Xc[:8])), psg.SquaredExponential(1.0, 1.0),
                  likelihood, q_cov=block_diagonal_covariance)
    svi = SVI(gp.model, gp.guide, optim.Adam(0.03), TraceMeanField_ELBO())
    result = svi.run(jax.random.PRNGKey(0), 400, Xc, yc, batch_size=120, progress_bar=False)
    probs = jax.jit(lambda p: gp.predict(Xc, params=p)["y_mean"])(result.params)
    assert np.mean(np.argmax(probs, 1) == yc) > 0.9
    assert result.losses[-20:].mean() < result.losses[:20].mean()


@pytest.mark.parametrize("batch_size", [2.5, "10", True])
def test_batch_size_that_is_not_a_row_count_is_refused(batch_size):
    """A float, a string or a bool minibatch size raises the library's error naming batch_size (it used
    to reach numpyro.plate: "'float' object cannot be interpreted as an integer")."""
    X, y = np.linspace(0, 1, 20)[:, None], np.sin(np.linspace(0, 6, 20))
    gp = SparseGP(psg.InducingPoints(X[::4]), psg.Matern32(), Gaussian(0.1))
    with pytest.raises(ValueError, match=r"batch_size must be None or a positive integer, got "):
        numpyro.handlers.seed(gp.model, 0)(X, y, batch_size=batch_size)
    numpyro.handlers.seed(gp.model, 0)(X, y, batch_size=np.int64(5))  # a NumPy int is a row count
