"""Integral-transform features (Lázaro-Gredilla & Figueiras-Vidal 2009) against independent computations:
Kuf and Kuu against numerical quadrature of their defining integrals in 1-D (adaptive quadrature) and 2-D
(tensor Gauss–Hermite), the inducing-point limit (window and frequencies → 0), Qff → Kff as the features
grow (Kff − Qff PSD on the way), the collapsed bound below the exact log marginal likelihood and reaching
it, and the family through the existing approximations unchanged: the SVGP optimum equals the collapsed
bound, and NUTS on the MCMC formulation reproduces the analytic posterior."""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.infer import MCMC, NUTS
from scipy import integrate

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.collapsed import optimal_whitened_q
from ppl_sparsegp.covariances import SufficientStatistics
from ppl_sparsegp.features import IntegralTransformFeatures
from ppl_sparsegp.likelihoods import Gaussian

NOISE = 0.05


def se(variance, lengthscale):
    """The SE kernel as a NumPy function of (..., D) arrays, written out (independent of the library)."""
    ell = np.asarray(lengthscale, float)

    def k(a, b):
        return variance * np.exp(-0.5 * np.sum(((a - b) / ell) ** 2, -1))

    return k


def window(feature, m, z):
    """g_m(z) = N(z; μ_m, diag(c²)) cos(ω_mᵀz + φ_m) for z (..., D), written out."""
    mu, W, phi = (np.asarray(feature.centres)[m], np.asarray(feature.frequencies)[m],
                  float(np.asarray(feature.phases)[m]))
    c = np.broadcast_to(np.asarray(feature.window, float), mu.shape)
    dens = np.prod(np.exp(-0.5 * ((z - mu) / c) ** 2) / (np.sqrt(2 * np.pi) * c), -1)
    return dens * np.cos(z @ W + phi)


def gauss_hermite(feature, m, n):
    """Nodes (n^D, D) and weights (n^D,) of the tensor Gauss–Hermite rule for ∫ h(z) N(z; μ_m, diag(c²)) dz."""
    mu = np.asarray(feature.centres)[m]
    c = np.broadcast_to(np.asarray(feature.window, float), mu.shape)
    t, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / np.sqrt(2 * np.pi)
    grids = np.meshgrid(*[mu[d] + c[d] * t for d in range(len(mu))], indexing="ij")
    weights = np.prod(np.meshgrid(*[w] * len(mu), indexing="ij"), 0)
    return np.stack([g.ravel() for g in grids], -1), weights.ravel()


def modulation(feature, m, z):
    W, phi = np.asarray(feature.frequencies)[m], float(np.asarray(feature.phases)[m])
    return np.cos(z @ W + phi)


def kuu_by_quadrature(feature, k, n):
    """∫∫ g_m(z) k(z, z') g_m'(z') dz dz' by the tensor Gauss–Hermite rule of each window."""
    M = feature.num_features
    out = np.zeros((M, M))
    for m in range(M):
        z, wz = gauss_hermite(feature, m, n)
        for j in range(M):
            zp, wp = gauss_hermite(feature, j, n)
            K = k(z[:, None, :], zp[None, :, :])
            out[m, j] = (wz * modulation(feature, m, z)) @ K @ (wp * modulation(feature, j, zp))
    return out


def test_kuf_and_kuu_against_quadrature_in_1d():
    """Adaptive quadrature of ∫ k(x, z) g_m(z) dz (tolerance 1e-12) for Kuf; an 80-node Gauss–Hermite rule per
    window for Kuu (the integrand is entire: the rule is exact to rounding well before 80 nodes). The
    remaining difference on Kuu's diagonal is its jitter (1e-10 × the mean diagonal)."""
    feature = IntegralTransformFeatures(np.array([[0.0], [1.5], [3.0], [-2.0]]),
                                        np.array([[0.1], [-0.4], [0.6], [0.0]]), 0.5,
                                        np.array([0.0, 0.3, np.pi / 2, 1.0]))
    kernel, k = psg.SquaredExponential(1.3, 0.7), se(1.3, [0.7])
    X = np.array([[-0.5], [0.2], [1.1], [2.5]])
    ref = np.array([[integrate.quad(lambda z: window(feature, m, np.array([z])) * k(np.array([z]), x), -np.inf,
                                    np.inf, epsabs=1e-13, epsrel=1e-12)[0] for x in X] for m in range(4)])
    np.testing.assert_allclose(psg.Kuf(feature, kernel, X), ref, rtol=0, atol=1e-11)
    np.testing.assert_allclose(psg.Kuu(feature, kernel).to_dense(), kuu_by_quadrature(feature, k, 80), rtol=0,
                               atol=1e-9)


