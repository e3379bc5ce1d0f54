"""Sparse-spectrum GPs against independent computations: the dense Gaussian log-density, the notes'
formula, the exact weight-space posterior, and the mixture metrics against their direct formulas. (Stein
particle inference, SRF and M-SRFR: ``tests/test_stein.py``.)"""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.util import log_density
from numpyro.optim import Adam
from scipy import stats

import ppl_sparsegp as psg
from ppl_sparsegp.approximations import CollapsedGP, GPModel
from ppl_sparsegp.approximations.spectrum import SparseSpectrumGP, SparseSpectrumNormal, ssgp_log_marginal_likelihood
from ppl_sparsegp.features.random_fourier import RandomFourierFeatures
from ppl_sparsegp.likelihoods import Gaussian


def regression_data(n=30, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, d))
    y = np.sin(6 * X[:, 0]) + 0.5 * X[:, -1] + 0.1 * rng.normal(size=n)
    return jnp.asarray(X), jnp.asarray(y)


def notes_formula(W, ell, s, noise, X, y):
    """Notes §1.2: −(yᵀy − s yᵀΦᵀA⁻¹Φy)/(2σ²) − ½log|A| + R log σ² − (N/2) log 2πσ², A = sΦΦᵀ + σ²I."""
    R, N = W.shape[0], X.shape[0]
    proj = W @ (X / ell).T
    P = np.vstack([np.cos(proj), np.sin(proj)]) / np.sqrt(R)
    A = s * P @ P.T + noise * np.eye(2 * R)
    quad = y @ y - s * (P @ y) @ np.linalg.solve(A, P @ y)
    return (-quad / (2 * noise) - 0.5 * np.linalg.slogdet(A)[1] + R * np.log(noise)
            - N / 2 * np.log(2 * np.pi * noise))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ssgp_log_marginal_equals_dense_multivariate_normal(seed):
    rng = np.random.default_rng(seed)
    X, y = regression_data(25, 3, seed)
    X, y = np.asarray(X), np.asarray(y)
    R = int(rng.integers(2, 9))
    W = rng.normal(size=(R, 3)) * 2
    ell = rng.uniform(0.2, 2.0, 3)
    s = rng.uniform(0.3, 2.0)
    noise = 10 ** rng.uniform(-3, 0)
    c = rng.normal()
    kernel = psg.SquaredExponential(variance=s, lengthscale=jnp.asarray(ell))
    lml = ssgp_log_marginal_likelihood(RandomFourierFeatures(W), kernel, X, y, noise, c)
    P = np.vstack([np.cos(W @ (X / ell).T), np.sin(W @ (X / ell).T)]) / np.sqrt(R)
    dense = dist.MultivariateNormal(jnp.full(25, c), jnp.asarray(s * P.T @ P + noise * np.eye(25)))
    np.testing.assert_allclose(lml, dense.log_prob(jnp.asarray(y)), rtol=1e-10)
    # the corrected constants of the notes (the paper's −R log(Rσ²) would be off by R log(R) + 2R log σ²)
    np.testing.assert_allclose(lml, notes_formula(W, ell, s, noise, X, y - c), rtol=1e-10)
    # and through the NumPyro model: the y site's log density
    gp = SparseSpectrumGP(kernel, Gaussian(noise), mean=c, frequencies=W)
    ld, _ = log_density(gp.model, (X, y), {}, {})
    np.testing.assert_allclose(ld, lml, rtol=1e-12)


def test_latent_frequency_site_has_the_spectral_prior():
    X, y = regression_data()
    kernel = psg.Matern32(variance=1.0, lengthscale=0.5)
    gp = SparseSpectrumGP(kernel, Gaussian(0.1), num_frequencies=4, input_dim=2)
    W = np.random.default_rng(3).normal(size=(4, 2))
    ld, tr = log_density(gp.model, (X, y), {}, {"feature_frequencies": W})
    prior = stats.multivariate_t(loc=np.zeros(2), shape=np.eye(2), df=3.0).logpdf(W).sum()
    lml = ssgp_log_marginal_likelihood(RandomFourierFeatures(W), kernel, X, y, 0.1)
    np.testing.assert_allclose(ld, prior + lml, rtol=1e-12)


def test_maximum_likelihood_recovers_a_sinusoid_frequency():
    # one frequency, ℓ = 1: y = sin(3x) is exactly representable at ω = ±3, the likelihood's maximum
    x = jnp.linspace(0, 4, 80)[:, None]
    y = jnp.sin(3.0 * x[:, 0])
    gp = SparseSpectrumGP(psg.SquaredExponential(variance=1.0, lengthscale=1.0), Gaussian(0.01),
                          frequencies=psg.Param(jnp.array([[2.6]])))
    svi = SVI(gp.model, gp.guide, Adam(0.02), Trace_ELBO())
    res = svi.run(jax.random.PRNGKey(0), 600, x, y, progress_bar=False)
    assert abs(float(res.params["feature_frequencies"][0, 0]) - 3.0) < 0.01


