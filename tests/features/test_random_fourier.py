"""Random Fourier features against independent computations: Bochner sums, the exact kernel, the exact
weight-space posterior, scipy's distributions, and the Halton stratification property."""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import stats

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.collapsed import optimal_whitened_q
from ppl_sparsegp.covariances import SufficientStatistics
from ppl_sparsegp.features.random_fourier import (
    RandomFourierFeatures,
    SpectralDensity,
    chi2_ppf,
    sample_frequencies,
    scrambled_halton,
)


def inputs(n=40, d=2, seed=0):
    return jnp.asarray(np.random.default_rng(seed).uniform(0, 1, (n, d)))


def rel_error(K, Kh):
    return jnp.linalg.norm(K - Kh) / jnp.linalg.norm(K)


def test_feature_map_is_the_bochner_sum_and_kuu_kuf_reproduce_it():
    kernel = psg.Matern32(variance=1.7, lengthscale=jnp.array([0.3, 1.5]))
    X, Z = inputs(12), inputs(7, seed=1)
    W = np.random.default_rng(2).normal(size=(9, 2))
    feat = RandomFourierFeatures(W)
    # σ²/R Σ_r cos(ω_rᵀ(x − x')/ℓ), written out pointwise
    diff = (np.asarray(X)[:, None, :] - np.asarray(Z)[None, :, :]) / np.array([0.3, 1.5])
    ref = 1.7 * np.mean(np.cos(np.einsum("rd,ijd->ijr", W, diff)), axis=-1)
    np.testing.assert_allclose(feat.gram(kernel, X, Z), ref, rtol=1e-12, atol=1e-14)
    # weight space: Kfu Kuu⁻¹ Kuf is the same matrix, and its diagonal is exactly σ²
    Kuu, Kuf1, Kuf2 = psg.Kuu(feat, kernel), psg.Kuf(feat, kernel, X), psg.Kuf(feat, kernel, Z)
    np.testing.assert_allclose(Kuf1.T @ Kuu.solve(Kuf2), ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jnp.diag(feat.gram(kernel, X)), 1.7, rtol=1e-13)


def _errors(kernel, method, Rs, d, seeds=8, n=100):
    """Mean relative Frobenius error of the RFF Gram matrix over ``seeds`` keys, for each R."""
    X = inputs(n, d, seed=3)
    K = kernel(X)
    out = []
    for R in Rs:
        err = jax.jit(jax.vmap(lambda k: rel_error(
            K, RandomFourierFeatures(sample_frequencies(kernel, k, R, d, method)).gram(kernel, X))))
        out.append(float(jnp.mean(err(jax.random.split(jax.random.PRNGKey(R), seeds)))))
    return np.array(out)


@pytest.mark.slow  # R up to 4096 over 8–16 keys (tens of seconds on a shared CPU)
def test_monte_carlo_error_decays_as_inverse_sqrt_R_and_qmc_faster():
    kernel = psg.SquaredExponential(lengthscale=0.4)
    Rs = np.array([16, 256, 4096])
    mc = _errors(kernel, "mc", Rs, 2, seeds=16)
    qmc = _errors(kernel, "qmc", Rs, 2, seeds=16)
    slope_mc = np.polyfit(np.log(Rs), np.log(mc), 1)[0]
    slope_qmc = np.polyfit(np.log(Rs), np.log(qmc), 1)[0]
    # Monte Carlo: the Gram error is a mean of R i.i.d. terms, so it scales as R^-1/2; averaging 16 seeds
    # over a 256-fold range of R keeps the fitted slope within ±0.12 of −1/2
    assert abs(slope_mc + 0.5) < 0.12, slope_mc
    # QMC (scrambled Halton, 2-D): close to R^-1 up to log factors, so clearly steeper and far smaller
    assert slope_qmc < -0.8, slope_qmc
    assert qmc[-1] < mc[-1] / 10


@pytest.mark.slow  # R up to 4096 over 8–16 keys (tens of seconds on a shared CPU)
def test_matern_frequencies_converge_to_matern_kernel():
    kernel = psg.Matern52(variance=0.8, lengthscale=0.5)
    Rs = np.array([64, 4096])
    mc = _errors(kernel, "mc", Rs, 3)
    qmc = _errors(kernel, "qmc", Rs, 3)
    # same R^-1/2 law for the Student-t spectral density: 64× more features → ≈8× smaller error
    assert 5.5 < mc[0] / mc[1] < 11.5, mc
    assert qmc[-1] < mc[-1] / 3