def test_kuf_and_kuu_against_quadrature_in_2d():
    """D = 2 with a lengthscale and a window per dimension: tensor Gauss–Hermite rules (40² nodes for Kuf,
    (24²)² for Kuu) of the defining integrals."""
    rng = np.random.default_rng(1)
    feature = IntegralTransformFeatures(rng.normal(0, 1.5, (3, 2)), rng.uniform(-1, 1, (3, 2)), np.array([0.4, 0.7]),
                                        rng.uniform(0, np.pi, 3))
    kernel, k = psg.SquaredExponential(0.8, jnp.array([0.6, 1.1])), se(0.8, [0.6, 1.1])
    X = rng.uniform(-1.5, 1.5, (5, 2))
    ref = np.zeros((3, 5))
    for m in range(3):
        z, w = gauss_hermite(feature, m, 40)
        ref[m] = (w * modulation(feature, m, z)) @ k(z[:, None, :], X[None, :, :])
    np.testing.assert_allclose(psg.Kuf(feature, kernel, X), ref, rtol=0, atol=1e-11)
    np.testing.assert_allclose(psg.Kuu(feature, kernel).to_dense(), kuu_by_quadrature(feature, k, 24), rtol=0,
                               atol=1e-9)


def test_a_vanishing_window_at_frequency_zero_gives_inducing_points():
    """c → 0, ω = 0, φ = 0: u_m = f(μ_m), so Kuu → k(Z, Z) and Kuf → k(Z, X) (to O(c²/ℓ²) = 1e-10)."""
    Z = np.array([[0.0, 0.5], [1.0, -0.2], [0.3, 0.3]])
    X = np.array([[0.1, 0.0], [0.7, 0.9]])
    kernel = psg.SquaredExponential(1.1, 0.8)
    feature = IntegralTransformFeatures(np.zeros_like(Z), Z, 1e-5 * 0.8)
    np.testing.assert_allclose(psg.Kuf(feature, kernel, X), kernel(Z, X), atol=1e-9)
    np.testing.assert_allclose(psg.Kuu(feature, kernel).to_dense(), kernel(Z), atol=1e-9)


def data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0, 1, n))[:, None]
    return jnp.asarray(X), jnp.asarray(np.sin(6 * X[:, 0]) + 0.2 * rng.normal(size=n))


def cosine_sine_features(n, frequency=4.0, width=0.1):
    """n centres on [−0.1, 1.1], each with a constant (ω = 0) and a sine (ω = 4, φ = π/2) feature: M = 2n."""
    c = np.linspace(-0.1, 1.1, n)
    return IntegralTransformFeatures(np.concatenate([np.zeros(n), np.full(n, frequency)])[:, None],
                                     np.concatenate([c, c])[:, None], width,
                                     np.concatenate([np.zeros(n), np.full(n, np.pi / 2)]))


def test_qff_approaches_kff_and_the_collapsed_bound_approaches_the_exact_evidence():
    """As the features grow (M = 4 … 32): tr(Kff − Qff)/tr(Kff) falls to the jitter's level (< 1e-7) with
    Kff − Qff PSD (to 1e-12) at every M, and the collapsed bound stays below the exact log marginal
    likelihood, rising to within 1e-5 nats of it."""
    X, y = data()
    kernel = psg.SquaredExponential(1.0, 0.3)
    Kff = np.asarray(kernel(X))
    exact = float(psg.exact_log_marginal_likelihood(kernel, X, y, NOISE))
    errors, bounds = [], []
    for n in (2, 4, 8, 16):
        feature = cosine_sine_features(n)
        Kuf = psg.Kuf(feature, kernel, X)
        residual = Kff - np.asarray(Kuf.T @ psg.Kuu(feature, kernel).solve(Kuf))
        assert np.linalg.eigvalsh(residual).min() > -1e-12
        errors.append(np.trace(residual) / np.trace(Kff))
        bounds.append(float(psg.collapsed_elbo(feature, kernel, X, y, NOISE)))
    assert all(a > b for a, b in zip(errors, errors[1:])) and errors[-1] < 1e-7
    assert all(b < exact + 1e-9 for b in bounds)
    assert bounds[0] < exact - 50 and exact - bounds[-1] < 1e-5


