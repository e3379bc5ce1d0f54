"""marginal_spectral_gp(..., exact=True) against independent dense computations: the density against
dist.MultivariateNormal with the summed kernels, the leave-one-out terms and the draws at new inputs
against explicit Gaussian conditioning, and the sparse marginal approaching it as the features grow."""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer import Predictive
from regression import assert_draws_match_conditional, trend_series

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.exact_marginal import ExactMarginalGaussian
from ppl_sparsegp.features import FourierFeatures

jax.config.update("jax_enable_x64", True)

N = 40
x, H, y = trend_series(N)
TREND_K, SEASON_K = psg.Matern52(0.7, 0.5), psg.Periodic(0.3, 0.8, 1.0)
BETA_LOC, BETA_SD = np.array([0.2, -0.1]), np.array([1.0, 0.5])
SIGMA = 0.15


def model(y, x_new=None, exact=True, m=12, harmonics=5):
    H_new = None if x_new is None else np.stack([np.ones(len(x_new)), x_new], 1)
    gps = {"trend": (FourierFeatures(-1.0, 4.0, m), TREND_K),
           "season": (FourierFeatures(0.0, 1.0, harmonics), SEASON_K)}
    return psg.marginal_spectral_gp("y", gps, x, y, SIGMA, mean_basis=H, mean_prior=dist.Normal(BETA_LOC, BETA_SD),
                                    X_new=x_new, mean_basis_new=H_new, exact=exact)


def _k(kernel, A, B):
    return np.asarray(kernel(jnp.asarray(A)[:, None], jnp.asarray(B)[:, None]))


def _dense():
    """(mean, covariance) of y: both kernels summed, the mean's prior pushed through H, the noise."""
    C = _k(TREND_K, x, x) + _k(SEASON_K, x, x) + H @ np.diag(BETA_SD**2) @ H.T + SIGMA**2 * np.eye(N)
    return H @ BETA_LOC, C


def _site(*args, **kw):
    return handlers.trace(handlers.seed(model, 0)).get_trace(*args, **kw)["y"]["fn"]


def test_exact_density_is_the_multivariate_normal_with_the_summed_kernels():
    m, C = _dense()
    d = _site(y)
    assert isinstance(d, ExactMarginalGaussian)
    ref = float(dist.MultivariateNormal(jnp.asarray(m), jnp.asarray(C)).log_prob(jnp.asarray(y)))
    np.testing.assert_allclose(float(d.log_prob(jnp.asarray(y))), ref, rtol=1e-11)
    # traced y (as under NUTS with a sampled y) and several outputs in a batch give the same values
    traced = jax.jit(lambda v: _site(v).log_prob(v))(jnp.asarray(y))
    np.testing.assert_allclose(float(traced), ref, rtol=1e-11)
    Y = np.stack([y, y[::-1]])
    refs = dist.MultivariateNormal(jnp.asarray(m), jnp.asarray(C)).log_prob(jnp.asarray(Y))
    np.testing.assert_allclose(np.asarray(d.log_prob(jnp.asarray(Y))), np.asarray(refs), rtol=1e-11)


def test_exact_leave_one_out_terms_against_explicit_conditioning():
    m, C = _dense()
    loo = np.asarray(_site(y).loo_log_prob(jnp.asarray(y)))
    for i in (0, 17, N - 1):
        rest = np.delete(np.arange(N), i)
        w = np.linalg.solve(C[np.ix_(rest, rest)], C[rest, i])
        mu, var = m[i] + w @ (y[rest] - m[rest]), C[i, i] - C[i, rest] @ w
        np.testing.assert_allclose(loo[i], -0.5 * np.log(2 * np.pi * var) - 0.5 * (y[i] - mu) ** 2 / var, rtol=1e-9)


def test_exact_draws_at_new_inputs_match_the_dense_conditional():
    x_new = np.linspace(-0.5, 3.5, 6)
    Hn = np.stack([np.ones(6), x_new], 1)
    m, C = _dense()
    B = np.diag(BETA_SD**2)
    S = 4000
    draws = Predictive(model, num_samples=S)(jax.random.PRNGKey(1), y, x_new)
    sites = [("trend_new", _k(TREND_K, x_new, x), _k(TREND_K, x_new, x_new), 0.0),
             ("season_new", _k(SEASON_K, x_new, x), _k(SEASON_K, x_new, x_new), 0.0),
             ("y_new", _k(TREND_K, x_new, x) + _k(SEASON_K, x_new, x) + Hn @ B @ H.T,
              _k(TREND_K, x_new, x_new) + _k(SEASON_K, x_new, x_new) + Hn @ B @ Hn.T, Hn @ BETA_LOC)]
    assert_draws_match_conditional(draws, sites, y, m, C, S)
    total = draws["trend_new"] + draws["season_new"] + draws["y_beta"] @ Hn.T
    np.testing.assert_allclose(draws["y_new"], total, rtol=1e-12, atol=1e-13)


def test_sparse_marginal_approaches_the_exact_one_as_the_features_grow():
    exact = float(_site(y).log_prob(jnp.asarray(y)))
    gaps = [abs(float(_site(y, exact=False, m=m, harmonics=10).log_prob(jnp.asarray(y))) - exact)
            for m in (4, 8, 16, 48)]
    # measured: 2.55, 0.44, 0.047, 0.0053 (five harmonics of the periodic kernel alone leave a floor of 0.16)
    assert all(b < 0.2 * a for a, b in zip(gaps, gaps[1:])), gaps
    assert gaps[-1] < 0.01


def test_exact_accepts_kernels_without_features_and_names_sites_as_the_sparse_model():
    def m2(exact, feature):
        psg.marginal_spectral_gp("y", {"trend": (feature, psg.Matern52(1.0, dist.LogNormal(0.0, 1.0)))}, x, y,
                                 dist.HalfNormal(1.0), exact=exact)

    sparse = handlers.trace(handlers.seed(m2, 0)).get_trace(False, FourierFeatures(-1.0, 4.0, 8))
    exact = handlers.trace(handlers.seed(m2, 0)).get_trace(True, None)
    assert set(sparse) == set(exact)
    with pytest.raises(ValueError, match="X_new needs the observations"):
        handlers.trace(handlers.seed(lambda: psg.marginal_spectral_gp(
            "y", (None, TREND_K), x, None, SIGMA, X_new=x, exact=True), 0)).get_trace()


def test_from_mcmc_stores_the_exact_leave_one_out_terms():
    from numpyro.infer import MCMC, NUTS

    from ppl_sparsegp import diagnostics

    def m3(y):
        psg.marginal_spectral_gp("y", (None, psg.Matern52(1.0, dist.LogNormal(0.0, 1.0))), x, y,
                                 dist.HalfNormal(1.0), exact=True)

    mcmc = MCMC(NUTS(m3), num_warmup=30, num_samples=10, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y)
    ll = diagnostics.from_mcmc(mcmc, m3).log_likelihood["y"].values
    draw = {k: v[3] for k, v in mcmc.get_samples().items()}
    tr = handlers.trace(handlers.substitute(handlers.seed(m3, 0), draw)).get_trace(y)
    np.testing.assert_allclose(ll[0, 3], tr["y"]["fn"].loo_log_prob(tr["y"]["value"]), rtol=1e-9)