def test_orthogonal_features_have_orthogonal_blocks_and_lower_error():
    d, R = 8, 24
    W = np.asarray(sample_frequencies(psg.SquaredExponential(), jax.random.PRNGKey(0), R, d, "orf"))
    for block in W.reshape(3, d, d):
        G = block @ block.T  # orthogonal directions: a diagonal Gram matrix holding the squared radii
        np.testing.assert_allclose(G - np.diag(np.diag(G)), 0.0, atol=1e-12)
    kernel = psg.SquaredExponential(lengthscale=1.0)
    orf = _errors(kernel, "orf", [64], d, seeds=16)
    mc = _errors(kernel, "mc", [64], d, seeds=16)
    # Yu et al. (2016): orthogonality lowers the variance of the SE estimate in moderate dimension
    assert orf[0] < 0.8 * mc[0], (orf, mc)


@pytest.mark.parametrize("kernel,df", [(psg.SquaredExponential(), None), (psg.Matern12(), 1.0),
                                       (psg.Matern32(), 3.0)])
def test_qmc_frequencies_have_the_spectral_marginals(kernel, df):
    W = np.asarray(sample_frequencies(kernel, jax.random.PRNGKey(5), 2048, 3, "qmc"))
    ref = stats.norm if df is None else stats.t(df)
    for d in range(3):
        ks = stats.kstest(W[:, d], ref.cdf)
        # a low-discrepancy sample fits its marginal far better than i.i.d. draws (95 % KS 0.03 at n=2048)
        assert ks.statistic < 0.01, (d, ks)


def test_chi2_quantile_matches_scipy():
    u = np.random.default_rng(0).uniform(1e-6, 1 - 1e-6, 500)
    for df in (1.0, 3.0, 5.0, 12.0):
        np.testing.assert_allclose(chi2_ppf(u, df), stats.chi2.ppf(u, df), rtol=1e-9)


def test_scrambled_halton_keeps_the_stratification():
    for key in (jax.random.PRNGKey(0), jax.random.PRNGKey(1)):
        U = np.asarray(scrambled_halton(key, 243, 3))
        # base 2 on 128 points, base 3 on 243 points: one point in every cell of width 1/n
        assert sorted(np.floor(U[:128, 0] * 128).astype(int)) == list(range(128))
        assert sorted(np.floor(U[:, 1] * 243).astype(int)) == list(range(243))
        assert sorted(np.floor(U[:125, 2] * 125).astype(int)) == list(range(125))
    a, b = scrambled_halton(jax.random.PRNGKey(0), 10, 2), scrambled_halton(jax.random.PRNGKey(1), 10, 2)
    assert not np.allclose(a, b)  # the scrambling is random


def test_spectral_density_distribution():
    W = np.random.default_rng(0).normal(size=(5, 2))
    se = SpectralDensity(psg.SquaredExponential(variance=3.0, lengthscale=0.1), 5, 2)
    np.testing.assert_allclose(se.log_prob(W), stats.norm.logpdf(W).sum(), rtol=1e-12)
    m32 = SpectralDensity(psg.Matern32, 5, 2)
    ref = stats.multivariate_t(loc=np.zeros(2), shape=np.eye(2), df=3.0).logpdf(W).sum()
    np.testing.assert_allclose(m32.log_prob(W), ref, rtol=1e-12)
    S = np.asarray(se.sample(jax.random.PRNGKey(0), (4000,)))
    assert S.shape == (4000, 5, 2)
    # mean 0, variance 1 (standard errors 0.007 and 0.01 for 20 000 values per coordinate)
    assert np.all(np.abs(S.mean((0, 1))) < 0.03) and np.all(np.abs(S.var((0, 1)) - 1) < 0.05)


def test_collapsed_bound_is_the_sparse_spectrum_marginal_likelihood():
    kernel = psg.SquaredExponential(variance=0.9, lengthscale=jnp.array([0.2, 0.6]))
    X = inputs(30)
    y = jnp.sin(6 * X[:, 0]) + 0.3 * X[:, 1]
    feat = RandomFourierFeatures(np.random.default_rng(1).normal(size=(6, 2)))
    noise = 0.05
    Q = 0.9 * np.asarray(feat.gram(psg.SquaredExponential(lengthscale=jnp.array([0.2, 0.6])), X))
    ref = stats.multivariate_normal(np.zeros(30), Q + noise * np.eye(30)).logpdf(np.asarray(y))
    # tr(Kff − Qff) = 0 exactly for random Fourier features, so the Titsias bound is tight
    np.testing.assert_allclose(psg.collapsed_elbo(feat, kernel, X, y, noise), ref, rtol=1e-10)