def test_map_guide_starts_frequencies_at_distinct_random_draws():
    X, y = regression_data()
    gp = SparseSpectrumGP(psg.SquaredExponential(), Gaussian(0.1), num_frequencies=6, input_dim=2)
    svi = SVI(gp.model, gp.guide, Adam(0.01), Trace_ELBO())
    W0 = np.asarray(svi.get_params(svi.init(jax.random.PRNGKey(0), X, y))["feature_frequencies_map"])
    # a draw from the spectral density (the prior mean, 0, would make all six frequencies equal forever)
    assert len(np.unique(np.round(W0, 8), axis=0)) == 6 and np.std(W0) > 0.3


def test_predict_is_the_exact_gp_with_the_sparse_spectrum_kernel():
    X, y = regression_data(20, 1)
    Xs = jnp.linspace(-0.1, 1.1, 7)[:, None]
    W = np.random.default_rng(5).normal(size=(5, 1))
    kernel = psg.SquaredExponential(variance=1.4, lengthscale=0.3)
    gp = SparseSpectrumGP(kernel, Gaussian(0.03), frequencies=W)
    out = gp.with_data(X, y).predict(Xs, params={})
    feat = RandomFourierFeatures(W)
    K, Ks, Kss = (np.asarray(feat.gram(kernel, a, b)) for a, b in ((X, X), (Xs, X), (Xs, Xs)))
    C = K + 0.03 * np.eye(20)
    np.testing.assert_allclose(out["f_mean"], Ks @ np.linalg.solve(C, np.asarray(y)), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(out["f_var"], np.diag(Kss - Ks @ np.linalg.solve(C, Ks.T)), rtol=1e-6, atol=1e-10)


def test_sparse_spectrum_gp_predicts_from_held_data_and_draws_its_posterior_predictive():
    # on the shared base, not the collapsed bound's class; predict conditions on the data of with_data
    # (a copy: the original holds none), and posterior_predictive draws y ~ N(m, v + σ²) from it
    X, y = regression_data(20, 1)
    gp = SparseSpectrumGP(psg.SquaredExponential(variance=1.4, lengthscale=0.3), Gaussian(0.03),
                          frequencies=dist.Normal(0.0, 1.0).expand((5, 1)).to_event(2))
    assert isinstance(gp, GPModel) and not isinstance(gp, CollapsedGP) and not gp.pointwise_likelihood
    W = jnp.asarray(np.random.default_rng(5).normal(size=(5, 1)))
    with pytest.raises(ValueError, match="with_data"):
        gp.predict(X, samples={"feature_frequencies": W[None]})
    out = gp.with_data(X, y).predict(X, samples={"feature_frequencies": W[None]})
    assert gp.data is None
    S = 4000  # one chain of S identical draws: y_rep ~ N(f_mean, y_var) per point
    draws = gp.posterior_predictive({"feature_frequencies": jnp.broadcast_to(W, (1, S, 5, 1))},
                                    jax.random.PRNGKey(1), X, y)["y"]
    assert draws.shape == (1, S, 20)
    sd = np.sqrt(np.asarray(out["y_var"]))
    # 4000 draws: the sample mean within 5 standard errors, the sample sd within 5·(1/√(2S)) relative
    np.testing.assert_allclose(draws[0].mean(0), out["y_mean"], atol=5 * sd.max() / np.sqrt(S))
    np.testing.assert_allclose(draws[0].std(0), sd, rtol=5 / np.sqrt(2 * S))
    np.testing.assert_allclose(out["y_var_draws"][0], out["f_var"] + 0.03, rtol=1e-12)


def test_sparse_spectrum_normal_is_the_dense_gaussian_with_any_diagonal():
    # heteroscedastic D, a batch of values, and the moments of its sampler: against the dense N(μ, D + WᵀW)
    rng = np.random.default_rng(3)
    K, N = 4, 12
    W, mu, d = rng.normal(size=(K, N)), rng.normal(size=N), 10 ** rng.uniform(-3, 0, N)
    d_ = SparseSpectrumNormal(jnp.asarray(mu), jnp.asarray(d), jnp.asarray(W))
    values = rng.normal(size=(2, 3, N))
    ref = stats.multivariate_normal(mu, np.diag(d) + W.T @ W).logpdf(values)
    np.testing.assert_allclose(d_.log_prob(jnp.asarray(values)), ref, rtol=1e-10)
    draws = np.asarray(d_.sample(jax.random.PRNGKey(0), (20000,)))
    # 20 000 draws: the sample covariance's entries are within 5 standard errors (≤ 5·√(2/n)·max var)
    np.testing.assert_allclose(np.cov(draws.T), np.diag(d) + W.T @ W, atol=5 * np.sqrt(2 / 20000) * 20)


def test_bad_input_is_rejected():
    X, y = regression_data()
    with pytest.raises(ValueError, match="num_frequencies"):
        SparseSpectrumGP(psg.SquaredExponential(), Gaussian(0.1))
    with pytest.raises(ValueError, match="init"):
        SparseSpectrumGP(psg.SquaredExponential(), Gaussian(0.1), num_frequencies=2, input_dim=2, init="sobol")
    gp = SparseSpectrumGP(psg.SquaredExponential(), Gaussian(0.1), frequencies=np.ones((2, 2)))
    with pytest.raises(ValueError, match="y"):
        ssgp_log_marginal_likelihood(gp.feature, psg.SquaredExponential(), X, y[:-1], 0.1)
    with pytest.raises(ValueError, match="X"):
        ssgp_log_marginal_likelihood(gp.feature, psg.SquaredExponential(), X[:, :1], y, 0.1)