def optimal_params(gp, kernel, X, y):
    """The analytic optimum of the whitened q(v) for fixed hyperparameters (the collapsed bound's q)."""
    stats = SufficientStatistics.from_kuf(psg.Kuf(gp.feature, kernel, X), y)
    m_v, S_v = optimal_whitened_q(psg.Kuu(gp.feature, kernel), stats, NOISE)
    return {"f_v_loc": m_v, "f_v_scale_tril": jnp.linalg.cholesky(S_v.to_dense())}


def test_svgp_optimum_equals_the_collapsed_bound():
    """SparseGP (SVGP) with these features, unchanged: at the analytic optimum of q its ELBO equals the
    collapsed bound to 1e-8, and moving q away lowers it."""
    X, y = data()
    kernel = psg.SquaredExponential(1.0, 0.3)
    feature = cosine_sine_features(4)
    gp = psg.SparseGP(feature, kernel, Gaussian(NOISE), whiten=True)
    params = optimal_params(gp, kernel, X, y)
    bound = psg.collapsed_elbo(feature, kernel, X, y, NOISE)
    np.testing.assert_allclose(gp.elbo(params, X, y), bound, rtol=1e-8)
    assert gp.elbo({**params, "f_v_loc": params["f_v_loc"] + 0.05}, X, y) < bound


def test_nuts_on_the_mcmc_formulation_reproduces_the_analytic_posterior():
    """Fixed hyperparameters, Gaussian likelihood: p(v | y) is Gaussian, and its mean is the optimal q's. A
    short NUTS run (M = 6) of SparseGP.model: the posterior mean of f at the data within 5 Monte Carlo
    standard errors of the analytic one, the posterior variance within 5 standard errors of a variance."""
    X, y = data(20, seed=2)
    kernel = psg.SquaredExponential(1.0, 0.3)
    gp = psg.SparseGP(cosine_sine_features(3), kernel, Gaussian(NOISE), whiten=True)
    mcmc = MCMC(NUTS(gp.model), num_warmup=300, num_samples=1000, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X, y)
    draws = np.asarray(gp.predict(X, samples=mcmc.get_samples())["f_mean_draws"])
    params = optimal_params(gp, kernel, X, y)
    A = np.asarray(psg.Kuf(gp.feature, kernel, X).T @ psg.Kuu(gp.feature, kernel).solve(
        psg.Kuu(gp.feature, kernel).sqrt()))  # f = A v
    mean = A @ np.asarray(params["f_v_loc"])
    L = np.asarray(params["f_v_scale_tril"])
    var = np.sum((A @ L) ** 2, 1)
    ess = np.asarray(numpyro.diagnostics.effective_sample_size(draws[None]))
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * np.sqrt(var / ess))
    assert np.all(np.abs(draws.var(0) - var) < 5 * var * np.sqrt(2 / ess))


@pytest.mark.parametrize("args, match", [
    ((np.zeros(3), np.zeros(3)), r"frequencies must have shape \(M, D\)"),
    ((np.zeros((3, 2)), np.zeros((3, 1))), r"centres must have the shape \(M, D\) of frequencies"),
    ((np.zeros((3, 2)), np.zeros((3, 2)), -1.0), "window"),
    ((np.zeros((3, 2)), np.zeros((3, 2)), np.ones(3)), r"window must be a scalar or shape \(2,\)"),
    ((np.zeros((3, 2)), np.zeros((3, 2)), 1.0, np.zeros(2)), r"phases must have shape \(3,\)"),
    ((np.full((3, 2), np.nan), np.zeros((3, 2))), "frequencies"),
])
def test_bad_arguments_are_refused_naming_them(args, match):
    with pytest.raises(ValueError, match=match):
        IntegralTransformFeatures(*args)


def test_wrong_input_dimension_and_an_unsupported_kernel_are_refused():
    feature = IntegralTransformFeatures(np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="X has 1 input dimensions but the features have 2"):
        psg.Kuf(feature, psg.SquaredExponential(), np.zeros((4, 1)))
    with pytest.raises(NotImplementedError, match="IntegralTransformFeatures with kernel Matern52"):
        psg.Kuu(feature, psg.Matern52())