def test_generic_conditional_gives_the_weight_space_posterior():
    kernel = psg.Matern52(variance=1.3, lengthscale=0.4)
    X, Xs = inputs(25, 1), jnp.linspace(-0.2, 1.2, 9)[:, None]
    y = jnp.cos(5 * X[:, 0])
    W = np.random.default_rng(4).standard_t(5.0, size=(7, 1))
    feat, noise = RandomFourierFeatures(W), 0.02
    m_v, S_v = optimal_whitened_q(psg.Kuu(feat, kernel), SufficientStatistics.from_kuf(psg.Kuf(feat, kernel, X), y),
                                  noise)
    mean, var = psg.conditional(feat, kernel, Xs, m_v, S_v, whiten=True)
    # Bayesian linear regression on φ with w ~ N(0, σ²I): A = ΦΦᵀ + (noise/σ²) I
    P, Ps = np.asarray(feat.features(X, 0.4)), np.asarray(feat.features(Xs, 0.4))
    A = P @ P.T + noise / 1.3 * np.eye(14)
    np.testing.assert_allclose(mean, Ps.T @ np.linalg.solve(A, P @ np.asarray(y)), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(var, noise * np.sum(Ps * np.linalg.solve(A, Ps), 0), rtol=1e-8, atol=1e-12)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="frequencies"):
        RandomFourierFeatures(np.ones(3))
    with pytest.raises(ValueError, match="frequencies"):
        RandomFourierFeatures(np.array([[1.0, np.nan]]))
    feat = RandomFourierFeatures(np.ones((3, 2)))
    with pytest.raises(ValueError, match="X"):
        feat.features(np.ones((4, 3)))
    with pytest.raises(NotImplementedError):
        psg.Kuu(feat, psg.Additive([psg.Matern12(), psg.Matern12()]))
    with pytest.raises(ValueError, match="method"):
        sample_frequencies(psg.SquaredExponential(), jax.random.PRNGKey(0), 3, 2, "sobol")
    with pytest.raises(ValueError, match="num_frequencies"):
        SpectralDensity(psg.SquaredExponential(), 0, 2)
    with pytest.raises(ValueError, match="stationary"):
        SpectralDensity(psg.Additive([psg.Matern12()]), 2, 1)


# --- importance-weighted features: fixed absolute frequencies for NUTS over ℓ ---------------------
@pytest.mark.parametrize("kernel_cls", [psg.SquaredExponential, psg.Matern52])
def test_importance_features_estimate_the_kernel_at_every_lengthscale(kernel_cls):
    """Frequencies drawn once from q (the kernel at ℓ_q = 0.1); σ²Φ_ℓᵀΦ_ℓ = (σ²/R) Σ w_r cos ω_rᵀ(x − x')
    with w = p_ℓ/q estimates k_ℓ for every ℓ ≥ ℓ_q (R = 20 000 QMC draws: max error 2e-3, the
    importance weights bounded by q being wider); the weights equal p_ℓ/q from the closed-form spectral
    densities; a kernel of another family is refused."""
    from ppl_sparsegp.features import ImportanceFourierFeatures

    f = ImportanceFourierFeatures.from_proposal(kernel_cls(1.0, 0.1), jax.random.PRNGKey(0), 20_000, 1)
    x = jnp.linspace(0.0, 1.0, 7)[:, None]
    for ell in (0.1, 0.3, 1.0):
        k = kernel_cls(1.7, ell)
        Kuf = psg.Kuf(f, k, x)
        np.testing.assert_allclose(Kuf.T @ psg.Kuu(f, k).solve(Kuf), k(x), atol=5e-3)
        w = np.asarray(k.spectral_density(f.frequencies) / 1.7 / (kernel_cls(1.0, 0.1).spectral_density(f.frequencies)))
        np.testing.assert_allclose(f.weights(k), w, rtol=1e-10)
    with pytest.raises(NotImplementedError, match="need a"):
        psg.Kuf(f, psg.Matern32(1.0, 0.3), x)


@pytest.mark.slow
def test_importance_features_mix_under_nuts_where_rescaled_frequencies_do_not():
    """NUTS over ℓ with spectral_gp on 80 points (2 chains × 300 + 300, R = 40 QMC frequencies): the
    importance-weighted features give ℓ's posterior mean within 0.3 exact-posterior sd of the exact GP's
    (measured 0.15) with R-hat ≤ 1.02 and at least twice the bulk ESS of RandomFourierFeatures (measured
    255 against 66; the rescaled frequencies' mean sits 0.8 sd off)."""
    from numpyro.diagnostics import summary
    from numpyro.infer import MCMC, NUTS

    from ppl_sparsegp.features import ImportanceFourierFeatures, RandomFourierFeatures

    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0, 1, 80))
    y = np.sin(6 * x) + 0.2 * rng.normal(size=80)
    prior = dist.LogNormal(np.log(0.3), 0.5)

    def run(model):
        mcmc = MCMC(NUTS(model), num_warmup=300, num_samples=300, num_chains=2, chain_method="sequential",
                    progress_bar=False)
        mcmc.run(jax.random.PRNGKey(1), x, y)
        return summary(mcmc.get_samples(group_by_chain=True))["f_kernel_lengthscale"]

    def with_features(f):
        def model(x, y=None):
            g = psg.spectral_gp("f", f, psg.SquaredExponential(1.0, prior), x)
            numpyro.sample("y", dist.Normal(g, 0.2), obs=y)
        return model

    def exact(x, y=None):
        ell = numpyro.sample("f_kernel_lengthscale", prior)
        K = psg.SquaredExponential(1.0, ell)(jnp.asarray(x)[:, None]) + 0.04 * jnp.eye(80)
        numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(80), K), obs=y)

    ref = run(exact)
    imp = run(with_features(ImportanceFourierFeatures.from_proposal(
        psg.SquaredExponential(1.0, 0.08), jax.random.PRNGKey(0), 40, 1)))
    rff = run(with_features(RandomFourierFeatures.from_kernel(
        psg.SquaredExponential(), jax.random.PRNGKey(0), 40, 1, method="qmc")))
    assert abs(float(imp["mean"]) - float(ref["mean"])) < 0.3 * float(ref["std"])
    assert float(imp["r_hat"]) <= 1.02 and float(imp["n_eff"]) >= 2 * float(rff["n_eff"])


def test_spectral_gp_warns_for_random_features_with_a_sampled_lengthscale():
    """Random Fourier features with a traced (sampled) lengthscale: the frequencies move with ℓ and NUTS
    does not mix, so spectral_gp warns and names ImportanceFourierFeatures; a fixed ℓ, or the importance
    features, say nothing."""
    import warnings

    from numpyro import handlers

    from ppl_sparsegp.features import ImportanceFourierFeatures

    x = np.linspace(0.0, 1.0, 10)
    rff = RandomFourierFeatures(np.linspace(-20.0, 20.0, 8)[:, None])
    imp = ImportanceFourierFeatures.from_proposal(psg.SquaredExponential(1.0, 0.1), jax.random.PRNGKey(0), 8, 1)

    def run(feature, ell):
        return handlers.seed(lambda: psg.spectral_gp("f", feature, psg.SquaredExponential(1.0, ell), x), 0)()

    with pytest.warns(UserWarning, match="NUTS mixes poorly.*ImportanceFourierFeatures"):
        jax.jit(lambda ell: run(rff, ell))(0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(rff, 0.3)
        jax.jit(lambda ell: run(imp, ell))(0.3)


def test_frequencies_and_lengthscale_of_different_dimensions_are_refused():
    """One-column frequencies with a two-entry lengthscale: the library's error naming both shapes (it
    used to be a dot_general shape error), from the approximation's constructor (kernel template) and
    from Kuf (concrete kernel, e.g. inside spectral_gp)."""
    rff = RandomFourierFeatures(np.ones((5, 1)))
    X = np.linspace(0, 1, 8)[:, None]
    with pytest.raises(ValueError, match=r"lengthscale has shape \(2,\) but the frequencies have D = 1"):
        psg.Kuf(rff, psg.SquaredExponential(1.0, [0.3, 0.5]), X)
    with pytest.raises(ValueError, match=r"lengthscale has shape \(2,\)"):
        psg.SparseGP(rff, psg.SquaredExponential(1.0, dist.LogNormal(jnp.zeros(2), 1.0)), psg.Gaussian(0.1))
    # a scalar or a per-dimension lengthscale is accepted
    assert psg.Kuf(rff, psg.SquaredExponential(1.0, [0.3]), X).shape == (10, 8)
    assert psg.Kuf(RandomFourierFeatures(np.ones((5, 2))), psg.SquaredExponential(1.0, [0.3, 0.5]),
                   np.ones((8, 2))).shape == (10, 8)
